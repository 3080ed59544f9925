/**
 * Hostile WebSocket tests, second round: clients and backends that misbehave
 * after the 101 (fragments interleaved with pings, a client that stops
 * reading, oversized messages, close races), many relays at once, and what
 * the backend receives on the upgrade. Real proxy, raw backend
 * (`tests/support/websocket_world.ts`), and a raw client where exact frames matter. A
 * comment starting "Was a bug" marks a test pinning a fix.
 *
 * @module
 */
import { assert, assertBetween, assertEquals } from "../../tests/support/assert.ts";
import { concatBytes, latin1, latin1Bytes } from "../../tests/support/raw_http.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import {
  closeCodeOf,
  connectClient,
  SAMPLE_KEY,
  withWsWorld,
  wsFrame,
  type WsWorld,
} from "../../tests/support/websocket_world.ts";
import {
  encodeClosePayload,
  FrameDecoder,
  OP_BINARY,
  OP_CLOSE,
  OP_CONTINUATION,
  OP_PING,
  OP_PONG,
  OP_TEXT,
  type WsFrame,
} from "./ws_frame.ts";

const KEY = SAMPLE_KEY;
const MIB = 1024 * 1024;
const decode = (b: Uint8Array | undefined) => new TextDecoder().decode(b);
/** A frame as a server sends it (unmasked). */
const sframe = (opcode: number, payload: Uint8Array | string, fin = true) =>
  wsFrame(opcode, payload, { fin });
/** A frame as a client sends it (masked). */
const cframe = (opcode: number, payload: Uint8Array | string, fin = true) =>
  wsFrame(opcode, payload, { fin, mask: true });

/** A raw client speaking frames itself over TCP, after a hand-written upgrade. */
class RawWsClient {
  readonly status: number;
  readonly head: string;
  #conn: Deno.Conn;
  #decoder = new FrameDecoder({ maxPayload: 256 * MIB, expectMasked: false });
  #eof = false;
  #closed = false;

  private constructor(conn: Deno.Conn, head: string, rest: Uint8Array) {
    this.#conn = conn;
    this.head = head;
    this.status = Number(head.split(" ")[1]);
    this.#decoder.push(rest);
  }

  static async open(port: number, target = "/ws", extra: readonly string[] = []) {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    const request = [
      `GET ${target} HTTP/1.1`,
      "Host: chat.example",
      "Upgrade: websocket",
      "Connection: Upgrade",
      `Sec-WebSocket-Key: ${KEY}`,
      "Sec-WebSocket-Version: 13",
      ...extra,
    ].join("\r\n") + "\r\n\r\n";
    await conn.write(latin1Bytes(request));
    let buf = new Uint8Array(0);
    const chunk = new Uint8Array(64 * 1024);
    for (;;) {
      const end = latin1(buf).indexOf("\r\n\r\n");
      if (end >= 0) {
        return new RawWsClient(conn, latin1(buf.subarray(0, end)), buf.slice(end + 4));
      }
      const n = await within(10_000, "the proxy's answer", conn.read(chunk));
      if (n === null) {
        conn.close();
        throw new Error("Connection closed before the 101");
      }
      buf = concatBytes([buf, chunk.subarray(0, n)]);
    }
  }

  async send(bytes: Uint8Array): Promise<void> {
    let offset = 0;
    while (offset < bytes.length) offset += await this.#conn.write(bytes.subarray(offset));
  }

