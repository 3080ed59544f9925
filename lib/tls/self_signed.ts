/**
 * Generates Sluice's default self-signed certificate in-process, at start-up:
 * an ECDSA P-256 key (cheaper TLS handshakes than RSA) and an X.509 v3
 * end-entity certificate signed by that key, both as PEM.
 *
 * The distroless image has no `openssl`, so this uses WebCrypto for the key
 * and signature and `@peculiar/x509` for the DER encoding. That library needs
 * the `reflect-metadata` polyfill (its dependency `tsyringe` checks for it at
 * load time); the polyfill only adds `Reflect.*Metadata` functions.
 *
 * It knows nothing of listeners or Kubernetes; it returns a
 * {@linkcode ServingCertificate} like the ones built from Secrets.
 *
 * @module
 */
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import type { ServingCertificate } from "../routing/snapshot.ts";

/** The `source` of the generated default certificate. */
export const SELF_SIGNED_SOURCE = "sluice/self-signed";

/** Options of {@linkcode generateSelfSignedCertificate}. */
export interface SelfSignedOptions {
  /** DNS names put in the subjectAltName extension. Default: `["sluice.invalid"]`. */
  readonly hostnames?: readonly string[];
  /** Subject common name. Default: `"Sluice Default Certificate"`. */
  readonly commonName?: string;
  /** Days the certificate is valid from `now()`. Default: 365. */
  readonly validityDays?: number;
  /** The clock, in milliseconds since the epoch. Default: `Date.now`. */
  readonly now?: () => number;
  /** The `source` reported with the certificate. Default: {@linkcode SELF_SIGNED_SOURCE}. */
  readonly source?: string;
}

const ALGORITHM = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

/**
 * Generates a fresh key pair and a self-signed certificate for `hostnames`.
 * The certificate is an end-entity certificate (`CA:FALSE`, `serverAuth`), so
 * a TLS client can trust it directly by listing it as a CA certificate.
 * `notBefore` is one hour before `now()` to tolerate clock skew.
 *
 * @example
 * ```ts
 * const cert = await generateSelfSignedCertificate({ hostnames: ["a.test"] });
 * Deno.listenTls({ port: 0, cert: cert.certPem, key: cert.keyPem });
 * ```
 */
export async function generateSelfSignedCertificate(
  options: SelfSignedOptions = {},
): Promise<ServingCertificate> {
  const hostnames = options.hostnames ?? ["sluice.invalid"];
  const validityDays = options.validityDays ?? 365;
  if (!(validityDays > 0)) {
    throw new RangeError(
      `Cannot generate a self-signed certificate: validityDays "${validityDays}" is not positive`,
    );
  }
  const now = (options.now ?? Date.now)();
  const keys = await crypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]);
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomSerialNumber(),
    name: [{ CN: [options.commonName ?? "Sluice Default Certificate"] }],
    notBefore: new Date(now - HOUR_MS),
    notAfter: new Date(now + validityDays * DAY_MS),
    signingAlgorithm: ALGORITHM,
    keys,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(
        hostnames.map((value) => ({ type: "dns" as const, value })),
      ),
    ],
  });
  const pkcs8 = await crypto.subtle.exportKey("pkcs8", keys.privateKey);
  return {
    source: options.source ?? SELF_SIGNED_SOURCE,
    certPem: cert.toString("pem") + "\n",
    keyPem: x509.PemConverter.encode(pkcs8, "PRIVATE KEY") + "\n",
  };
}

/** 16 random bytes as hex, first bit cleared so the DER INTEGER stays positive (RFC 5280 §4.1.2.2). */
function randomSerialNumber(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[0] = (bytes[0]! & 0x7f) | 0x01;
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
