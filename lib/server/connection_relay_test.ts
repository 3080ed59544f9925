/**
 * The connection relays that own client sockets (`_connection_relay.ts`,
 * `_relay_server.ts`): the {@linkcode RelayServer} fed plain TCP by its own
 * accept loop (the relay without the TLS), and HTTPS through its TLS relay.
 * Client timeouts on relayed connections (a trickled head, an upload paused
 * past the idle timeout while its request is in flight, a reader that takes
 * nothing or reads with pauses, over TLS too, h2c PINGs only, a WebSocket
 * client that reads nothing), what crosses a relay whole (large heads,
 * pipelined requests, a refused upload's answer), only relays reaching the
 * inner server (421), each request attributed to its own client (IPv4, IPv6,
 * under churn), descriptors returned after churn, and shutdown mid-transfer.
 *
 * @module
 */
import { assert, assertEquals } from "../../tests/support/assert.ts";
import { concatBytes, latin1, parseResponses } from "../../tests/support/raw_http.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import { generateSelfSignedCertificate } from "../tls/self_signed.ts";
import { stubCertificateTable } from "../../tests/support/stub_snapshot.ts";
import { Generation } from "./_generation.ts";
import { keepAliveOk } from "../../tests/support/tls_client.ts";
import { RelayServer } from "./_relay_server.ts";
import { listenHttps } from "./https_listener.ts";
import type { Listener, RequestHandler } from "./listener.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Small timeouts: every test that waits for one waits at most a few of them. */
const TIMEOUTS = { firstBytesTimeoutMs: 200, idleTimeoutMs: 150 };

/** `listener`, shut down (waiting at most 5 s) when disposed. */
function stopping<L extends Listener>(listener: L): L & AsyncDisposable {
  return Object.assign(listener, {
    [Symbol.asyncDispose]: async () => void await listener.shutdown({ timeoutMs: 5_000 }),
  });
}

/**
 * A {@linkcode RelayServer} fed by its own accept loop on plain TCP (the relay HTTPS uses,
 * without the TLS), for tests of the relay itself and of its counters; disposing it stops it.
 */
interface RelayWorld extends AsyncDisposable {
  readonly port: number;
  readonly server: RelayServer;
  /** Requests seen by `onRequest` (+1/-1) and the lowest value it reached. */
  readonly counted: { now: number; lowest: number };
  stop(timeoutMs?: number): Promise<void>;
}

function relayWorld(
  handler: RequestHandler,
  timeouts: { firstBytesTimeoutMs: number; idleTimeoutMs: number } = TIMEOUTS,
  hostname = "127.0.0.1",
): RelayWorld {
  const counted = { now: 0, lowest: 0 };
  const server = new RelayServer(handler, {
    secure: false,
    ...timeouts,
    localPort: () => port,
    onRequest: (delta) => {
      counted.now += delta;
      counted.lowest = Math.min(counted.lowest, counted.now);
    },
  });
  const listener = Deno.listen({ hostname, port: 0 });
  const port = listener.addr.port;
  const accepting = new Generation<Deno.TcpConn>({
    id: 1,
    listener,
    onConnection: (conn) => void server.relay(conn),
    onAcceptError: () => {},
  });
  return {
    port,
    server,
    counted,
    async stop(timeoutMs = 5_000) {
      await accepting.stopAccepting();
      const { finished } = await server.shutdown(timeoutMs);
      await within(10_000, "every relay to end", finished);
    },
    [Symbol.asyncDispose]() {
      return this.stop();
    },
  };
}

function connect(port: number): Promise<Deno.TcpConn> {
  return Deno.connect({ hostname: "127.0.0.1", port });
}

function closeQuietly(conn: { close(): void }): void {
  try {
    conn.close();
  } catch {
    // Already closed.
  }
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let at = 0;
  while (at < bytes.length) at += await conn.write(bytes.subarray(at));
}

/** Everything the server sends until it closes (a reset counts as the end too). */
async function readToEnd(conn: Deno.Conn, what: string, timeoutMs = 5_000): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  const buffer = new Uint8Array(64 * 1024);
  const read = async () => {
    while (true) {
      let n: number | null;
      try {
        n = await conn.read(buffer);
      } catch {
        n = null;
      }
      if (n === null) return concatBytes(parts);
      parts.push(buffer.slice(0, n));
    }
  };
  return await within(timeoutMs, what, read());
}

