/**
 * The WebSocket relay's limits and resources: messages over the cap (1009),
 * backpressure toward a backend that is not reading (pings answered once,
 * queued bytes delivered, the 64 MiB queue cap), a client that stops reading
 * (idle timeout), many relays opened and closed at once, and an ended relay's
 * buffers freed (measured in a separate process,
 * `tests/support/websocket_soak_probe.ts`). Real proxy, raw backend
 * (`tests/support/websocket_world.ts`), raw clients where exact frames matter.
 *
 * @module
 */
import { assert, assertBetween, assertEquals } from "../../tests/support/assert.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import {
  acceptFor,
  closeCodeOf,
  connectClient,
  RawWsClient,
  SAMPLE_KEY,
  withWsWorld,
  wsFrame,
  type WsWorld,
} from "../../tests/support/websocket_world.ts";
import {
  encodeClosePayload,
  OP_BINARY,
  OP_CLOSE,
  OP_CONTINUATION,
  OP_PING,
  OP_PONG,
  OP_TEXT,
} from "./ws_frame.ts";
import { concatBytes } from "../../tests/support/raw_http.ts";
import type { ProbeReading } from "../../tests/support/websocket_soak_probe.ts";

const MIB = 1024 * 1024;
const decode = (b: Uint8Array | undefined) => new TextDecoder().decode(b);

/** A frame as a server sends it (unmasked). */
const sframe = (opcode: number, payload: Uint8Array | string, fin = true) =>
  wsFrame(opcode, payload, { fin });

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

/** A frame as a server sends it (unmasked). */
const frame = (opcode: number, payload: Uint8Array | string, fin = true) =>
  wsFrame(opcode, payload, { fin });
const join = (...parts: Uint8Array[]) => concatBytes(parts);

Deno.test("10,000 pings from a backend that is not reading are each answered once, in order, and the relay keeps working", async () => {
  const PINGS = 10_000;
  await withWsWorld(async (conn) => {
    await conn.accept();
    const flood = join(
      ...Array.from({ length: PINGS }, (_, i) => frame(OP_PING, `${i}`.padEnd(125, "."))),
    );
    await conn.write(join(flood, frame(OP_TEXT, "after flood")));
    // Only now read: every pong, then the client's message.
    let pongs = 0;
    for (;;) {
      const next = await conn.nextFrame();
      assert(next !== null, "the proxy closed before the client's message");
      if (next.opcode === OP_TEXT) break;
      assertEquals(next.opcode, OP_PONG);
      assertEquals(new TextDecoder().decode(next.payload), `${pongs}`.padEnd(125, "."));
      pongs++;
    }
    assertEquals(pongs, PINGS);
    await conn.write(frame(OP_CLOSE, encodeClosePayload(1000, "")));
  }, async ({ url, backend, relaysEnded }) => {
    const client = connectClient(url);
    assertEquals(await client.next(), "after flood");
    client.ws.send("sentinel");
    assertEquals((await within(10_000, "the client's close", client.closed)).code, 1000);
    const record = await backend.closedByProxy(0);
    assertEquals(record.error, undefined);
    await relaysEnded();
  });
});

/** A 1 MiB message whose bytes all equal `index & 0xff`. */
const chunk = (index: number) => new Uint8Array(MIB).fill(index & 0xff);

Deno.test("50 MiB sent to a backend that is not reading arrive whole and in order once it reads", async () => {
  const COUNT = 50;
  let clientDone = false;
  await withWsWorld(async (conn) => {
    await conn.accept();
    await waitFor("the client to hand over its 50 MiB", () => clientDone, { timeoutMs: 30_000 });
    for (let i = 0; i < COUNT; i++) {
      const next = await conn.nextFrame(30_000);
      assertEquals([next?.opcode, next?.payload.length], [OP_BINARY, MIB], `message ${i}`);
      assert(next?.payload.every((b) => b === (i & 0xff)), `message ${i} content`);
    }
    await conn.write(frame(OP_TEXT, "all read"));
  }, async ({ url, backend, relaysEnded }) => {
    const client = connectClient(url);
    await client.waitOpen();
    for (let i = 0; i < COUNT; i++) client.ws.send(chunk(i));
    await waitFor("the client's send buffer to drain", () => client.ws.bufferedAmount === 0, {
      timeoutMs: 30_000,
    });
    clientDone = true;
    assertEquals(await client.next(30_000), "all read");
    client.ws.close(1000);
    assertEquals((await client.closed).code, 1000);
    await backend.closedByProxy(0);
    await relaysEnded();
  });
});

// Was a bug: over the 64 MiB queue cap the relay ended but the backend socket stayed open, its
// write pending, until the backend read everything.
Deno.test({
  name: "a backend that stops reading past the 64 MiB queue cap is disconnected at once",
  fn: async () => {
    const COUNT = 80;
    let clientClosed = false;
    let received = -1;
    await withWsWorld(async (conn) => {
      await conn.accept();
      await waitFor("the client to be closed", () => clientClosed, { timeoutMs: 30_000 });
      received = await conn.countToEnd(30_000);
    }, async ({ url, backend, relaysEnded }) => {
      const client = connectClient(url);
      await client.waitOpen();
      for (let i = 0; i < COUNT; i++) client.ws.send(chunk(i));
      const event = await within(30_000, "the client's close", client.closed);
      // Sluice closes with 1008 "Backend too slow", but the client (still sending) sees an
      // abnormal close (Deno 2.9.6 reports code 0): the close frame is lost to a reset.
      assert(!event.wasClean || event.code === 1008, `client close ${event.code}`);
      await relaysEnded();
      clientClosed = true;
      await backend.closedByProxy(0, 30_000);
      // Closed at once, only what the kernel buffers held arrives; today the whole 64 MiB queue does.
      assertBetween(received, 0, 32 * MIB, "bytes the backend read after the cap");
    });
  },
});

