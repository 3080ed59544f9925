/**
 * Test support for the TLS tests of `lib/server/` (Secrets, SNI,
 * handshakes): certificates of every shape a TLS Secret can hold (in-process ECDSA ones with chosen names and dates, and
 * `openssl`-made ones for other key types), the path a Secret takes to the
 * certificate table (translation, then compilation), and a hand-made TLS 1.2
 * ClientHello whose server name, ALPN list and timing the test controls
 * byte for byte, reading the server's certificate in the clear.
 * Not part of Sluice.
 *
 * @module
 */
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { webIngressSpec } from "./fixture_objects.ts";
import type { Ingress, Secret } from "../../lib/k8s/objects.ts";
import { compileCertificateTable } from "../../lib/routing/certificate_table.ts";
import type { CertificateTable, ServingCertificate } from "../../lib/routing/snapshot.ts";
import { createCertificateInspector } from "../../lib/tls/certificate_inspector.ts";
import { translate } from "../../lib/translate/translate.ts";
import type { InspectCertificate, Issue } from "../../lib/translate/translation.ts";

// ---------------------------------------------------------------------------
// Certificates
// ---------------------------------------------------------------------------

/** A PEM certificate (chain) and key, as a TLS Secret holds them. */
export interface PemPair {
  readonly certPem: string;
  readonly keyPem: string;
}

/** Options of {@linkcode ecCertificate}. */
export interface EcCertificateOptions {
  /** subjectAltName DNS names, written as given (case kept). None: no SAN extension at all. */
  readonly dnsNames?: readonly string[];
  readonly commonName?: string;
  readonly notBefore: Date;
  readonly notAfter: Date;
}

/** An ECDSA P-256 self-signed end-entity certificate with the names and dates given. */
export async function ecCertificate(options: EcCertificateOptions): Promise<PemPair> {
  const algorithm = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
  const keys = await crypto.subtle.generateKey(algorithm, true, ["sign", "verify"]);
  const extensions: x509.Extension[] = [
    new x509.BasicConstraintsExtension(false, undefined, true),
    new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
  ];
  if (options.dnsNames !== undefined) {
    extensions.push(
      new x509.SubjectAlternativeNameExtension(
        options.dnsNames.map((value) => ({ type: "dns" as const, value })),
      ),
    );
  }
  const serial = Array.from(
    crypto.getRandomValues(new Uint8Array(12)),
    (b) => (b & 0x7f).toString(16).padStart(2, "0"),
  ).join("");
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: `01${serial}`,
    name: [{ CN: [options.commonName ?? "hostile-tls test"] }],
    notBefore: options.notBefore,
    notAfter: options.notAfter,
    signingAlgorithm: algorithm,
    keys,
    extensions,
  });
  const pkcs8 = await crypto.subtle.exportKey("pkcs8", keys.privateKey);
  return {
    certPem: cert.toString("pem") + "\n",
    keyPem: x509.PemConverter.encode(pkcs8, "PRIVATE KEY") + "\n",
  };
}

/** Whether the `openssl` command can be run here. */
export const HAS_OPENSSL: boolean = (() => {
  try {
    return new Deno.Command("openssl", { args: ["version"], stdout: "null", stderr: "null" })
      .outputSync().success;
  } catch {
    return false;
  }
})();

async function openssl(args: readonly string[], cwd: string): Promise<void> {
  const out = await new Deno.Command("openssl", { args: [...args], cwd, stdin: "null" }).output();
  if (!out.success) {
    throw new Error(
      `Cannot run "openssl ${args.join(" ")}": ${new TextDecoder().decode(out.stderr).trim()}`,
    );
  }
}

/** Key types `openssl req -newkey` is asked for by {@linkcode opensslCertificate}. */
export const OPENSSL_KEYS = {
  "ec-p256": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
  "ec-p384": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"],
  "ec-secp256k1": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:secp256k1"],
  "rsa-1024": ["-newkey", "rsa:1024"],
  "rsa-2048": ["-newkey", "rsa:2048"],
  "rsa-pss-2048": ["-newkey", "rsa-pss", "-pkeyopt", "rsa_keygen_bits:2048"],
  "ed25519": ["-newkey", "ed25519"],
  "ed448": ["-newkey", "ed448"],
} as const;