/** Resolves when the server closes `conn` (read end or reset); what it sent meanwhile is dropped. */
function serverClosed(conn: Deno.Conn): Promise<void> {
  return (async () => {
    const buffer = new Uint8Array(16 * 1024);
    while (true) {
      try {
        if (await conn.read(buffer) === null) return;
      } catch {
        return;
      }
    }
  })();
}

/** A request head that never ends. */
const SLOW_HEAD = "GET / HTTP/1.1\r\nHost: a.test\r\nX-Slow: ";

/**
 * Writes `first`, then `more` every half idle timeout until the server closes `conn` or 3 s
 * pass; whether the server closed it.
 */
async function closedWhileTrickling(
  conn: Deno.Conn,
  first: Uint8Array,
  more: Uint8Array,
): Promise<boolean> {
  let ended = false;
  void serverClosed(conn).then(() => ended = true);
  await writeAll(conn, first);
  const end = performance.now() + 3_000;
  while (!ended && performance.now() < end) {
    await pause(TIMEOUTS.idleTimeoutMs / 2);
    await conn.write(more).catch(() => {});
  }
  return ended;
}

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Open descriptors of this process. */
function openDescriptors(): number {
  let count = 0;
  for (const _ of Deno.readDirSync("/proc/self/fd")) count++;
  return count;
}

/** Reads until the end of a response head; the head. */
async function readHead(conn: Deno.Conn): Promise<string> {
  let text = "";
  const buffer = new Uint8Array(4096);
  while (!text.includes("\r\n\r\n")) {
    const n = await conn.read(buffer);
    if (n === null) throw new Error(`Closed after "${text}"`);
    text += decoder.decode(buffer.subarray(0, n));
  }
  return text.slice(0, text.indexOf("\r\n\r\n"));
}

const ok: RequestHandler = () => new Response("ok");

// ---------------------------------------------------------------------------
// Slow clients
// ---------------------------------------------------------------------------

// Was a bug: any byte reset the idle check, so a head trickled forever held the connection (slowloris).
Deno.test("a client trickling one byte of a request head every half idle timeout is disconnected", async () => {
  let called = 0;
  await using listener = relayWorld(() => {
    called++;
    return new Response("ok");
  });
  using conn = await connect(listener.port);
  // nginx bounds the whole head (client_header_timeout); a byte now and then must not reset it.
  const ended = await closedWhileTrickling(conn, encoder.encode(SLOW_HEAD), encoder.encode("a"));
  assert(ended, "the trickling client is still connected after 3 s");
  assertEquals(called, 0);
});

Deno.test("an upload whose pauses outlast the idle timeout is not cut while its request is in flight", async () => {
  await using listener = relayWorld(async (req) =>
    new Response(`got ${(await req.arrayBuffer()).byteLength}`)
  );
  using conn = await connect(listener.port);
  await writeAll(
    conn,
    encoder.encode(
      "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\nConnection: close\r\n\r\n",
    ),
  );
  // A slow uploader (nginx's client_body_timeout is between two reads, not for the whole body).
  for (const byte of "abcd") {
    await pause(TIMEOUTS.idleTimeoutMs * 1.5);
    await writeAll(conn, encoder.encode(byte));
  }
  const text = latin1(await readToEnd(conn, "the answer"));
  assert(text.startsWith("HTTP/1.1 200 OK\r\n") && text.endsWith("got 4"), text);
});

// Was a bug: a request in flight exempted the connection, so a client that never read held it forever.
Deno.test("a client that takes nothing of a large response for longer than the idle timeout is disconnected", async () => {
  let cancelled = false;
  // A body that never ends: only the relay can end this connection.
  await using listener = relayWorld(() =>
    new Response(
      new ReadableStream({
        pull(controller) {
          controller.enqueue(new Uint8Array(64 * 1024));
        },
        cancel() {
          cancelled = true;
        },
      }),
    )
  );
  using conn = await connect(listener.port);
  await writeAll(conn, encoder.encode("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"));
  // nginx's send_timeout: a client that accepts nothing for that long is closed.
  const first = await within(5_000, "the first bytes", conn.read(new Uint8Array(1)));
  assertEquals(first, 1);
  let closed = false;
  const deadline = performance.now() + 4_000;
  // Read nothing more; then, only to learn whether the server closed, drain what is buffered.
  await pause(1_500);
  const buffer = new Uint8Array(1 << 20);
  while (!closed && performance.now() < deadline) {
    try {
      closed = await within(1_000, "a read", conn.read(buffer)) === null;
    } catch {
      closed = true;
    }
  }
  assert(closed, "the connection of a client that reads nothing is still open");
  await waitFor("the handler's body to be cancelled", () => cancelled);
});

