import { assert, assertEquals, assertStringIncludes } from "../../tests/support/assert.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import { tcpNoDelay } from "../../tests/support/tcp_probe.ts";
import {
  closeCode,
  httpsGet,
  keepAliveOk,
  tlsHandshake,
  wssConnect,
} from "../../tests/support/tls_client.ts";
import { listenHttps } from "./https_listener.ts";
import type { ConnectionInfo, RequestHandler } from "./listener.ts";
import {
  certA,
  certA2,
  echoWebSocket,
  tableCell,
  withHttpsListener,
} from "../../tests/support/tls_world.ts";

Deno.test("listenHttps() tells the handler the request is secure, its port and the client's address", async () => {
  const seen: ConnectionInfo[] = [];
  const handler: RequestHandler = (req, info) => {
    seen.push(info);
    return new Response(`${req.method} ${new URL(req.url).host}`);
  };
  await withHttpsListener({ handler }, async (_listener, port) => {
    const response = await httpsGet(port, "/x?y", {
      serverName: "a.test",
      caCerts: [certA.certPem],
    });
    assertEquals([response.status, response.body], [200, `GET a.test`]);
    assertEquals(seen.length, 1);
    assertEquals(seen[0]!.secure, true);
    assertEquals(seen[0]!.localPort, port);
    assertEquals(seen[0]!.remoteAddr.hostname, "127.0.0.1");
    // The client's own address, not the relay's connection to the inner server.
    const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
    const clientPort = (tcp.localAddr as Deno.NetAddr).port;
    const conn = await Deno.startTls(tcp, { hostname: "a.test", caCerts: [certA.certPem] });
    try {
      await conn.write(
        new TextEncoder().encode("GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"),
      );
      await within(5_000, "the answer", new Response(conn.readable).text());
    } catch (error) {
      conn.close();
      throw error;
    }
    assertEquals(seen.length, 2);
    assertEquals(seen[1]!.remoteAddr.port, clientPort);
    assertEquals(
      await tlsHandshake(port, {
        serverName: "a.test",
        caCerts: [certA.certPem],
        alpnProtocols: ["h2", "http/1.1"],
      }),
      "h2",
    );
  });
});

Deno.test("client connections of every generation have TCP_NODELAY (streamed responses do not wait for delayed ACKs)", async () => {
  const cell = tableCell(certA);
  await withHttpsListener({ table: cell.get }, async (listener, port) => {
    for (const certificate of [certA, certA2]) {
      cell.set(certificate);
      listener.refresh();
      await listener.settled();
      const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
      const conn = await Deno.startTls(tcp, {
        hostname: "a.test",
        caCerts: [certA.certPem, certA2.certPem],
      });
      try {
        assert((await keepAliveOk(conn)).startsWith("HTTP/1.1 200"));
        assertEquals(
          tcpNoDelay(port, tcp.localAddr.port),
          true,
          `generation ${listener.stats.generation}`,
        );
      } finally {
        conn.close();
      }
    }
    assertEquals(listener.stats.generation, 2);
  });
});

Deno.test("shutdown() lets an in-flight request finish and closes the listener", async () => {
  const entered = Promise.withResolvers<void>();
  const release = Promise.withResolvers<void>();
  const handler: RequestHandler = async () => {
    entered.resolve();
    await release.promise;
    return new Response("finished");
  };
  const listener = listenHttps(handler, {
    hostname: "127.0.0.1",
    port: 0,
    certificates: tableCell(certA).get,
  });
  const port = listener.addr.port;
  const request = httpsGet(port, "/", { serverName: "a.test", caCerts: [certA.certPem] });
  await within(5_000, "the request", entered.promise);
  const stopped = listener.shutdown({ timeoutMs: 10_000 });
  await waitFor("the listening socket to close", async () => {
    try {
      await Deno.connect({ hostname: "127.0.0.1", port }).then((c) => c.close());
      return false;
    } catch (error) {
      return error instanceof Deno.errors.ConnectionRefused;
    }
  });
  release.resolve();
  const response = await request;
  assertEquals([response.status, response.body], [200, "finished"]);
  assertEquals(await stopped, { graceful: true, openConnections: 0 });
  await listener.finished;
});