const encoder = new TextEncoder();

/**
 * A WebSocket backend that answers the upgrade, echoes "hello" to the first
 * frame, then reads until the proxy closes.
 */
function echoBackend(accept: string): { port: number; close(): Promise<void> } {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const open = new Set<Deno.Conn>();
  const serving = new Set<Promise<void>>();
  const serve = async (conn: Deno.Conn) => {
    const buf = new Uint8Array(4096);
    try {
      let head = "";
      while (!head.includes("\r\n\r\n")) {
        const n = await conn.read(buf);
        if (n === null) return;
        head += new TextDecoder().decode(buf.subarray(0, n));
      }
      await conn.write(encoder.encode(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
          `Sec-WebSocket-Accept: ${accept}\r\n\r\n`,
      ));
      if (await conn.read(buf) === null) return;
      await conn.write(wsFrame(OP_TEXT, "hello"));
      while (await conn.read(buf) !== null) { /* until the proxy closes */ }
    } catch {
      // Reset by the proxy, or closed at the end.
    } finally {
      open.delete(conn);
      try {
        conn.close();
      } catch {
        // Closed by close().
      }
    }
  };
  const accepting = (async () => {
    for await (const conn of listener) {
      open.add(conn);
      const task = serve(conn).finally(() => serving.delete(task));
      serving.add(task);
    }
  })().catch(() => {});
  return {
    port: (listener.addr as Deno.NetAddr).port,
    async close() {
      listener.close();
      await accepting;
      for (const conn of open) conn.close();
      await Promise.all([...serving]);
    },
  };
}

/** One session: upgrade, one echoed message, then the TCP connection closed without a close frame. */
async function vanishingSession(port: number): Promise<void> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(encoder.encode(
      `GET /ws HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
        `Sec-WebSocket-Key: ${SAMPLE_KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
    ));
    const buf = new Uint8Array(4096);
    let seen = "";
    while (!seen.includes("\r\n\r\n")) {
      const n = await conn.read(buf);
      if (n === null) throw new Error("Cannot upgrade: the proxy closed the connection");
      seen += new TextDecoder().decode(buf.subarray(0, n));
    }
    assert(seen.startsWith("HTTP/1.1 101"), `upgraded: ${seen.slice(0, 40)}`);
    await conn.write(wsFrame(OP_TEXT, "hello", { mask: true }));
    // The echo (7 bytes), unless it came with the 101.
    if (!/\r\n\r\n[\s\S]{7}/.test(seen)) await conn.read(buf);
  } finally {
    conn.close();
  }
}

/** `n` vanishing sessions, 16 at a time. */
async function sessions(port: number, n: number): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: 16 }, async () => {
    while (next < n) {
      next++;
      await vanishingSession(port);
    }
  }));
}

// Was a bug: a relay whose client vanished (TCP closed, no close frame) stayed reachable
// after it ended, with its frame decoder's 16 KiB buffer, for as long as Deno 2.9.6 keeps such
// a server socket (5 to 15 s more): the socket's handlers held it. +16 KiB of external memory
// per session in tests/bench/soak_bench.ts (Deno's own ~4 KB of heap per socket remains, for
// those seconds; not asserted here).
Deno.test("an ended relay's buffers are freed even when its client vanished without a close frame", async () => {
  const backend = echoBackend(await acceptFor(SAMPLE_KEY));
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--unstable-net",
      "--unstable-no-legacy-abort",
      "--v8-flags=--expose-gc",
      new URL("../../tests/support/websocket_soak_probe.ts", import.meta.url).pathname,
      String(backend.port),
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const stdin = child.stdin.getWriter();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  const nextLine = async (): Promise<string> => {
    while (!buffered.includes("\n")) {
      const { value, done } = await lines.read();
      if (done) throw new Error(`Cannot read the probe: it exited (${buffered})`);
      buffered += value;
    }
    const at = buffered.indexOf("\n");
    const line = buffered.slice(0, at);
    buffered = buffered.slice(at + 1);
    return line;
  };
  const reading = async (): Promise<ProbeReading> => {
    await stdin.write(encoder.encode("measure\n"));
    return JSON.parse(await nextLine());
  };
  try {
    const { port } = JSON.parse(await nextLine()) as { port: number };
    await sessions(port, 200);
    const before = await reading();
    assert(before.gc, "the probe runs with --expose-gc");
    await sessions(port, 2_000);
    const after = await reading();
    assertEquals(after.ended - before.ended, 2_000);
    // Leaked: 2,000 x 16 KiB = 31 MiB.
    const growth = after.external - before.external;
    assert(growth < 4 * 1024 * 1024, `external memory grew by ${growth} bytes over 2,000 sessions`);
  } finally {
    await stdin.close();
    while (!(await lines.read()).done) { /* drain */ }
    await child.status;
    await backend.close();
  }
});
