/**
 * A worker pool's shutdown: requests in flight on every worker finish and it
 * reports graceful, a request outlasting the timeout is cut on time and
 * reported, and WebSockets on every listener are closed with 1001.
 *
 * @module
 */
import { assert, assertEquals, assertStringIncludes } from "../../tests/support/assert.ts";
import { startEchoBackend } from "../../tests/support/echo_backend.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import { renderMetrics } from "../metrics/exposition.ts";
import type { MetricsSnapshot } from "../metrics/exposition.ts";
import {
  decodeClosePayload,
  encodeClosePayload,
  encodeFrame,
  FrameDecoder,
  OP_CLOSE,
  OP_TEXT,
  type WsFrame,
} from "../websocket/ws_frame.ts";
import { generateSelfSignedCertificate } from "../tls/self_signed.ts";
import type { SluiceSnapshotData } from "./sluice_worker.ts";
import { startWorkerPool } from "./worker_pool.ts";
import { probeGet, probeStats, withProbePool } from "../../tests/support/probe_pool.ts";

const certDefault = await generateSelfSignedCertificate({
  hostnames: ["chat.test"],
  commonName: "chat.test",
});

/** A WebSocket client on a raw connection (plain or TLS), so both listeners are reached alike. */
class RawWebSocket {
  #conn: Deno.Conn | Deno.TlsConn;
  #decoder = new FrameDecoder({ maxPayload: 1 << 20, expectMasked: false });
  #buf = new Uint8Array(16 * 1024);

  private constructor(conn: Deno.Conn | Deno.TlsConn) {
    this.#conn = conn;
  }

  static async open(port: number, secure: boolean): Promise<RawWebSocket> {
    const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
    const conn = secure
      ? await Deno.startTls(tcp, {
        hostname: "chat.test",
        caCerts: [certDefault.certPem],
        alpnProtocols: ["http/1.1"],
      })
      : tcp;
    const ws = new RawWebSocket(conn);
    try {
      await ws.#write(
        "GET /ws HTTP/1.1\r\nHost: chat.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
      );
      let head = "";
      while (!head.includes("\r\n\r\n")) {
        const n = await conn.read(ws.#buf);
        if (n === null) throw new Error("Cannot upgrade: connection closed");
        head += String.fromCharCode(...ws.#buf.subarray(0, n));
      }
      if (!head.startsWith("HTTP/1.1 101")) {
        throw new Error(`Cannot upgrade: ${head.split("\r\n")[0]}`);
      }
      ws.#decoder.push(
        Uint8Array.from(head.slice(head.indexOf("\r\n\r\n") + 4), (c) => c.charCodeAt(0)),
      );
    } catch (error) {
      conn.close();
      throw error;
    }
    return ws;
  }

  send(text: string): Promise<void> {
    return this.#writeBytes(encodeFrame(OP_TEXT, new TextEncoder().encode(text), { mask: true }));
  }

  /** The next frame from the server, or undefined when the connection ended. */
  async next(): Promise<WsFrame | undefined> {
    for (;;) {
      const frame = this.#decoder.next();
      if (frame !== undefined) return frame;
      const n = await this.#conn.read(this.#buf).catch(() => null);
      if (n === null) return undefined;
      this.#decoder.push(this.#buf.subarray(0, n));
    }
  }

  /** Answers the server's close frame, as a client must. */
  async replyClose(code: number): Promise<void> {
    await this.#writeBytes(encodeFrame(OP_CLOSE, encodeClosePayload(code), { mask: true })).catch(
      () => {},
    );
  }

  close(): void {
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }

  #write(text: string): Promise<void> {
    return this.#writeBytes(Uint8Array.from(text, (c) => c.charCodeAt(0)));
  }

  async #writeBytes(bytes: Uint8Array): Promise<void> {
    let offset = 0;
    while (offset < bytes.length) offset += await this.#conn.write(bytes.subarray(offset));
  }
}

