/**
 * Inspects the certificate and key of a TLS Secret: parses `tls.crt` and
 * `tls.key` once, checks that the key belongs to the certificate, and reports
 * validity dates, DNS names and fingerprint — or why the pair is unusable
 * (missing, unparsable, a bad certificate anywhere in the chain, an encrypted
 * key, key mismatch, a key algorithm Deno's TLS cannot serve, expired at the
 * injected `now`).
 *
 * Parsing is memoised by content, so rebuilding a snapshot does not re-parse
 * unchanged Secrets; expiry is judged on every call against the `now` given.
 * Uses `node:crypto` (`X509Certificate`, `createPrivateKey`). Knows nothing
 * about Kubernetes objects or Ingresses: translation receives this as its
 * injected `inspectCertificate`.
 *
 * @module
 */

import { createHash, createPrivateKey, type KeyObject, X509Certificate } from "node:crypto";
import type {
  CertificateInspection,
  CertificatePems,
  InspectCertificate,
} from "../translate/translation.ts";

/** What parsing found, before the dates are judged against a clock. */
type Parsed =
  | {
    readonly ok: true;
    readonly notBeforeMs: number;
    readonly notAfterMs: number;
    readonly notBefore: string;
    readonly notAfter: string;
    readonly dnsNames: readonly string[];
    readonly fingerprint: string;
    readonly chainFingerprint: string;
  }
  | { readonly ok: false; readonly reason: string };

const CERTIFICATE_BLOCKS = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;
/** The longest chain served; real ones hold the leaf and one to three intermediates. */
const MAX_CHAIN_CERTIFICATES = 10;
/** EC curves rustls (Deno's TLS) serves; other curves fail every handshake. */
const SERVABLE_CURVES = new Set(["prime256v1", "secp384r1", "secp521r1"]);
const PRIVATE_KEY_BLOCK =
  /-----BEGIN ((?:RSA |EC |ENCRYPTED )?PRIVATE KEY)-----[\s\S]+?-----END \1-----/;

function rfc3339(ms: number): string {
  return new Date(ms).toISOString().replace(".000Z", "Z");
}

function parseDate(certificate: X509Certificate, which: "validFrom" | "validTo"): number {
  const asDate = (certificate as unknown as Record<string, unknown>)[`${which}Date`];
  if (asDate instanceof Date) return asDate.getTime();
  return Date.parse(certificate[which]);
}

/** The DNS names of a `subjectAltName` string such as `DNS:a.example.com, IP Address:10.0.0.1`. */
function dnsNamesOf(subjectAltName: string | undefined): string[] {
  if (subjectAltName === undefined || subjectAltName === "") return [];
  const names: string[] = [];
  for (const part of subjectAltName.split(/,\s*/)) {
    const entry = part.startsWith('"') && part.endsWith('"') ? part.slice(1, -1) : part;
    if (entry.startsWith("DNS:")) names.push(entry.slice(4).toLowerCase());
  }
  return names;
}

/**
 * What rustls (Deno's TLS) would refuse in a key, or undefined: it serves RSA
 * of 2048 bits or more, ECDSA on P-256, P-384 and P-521, and Ed25519 (measured
 * on Deno 2.9.6: RSA 1024, RSA-PSS, secp256k1 and Ed448 keys fail to load).
 */
function unservableKey(key: KeyObject): string | undefined {
  const type = key.asymmetricKeyType;
  const details = key.asymmetricKeyDetails;
  if (type === "rsa") {
    const bits = details?.modulusLength ?? 0;
    return bits >= 2048 ? undefined : `RSA of ${bits} bits; at least 2048 are needed`;
  }
  if (type === "ec") {
    const curve = details?.namedCurve ?? "unknown";
    return SERVABLE_CURVES.has(curve) ? undefined : `EC curve ${curve}`;
  }
  if (type === "ed25519") return undefined;
  return type ?? "unknown";
}