Deno.test("a client reading a large response with pauses shorter than the idle timeout gets it whole", async () => {
  // Larger than what loopback socket buffers hold (about 4 MiB each way), so the relay's writes
  // to the client block and resume many times.
  const size = 16 << 20;
  await using listener = relayWorld(() => new Response(new Uint8Array(size).fill(7)));
  using conn = await connect(listener.port);
  await writeAll(
    conn,
    encoder.encode("GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"),
  );
  const buffer = new Uint8Array(64 * 1024);
  let received = 0;
  let sincePause = 0;
  while (true) {
    const n = await within(5_000, "a read", conn.read(buffer));
    if (n === null) break;
    received += n;
    sincePause += n;
    if (sincePause >= 1 << 20) {
      sincePause = 0;
      await pause(TIMEOUTS.idleTimeoutMs / 3);
    }
  }
  assert(received > size, `got ${received} bytes of a ${size}-byte body and its head`);
});

// ---------------------------------------------------------------------------
// Ends: resets, half-closes, the inner server's door
// ---------------------------------------------------------------------------

Deno.test("a client that resets mid-response leaves no relay, request or handler stream behind", async () => {
  let cancelled = 0;
  await using world = relayWorld(() =>
    new Response(
      new ReadableStream({
        pull: (controller) => controller.enqueue(new Uint8Array(64 * 1024)),
        cancel: () => void cancelled++,
      }),
    )
  );
  for (let i = 0; i < 5; i++) {
    const conn = await connect(world.port);
    await writeAll(conn, encoder.encode("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"));
    await within(5_000, "the first bytes", conn.read(new Uint8Array(1024)));
    // Closing with unread bytes in the receive buffer makes the kernel send a reset.
    conn.close();
  }
  await waitFor("every handler stream to be cancelled", () => cancelled === 5);
  await waitFor(
    "the relays to end",
    () => world.server.connections === 0 && world.server.requests === 0,
  );
  assertEquals([world.counted.now, world.counted.lowest], [0, 0]);
});

Deno.test("only relays reach the inner server: HTTP/1.1, h2c and an upgrade from elsewhere on loopback get 421", async () => {
  let called = 0;
  await using world = relayWorld(() => {
    called++;
    return new Response("ok");
  });
  const inner = world.server.innerAddr;
  assertEquals(inner.hostname, "127.0.0.1");
  const plain = await fetch(`http://127.0.0.1:${inner.port}/`);
  assertEquals([plain.status, await plain.text()], [421, "Misdirected Request\n"]);
  using client = Deno.createHttpClient({ http1: false, http2: true });
  const h2 = await fetch(`http://127.0.0.1:${inner.port}/`, { client });
  assertEquals([h2.status, await h2.text()], [421, "Misdirected Request\n"]);
  const conn = await connect(inner.port);
  try {
    await writeAll(
      conn,
      encoder.encode(
        "GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
      ),
    );
    const answer = await within(5_000, "the answer", readHead(conn));
    assert(answer.startsWith("HTTP/1.1 421 "), answer);
  } finally {
    conn.close();
  }
  assertEquals(called, 0);
  assertEquals(world.server.requests, 0);
});

Deno.test("a refused Upgrade: h2c does not exempt the connection from the idle timeout", async () => {
  await using listener = relayWorld(ok);
  using conn = await connect(listener.port);
  await writeAll(
    conn,
    encoder.encode(
      "GET / HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade, HTTP2-Settings\r\n" +
        "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
    ),
  );
  const responses = parseResponses(await readToEnd(conn, "the idle connection to close"));
  assertEquals(responses.map((r) => r.status), [200]);
});

// ---------------------------------------------------------------------------
// Framing across the relay
// ---------------------------------------------------------------------------