// On Deno 2.9.6 a listener's graceful shutdown already closes the WebSockets it upgraded (1001,
// "Server shutting down"), and the worker calls `closeWebSockets()` (1001 "Going away") right after:
// whichever frame goes first, the client sees 1001, the backend a close frame, and the drain ends.
for (const listener of ["http", "https"] as const) {
  Deno.test({
    name:
      `a worker's shutdown closes WebSockets on the ${listener} listener with 1001 and stops gracefully`,
    fn: async () => {
      const backend = await startEchoBackend({ name: "chat/ws", pod: "ws-1" });
      const pool = await startWorkerPool<SluiceSnapshotData>({
        count: 1,
        module: new URL("./sluice_worker.ts", import.meta.url),
        config: {
          hostname: "127.0.0.1",
          httpPort: listener === "http" ? 0 : null,
          httpsPort: listener === "https" ? 0 : null,
          handlerOptions: { accessLog: false },
        },
        snapshot: {
          version: 1,
          data: {
            translation: {
              routes: [{
                host: "",
                path: "/",
                pathType: "Prefix",
                ingress: "chat/ws",
                backend: "chat/ws:80",
              }],
              backends: [{
                key: "chat/ws:80",
                service: "chat/ws",
                endpoints: [{ address: "127.0.0.1", port: backend.port }],
              }],
              tlsHosts: [],
              certificates: [],
              issues: [],
            },
            defaultCertificate: certDefault,
          },
        },
      });
      let client: RawWebSocket | undefined;
      try {
        client = await RawWebSocket.open(
          (listener === "http" ? pool.httpPort : pool.httpsPort)!,
          listener === "https",
        );
        await client.send("hello");
        const echo = await within(5_000, "the echo", client.next());
        assertEquals(new TextDecoder().decode(echo?.payload), "hello");
        const metrics = await renderMetrics(await pool.collect() as MetricsSnapshot[]);
        assertStringIncludes(metrics, "sluice_active_websockets 1");

        // Graceful although a WebSocket was open: it was closed rather than drained for 20 s.
        const stopped = pool.shutdown({ timeoutMs: 20_000 });
        const frame = await within(10_000, "a close frame", client.next());
        assertEquals(frame?.opcode, OP_CLOSE);
        const { code, reason } = decodeClosePayload(frame!.payload);
        assertEquals(code, 1001);
        assert(["Going away", "Server shutting down"].includes(reason), reason);
        await client.replyClose(1001);
        assertEquals(await within(15_000, "the pool to stop", stopped), {
          graceful: true,
          openConnections: 0,
        });
        await backend.waitFor(() => backend.requests[0]?.wsClose !== undefined);
        assertEquals(backend.requests[0]?.wsClose?.code, 1001);
      } finally {
        client?.close();
        await pool.shutdown({ timeoutMs: 5_000 });
        await backend.close();
      }
    },
  });
}

Deno.test("shutdown() lets requests in flight on every worker finish, and reports graceful", async () => {
  await withProbePool(2, async (pool, port) => {
    const slow = Array.from({ length: 6 }, () => probeGet(port, "/?ms=600"));
    await waitFor("6 requests in flight", async () => {
      return (await probeStats(pool)).reduce((sum, s) => sum + s.inFlight, 0) === 6;
    });
    const stopped = await within(10_000, "the shutdown", pool.shutdown({ timeoutMs: 5_000 }));
    assertEquals(stopped, { graceful: true, openConnections: 0 });
    for (const body of await Promise.all(slow)) assert(body.startsWith("v1 start "), body);
    assertEquals(pool.size, 0);
  });
});

// Was a bug: a plain-HTTP worker cut at the deadline reported 0 open connections (Deno.serve
// does not count them), so the pool said "graceful: false, openConnections: 0".
Deno.test("shutdown() with a request outlasting its timeout ends on time and reports it cut", async () => {
  await withProbePool(1, async (pool, port) => {
    const slow = probeGet(port, "/?ms=8000").catch(() => "");
    await waitFor("the request in flight", async () => (await probeStats(pool))[0]?.inFlight === 1);
    const started = performance.now();
    const stopped = await within(4_000, "the shutdown", pool.shutdown({ timeoutMs: 300 }));
    const ms = performance.now() - started;
    assertEquals(stopped.graceful, false);
    assert(stopped.openConnections >= 1, `openConnections ${stopped.openConnections}`);
    assertEquals(await slow, "", "the cut request got no answer");
    // The pool waits for the worker's own report, not its 5 s slack.
    assert(ms < 3_000, `shutdown took ${ms.toFixed(0)} ms`);
  });
});