/** What {@linkcode opensslCertificate} returns: the pair plus other encodings of its key. */
export interface OpensslPair extends PemPair {
  /** `-----BEGIN RSA PRIVATE KEY-----` (RSA keys only). */
  readonly pkcs1KeyPem?: string;
  /** `-----BEGIN EC PRIVATE KEY-----` (EC keys only). */
  readonly sec1KeyPem?: string;
  /** The key as PKCS#8, encrypted with the password `x`. */
  readonly encryptedKeyPem: string;
  /** The key in its traditional form, encrypted with the password `x` (RSA and EC only). */
  readonly encryptedTraditionalKeyPem?: string;
}

/** A self-signed certificate for `dnsName` made by the `openssl` command with the key type given. */
export async function opensslCertificate(
  key: keyof typeof OPENSSL_KEYS,
  dnsName: string,
): Promise<OpensslPair> {
  const dir = await Deno.makeTempDir({ prefix: "sluice-hostile-tls-" });
  try {
    await openssl([
      "req",
      "-x509",
      ...OPENSSL_KEYS[key],
      "-keyout",
      "key.pem",
      "-out",
      "cert.pem",
      "-days",
      "30",
      "-nodes",
      "-subj",
      `/CN=${dnsName}`,
      "-addext",
      `subjectAltName=DNS:${dnsName}`,
    ], dir);
    await openssl(
      ["pkcs8", "-topk8", "-in", "key.pem", "-passout", "pass:x", "-out", "enc.pem"],
      dir,
    );
    const read = (name: string) => Deno.readTextFile(`${dir}/${name}`);
    const pair = {
      certPem: await read("cert.pem"),
      keyPem: await read("key.pem"),
      encryptedKeyPem: await read("enc.pem"),
    };
    const tool = key.startsWith("rsa-") && !key.startsWith("rsa-pss")
      ? "rsa"
      : key.startsWith("ec-")
      ? "ec"
      : undefined;
    if (tool === undefined) return pair;
    // `openssl ec` writes SEC1 by default; `openssl rsa` needs `-traditional` for PKCS#1.
    const traditionalFlag = tool === "rsa" ? ["-traditional"] : [];
    await openssl([tool, "-in", "key.pem", ...traditionalFlag, "-out", "trad.pem"], dir);
    await openssl([
      tool,
      "-in",
      "key.pem",
      ...traditionalFlag,
      "-aes256",
      "-passout",
      "pass:x",
      "-out",
      "trad_enc.pem",
    ], dir);
    const traditional = await read("trad.pem");
    return {
      ...pair,
      ...(tool === "rsa" ? { pkcs1KeyPem: traditional } : { sec1KeyPem: traditional }),
      encryptedTraditionalKeyPem: await read("trad_enc.pem"),
    };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** The DER bytes of the first `CERTIFICATE` block of `pem`. */
export function derOf(pem: string): Uint8Array {
  const match = /-----BEGIN CERTIFICATE-----([\s\S]+?)-----END CERTIFICATE-----/.exec(pem);
  if (match === null) throw new Error("Cannot read a certificate: no PEM block");
  const binary = atob(match[1]!.replace(/\s+/g, ""));
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

/** Base64 of a (Latin-1/ASCII) string, as a Secret's `data` holds it. */
export function base64(text: string): string {
  const bytes = new TextEncoder().encode(text);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

// ---------------------------------------------------------------------------
// From Secrets to a certificate table
// ---------------------------------------------------------------------------

/** A Secret `tls/<name>` holding `pems` in `data` (base64), of `type` (default `kubernetes.io/tls`). */
export function tlsSecret(
  name: string,
  data: Record<string, string>,
  options: { readonly type?: string } = {},
): Secret {
  return {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { namespace: "tls", name },
    type: options.type ?? "kubernetes.io/tls",
    data,
  };
}

/** The `data` of a TLS Secret holding `pair`. */
export function tlsData(pair: PemPair): Record<string, string> {
  return { "tls.crt": base64(pair.certPem), "tls.key": base64(pair.keyPem) };
}

/** An Ingress `tls/<name>` of class `sluice` serving `hosts` over TLS with Secret `secretName`. */
export function tlsIngress(name: string, hosts: readonly string[], secretName: string): Ingress {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "Ingress",
    metadata: { namespace: "tls", name, creationTimestamp: "2024-01-01T00:00:00Z" },
    spec: { ...webIngressSpec(hosts), tls: [{ hosts: [...hosts], secretName }] },
  };
}

/** What {@linkcode certificateTableFrom} returns. */
export interface TableFromSecrets {
  readonly table: CertificateTable;
  readonly issues: readonly Issue[];
}

/**
 * Translates Ingresses and Secrets (with the real certificate inspector) and
 * compiles the certificate table, as the controller and a worker do.
 */
export function certificateTableFrom(
  objects: { readonly ingresses: readonly Ingress[]; readonly secrets: readonly Secret[] },
  options: {
    readonly now: number;
    readonly defaultCertificate: ServingCertificate;
    readonly defaultSslCertificate?: string;
    /** Default: the real inspector (`createCertificateInspector()`). */
    readonly inspectCertificate?: InspectCertificate;
  },
): TableFromSecrets {
  const translation = translate({
    ingresses: objects.ingresses,
    secrets: objects.secrets,
    ingressClasses: [{
      apiVersion: "networking.k8s.io/v1",
      kind: "IngressClass",
      metadata: { name: "sluice" },
      spec: { controller: "sluice.dev/ingress-controller" },
    }],
  }, {
    now: options.now,
    inspectCertificate: options.inspectCertificate ?? createCertificateInspector(),
    ...(options.defaultSslCertificate === undefined
      ? {}
      : { defaultSslCertificate: options.defaultSslCertificate }),
  });
  return {
    table: compileCertificateTable(translation, { defaultCertificate: options.defaultCertificate }),
    // The rules' Service does not exist: only the TLS issues matter here.
    issues: translation.issues.filter((issue) => !issue.field.startsWith("spec.rules")),
  };
}

// ---------------------------------------------------------------------------
// A hand-made TLS 1.2 ClientHello
// ---------------------------------------------------------------------------

function u16(n: number): number[] {
  return [(n >> 8) & 0xff, n & 0xff];
}

function u24(n: number): number[] {
  return [(n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff];
}

function extension(type: number, body: readonly number[]): number[] {
  return [...u16(type), ...u16(body.length), ...body];
}

/** Options of {@linkcode clientHello}. */
export interface ClientHelloOptions {
  /** Sent in the server_name extension byte for byte; absent: no server_name extension. */
  readonly serverName?: string | Uint8Array;
  /** ALPN protocols offered; absent: no ALPN extension. */
  readonly alpn?: readonly string[];
}

/**
 * A TLS 1.2-only ClientHello (ECDHE with AES-GCM or ChaCha20, ECDSA/RSA/Ed25519
 * signatures) as one record. Against a TLS 1.2 server it makes the server
 * send its certificate unencrypted, which is what the test reads.
 */
export function clientHello(options: ClientHelloOptions = {}): Uint8Array {
  const extensions: number[] = [];
  if (options.serverName !== undefined) {
    const name = typeof options.serverName === "string"
      ? new TextEncoder().encode(options.serverName)
      : options.serverName;
    const entry = [0, ...u16(name.length), ...name];
    extensions.push(...extension(0x0000, [...u16(entry.length), ...entry]));
  }
  // supported_groups: x25519, secp256r1, secp384r1.
  extensions.push(...extension(0x000a, [...u16(6), 0x00, 0x1d, 0x00, 0x17, 0x00, 0x18]));
  extensions.push(...extension(0x000b, [1, 0])); // ec_point_formats: uncompressed
  const schemes = [0x0403, 0x0503, 0x0804, 0x0805, 0x0401, 0x0501, 0x0807];
  extensions.push(...extension(0x000d, [...u16(schemes.length * 2), ...schemes.flatMap(u16)]));
  if (options.alpn !== undefined) {
    const list = options.alpn.flatMap((p) => {
      const bytes = new TextEncoder().encode(p);
      return [bytes.length, ...bytes];
    });
    extensions.push(...extension(0x0010, [...u16(list.length), ...list]));
  }
  extensions.push(...extension(0x0017, [])); // extended_master_secret
  extensions.push(...extension(0xff01, [0])); // renegotiation_info
  const suites = [0xc02b, 0xc02c, 0xc02f, 0xc030, 0xcca8, 0xcca9];
  const body = [
    0x03,
    0x03,
    ...crypto.getRandomValues(new Uint8Array(32)),
    0, // session id
    ...u16(suites.length * 2),
    ...suites.flatMap(u16),
    1,
    0, // compression: null
    ...u16(extensions.length),
    ...extensions,
  ];
  const handshake = [1, ...u24(body.length), ...body];
  return new Uint8Array([0x16, 0x03, 0x01, ...u16(handshake.length), ...handshake]);
}

/** What the server answered a {@linkcode clientHello}, up to its ServerHelloDone. */
export interface ServerFlight {
  /** The DER certificates of the server's Certificate message (empty if none came). */
  readonly certificates: readonly Uint8Array[];
  /** The ALPN protocol the ServerHello selected, `null` when none. */
  readonly alpn: string | null;
  /** The description of a fatal alert the server sent instead, if it did. */
  readonly alert?: number;
  /** The connection ended before the flight was complete (and without an alert). */
  readonly ended: boolean;
}

/** Reads records from `conn` until the server's first flight is complete, an alert, or the end. */
export async function readServerFlight(conn: Deno.Conn): Promise<ServerFlight> {
  let buffer = new Uint8Array(0);
  let handshake = new Uint8Array(0);
  const certificates: Uint8Array[] = [];
  let alpn: string | null = null;
  const chunk = new Uint8Array(16 * 1024);
  const append = (a: Uint8Array, b: Uint8Array) => {
    const out = new Uint8Array(a.length + b.length);
    out.set(a);
    out.set(b, a.length);
    return out;
  };
  while (true) {
    // Whole records first.
    while (buffer.length >= 5 && buffer.length >= 5 + ((buffer[3]! << 8) | buffer[4]!)) {
      const length = (buffer[3]! << 8) | buffer[4]!;
      const type = buffer[0]!;
      const payload = buffer.subarray(5, 5 + length);
      buffer = buffer.slice(5 + length);
      if (type === 0x15) return { certificates, alpn, alert: payload[1]!, ended: false };
      if (type !== 0x16) continue;
      handshake = append(handshake, payload);
      while (handshake.length >= 4) {
        const size = (handshake[1]! << 16) | (handshake[2]! << 8) | handshake[3]!;
        if (handshake.length < 4 + size) break;
        const kind = handshake[0]!;
        const message = handshake.subarray(4, 4 + size);
        if (kind === 2) alpn = serverHelloAlpn(message);
        if (kind === 11) certificates.push(...certificateList(message));
        handshake = handshake.slice(4 + size);
        if (kind === 14) return { certificates, alpn, ended: false }; // ServerHelloDone
      }
    }
    const n = await conn.read(chunk);
    if (n === null) return { certificates, alpn, ended: true };
    buffer = append(buffer, chunk.subarray(0, n));
  }
}

function serverHelloAlpn(message: Uint8Array): string | null {
  let at = 2 + 32;
  at += 1 + message[at]!; // session id
  at += 2 + 1; // cipher suite, compression
  if (at + 2 > message.length) return null;
  const end = at + 2 + ((message[at]! << 8) | message[at + 1]!);
  at += 2;
  while (at + 4 <= end) {
    const type = (message[at]! << 8) | message[at + 1]!;
    const length = (message[at + 2]! << 8) | message[at + 3]!;
    if (type === 0x0010) {
      const size = message[at + 6]!;
      return new TextDecoder().decode(message.subarray(at + 7, at + 7 + size));
    }
    at += 4 + length;
  }
  return null;
}

function certificateList(message: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = [];
  let at = 3;
  while (at + 3 <= message.length) {
    const size = (message[at]! << 16) | (message[at + 1]! << 8) | message[at + 2]!;
    out.push(message.slice(at + 3, at + 3 + size));
    at += 3 + size;
  }
  return out;
}

/** Sends a {@linkcode clientHello} to a loopback port and returns the server's flight; closes the connection. */
export async function probeCertificate(
  port: number,
  options: ClientHelloOptions = {},
): Promise<ServerFlight> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(clientHello(options));
    return await readServerFlight(conn);
  } finally {
    try {
      conn.close();
    } catch {
      // Already closed.
    }
  }
}

/** Whether two byte arrays are equal. */
export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}
