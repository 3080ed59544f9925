/**
 * Which certificate a TLS handshake gets by its server name (SNI): the exact
 * host, a one-label wildcard, then the default; odd names (none, IP literals,
 * uppercase, a trailing dot, wildcard depth); names refused with an alert
 * (over-long, empty, non-ASCII, NUL) while the listener carries on; and that a
 * request is routed, redirected and given HSTS by its Host (or :authority), not
 * by its SNI. Real HTTPS listener, hand-made ClientHellos
 * (`tests/support/tls_material.ts`).
 *
 * @module
 */
import type { Snapshot } from "../routing/snapshot.ts";
import {
  certA,
  certDefault,
  certWild,
  DEFAULT,
  leafIs,
  pairA,
  pairB,
  pairWild,
  secretsTable,
  serves,
  withHttpsListener,
  withTlsListener,
} from "../../tests/support/tls_world.ts";
import { type PemPair, probeCertificate } from "../../tests/support/tls_material.ts";
import { assert, assertEquals, assertRejects } from "../../tests/support/assert.ts";
import { waitFor } from "../../tests/support/wait.ts";
import { startEchoBackend } from "../../tests/support/echo_backend.ts";
import { compileStubSnapshot } from "../../tests/support/stub_snapshot.ts";
import { createProxyHandler } from "../proxy/proxy_handler.ts";
import type { RequestHandler } from "./listener.ts";

Deno.test("odd server names get the right certificate: none, IP literals, uppercase, trailing dot, wildcard depth", async () => {
  const table = secretsTable();
  await withTlsListener(() => table, {}, async (_listener, port) => {
    const cases: [string | undefined, PemPair][] = [
      [undefined, DEFAULT],
      ["127.0.0.1", DEFAULT], // IP literals are not server names (RFC 6066 §3): rustls ignores them
      ["::1", DEFAULT],
      ["A.TEST", pairA!],
      ["a.test.", pairA!],
      ["X.W.TEST.", pairWild!],
      ["w.test", DEFAULT],
      ["y.x.w.test", DEFAULT],
      ["a_b.w.test", pairWild!],
      [`${"a".repeat(63)}.${"b".repeat(63)}.${"c".repeat(63)}.${"d".repeat(61)}`, DEFAULT],
    ];
    for (const [name, pair] of cases) {
      const flight = await probeCertificate(port, name === undefined ? {} : { serverName: name });
      assert(leafIs(flight, pair), `${name}: ${JSON.stringify({ alert: flight.alert })}`);
    }
  });
});

Deno.test("an over-long, empty, non-ASCII or NUL-holding server name is refused with an alert; the listener carries on", async () => {
  const table = secretsTable();
  await withTlsListener(() => table, {}, async (listener, port) => {
    const names: (string | Uint8Array)[] = [
      "x".repeat(255),
      "a".repeat(300) + ".test",
      "",
      "é.w.test",
      new Uint8Array([0x61, 0x00, 0x2e, 0x74]),
    ];
    for (const name of names) {
      const flight = await probeCertificate(port, { serverName: name });
      assertEquals(flight.certificates.length, 0, String(name).slice(0, 20));
      assert(flight.alert !== undefined || flight.ended, String(name).slice(0, 20));
    }
    assert(leafIs(await probeCertificate(port, { serverName: "a.test" }), pairA!));
    await waitFor("the relays to end", () => listener.stats.connections === 0);
  });
});

Deno.test("a request is routed, redirected and given HSTS by its Host (or :authority), not by its SNI", async () => {
  const [backendA, backendB] = await Promise.all([
    startEchoBackend({ name: "a" }),
    startEchoBackend({ name: "b" }),
  ]);
  const backend = (name: string, port: number) => ({
    key: `tls/${name}:80`,
    service: `tls/${name}`,
    endpoints: [{ address: "127.0.0.1", port }],
  });
  const snapshot: Snapshot = compileStubSnapshot({
    version: 1,
    routes: [
      { host: "a.test", path: "/", backend: backend("a", backendA.port), tls: true },
      { host: "b.test", path: "/", backend: backend("b", backendB.port), tls: false },
    ],
    certificates: [
      { hosts: ["a.test"], certificate: { source: "tls/a", ...pairA! } },
      { hosts: ["b.test"], certificate: { source: "tls/b", ...pairB! } },
    ],
    defaultCertificate: DEFAULT,
  });
  const proxy = createProxyHandler({ snapshot: () => snapshot });
  const handler: RequestHandler = (req, info) => proxy(req, info);
  try {
    await withTlsListener(() => snapshot.certificates, { handler }, async (_listener, port) => {
      const get = async (serverName: string, ca: PemPair, host: string) => {
        const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
        const conn = await Deno.startTls(tcp, { hostname: serverName, caCerts: [ca.certPem] });
        await conn.write(
          new TextEncoder().encode(`GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`),
        );
        const text = await new Response(conn.readable).text();
        const head = text.slice(0, text.indexOf("\r\n\r\n")).toLowerCase();
        const body = JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4)) as { service: string };
        return { hsts: head.includes("strict-transport-security"), service: body.service };
      };
      // Domain fronting, as nginx allows it: the certificate follows SNI, everything else Host.
      assertEquals(await get("a.test", pairA!, "b.test"), { hsts: false, service: "b" });
      assertEquals(await get("b.test", pairB!, "a.test"), { hsts: true, service: "a" });
      assertEquals(await get("a.test", pairA!, "a.test"), { hsts: true, service: "a" });
      assertEquals(await get("b.test", pairB!, "b.test"), { hsts: false, service: "b" });
    });
  } finally {
    proxy.close();
    await Promise.all([backendA.close(), backendB.close()]);
  }
});

Deno.test("listenHttps() serves the table's certificate: exact host, wildcard, then default", async () => {
  await withHttpsListener({}, async (_listener, port) => {
    await serves(port, "a.test", certA);
    await serves(port, "x.w.test", certWild);
    await serves(port, "other.rand.test", certDefault);
    await assertRejects(() => serves(port, "x.w.test", certA), Error, "invalid peer certificate");
    // No SNI at all gets the default certificate too.
    await assertRejects(
      () => serves(port, "127.0.0.1", certDefault),
      Error,
      'DnsName("default.test")',
    );
  });
});
