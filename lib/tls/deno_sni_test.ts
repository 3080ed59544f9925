/**
 * Pins the behaviour of Deno's internal SNI API that Sluice depends on, with
 * real TLS handshakes on loopback. If one of these fails after a Deno
 * upgrade, read `lib/tls/deno_sni.ts` and `lib/server/https_listener.ts`
 * before changing anything.
 *
 * @module
 */
import { assertEquals, assertRejects } from "../../tests/support/assert.ts";
import { closeCode, httpsGet, tlsHandshake, wssConnect } from "../../tests/support/tls_client.ts";
import {
  checkServeInternals,
  serveHttpOnConnection,
  serveHttpOnListener,
  TESTED_DENO_VERSION,
} from "../../tests/support/deno_serve.ts";
import { listenTlsWithSni, type TlsKeyPair } from "./deno_sni.ts";
import { generateSelfSignedCertificate } from "./self_signed.ts";

const [certA, certA2, certB, certDefault] = await Promise.all([
  generateSelfSignedCertificate({ hostnames: ["a.test"] }),
  generateSelfSignedCertificate({ hostnames: ["a.test"] }),
  generateSelfSignedCertificate({ hostnames: ["b.test"] }),
  generateSelfSignedCertificate({ hostnames: ["default.test"] }),
]);

function pair(certificate: { certPem: string; keyPem: string }): TlsKeyPair {
  return { cert: certificate.certPem, key: certificate.keyPem };
}

Deno.test("Deno's internal SNI API is there on this Deno: the resolver listenTlsWithSni() needs, and both serve functions", () => {
  try {
    listenTlsWithSni({ hostname: "127.0.0.1", port: 0, resolve: () => pair(certA) }).close();
    checkServeInternals();
  } catch (error) {
    throw new Error(
      `Deno ${Deno.version.deno} no longer offers the internal SNI API Sluice uses ` +
        `(tested on ${TESTED_DENO_VERSION}): ${(error as Error).message}`,
    );
  }
});

Deno.test("listenTlsWithSni() serves the certificate the resolver picks for each server name", async () => {
  const asked: string[] = [];
  const listener = listenTlsWithSni({
    hostname: "127.0.0.1",
    port: 0,
    resolve: (serverName) => {
      asked.push(serverName);
      if (serverName === "a.test") return pair(certA);
      if (serverName === "b.test") return pair(certB);
      return pair(certDefault);
    },
  });
  const server = serveHttpOnListener(listener, (req) => new Response(new URL(req.url).host));
  const { port } = listener.addr;
  try {
    // A handshake trusting only certificate A succeeds for a.test and fails for b.test.
    const a = await httpsGet(port, "/", { serverName: "a.test", caCerts: [certA.certPem] });
    assertEquals(a.status, 200);
    // b.test must not be served certificate A.
    await assertRejects(
      () => tlsHandshake(port, { serverName: "b.test", caCerts: [certA.certPem] }),
      Error,
      "invalid peer certificate",
    );
    await tlsHandshake(port, { serverName: "b.test", caCerts: [certB.certPem] });
    // No SNI (an IP address): the resolver is asked for "". The default certificate has no IP
    // address SAN, so the client rejects it, and its error names the certificate it was served.
    await assertRejects(
      () => tlsHandshake(port, { serverName: "127.0.0.1", caCerts: [certDefault.certPem] }),
      Error,
      "default.test",
    );
    assertEquals(asked.sort(), ["", "a.test", "b.test"]);
  } finally {
    await server.shutdown();
  }
});

Deno.test("listenTlsWithSni() caches each server name's certificate for the listener's life", async () => {
  // This caching is why the HTTPS listener rotates generations: if a Deno
  // upgrade removes it, rotation may no longer be needed (and this test fails).
  let current = certA;
  let calls = 0;
  const resolve = () => {
    calls++;
    return pair(current);
  };
  const first = listenTlsWithSni({ hostname: "127.0.0.1", port: 0, reusePort: true, resolve });
  const { port } = first.addr;
  const serveFirst = serveHttpOnListener(first, () => new Response("first"));
  try {
    await tlsHandshake(port, { serverName: "a.test", caCerts: [certA.certPem] });
    current = certA2;
    await tlsHandshake(port, { serverName: "a.test", caCerts: [certA.certPem] });
    // The listener cached certificate A for a.test: the renewed one is not served.
    await assertRejects(
      () => tlsHandshake(port, { serverName: "a.test", caCerts: [certA2.certPem] }),
      Error,
      "invalid peer certificate",
    );
    assertEquals(calls, 1, "the resolver is asked once per server name");
  } finally {
    await serveFirst.shutdown();
  }
  // A new listener on the same port asks again and serves the renewed certificate.
  const second = listenTlsWithSni({ hostname: "127.0.0.1", port, reusePort: true, resolve });
  const serveSecond = serveHttpOnListener(second, () => new Response("second"));
  try {
    await tlsHandshake(port, { serverName: "a.test", caCerts: [certA2.certPem] });
    assertEquals(calls, 2);
  } finally {
    await serveSecond.shutdown();
  }
});