Deno.test("a 50 KB request head sent in one write crosses the relay intact; a 200 KB one is refused", async () => {
  const seen: string[] = [];
  await using listener = relayWorld((req) => {
    seen.push(req.headers.get("x-big") ?? "");
    return new Response("ok");
  });
  const big = "b".repeat(50_000);
  const conn = await connect(listener.port);
  try {
    await writeAll(
      conn,
      encoder.encode(
        `GET / HTTP/1.1\r\nHost: a.test\r\nX-Big: ${big}\r\nConnection: close\r\n\r\n`,
      ),
    );
    const responses = parseResponses(await readToEnd(conn, "the answer"));
    assertEquals(responses.map((r) => r.status), [200]);
    assertEquals(seen, [big]);
  } finally {
    conn.close();
  }
  const huge = await connect(listener.port);
  try {
    await writeAll(
      huge,
      encoder.encode(`GET / HTTP/1.1\r\nHost: a.test\r\nX-Big: ${"h".repeat(200_000)}\r\n\r\n`),
    ).catch(() => {});
    const responses = parseResponses(await readToEnd(huge, "the refusal"));
    assert(responses.every((r) => r.status >= 400), "a 200 KB head got a success");
    assertEquals(seen.length, 1);
  } finally {
    huge.close();
  }
  const again = await connect(listener.port);
  try {
    assert((await keepAliveOk(again)).startsWith("HTTP/1.1 200 OK"));
  } finally {
    again.close();
  }
});

Deno.test("three requests pipelined in one write get three answers in order; the counters return to zero", async () => {
  await using world = relayWorld((req) => new Response(new URL(req.url).pathname));
  using conn = await connect(world.port);
  await writeAll(
    conn,
    encoder.encode(
      "GET /1 HTTP/1.1\r\nHost: a.test\r\n\r\nGET /2 HTTP/1.1\r\nHost: a.test\r\n\r\n" +
        "GET /3 HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
    ),
  );
  const responses = parseResponses(await readToEnd(conn, "the answers"));
  assertEquals(responses.map((r) => decoder.decode(r.body)), ["/1", "/2", "/3"]);
  await waitFor("the relay to end", () => world.server.connections === 0);
  assertEquals([world.server.requests, world.counted.now, world.counted.lowest], [0, 0, 0]);
});

// ---------------------------------------------------------------------------
// HTTP/2 with prior knowledge over the relay
// ---------------------------------------------------------------------------

/** One HTTP/2 frame. */
function h2Frame(type: number, flags: number, stream: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(9 + payload.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, payload.length << 8);
  out[3] = type;
  out[4] = flags;
  view.setUint32(5, stream);
  out.set(payload, 9);
  return out;
}

// Was a bug: PINGs counted as activity, so a connection with no request lived forever.
Deno.test("an h2c connection that only sends PINGs, never a request, is disconnected", async () => {
  let called = 0;
  await using listener = relayWorld(() => {
    called++;
    return new Response("ok");
  });
  using conn = await connect(listener.port);
  const ended = await closedWhileTrickling(
    conn,
    concatBytes([
      encoder.encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
      h2Frame(4, 0, 0, new Uint8Array()),
    ]),
    h2Frame(6, 0, 0, new Uint8Array(8)),
  );
  assert(ended, "a PING-only h2c connection is still open after 3 s");
  assertEquals(called, 0);
});

// Was a bug (1 run in 3): the idle check looked only at the instant it ran, so a connection whose
// response the inner server had just finished, before its bytes reached the relay, looked idle for
// the whole period and was closed under the response ("broken pipe").
Deno.test("an h2c stream whose handler outlasts the idle timeout, and one after it, are answered", async () => {
  await using listener = relayWorld(async (req) => {
    if (new URL(req.url).pathname === "/slow") await pause(TIMEOUTS.idleTimeoutMs * 3);
    return new Response(new URL(req.url).pathname);
  });
  using client = Deno.createHttpClient({ http1: false, http2: true });
  const base = `http://127.0.0.1:${listener.port}`;
  const slow = await fetch(`${base}/slow`, { client });
  assertEquals(await slow.text(), "/slow");
  const next = await fetch(`${base}/next`, { client });
  assertEquals(await next.text(), "/next");
});

// ---------------------------------------------------------------------------
// Churn: timers at the edge, attribution, descriptors
// ---------------------------------------------------------------------------

