/**
 * The TLS handshake on the HTTPS port: ALPN (h2 and http/1.1 as offered, none as
 * HTTP/1.1, an unknown-only list refused), clients that send nothing, a partial
 * ClientHello or nothing after it, or no request after the handshake
 * (disconnected after the first-bytes timeout, 200 at once), a handshake failing
 * mid-way (no relay left behind), and plain HTTP sent to the HTTPS port (an
 * alert and a close, no handler reached). Real HTTPS listener.
 *
 * @module
 */

import {
  certA,
  endsWithin,
  leafIs,
  okHandler,
  pairA,
  secretsTable,
  tableCell,
  withHttpsListener,
  withTlsListener,
} from "../../tests/support/tls_world.ts";
import {
  clientHello,
  probeCertificate,
  readServerFlight,
} from "../../tests/support/tls_material.ts";
import { assert, assertEquals } from "../../tests/support/assert.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import type { RequestHandler } from "./listener.ts";
import { generateSelfSignedCertificate } from "../tls/self_signed.ts";
import { stubCertificateTable } from "../../tests/support/stub_snapshot.ts";
import { listenHttps } from "./https_listener.ts";

Deno.test("a partial ClientHello, then silence, is disconnected after firstBytesTimeoutMs", async () => {
  await withTlsListener(secretsTable, { firstBytesTimeoutMs: 200 }, async (listener, port) => {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    await conn.write(clientHello({ serverName: "a.test" }).subarray(0, 40));
    assertEquals(await endsWithin(conn, 5_000), "closed");
    await waitFor("the relay to end", () => listener.stats.connections === 0);
  });
});

// Was a limitation: Deno 2.9.6 does not close the socket of a TlsConn closed while its handshake is
// pending (pinned in native_socket_test.ts), so such clients kept their descriptors for good. The
// listener now shuts those sockets down itself.
Deno.test("a client that sends a ClientHello and then nothing is disconnected after firstBytesTimeoutMs", async () => {
  await withTlsListener(secretsTable, { firstBytesTimeoutMs: 200 }, async (listener, port) => {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    await conn.write(clientHello({ serverName: "a.test" }));
    const flight = await readServerFlight(conn);
    assert(leafIs(flight, pairA!));
    assertEquals(await endsWithin(conn, 5_000), "closed");
    assertEquals(listener.stats.connections, 0);
    assertEquals(listener.stats.stalledHandshakes, 1);
    assertEquals(listener.stats.stalledHandshakesShut, 1);
  });
});

Deno.test("clients that connect and send nothing are disconnected after firstBytesTimeoutMs, 200 of them at once", async () => {
  await withTlsListener(secretsTable, { firstBytesTimeoutMs: 200 }, async (listener, port) => {
    const conns = await Promise.all(
      Array.from({ length: 200 }, () => Deno.connect({ hostname: "127.0.0.1", port })),
    );
    await waitFor("the relays to start", () => listener.stats.connections === 200);
    const ends = await Promise.all(conns.map((conn) => endsWithin(conn, 10_000)));
    assertEquals(ends.filter((end) => end === "closed").length, 200);
    assertEquals(listener.stats.connections, 0);
    assertEquals(listener.stats.stalledHandshakes, 200);
    assertEquals(listener.stats.stalledHandshakesShut, 200);
  });
});

Deno.test("a handshake that fails mid-way ends the connection and leaves no relay behind", async () => {
  await withTlsListener(secretsTable, {}, async (listener, port) => {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    await conn.write(clientHello({ serverName: "a.test" }));
    assert(leafIs(await readServerFlight(conn), pairA!));
    // A ClientKeyExchange too short to hold a key.
    await conn.write(new Uint8Array([0x16, 3, 3, 0, 4, 16, 0, 0, 0]));
    assertEquals(await endsWithin(conn, 5_000), "closed");
    await waitFor("the relay to end", () => listener.stats.connections === 0);
    assert(leafIs(await probeCertificate(port, { serverName: "a.test" }), pairA!));
  });
});

