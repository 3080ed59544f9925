/**
 * Test support for the TLS tests of `lib/server/`: the certificates they serve
 * (made once, at load: valid, wildcard, default, expired, not yet valid,
 * without subjectAltName, uppercase, from `tls_material.ts`; and Sluice's own
 * self-signed ones for `a.test` and its renewals, `*.w.test` and a default),
 * the HTTPS listener around a certificate table, tables built from TLS Secrets
 * at `NOW` (`tls_material.ts`) or swappable as the worker swaps them
 * ({@linkcode tableCell}), a handler echoing WebSockets, and checks of what a
 * handshake served. Not part of Sluice.
 *
 * @module
 */
import {
  certificateTableFrom,
  derOf,
  ecCertificate,
  type PemPair,
  sameBytes,
  type ServerFlight,
  type TableFromSecrets,
  tlsData,
  tlsIngress,
  tlsSecret,
} from "./tls_material.ts";
import { stubCertificateTable } from "./stub_snapshot.ts";
import { tlsHandshake } from "./tls_client.ts";
import type { CertificateTable, ServingCertificate } from "../../lib/routing/snapshot.ts";
import type { RequestHandler } from "../../lib/server/listener.ts";
import { type HttpsListener, listenHttps } from "../../lib/server/https_listener.ts";
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";
import type { InspectCertificate } from "../../lib/translate/translation.ts";

export const NOW = Date.now();
export const HOUR = 3_600_000;
export const valid = { notBefore: new Date(NOW - HOUR), notAfter: new Date(NOW + 30 * 24 * HOUR) };

export const [pairA, pairB, pairWild, pairDefault, pairExpired, pairFuture, pairNoSan, pairUpper] =
  await Promise.all([
    ecCertificate({ dnsNames: ["a.test"], ...valid }),
    ecCertificate({ dnsNames: ["b.test"], ...valid }),
    ecCertificate({ dnsNames: ["*.w.test"], ...valid }),
    ecCertificate({ dnsNames: ["default.test"], commonName: "default", ...valid }),
    ecCertificate({
      dnsNames: ["expired.test"],
      notBefore: new Date(NOW - 60 * 24 * HOUR),
      notAfter: new Date(NOW - 24 * HOUR),
    }),
    ecCertificate({
      dnsNames: ["future.test"],
      notBefore: new Date(NOW + 24 * HOUR),
      notAfter: new Date(NOW + 60 * 24 * HOUR),
    }),
    ecCertificate({ commonName: "nosan.test", ...valid }),
    ecCertificate({ dnsNames: ["Upper.Test", "*.Wild.Upper.Test"], ...valid }),
  ]);
export const DEFAULT: ServingCertificate = { source: "sluice/self-signed", ...pairDefault! };

/**
 * Sluice's own self-signed certificates (`lib/tls/self_signed.ts`): `a.test`
 * and three renewals of it (common names a, a2, a3, a4), `*.w.test`, and a
 * default for `default.test` and `*.rand.test`.
 */
export const [certA, certA2, certA3, certA4, certWild, certDefault] = await Promise.all([
  generateSelfSignedCertificate({ hostnames: ["a.test"], commonName: "a" }),
  generateSelfSignedCertificate({ hostnames: ["a.test"], commonName: "a2" }),
  generateSelfSignedCertificate({ hostnames: ["a.test"], commonName: "a3" }),
  generateSelfSignedCertificate({ hostnames: ["a.test"], commonName: "a4" }),
  generateSelfSignedCertificate({ hostnames: ["*.w.test"], commonName: "w" }),
  generateSelfSignedCertificate({ hostnames: ["default.test", "*.rand.test"], commonName: "d" }),
]);

/** Answers every request with "ok". */
export const okHandler: RequestHandler = () => new Response("ok");

/** Echoes WebSocket messages (closing with 4001 on "close"); answers other requests with "ok". */
export const echoWebSocket: RequestHandler = (req) => {
  if (req.headers.get("upgrade")?.toLowerCase() !== "websocket") return new Response("ok");
  const { socket, response } = Deno.upgradeWebSocket(req);
  socket.onmessage = (event) => {
    if (event.data === "close") socket.close(4001, "asked to");
    else socket.send(event.data);
  };
  return response;
};

/**
 * A certificate table the test can swap, as the worker does when a snapshot
 * arrives: `forA` for `a.test`, {@linkcode certWild} for `*.w.test`,
 * {@linkcode certDefault} otherwise.
 */