Deno.test("first bytes arriving as the first-bytes timeout fires get a whole answer or a close, never half of one", async () => {
  const timeouts = { firstBytesTimeoutMs: 60, idleTimeoutMs: 150 };
  let called = 0;
  await using world = relayWorld(() => {
    called++;
    return new Response("y".repeat(20_000));
  }, timeouts);
  const outcomes = await Promise.all(Array.from({ length: 40 }, async (_, i) => {
    const conn = await connect(world.port);
    try {
      await pause(timeouts.firstBytesTimeoutMs + (i % 9) * 3 - 12);
      await writeAll(
        conn,
        encoder.encode("GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"),
      ).catch(() => {});
      const bytes = await readToEnd(conn, "the answer or the close");
      if (bytes.length === 0) return "closed";
      const responses = parseResponses(bytes);
      return responses.length === 1 && responses[0]!.body.length === 20_000
        ? "answered"
        : `partial ${bytes.length}`;
    } finally {
      conn.close();
    }
  }));
  assertEquals(outcomes.filter((o) => o !== "closed" && o !== "answered"), []);
  assertEquals(called, outcomes.filter((o) => o === "answered").length);
  await waitFor("the relays to end", () => world.server.connections === 0);
  assertEquals([world.server.requests, world.counted.now, world.counted.lowest], [0, 0, 0]);
});

Deno.test("under churn every request is attributed to its own client's address and port", async () => {
  await using world = relayWorld((_req, info) => new Response(`${info.remoteAddr.port}`), {
    firstBytesTimeoutMs: 2_000,
    idleTimeoutMs: 2_000,
  });
  const wrong: string[] = [];
  const worker = async (w: number) => {
    for (let i = 0; i < 15; i++) {
      const conn = await connect(world.port);
      try {
        const mine = conn.localAddr.port;
        const requests = 1 + ((w + i) % 3);
        let received = new Uint8Array(0);
        const buffer = new Uint8Array(4096);
        for (let r = 0; r < requests; r++) {
          const last = r === requests - 1;
          await writeAll(
            conn,
            encoder.encode(
              `GET / HTTP/1.1\r\nHost: a.test\r\n${last ? "Connection: close\r\n" : ""}\r\n`,
            ),
          );
          // Keep-alive: wait for this answer before sending the next request.
          while (parseResponses(received).length <= r) {
            const n = await within(5_000, "an answer", conn.read(buffer));
            if (n === null) throw new Error(`Closed after ${r} answers`);
            received = concatBytes([received, buffer.subarray(0, n)]);
          }
        }
        for (const answer of parseResponses(received)) {
          const got = decoder.decode(answer.body);
          if (got !== `${mine}`) wrong.push(`${mine} got ${got}`);
        }
      } finally {
        conn.close();
      }
    }
  };
  await Promise.all(Array.from({ length: 12 }, (_, w) => worker(w)));
  assertEquals(wrong, []);
  await waitFor("the relays to end", () => world.server.connections === 0);
});

Deno.test("hundreds of connections opened and abandoned return the descriptors to their baseline", async () => {
  await using world = relayWorld(ok);
  const clients: Deno.Conn[] = [];
  try {
    // Warm up: the first relay opens the inner server's first connection and Deno's resources.
    const warm = await connect(world.port);
    await keepAliveOk(warm);
    warm.close();
    await waitFor("the warm-up relay to end", () => world.server.connections === 0);
    const baseline = openDescriptors();
    for (let i = 0; i < 300; i++) {
      const conn = await connect(world.port);
      if (i % 3 === 0) {
        clients.push(conn); // silent: the server must close it
      } else if (i % 3 === 1) {
        clients.push(conn); // half a head, then silence
        await writeAll(conn, encoder.encode("GET / HTTP/1.1\r\nHost: a"));
      } else {
        await writeAll(conn, encoder.encode("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"));
        conn.close(); // gone before its answer
      }
    }
    await waitFor("every relay to end", () => world.server.connections === 0, {
      timeoutMs: 15_000,
    });
    for (const conn of clients.splice(0)) conn.close();
    await waitFor(
      `the descriptors to return to ${baseline}`,
      () => openDescriptors() <= baseline,
      { timeoutMs: 5_000 },
    );
    assertEquals([world.server.requests, world.counted.now, world.counted.lowest], [0, 0, 0]);
  } finally {
    for (const conn of clients) closeQuietly(conn);
  }
});

// ---------------------------------------------------------------------------
// Shutdown mid-transfer
// ---------------------------------------------------------------------------