Deno.test("plain HTTP sent to the HTTPS port gets a TLS alert and a close, and reaches no handler", async () => {
  let requests = 0;
  const handler: RequestHandler = () => {
    requests++;
    return new Response("ok");
  };
  await withTlsListener(secretsTable, { handler }, async (listener, port) => {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    await conn.write(new TextEncoder().encode("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"));
    const flight = await within(5_000, "the server's answer", readServerFlight(conn));
    conn.close();
    assert(flight.alert !== undefined || flight.ended, JSON.stringify(flight));
    assertEquals(flight.certificates.length, 0);
    await waitFor("the relay to end", () => listener.stats.connections === 0);
    assertEquals(requests, 0);
  });
});

Deno.test("ALPN: h2 and http/1.1 are chosen as offered, none works as HTTP/1.1, an unknown-only list is refused", async () => {
  await withTlsListener(secretsTable, {}, async (_listener, port) => {
    const alpn = async (offer?: string[]) => (await probeCertificate(port, {
      serverName: "a.test",
      ...(offer === undefined ? {} : { alpn: offer }),
    }));
    assertEquals((await alpn(["h2", "http/1.1"])).alpn, "h2");
    assertEquals((await alpn(["http/1.1", "h2"])).alpn, "h2"); // the server's preference
    assertEquals((await alpn(["http/1.1"])).alpn, "http/1.1");
    const none = await alpn();
    assert(leafIs(none, pairA!));
    assertEquals(none.alpn, null);
    // no_application_protocol (120), as RFC 7301 §3.2 asks.
    assertEquals((await alpn(["spdy/3", "h2c"])).alert, 120);
    // A full request without ALPN is served as HTTP/1.1.
    const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
    const conn = await Deno.startTls(tcp, {
      hostname: "a.test",
      caCerts: [pairA!.certPem],
      alpnProtocols: [],
    });
    try {
      await conn.write(
        new TextEncoder().encode("GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"),
      );
      const text = await new Response(conn.readable).text();
      assert(text.startsWith("HTTP/1.1 200"), text.slice(0, 40));
    } catch (error) {
      conn.close();
      throw error;
    }
  });
});

Deno.test("listenHttps() serves HTTP/2 requests negotiated by ALPN", async () => {
  const cert = await generateSelfSignedCertificate({ hostnames: ["localhost"] });
  const table = stubCertificateTable([], cert);
  const handler: RequestHandler = (req) => new Response(new URL(req.url).host);
  await withHttpsListener({ handler, table: () => table }, async (_listener, port) => {
    using client = Deno.createHttpClient({ caCerts: [cert.certPem], http1: false, http2: true });
    const response = await fetch(`https://localhost:${port}/`, { client });
    assertEquals(await response.text(), `localhost:${port}`);
  });
});

Deno.test("a client that sends no request in time after its TLS handshake is disconnected", async () => {
  const listener = listenHttps(okHandler, {
    hostname: "127.0.0.1",
    port: 0,
    certificates: tableCell(certA).get,
    firstBytesTimeoutMs: 200,
    onClientTimeout: (reason, count) => timeouts.push([reason, count]),
  });
  const timeouts: [string, number][] = [];
  try {
    const tcp = await Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port });
    const conn = await Deno.startTls(tcp, { hostname: "a.test", caCerts: [certA.certPem] });
    try {
      await conn.handshake();
      assertEquals(listener.stats.connections, 1);
      const end = await within(5_000, "the server to close", conn.read(new Uint8Array(16)));
      assertEquals(end, null);
      await waitFor("the relay to end", () => listener.stats.connections === 0);
      // Its handshake was done, so Deno closed it: no descriptor sweep is needed.
      assertEquals(listener.stats.stalledHandshakes, 0);
      assertEquals(timeouts, [["first-bytes", 1]]);
    } finally {
      conn.close();
    }
  } finally {
    await listener.shutdown({ timeoutMs: 5_000 });
  }
});