Deno.test("shutdown() returns at the deadline with a request in flight, and finishes after it", async () => {
  const entered = Promise.withResolvers<void>();
  const release = Promise.withResolvers<void>();
  const handler: RequestHandler = async () => {
    entered.resolve();
    await release.promise;
    return new Response("late");
  };
  const listener = listenHttps(handler, {
    hostname: "127.0.0.1",
    port: 0,
    certificates: tableCell(certA).get,
  });
  const request = httpsGet(listener.addr.port, "/", {
    serverName: "a.test",
    caCerts: [certA.certPem],
  });
  await within(5_000, "the request", entered.promise);
  assertEquals(await listener.shutdown({ timeoutMs: 50 }), {
    graceful: false,
    openConnections: 1,
  });
  release.resolve();
  assertEquals((await request).body, "late");
  await within(5_000, "the listener to finish", listener.finished);
});

const encoder = new TextEncoder();
const decoder = new TextDecoder();

Deno.test("a WebSocket through the HTTPS listener relays messages both ways and its close code", async () => {
  await withHttpsListener({ handler: echoWebSocket }, async (_listener, port) => {
    const ws = await wssConnect(port, "/ws", { serverName: "a.test", caCerts: [certA.certPem] });
    try {
      assertStringIncludes(ws.head.toLowerCase(), "upgrade: websocket");
      for (let i = 0; i < 5; i++) {
        const text = `message ${i} ${"x".repeat(i * 100)}`;
        await ws.send(1, encoder.encode(text));
        const frame = await within(5_000, `echo ${i}`, ws.receive());
        assertEquals([frame?.opcode, decoder.decode(frame?.payload)], [1, text]);
      }
      const binary = new Uint8Array([0, 1, 2, 255]);
      await ws.send(2, binary);
      const echoed = await within(5_000, "the binary echo", ws.receive());
      assertEquals([echoed?.opcode, [...echoed!.payload]], [2, [0, 1, 2, 255]]);
      // The server closes with its own code; the client answers with the same close frame.
      await ws.send(1, encoder.encode("close"));
      const close = await within(5_000, "the close frame", ws.receive());
      assertEquals([close?.opcode, closeCode(close!)], [8, 4001]);
      assertEquals(decoder.decode(close!.payload.subarray(2)), "asked to");
      await ws.send(8, close!.payload);
      assertEquals(await within(5_000, "the end of the connection", ws.receive()), null);
    } finally {
      ws.close();
    }
  });
});

Deno.test("a WebSocket closed by the client reports its close code to the server", async () => {
  const closed = Promise.withResolvers<number>();
  const handler: RequestHandler = (req) => {
    const { socket, response } = Deno.upgradeWebSocket(req);
    socket.onmessage = (event) => socket.send(event.data);
    socket.onclose = (event) => closed.resolve(event.code);
    return response;
  };
  await withHttpsListener({ handler }, async (_listener, port) => {
    const ws = await wssConnect(port, "/", { serverName: "a.test", caCerts: [certA.certPem] });
    try {
      await ws.send(1, encoder.encode("ping"));
      assertEquals(
        decoder.decode((await within(5_000, "the echo", ws.receive()))?.payload),
        "ping",
      );
      await ws.send(8, new Uint8Array([0x0f, 0xa2])); // 4002
      assertEquals(await within(5_000, "the server's close event", closed.promise), 4002);
      const answer = await within(5_000, "the close answer", ws.receive());
      assertEquals([answer?.opcode, closeCode(answer!)], [8, 4002]);
    } finally {
      ws.close();
    }
  });
});