Deno.test("shutdown() finishes a streaming response and a slow reader's, closes idle and silent connections, and returns", async () => {
  const timeouts = { firstBytesTimeoutMs: 5_000, idleTimeoutMs: 5_000 };
  const streaming = Promise.withResolvers<void>();
  await using world = relayWorld((req) => {
    if (new URL(req.url).pathname === "/stream") {
      let sent = 0;
      return new Response(
        new ReadableStream({
          async pull(controller) {
            if (sent === 1) streaming.resolve();
            if (sent === 5) return controller.close();
            await pause(40);
            controller.enqueue(encoder.encode(`chunk${sent++};`));
          },
        }),
      );
    }
    if (new URL(req.url).pathname === "/big") return new Response(new Uint8Array(1 << 20));
    return new Response("ok");
  }, timeouts);
  const conns: Deno.Conn[] = [];
  try {
    const idle = await connect(world.port);
    conns.push(idle);
    await keepAliveOk(idle);
    const silent = await connect(world.port);
    conns.push(silent);
    const reader = await connect(world.port);
    conns.push(reader);
    await writeAll(reader, encoder.encode("GET /big HTTP/1.1\r\nHost: a.test\r\n\r\n"));
    const stream = await connect(world.port);
    conns.push(stream);
    await writeAll(stream, encoder.encode("GET /stream HTTP/1.1\r\nHost: a.test\r\n\r\n"));
    await within(5_000, "the stream to begin", streaming.promise);
    await waitFor("four relays", () => world.server.connections === 4);

    const started = performance.now();
    const stopped = world.server.shutdown(5_000);
    const streamed = readToEnd(stream, "the streamed response");
    // Shutdown has begun once it has closed the idle and the silent connections; the slow
    // reader takes its megabyte only after that.
    assertEquals(latin1(await readToEnd(idle, "the idle connection to close")), "");
    assertEquals(latin1(await readToEnd(silent, "the silent connection to close")), "");
    const big = readToEnd(reader, "the large response");
    assert(
      performance.now() - started < timeouts.idleTimeoutMs,
      "closed by a timeout, not shutdown",
    );
    const [streamAnswer] = parseResponses(await streamed);
    assertEquals(decoder.decode(streamAnswer?.body), "chunk0;chunk1;chunk2;chunk3;chunk4;");
    const [bigAnswer] = parseResponses(await big);
    assertEquals(bigAnswer?.body.length, 1 << 20);
    const { result, finished } = await stopped;
    assertEquals(result, { graceful: true, openConnections: 0 });
    await within(5_000, "every relay to end", finished);
    assertEquals(world.server.connections, 0);
  } finally {
    for (const conn of conns) conn.close();
  }
});

Deno.test("shutdown() is not held by a client trickling a request head", async () => {
  await using world = relayWorld(ok, { firstBytesTimeoutMs: 5_000, idleTimeoutMs: 300 });
  const conn = await connect(world.port);
  let trickling = true;
  try {
    await writeAll(conn, encoder.encode(SLOW_HEAD));
    const trickle = (async () => {
      while (trickling) {
        await pause(100);
        await conn.write(encoder.encode("a")).catch(() => trickling = false);
      }
    })();
    await waitFor("the relay", () => world.server.connections === 1);
    const { result, finished } = await world.server.shutdown(3_000);
    assertEquals(result.graceful, true);
    await within(5_000, "every relay to end", finished);
    trickling = false;
    await trickle;
  } finally {
    trickling = false;
    conn.close();
  }
});

Deno.test("a client that pipelines thousands of requests and reads no answer is disconnected", async () => {
  let called = 0;
  await using world = relayWorld(() => {
    called++;
    return new Response(new Uint8Array(16 * 1024));
  });
  using conn = await connect(world.port);
  const request = "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n";
  // 2,000 requests (64 KiB): whatever the server answers, this client takes none of it.
  void writeAll(conn, encoder.encode(request.repeat(2_000))).catch(() => {});
  await waitFor("the relay to end", () => world.server.connections === 0, { timeoutMs: 5_000 });
  assert(called < 2_000, `all ${called} requests were answered into a client that reads nothing`);
  assertEquals([world.server.requests, world.counted.now, world.counted.lowest], [0, 0, 0]);
});