  /** The next frame, or null at EOF. */
  async next(timeoutMs = 10_000): Promise<WsFrame | null> {
    const chunk = new Uint8Array(64 * 1024);
    for (;;) {
      const frame = this.#decoder.next();
      if (frame !== undefined) return frame;
      if (this.#eof) return null;
      const n = await within(timeoutMs, "a frame from the proxy", this.#conn.read(chunk));
      if (n === null) this.#eof = true;
      else this.#decoder.push(chunk.subarray(0, n));
    }
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }
}

// --- Client frames. ---

Deno.test("a client's fragmented message interleaved with pings reaches the backend whole, and each ping gets its pong", async () => {
  let received: WsFrame | null = null;
  await withWsWorld(async (conn) => {
    await conn.accept();
    received = await conn.nextFrame();
    await conn.write(sframe(OP_TEXT, "got it"));
    const close = await conn.nextFrame();
    if (close !== null) await conn.write(sframe(OP_CLOSE, close.payload));
  }, async ({ proxy, backend, relaysEnded }) => {
    const client = await RawWsClient.open(proxy.port);
    try {
      assertEquals(client.status, 101);
      await client.send(concatBytes([
        cframe(OP_TEXT, "hel", false),
        cframe(OP_PING, "p1"),
        cframe(OP_CONTINUATION, "lo ", false),
        cframe(OP_PING, "p2"),
        cframe(OP_CONTINUATION, "wörld"),
      ]));
      const seen: string[] = [];
      for (let i = 0; i < 3; i++) {
        const next = await client.next();
        seen.push(`${next?.opcode}:${decode(next?.payload)}`);
      }
      assertEquals(seen, [`${OP_PONG}:p1`, `${OP_PONG}:p2`, `${OP_TEXT}:got it`]);
      const got = received as WsFrame | null;
      assertEquals([got?.opcode, got?.fin, decode(got?.payload)], [OP_TEXT, true, "hello wörld"]);
      await client.send(cframe(OP_CLOSE, encodeClosePayload(1000, "")));
      const record = await backend.closedByProxy(0);
      assertEquals(record.frames.map(closeCodeOf).filter((c) => c !== undefined), [1000]);
    } finally {
      client.close();
    }
    await relaysEnded();
  });
});

Deno.test("the backend's close while the client is mid-message reaches the client, and the half-sent message never reaches the backend", async () => {
  await withWsWorld(async (conn) => {
    await conn.accept();
    await conn.write(sframe(OP_CLOSE, encodeClosePayload(4000, "bye")));
  }, async ({ proxy, backend, relaysEnded }) => {
    const client = await RawWsClient.open(proxy.port);
    try {
      await client.send(cframe(OP_TEXT, "half", false));
      const close = await client.next();
      assertEquals(close === null ? undefined : closeCodeOf(close), 4000);
      await client.send(cframe(OP_CONTINUATION, " and the rest"));
      await client.send(cframe(OP_CLOSE, encodeClosePayload(4000, "")));
      const record = await backend.closedByProxy(0);
      assertEquals(record.frames.filter((f) => f.opcode !== OP_CLOSE), []);
      assertEquals(record.frames.map(closeCodeOf).filter((c) => c !== undefined), [4000]);
    } finally {
      client.close();
    }
    await relaysEnded();
  });
});

// --- The upgrade request. ---

Deno.test("Origin, Cookie and the offered subprotocols reach the backend unchanged on an upgrade", async () => {
  const seen: Record<string, string | undefined> = {};
  await withWsWorld(async (conn) => {
    for (const name of ["origin", "cookie", "sec-websocket-protocol", "sec-websocket-key"]) {
      seen[name] = conn.field(name);
    }
    await conn.accept({ fields: ["Sec-WebSocket-Protocol: b"] });
    await conn.write(sframe(OP_CLOSE, encodeClosePayload(1000, "")));
  }, async ({ proxy, relaysEnded }) => {
    const client = await RawWsClient.open(proxy.port, "/ws", [
      "Origin: https://app.example",
      "Cookie: session=abc; theme=dark",
      "Sec-WebSocket-Protocol: a, b",
    ]);
    try {
      assertEquals(client.status, 101);
      assert(/\r\nsec-websocket-protocol: b(\r\n|$)/i.test(client.head), client.head);
      await client.next();
      await client.send(cframe(OP_CLOSE, encodeClosePayload(1000, "")));
    } finally {
      client.close();
    }
    await relaysEnded();
  });
  assertEquals(seen, {
    origin: "https://app.example",
    cookie: "session=abc; theme=dark",
    "sec-websocket-protocol": "a, b",
    "sec-websocket-key": KEY,
  });
});

// Was a bug: with two Sec-WebSocket-Protocol fields in the 101 the relay took the first
// (RFC 6455 section 4.2.2: at most one; section 4.1: the client fails the connection).
Deno.test("a 101 naming two subprotocols gets 502 even when both were offered", async () => {
  await withWsWorld(async (conn) => {
    await conn.accept({ fields: ["Sec-WebSocket-Protocol: a", "Sec-WebSocket-Protocol: b"] });
  }, async ({ proxy, backend, deltas }) => {
    const client = await RawWsClient.open(proxy.port, "/ws", ["Sec-WebSocket-Protocol: a, b"]);
    client.close();
    assertEquals(client.status, 502);
    await backend.closedByProxy(0);
    assertEquals(deltas, []);
  });
});

// --- Oversized backend messages. ---

/**
 * A backend writing 100 MiB past the cap: the client gets 1011 and no message, the backend a
 * 1009 close and then a closed socket, before it could write it all.
 */
async function assertBackendCutOff(
  { url, backend, relaysEnded }: WsWorld,
  progress: () => { written: number; writeFailed: boolean },
): Promise<void> {
  const client = connectClient(url);
  const event = await within(20_000, "the client's close", client.closed);
  assertEquals([event.code, client.messages.length], [1011, 0]);
  const record = await backend.closedByProxy(0, 20_000);
  assertEquals(record.frames.map(closeCodeOf).filter((c) => c !== undefined), [1009]);
  await relaysEnded();
  await waitFor("the backend's writes to stop", () => {
    const { written, writeFailed } = progress();
    return writeFailed || written === 100 * MIB;
  }, { timeoutMs: 20_000 });
  assert(progress().writeFailed, "the backend wrote all 100 MiB");
}

Deno.test("a backend streaming a 100 MiB frame over the cap is cut off after a 1009 close, without the proxy taking it all", async () => {
  let written = 0;
  let writeFailed = false;
  await withWsWorld(async (conn) => {
    await conn.accept({ after: Uint8Array.of(0x82, 127, 0, 0, 0, 0, 0x06, 0x40, 0, 0) });
    const piece = new Uint8Array(MIB);
    try {
      for (let i = 0; i < 100; i++) {
        await conn.write(piece);
        written += piece.length;
      }
    } catch {
      writeFailed = true;
    }
  }, async (world) => {
    await assertBackendCutOff(world, () => ({ written, writeFailed }));
    assertBetween(written, 0, 32 * MIB, "bytes the backend wrote before being cut off");
  }, { maxWebSocketMessageBytes: 16 * MIB });
});

Deno.test("a backend sending a message in 1 MiB fragments past the cap is cut off with 1009 once over it", async () => {
  let written = 0;
  let writeFailed = false;
  await withWsWorld(async (conn) => {
    await conn.accept();
    const piece = new Uint8Array(MIB).fill(1);
    try {
      for (let i = 0; i < 100; i++) {
        await conn.write(sframe(i === 0 ? OP_BINARY : OP_CONTINUATION, piece, false));
        written += MIB;
      }
    } catch {
      writeFailed = true;
    }
  }, async (world) => {
    await assertBackendCutOff(world, () => ({ written, writeFailed }));
  }, { maxWebSocketMessageBytes: 8 * MIB });
});

// --- Many relays. ---

Deno.test("200 WebSockets opened at once and then closed all end, and every backend socket is closed", async () => {
  const COUNT = 200;
  await withWsWorld(async (conn) => {
    await conn.accept();
    const hello = await conn.nextFrame();
    await conn.write(sframe(OP_TEXT, `echo ${decode(hello?.payload)}`));
    const close = await conn.nextFrame();
    if (close !== null && close.opcode === OP_CLOSE) {
      await conn.write(sframe(OP_CLOSE, close.payload));
    }
  }, async ({ url, backend, deltas, relaysEnded }) => {
    const clients = Array.from({ length: COUNT }, () => connectClient(url));
    await Promise.all(clients.map((c) => c.waitOpen(20_000)));
    clients.forEach((c, i) => c.ws.send(`${i}`));
    for (const [i, c] of clients.entries()) assertEquals(await c.next(20_000), `echo ${i}`);
    assertEquals(deltas.filter((d) => d === 1).length, COUNT);
    clients.forEach((c, i) => c.ws.close(i % 2 === 0 ? 1000 : 4000 + i, "bye"));
    const events = await within(
      20_000,
      "every client's close",
      Promise.all(clients.map((c) => c.closed)),
    );
    assertEquals(events.filter((e, i) => e.code !== (i % 2 === 0 ? 1000 : 4000 + i)).length, 0);
    await relaysEnded(20_000);
    for (let i = 0; i < COUNT; i++) await backend.closedByProxy(i, 20_000);
    assertEquals(backend.conns.filter((r) => r.error !== undefined).map((r) => r.error), []);
  });
});

// --- A client that stops reading. ---

Deno.test("a client that stops reading while the backend streams is closed on both sides by the idle timeout", async () => {
  let written = 0;
  await withWsWorld(async (conn) => {
    await conn.accept();
    const message = sframe(OP_BINARY, new Uint8Array(256 * 1024));
    try {
      for (let i = 0; i < 1000; i++) {
        await conn.write(message);
        written += message.length;
      }
    } catch {
      // Cut off by the proxy.
    }
  }, async ({ proxy, backend, deltas }) => {
    const client = await RawWsClient.open(proxy.port); // never reads after the 101
    try {
      assertEquals(client.status, 101);
      await waitFor("the relay to end", () => deltas.length === 2, { timeoutMs: 15_000 });
      await backend.closedByProxy(0, 15_000);
      assertBetween(written, 0, 200 * MIB, "bytes the backend wrote");
    } finally {
      client.close();
    }
  }, { webSocketIdleTimeoutMs: 1_500 });
});