Deno.test("the inner server answers only its own relays", async () => {
  let called = 0;
  const handler: RequestHandler = () => {
    called++;
    return new Response("ok");
  };
  await withHttpsListener({ handler }, async (listener) => {
    const inner = listener.innerAddr;
    assertEquals(inner.hostname, "127.0.0.1");
    const response = await fetch(`http://127.0.0.1:${inner.port}/`);
    assertEquals([response.status, await response.text()], [421, "Misdirected Request\n"]);
    assertEquals(called, 0);
  });
});

/** Opens a TLS connection, sends one keep-alive request and reads its answer ("ok", 2 bytes). */
async function keepAliveRequest(port: number): Promise<Deno.TlsConn> {
  const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
  const conn = await Deno.startTls(tcp, { hostname: "a.test", caCerts: [certA.certPem] });
  try {
    await keepAliveOk(conn);
    return conn;
  } catch (error) {
    conn.close();
    throw error;
  }
}

Deno.test("an idle keep-alive connection is closed after idleTimeoutMs; a slow request and a WebSocket are not", async () => {
  const release = Promise.withResolvers<void>();
  const entered = Promise.withResolvers<void>();
  const handler: RequestHandler = async (req) => {
    const path = new URL(req.url).pathname;
    if (path === "/slow") {
      entered.resolve();
      await release.promise;
      return new Response("slow done");
    }
    return echoWebSocket(req, {} as ConnectionInfo);
  };
  const listener = listenHttps(handler, {
    hostname: "127.0.0.1",
    port: 0,
    certificates: tableCell(certA).get,
    idleTimeoutMs: 150,
    onClientTimeout: (reason, count) => timeouts.push([reason, count]),
  });
  const timeouts: [string, number][] = [];
  const port = listener.addr.port;
  const ws = await wssConnect(port, "/ws", { serverName: "a.test", caCerts: [certA.certPem] });
  try {
    const slow = httpsGet(port, "/slow", { serverName: "a.test", caCerts: [certA.certPem] });
    await within(5_000, "the slow request", entered.promise);
    const idle = await keepAliveRequest(port);
    try {
      // The idle connection's end proves the timeout passed (at least once) for the others too.
      assertEquals(
        await within(5_000, "the idle connection to close", idle.read(new Uint8Array(8))),
        null,
      );
    } finally {
      idle.close();
    }
    await waitFor("the timeout to be reported", () => timeouts.length > 0);
    assertEquals(timeouts, [["idle", 1]]);
    release.resolve();
    assertEquals((await slow).body, "slow done");
    await ws.send(1, encoder.encode("still open"));
    const echo = await within(5_000, "the WebSocket echo", ws.receive());
    assertEquals(decoder.decode(echo?.payload), "still open");
  } finally {
    ws.close();
    await listener.shutdown({ timeoutMs: 5_000 });
  }
});

Deno.test("listenHttps() reports `closed` when Deno closes its inner server on its own, and at shutdown", async () => {
  // Deno 2.9.6 closes the whole server when an upgraded handler answers anything but its 101.
  const handler: RequestHandler = (req) => {
    if (req.headers.get("upgrade") !== "websocket") return new Response("ok");
    Deno.upgradeWebSocket(req);
    return new Response("no", { status: 502 });
  };
  await withHttpsListener({ handler }, async (listener, port) => {
    let closed = false;
    void listener.closed.then(() => closed = true);
    assertEquals(
      (await httpsGet(port, "/", { serverName: "a.test", caCerts: [certA.certPem] }))
        .status,
      200,
    );
    assertEquals(closed, false);
    const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
    const conn = await Deno.startTls(tcp, { hostname: "a.test", caCerts: [certA.certPem] });
    try {
      await conn.write(
        new TextEncoder().encode(
          "GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        ),
      );
      await within(5_000, "`closed`", listener.closed);
    } finally {
      conn.close();
    }
  });
});