// Was a bug: an upgraded connection was exempt from every timeout, even with its client taking nothing.
Deno.test("a WebSocket client that reads nothing while the server keeps sending is disconnected", async () => {
  const closed = Promise.withResolvers<void>();
  await using world = relayWorld((req) => {
    const { socket, response } = Deno.upgradeWebSocket(req);
    let timer: ReturnType<typeof setInterval> | undefined;
    socket.onopen = () => {
      timer = setInterval(() => {
        if (socket.readyState === WebSocket.OPEN) socket.send(new Uint8Array(64 * 1024));
      }, 5);
    };
    socket.onclose = () => {
      clearInterval(timer);
      closed.resolve();
    };
    socket.onerror = () => {};
    return response;
  });
  using conn = await connect(world.port);
  await writeAll(
    conn,
    encoder.encode(
      "GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    ),
  );
  assert((await within(5_000, "the 101", readHead(conn))).startsWith("HTTP/1.1 101 "));
  // An open WebSocket is never idle-timed-out, but one whose client takes nothing is (send_timeout).
  await within(5_000, "the server's WebSocket to close", closed.promise);
  await waitFor("the relay to end", () => world.server.connections === 0);
});

// ---------------------------------------------------------------------------
// The same over TLS (every HTTPS connection is relayed)
// ---------------------------------------------------------------------------

const certificate = await generateSelfSignedCertificate({ hostnames: ["a.test"], commonName: "a" });
const certificates = () => stubCertificateTable([{ hosts: ["a.test"], certificate }], certificate);

async function tlsConnect(port: number): Promise<Deno.TlsConn> {
  const tcp = await connect(port);
  const conn = await Deno.startTls(tcp, { hostname: "a.test", caCerts: [certificate.certPem] });
  await conn.handshake();
  return conn;
}

// Was a bug: as over plain TCP (one relay serves both).
Deno.test("over TLS, a client trickling a request head is disconnected", async () => {
  await using listener = stopping(
    listenHttps(ok, { hostname: "127.0.0.1", port: 0, certificates, ...TIMEOUTS }),
  );
  using conn = await tlsConnect(listener.addr.port);
  const ended = await closedWhileTrickling(conn, encoder.encode(SLOW_HEAD), encoder.encode("a"));
  assert(ended, "the trickling TLS client is still connected after 3 s");
  await waitFor("the relay to end", () => listener.stats.connections === 0);
});

// Was a bug: as over plain TCP (one relay serves both).
Deno.test("over TLS, a client that takes nothing of an endless response is disconnected", async () => {
  let cancelled = false;
  await using listener = stopping(listenHttps(() =>
    new Response(
      new ReadableStream({
        pull: (controller) => controller.enqueue(new Uint8Array(64 * 1024)),
        cancel: () => void (cancelled = true),
      }),
    ), { hostname: "127.0.0.1", port: 0, certificates, ...TIMEOUTS }));
  using conn = await tlsConnect(listener.addr.port);
  await writeAll(conn, encoder.encode("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"));
  assertEquals(await within(5_000, "the first bytes", conn.read(new Uint8Array(1))), 1);
  await waitFor("the relay to end", () => listener.stats.connections === 0, { timeoutMs: 5_000 });
  await waitFor("the handler's body to be cancelled", () => cancelled);
  assertEquals(listener.stats.requests, 0);
});

Deno.test("a client whose upload is refused before it is read gets the refusal whole", async () => {
  await using listener = relayWorld(() => new Response("too large", { status: 413 }));
  using conn = await connect(listener.port);
  await writeAll(
    conn,
    encoder.encode("POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 50000000\r\n\r\n"),
  );
  // The client goes on sending its body while the answer is on its way.
  const sending = (async () => {
    const chunk = new Uint8Array(64 * 1024);
    for (let i = 0; i < 100; i++) await writeAll(conn, chunk);
  })().catch(() => {});
  const head = await within(5_000, "the refusal", readHead(conn));
  assert(head.startsWith("HTTP/1.1 413 "), head);
  await sending;
});

Deno.test("an IPv6 client is told to the handler with its own address and port", async () => {
  const seen: Deno.NetAddr[] = [];
  await using listener = relayWorld(
    (_req, info) => {
      seen.push(info.remoteAddr);
      return new Response("ok", { headers: { connection: "close" } });
    },
    TIMEOUTS,
    "::1",
  );
  using conn = await Deno.connect({ hostname: "::1", port: listener.port });
  await writeAll(conn, encoder.encode("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"));
  const [answer] = parseResponses(await readToEnd(conn, "the answer"));
  assertEquals(answer?.status, 200);
  assertEquals(seen, [conn.localAddr as Deno.NetAddr]);
});