Deno.test("listenTlsWithSni() caches a resolver failure for the server name", async () => {
  let calls = 0;
  const listener = listenTlsWithSni({
    hostname: "127.0.0.1",
    port: 0,
    resolve: () => {
      calls++;
      if (calls === 1) throw new Error("No certificate yet");
      return pair(certA);
    },
  });
  const server = serveHttpOnListener(listener, () => new Response("ok"));
  try {
    for (let i = 0; i < 2; i++) {
      await assertRejects(() =>
        tlsHandshake(listener.addr.port, { serverName: "a.test", caCerts: [certA.certPem] })
      );
    }
    assertEquals(calls, 1);
  } finally {
    await server.shutdown();
  }
});

Deno.test("serveHttpOnListener() negotiates h2 and http/1.1 by ALPN", async () => {
  const listener = listenTlsWithSni({
    hostname: "127.0.0.1",
    port: 0,
    resolve: () => pair(certA),
  });
  const server = serveHttpOnListener(listener, () => new Response("ok"));
  const options = { serverName: "a.test", caCerts: [certA.certPem] };
  try {
    const port = listener.addr.port;
    assertEquals(await tlsHandshake(port, { ...options, alpnProtocols: ["h2", "http/1.1"] }), "h2");
    assertEquals(await tlsHandshake(port, { ...options, alpnProtocols: ["http/1.1"] }), "http/1.1");
  } finally {
    await server.shutdown();
  }
});

Deno.test("serveHttpOnConnection() serves one accepted TLS connection until shutdown()", async () => {
  const listener = listenTlsWithSni({
    hostname: "127.0.0.1",
    port: 0,
    resolve: () => pair(certA),
  });
  const request = httpsGet(listener.addr.port, "/one", {
    serverName: "a.test",
    caCerts: [certA.certPem],
  });
  const conn = await listener.accept();
  listener.close();
  const server = serveHttpOnConnection(conn, (req) => new Response(new URL(req.url).pathname));
  const response = await request;
  assertEquals([response.status, response.body], [200, "/one"]);
  await server.shutdown();
  await server.finished;
});

/** Upgrades to a WebSocket that echoes; other requests get "ok". */
function echoWebSocket(req: Request): Response {
  if (req.headers.get("upgrade") !== "websocket") return new Response("ok");
  const { socket, response } = Deno.upgradeWebSocket(req);
  socket.onmessage = (event) => socket.send(event.data);
  return response;
}

Deno.test("serveHttpOnListener() keeps a WebSocket open until shutdown(), which closes it with 1001", async () => {
  const listener = listenTlsWithSni({ hostname: "127.0.0.1", port: 0, resolve: () => pair(certA) });
  const server = serveHttpOnListener(listener, echoWebSocket);
  const ws = await wssConnect(listener.addr.port, "/", {
    serverName: "a.test",
    caCerts: [certA.certPem],
  });
  try {
    for (const text of ["one", "two"]) {
      await ws.send(1, new TextEncoder().encode(text));
      const frame = await ws.receive();
      assertEquals([frame?.opcode, new TextDecoder().decode(frame?.payload)], [1, text]);
    }
    // Why the HTTPS listener relays into one long-lived server: shutting down a generation's own
    // server would close its WebSockets.
    const stopped = server.shutdown();
    const close = await ws.receive();
    assertEquals([close?.opcode, close && closeCode(close)], [8, 1001]);
    await stopped;
  } finally {
    ws.close();
  }
});

Deno.test("serveHttpOnConnection() closes an upgraded WebSocket right after the 101 (why Sluice does not use it)", async () => {
  // If this fails, a Deno upgrade made per-connection serving keep WebSockets: the HTTPS listener
  // can then go back to its own accept loop and rotate without closing unanswered connections.
  const listener = listenTlsWithSni({ hostname: "127.0.0.1", port: 0, resolve: () => pair(certA) });
  const opening = wssConnect(listener.addr.port, "/", {
    serverName: "a.test",
    caCerts: [certA.certPem],
  });
  const conn = await listener.accept();
  listener.close();
  const server = serveHttpOnConnection(conn, echoWebSocket);
  const ws = await opening;
  try {
    assertEquals(ws.head.split("\r\n")[0], "HTTP/1.1 101 Switching Protocols");
    const frame = await ws.receive();
    assertEquals(frame?.opcode, 8, "the server closes the WebSocket at once");
    await server.finished;
  } finally {
    ws.close();
  }
});