export function tableCell(forA: ServingCertificate) {
  const build = (a: ServingCertificate) =>
    stubCertificateTable([
      { hosts: ["a.test"], certificate: a },
      { hosts: ["*.w.test"], certificate: certWild },
    ], certDefault);
  let table: CertificateTable = build(forA);
  return {
    get: () => table,
    set: (a: ServingCertificate) => table = build(a),
  };
}

export async function withTlsListener(
  certificates: () => CertificateTable,
  options: { firstBytesTimeoutMs?: number; maxServerNames?: number; handler?: RequestHandler },
  body: (listener: HttpsListener, port: number) => Promise<void>,
): Promise<void> {
  const listener = listenHttps(options.handler ?? okHandler, {
    hostname: "127.0.0.1",
    port: 0,
    certificates,
    ...(options.firstBytesTimeoutMs === undefined
      ? {}
      : { firstBytesTimeoutMs: options.firstBytesTimeoutMs }),
    ...(options.maxServerNames === undefined ? {} : { maxServerNames: options.maxServerNames }),
  });
  try {
    await body(listener, listener.addr.port);
  } finally {
    await listener.shutdown({ timeoutMs: 5_000 });
  }
}

/**
 * {@linkcode withTlsListener} serving `options.table`, by default a fresh
 * {@linkcode tableCell}`(certA)`.
 */
export function withHttpsListener(
  options: { handler?: RequestHandler; maxServerNames?: number; table?: () => CertificateTable },
  body: (listener: HttpsListener, port: number) => Promise<void>,
): Promise<void> {
  const { table = tableCell(certA).get, ...rest } = options;
  return withTlsListener(table, rest, body);
}

/** Resolves when a handshake trusting only `certificate` succeeds, i.e. that one is served. */
export function serves(port: number, serverName: string, certificate: ServingCertificate) {
  return tlsHandshake(port, { serverName, caCerts: [certificate.certPem] });
}

/** Whether the flight's leaf certificate is `pair`'s. */
export function leafIs(flight: ServerFlight, pair: PemPair): boolean {
  const leaf = flight.certificates[0];
  return leaf !== undefined && sameBytes(leaf, derOf(pair.certPem));
}

/** Resolves with how the connection ended: `"closed"` (EOF or reset), or `"open"` once `ms` passed. */
export async function endsWithin(conn: Deno.Conn, ms: number): Promise<"closed" | "open"> {
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    conn.close();
  }, ms);
  const buffer = new Uint8Array(4096);
  try {
    while ((await conn.read(buffer)) !== null) { /* server bytes (an alert): keep reading */ }
    return "closed";
  } catch {
    return timedOut ? "open" : "closed";
  } finally {
    clearTimeout(timer);
    if (!timedOut) conn.close();
  }
}

/** One Ingress per host, each with its own Secret `tls/<host>`. */
export function perHost(cases: Record<string, Record<string, string>>, type?: string) {
  const hosts = Object.keys(cases);
  return {
    ingresses: hosts.map((host) => tlsIngress(host, [host], host)),
    secrets: hosts.map((host) => tlsSecret(host, cases[host]!, type === undefined ? {} : { type })),
  };
}

/** The `data` of a TLS Secret per host. */
export function dataOf(pairs: Record<string, PemPair>): Record<string, Record<string, string>> {
  return Object.fromEntries(Object.entries(pairs).map(([host, pair]) => [host, tlsData(pair)]));
}

/** The certificate table of `objects` at `NOW`, with `DEFAULT` as the default certificate. */
export function tableOf(
  objects: Parameters<typeof certificateTableFrom>[0],
  inspectCertificate?: InspectCertificate,
): TableFromSecrets {
  return certificateTableFrom(objects, {
    now: NOW,
    defaultCertificate: DEFAULT,
    ...(inspectCertificate === undefined ? {} : { inspectCertificate }),
  });
}

/** The table of Secrets `tls/a` (`a.test`, {@linkcode pairA}) and `tls/w` (`*.w.test`, {@linkcode pairWild}) at `NOW`. */
export function secretsTable(): CertificateTable {
  return tableOf({
    ingresses: [tlsIngress("a", ["a.test"], "a"), tlsIngress("w", ["*.w.test"], "w")],
    secrets: [tlsSecret("a", tlsData(pairA!)), tlsSecret("w", tlsData(pairWild!))],
  }).table;
}

export function issueFor(
  issues: readonly { message: string }[],
  secret: string,
): string | undefined {
  return issues.find((issue) => issue.message.includes(`"tls/${secret}"`))?.message;
}