function parse(certPem: string | undefined, keyPem: string | undefined): Parsed {
  if (certPem === undefined || certPem.trim() === "") {
    return { ok: false, reason: "tls.crt is missing" };
  }
  if (keyPem === undefined || keyPem.trim() === "") {
    return { ok: false, reason: "tls.key is missing" };
  }
  const blocks = certPem.match(CERTIFICATE_BLOCKS) ?? [];
  if (blocks.length === 0) {
    return { ok: false, reason: "tls.crt holds no PEM certificate" };
  }
  if (blocks.length > MAX_CHAIN_CERTIFICATES) {
    // Deno keeps a copy of the chain per server name it has answered (up to a listener
    // generation's name limit), and many clients refuse a Certificate message over 64 KB.
    return {
      ok: false,
      reason: `tls.crt holds ${blocks.length} certificates; at most ` +
        `${MAX_CHAIN_CERTIFICATES} (the leaf and its intermediates) are served`,
    };
  }
  // Every block: the server sends the whole chain, and one bad block fails every handshake.
  const certificates: X509Certificate[] = [];
  for (const [i, block] of blocks.entries()) {
    try {
      certificates.push(new X509Certificate(block));
    } catch {
      return {
        ok: false,
        reason: i === 0
          ? "tls.crt is not a valid certificate"
          : `tls.crt certificate #${i + 1} (of the chain) is not a valid certificate`,
      };
    }
  }
  const certificate = certificates[0]!;
  const keyBlock = PRIVATE_KEY_BLOCK.exec(keyPem);
  if (keyBlock === null) return { ok: false, reason: "tls.key holds no PEM private key" };
  if (keyBlock[1] === "ENCRYPTED PRIVATE KEY" || /Proc-Type:\s*4,\s*ENCRYPTED/.test(keyBlock[0])) {
    return { ok: false, reason: "tls.key is encrypted; an unencrypted key is needed" };
  }
  let key: KeyObject;
  let matches: boolean;
  try {
    key = createPrivateKey(keyBlock[0]);
    matches = certificate.checkPrivateKey(key);
  } catch {
    return { ok: false, reason: "tls.key is not a valid private key" };
  }
  if (!matches) return { ok: false, reason: "tls.key does not match the certificate in tls.crt" };
  const unservable = unservableKey(key);
  if (unservable !== undefined) {
    return {
      ok: false,
      reason: `tls.key uses an algorithm the TLS server cannot serve (${unservable})`,
    };
  }
  const notBeforeMs = parseDate(certificate, "validFrom");
  const notAfterMs = parseDate(certificate, "validTo");
  if (Number.isNaN(notBeforeMs) || Number.isNaN(notAfterMs)) {
    return { ok: false, reason: "tls.crt has unreadable validity dates" };
  }
  return {
    ok: true,
    notBeforeMs,
    notAfterMs,
    notBefore: rfc3339(notBeforeMs),
    notAfter: rfc3339(notAfterMs),
    dnsNames: Object.freeze(dnsNamesOf(certificate.subjectAltName)),
    fingerprint: certificate.fingerprint256,
    // Of all of tls.crt: the leaf fingerprint misses a changed chain, which the
    // certificate table's fingerprint must see so listeners rotate.
    chainFingerprint: createHash("sha256").update(certPem).digest("hex"),
  };
}

function judge(parsed: Parsed, now: number): CertificateInspection {
  if (!parsed.ok) return parsed;
  if (now > parsed.notAfterMs) {
    return { ok: false, reason: `the certificate expired at ${parsed.notAfter}` };
  }
  // A certificate not yet valid is still served: clocks drift, and a freshly
  // issued certificate is better than the default one.
  return {
    ok: true,
    notBefore: parsed.notBefore,
    notAfter: parsed.notAfter,
    dnsNames: parsed.dnsNames,
    fingerprint: parsed.fingerprint,
    chainFingerprint: parsed.chainFingerprint,
  };
}

/** Inspects a certificate and key without memoising. */
export function inspectCertificate(
  pems: CertificatePems,
  options: { readonly now: number },
): CertificateInspection {
  return judge(parse(pems.certPem, pems.keyPem), options.now);
}

/** Options of {@linkcode createCertificateInspector}. */
export interface CertificateInspectorOptions {
  /** How many distinct certificate/key pairs to remember (least recently used go first). Default 4096. */
  readonly maxEntries?: number;
}

/**
 * Returns an {@linkcode InspectCertificate} that parses each distinct
 * certificate/key pair once and remembers the result.
 */
export function createCertificateInspector(
  options: CertificateInspectorOptions = {},
): InspectCertificate & { readonly parses: () => number } {
  const maxEntries = options.maxEntries ?? 4096;
  const cache = new Map<string, Parsed>();
  let parses = 0;
  const inspect = (pems: CertificatePems, { now }: { readonly now: number }) => {
    const key = `${pems.certPem ?? ""}\u0000${pems.keyPem ?? ""}`;
    let parsed = cache.get(key);
    if (parsed === undefined) {
      parsed = parse(pems.certPem, pems.keyPem);
      parses++;
      if (cache.size >= maxEntries) cache.delete(cache.keys().next().value!);
    } else {
      cache.delete(key);
    }
    cache.set(key, parsed);
    return judge(parsed, now);
  };
  return Object.assign(inspect, { parses: () => parses });
}
