import { assert, assertEquals } from "../../tests/support/assert.ts";
import { RawConnection } from "../../tests/support/raw_http.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import {
  pace,
  SWEEPS_PAST_TIMEOUTS,
  TIMEOUTS,
  trickleUntilClosed,
  world,
} from "../../tests/support/reaper_world.ts";
import { HttpConnectionReaper } from "./http_connection_reaper.ts";
import net from "node:net";
import { RawH2, statusOf, textOf } from "../../tests/support/raw_h2.ts";
import { tcpConnectionsOnPort } from "./native_socket.ts";
import { WsBackend } from "../../tests/support/websocket_world.ts";
import { staticSnapshot } from "../../tests/support/static_snapshot.ts";
import { createProxyHandler } from "../proxy/proxy_handler.ts";
import { ConnectionActivity } from "./connection_activity.ts";
import { listenHttp } from "./http_listener.ts";

Deno.test("a connection that sends nothing is closed after firstBytesTimeoutMs", async () => {
  await using w = world();
  using conn = await RawConnection.open(w.port);
  assert(await conn.closedByPeer(5_000), "closed");
  assertEquals(w.reaper.stats["first-bytes"], 1);
});

Deno.test("a keep-alive connection idle after its response is closed after idleTimeoutMs", async () => {
  await using w = world();
  using conn = await RawConnection.open(w.port);
  await conn.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
  assertEquals((await conn.readResponse()).status, 200);
  assert(await conn.closedByPeer(5_000), "closed");
  assertEquals(w.reaper.stats.idle, 1);
  assertEquals(w.reaper.stats["first-bytes"], 0);
});

Deno.test("a request head trickled a byte at a time is closed after idleTimeoutMs", async () => {
  await using w = world();
  using conn = await RawConnection.open(w.port);
  await conn.send("GET / HTTP/1.1\r\nHost: a\r\n");
  // One byte of a header every 50 ms, until the server ends it: never idle, never a request.
  assert(await within(10_000, "the trickle to be cut", trickleUntilClosed(conn)), "closed");
  assertEquals(w.reaper.stats.head, 1);
  assertEquals(w.reaper.stats.idle, 0);
});

Deno.test("a request in flight (a long poll), a WebSocket and a busy keep-alive connection are never closed", async () => {
  await using w = world();
  using poll = await RawConnection.open(w.port);
  await poll.send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n");
  const ws = new WebSocket(`ws://127.0.0.1:${w.port}/ws`);
  await within(5_000, "the WebSocket to open", new Promise((resolve) => ws.onopen = resolve));
  using busy = await RawConnection.open(w.port);
  const start = w.reaper.stats.sweeps;
  while (w.reaper.stats.sweeps < start + SWEEPS_PAST_TIMEOUTS) {
    await busy.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assertEquals((await busy.readResponse()).status, 200);
    await w.sweeps(1);
  }
  const echoed = new Promise((resolve) => ws.onmessage = (event) => resolve(event.data));
  ws.send("still here");
  assertEquals(await within(5_000, "the echo", echoed), "still here");
  w.release();
  const answer = await poll.readResponse();
  assertEquals([answer.status, new TextDecoder().decode(answer.body)], [200, "done"]);
  const closed = new Promise((resolve) => ws.onclose = resolve);
  ws.close();
  await within(5_000, "the WebSocket to close", closed);
  assertEquals(w.reaper.stats, {
    "first-bytes": 0,
    idle: 0,
    head: 0,
    send: 0,
    sweeps: w.reaper.stats.sweeps,
  });
});

Deno.test("a client that reads nothing of a large response is closed after idleTimeoutMs, and the body is cancelled", async () => {
  await using w = world();
  using conn = await RawConnection.open(w.port);
  await conn.send("GET /big HTTP/1.1\r\nHost: a\r\n\r\n");
  // The client never reads: its buffers fill and the server's writes stop.
  await within(10_000, "the response body to be cancelled", w.bigCancelled);
  assertEquals(w.reaper.stats.send, 1);
});

const NO_REAPS = { "first-bytes": 0, idle: 0, head: 0, send: 0 };

/** The reaper's counts without its sweeps. */
function reaps(reaper: HttpConnectionReaper): Record<string, number> {
  const { sweeps: _, ...rest } = reaper.stats;
  return rest;
}

/** A raw TCP client bound to a chosen local address and port (node:net; Deno.connect cannot). */
class BoundClient {
  readonly socket: net.Socket;
  #data: Uint8Array[] = [];
  #ended = false;
  #changed: (() => void)[] = [];

  private constructor(socket: net.Socket) {
    this.socket = socket;
    socket.on("data", (chunk: Uint8Array) => {
      this.#data.push(chunk);
      this.#notify();
    });
    const ended = () => {
      this.#ended = true;
      this.#notify();
    };
    socket.on("end", ended);
    socket.on("close", ended);
    socket.on("error", ended);
  }

  static async open(port: number, localAddress: string, localPort: number): Promise<BoundClient> {
    const socket = net.connect({ host: "127.0.0.1", port, localAddress, localPort });
    await within(
      5_000,
      `a connection from ${localAddress}:${localPort}`,
      new Promise<void>((resolve, reject) => {
        socket.once("connect", resolve);
        socket.once("error", reject);
      }),
    );
    return new BoundClient(socket);
  }

  send(text: string): Promise<void> {
    return new Promise((resolve, reject) =>
      this.socket.write(text, (error) => error ? reject(error) : resolve())
    );
  }

  /** Everything received so far, as text. */
  get text(): string {
    return new TextDecoder().decode(
      this.#data.reduce((all, part) => new Uint8Array([...all, ...part]), new Uint8Array()),
    );
  }

  get ended(): boolean {
    return this.#ended;
  }

  /** Resolves once `check` holds (checked on every event), or rejects after `ms`. */
  async until(what: string, check: () => boolean, ms = 5_000): Promise<void> {
    await within(
      ms,
      what,
      (async () => {
        while (!check()) await new Promise<void>((resolve) => this.#changed.push(resolve));
      })(),
    );
  }

  /** Sends a reset (no TIME_WAIT, so the same local port can connect again at once). */
  reset(): void {
    this.socket.resetAndDestroy();
  }

  close(): void {
    this.socket.destroy();
  }

  [Symbol.dispose](): void {
    this.close();
  }

  #notify(): void {
    const waiting = this.#changed;
    this.#changed = [];
    for (const resolve of waiting) resolve();
  }
}

/** A local port nothing uses now, for a client to bind. */
function freePort(): number {
  const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = probe.addr.port;
  probe.close();
  return port;
}

Deno.test("every begin has its end: a thrown handler, a client that leaves mid-request, a head Deno refuses itself, pipelined and h2c requests and a closed WebSocket leave nothing in flight", async () => {
  await using w = world();
  // The handler throws: onError answers 500.
  {
    using conn = await RawConnection.open(w.port);
    await conn.send("GET /throw HTTP/1.1\r\nHost: a\r\n\r\n");
    assertEquals((await conn.readResponse()).status, 500);
  }
  // The client leaves while its request is in flight.
  {
    using conn = await RawConnection.open(w.port);
    await conn.send("GET /until-abort HTTP/1.1\r\nHost: a\r\n\r\n");
    await waitFor("the request to be in flight", () => w.activity.totalInFlight() === 1);
  }
  // A head Deno answers with 400 without calling the handler.
  {
    using conn = await RawConnection.open(w.port);
    await conn.send("GET / HTTP/1.1\r\nHost: a\r\nBad Field\r\n\r\n");
    assertEquals((await conn.readResponse()).status, 400);
  }
  // Three pipelined requests in one write.
  {
    using conn = await RawConnection.open(w.port);
    await conn.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n".repeat(3));
    for (let i = 0; i < 3; i++) assertEquals((await conn.readResponse()).status, 200);
  }
  // Two h2c streams on one connection.
  {
    const h2 = await RawH2.open({ port: w.port });
    try {
      const ids = [];
      for (let i = 0; i < 2; i++) {
        ids.push(
          await h2.request([[":method", "GET"], [":scheme", "http"], [":authority", "a"], [
            ":path",
            "/",
          ]]),
        );
      }
      for (const id of ids) assertEquals(statusOf(await h2.finished(id)), 200);
      // A stream the client resets while its request is in flight.
      const reset = await h2.request([
        [":method", "GET"],
        [":scheme", "http"],
        [":authority", "a"],
        [":path", "/until-abort"],
      ]);
      await waitFor("the h2c request to be in flight", () => w.activity.totalInFlight() >= 1);
      await h2.reset(reset);
      await waitFor("the reset request's end", () => w.activity.totalInFlight() === 0);
    } finally {
      await h2.close();
    }
  }
  // A WebSocket session, closed by the client.
  {
    const ws = new WebSocket(`ws://127.0.0.1:${w.port}/ws`);
    await within(5_000, "the WebSocket to open", new Promise((resolve) => ws.onopen = resolve));
    const closed = new Promise((resolve) => ws.onclose = resolve);
    ws.close();
    await within(5_000, "the WebSocket to close", closed);
  }
  await waitFor("nothing in flight", () => w.activity.totalInFlight() === 0);
  assertEquals(reaps(w.reaper), NO_REAPS);
});

Deno.test("a body uploaded slowly but steadily, and one sent only after a long wait for 100 Continue, are received whole", async () => {
  await using w = world();
  using steady = await RawConnection.open(w.port);
  using expecting = await RawConnection.open(w.port);
  const length = Math.ceil(3 * TIMEOUTS.idleTimeoutMs / 50);
  await steady.send(`POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: ${length}\r\n\r\n`);
  await expecting.send(
    "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
  );
  const start = w.reaper.stats.sweeps;
  // One byte every 50 ms: three idle timeouts in all.
  for (let i = 0; i < length; i++) {
    await steady.send("x");
    await pace(50);
  }
  assertEquals((await steady.readResponse()).status, 200);
  assert(w.reaper.stats.sweeps - start >= SWEEPS_PAST_TIMEOUTS / 2, "the reaper kept sweeping");
  // The 100 Continue came long ago; the body only now.
  assertEquals((await expecting.readResponse()).status, 100);
  await expecting.send("hello");
  const answer = await expecting.readResponse();
  assertEquals([answer.status, new TextDecoder().decode(answer.body)], [200, "5"]);
  assertEquals(reaps(w.reaper), NO_REAPS);
});

Deno.test("a 64 MiB download read slowly but steadily is not cut", async () => {
  await using w = world();
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: w.port });
  try {
    await conn.write(new TextEncoder().encode("GET /big HTTP/1.1\r\nHost: a\r\n\r\n"));
    const buffer = new Uint8Array(64 * 1024);
    const start = w.reaper.stats.sweeps;
    let total = 0;
    // At most 64 KiB every 25 ms (about 2.5 MiB/s): the server's buffers stay full and its
    // writes wait on the client, which acknowledges a little at a time.
    while (w.reaper.stats.sweeps < start + SWEEPS_PAST_TIMEOUTS) {
      const n = await conn.read(buffer);
      assert(n !== null, `the download was cut after ${total} bytes`);
      total += n;
      await pace(25);
    }
    assertEquals(reaps(w.reaper), NO_REAPS);
    assert(total < 64 * 1024 * 1024, "the download was still under way");
  } finally {
    conn.close();
  }
});

Deno.test("pipelined requests behind a long poll, and an HTTP/1.0 long poll, are all answered however long the poll", async () => {
  await using w = world();
  using pipelined = await RawConnection.open(w.port);
  using old = await RawConnection.open(w.port);
  await pipelined.send(
    "GET /slow HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
  );
  await old.send("GET /slow HTTP/1.0\r\n\r\n");
  await w.sweeps(SWEEPS_PAST_TIMEOUTS);
  w.release();
  const first = await pipelined.readResponse();
  assertEquals([first.status, new TextDecoder().decode(first.body)], [200, "done"]);
  assertEquals((await pipelined.readResponse()).status, 200);
  assertEquals((await pipelined.readResponse()).status, 200);
  assertEquals((await old.readResponse()).status, 200);
  assertEquals(reaps(w.reaper), NO_REAPS);
});

Deno.test("an h2c connection with a stream in flight is not cut; once idle after it, it is", async () => {
  await using w = world();
  const h2 = await RawH2.open({ port: w.port });
  try {
    const id = await h2.request([
      [":method", "GET"],
      [":scheme", "http"],
      [":authority", "a"],
      [":path", "/slow"],
    ]);
    await w.sweeps(SWEEPS_PAST_TIMEOUTS);
    assert(!h2.closed, "the connection is open");
    w.release();
    const stream = await h2.finished(id);
    assertEquals([statusOf(stream), textOf(stream)], [200, "done"]);
    await waitFor("the idle connection to be cut", () => h2.closed);
    assertEquals(reaps(w.reaper), { ...NO_REAPS, idle: 1 });
  } finally {
    await h2.close();
  }
});

Deno.test("a request head trickled after a completed request on a keep-alive connection is cut as a head", async () => {
  await using w = world();
  using conn = await RawConnection.open(w.port);
  await conn.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
  assertEquals((await conn.readResponse()).status, 200);
  await conn.send("GET / HTTP/1.1\r\nHost: a\r\nX-Trickle: ");
  assert(await within(10_000, "the trickle to be cut", trickleUntilClosed(conn)), "closed");
  assertEquals(reaps(w.reaper), { ...NO_REAPS, head: 1 });
});

Deno.test("a client that reconnects from the same port onto the same descriptor does not inherit the trickle of the connection before", async () => {
  // Was a bug: the reaper knew a connection by descriptor and client address, so a new connection
  // from the same client port on a reused descriptor took over the old one's head-trickle clock and
  // was cut as soon as its first bytes arrived.
  await using w = world({ manual: true });
  const localPort = freePort();
  const { idleTimeoutMs } = TIMEOUTS;
  const ours = async (remotePort: number) => {
    const connections = await tcpConnectionsOnPort(w.port);
    assert(Array.isArray(connections), "the sockets can be read");
    return connections.find((c) => c.remotePort === remotePort);
  };
  const before = await BoundClient.open(w.port, "127.0.0.1", localPort);
  let fd: number;
  let trickleSince: number;
  try {
    await before.send("GET / HTTP/1.1\r\nHost: a\r\nX-Long: ");
    await waitFor("the first bytes", async () => (await ours(localPort))?.bytesReceived);
    await w.reaper.sweep();
    trickleSince = performance.now();
    await before.send("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    await waitFor("more bytes", async () => (await ours(localPort))!.bytesReceived > 40);
    await w.reaper.sweep(); // The trickle is seen: its clock started at the sweep before.
    fd = (await ours(localPort))!.fd;
    // The trickle is past the idle timeout now (no sweep has cut it: they run on demand here).
    await waitFor(
      "the old trickle's clock to pass the idle timeout",
      () => performance.now() - trickleSince >= idleTimeoutMs + 50,
    );
  } finally {
    before.reset();
  }
  await waitFor("the old socket to be gone", async () => (await ours(localPort)) === undefined);
  using after = await BoundClient.open(w.port, "127.0.0.1", localPort);
  after.socket.on("error", () => {});
  const startedAt = performance.now();
  await after.send("GET / HTTP/1.1\r\nHost: a\r\n");
  await waitFor("the new connection's bytes", async () => (await ours(localPort))?.bytesReceived);
  assertEquals((await ours(localPort))!.fd, fd, "the new connection got the old descriptor");
  await w.reaper.sweep();
  const age = performance.now() - startedAt;
  assert(age < idleTimeoutMs, `the check ran within the new connection's idle timeout (${age} ms)`);
  assertEquals(reaps(w.reaper), NO_REAPS);
  assert(!after.ended, "the new connection is open");
});

Deno.test("two clients with the same port from different addresses: the one in flight stays, and both are cut once idle", async () => {
  await using w = world();
  const port = freePort();
  const polling = await BoundClient.open(w.port, "127.0.0.2", port);
  const other = await BoundClient.open(w.port, "127.0.0.3", port);
  try {
    await polling.send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n");
    await other.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    await other.until("the other's answer", () => other.text.includes("\r\n\r\nok"));
    await w.sweeps(SWEEPS_PAST_TIMEOUTS);
    assert(!polling.ended, "the long poll is open");
    w.release();
    await polling.until("the poll's answer", () => polling.text.includes("done"));
    await polling.until("the poll's connection to be cut", () => polling.ended);
    await other.until("the other connection to be cut", () => other.ended);
    assertEquals(reaps(w.reaper), { ...NO_REAPS, idle: 2 });
    await waitFor("nothing in flight", () => w.activity.totalInFlight() === 0);
  } finally {
    polling.close();
    other.close();
  }
});

Deno.test("a client that half-closes after its request still gets its answer, then the end of the connection", async () => {
  await using w = world();
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: w.port });
  try {
    await conn.write(new TextEncoder().encode("GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
    await conn.closeWrite();
    const received = new Uint8Array(1024);
    let text = "";
    for (;;) {
      const n = await within(5_000, "the answer and the end", conn.read(received));
      if (n === null) break;
      text += new TextDecoder().decode(received.subarray(0, n));
    }
    assert(text.startsWith("HTTP/1.1 200"), `answered: ${JSON.stringify(text)}`);
  } finally {
    conn.close();
  }
});

Deno.test("WebSockets through the real proxy handler leave nothing in flight: a closed session, and an upgrade whose client left before the 101", async () => {
  let accept = () => {};
  const acceptNow = new Promise<void>((resolve) => accept = resolve);
  let connections = 0;
  const backend = new WsBackend(async (conn) => {
    if (++connections === 2) await acceptNow;
    await conn.accept();
    for (;;) {
      const frame = await conn.nextFrame(10_000);
      if (frame === null || frame.opcode === 8) return;
    }
  });
  const snapshot = staticSnapshot([{ endpoints: [{ address: "127.0.0.1", port: backend.port }] }]);
  const proxy = createProxyHandler({ snapshot: () => snapshot, readTimeoutMs: 10_000 });
  const activity = new ConnectionActivity();
  const listener = listenHttp((req, info) => proxy(req, info), {
    hostname: "127.0.0.1",
    port: 0,
    activity,
  });
  try {
    const ws = new WebSocket(`ws://127.0.0.1:${listener.addr.port}/ws`);
    await within(5_000, "the WebSocket to open", new Promise((resolve) => ws.onopen = resolve));
    await waitFor("the session to be counted", () => activity.totalInFlight() === 1);
    const closed = new Promise((resolve) => ws.onclose = resolve);
    ws.close();
    await within(5_000, "the WebSocket to close", closed);
    await waitFor("the session's end", () => activity.totalInFlight() === 0);
    // The client asks for an upgrade and leaves before the backend's 101 arrives.
    {
      using conn = await RawConnection.open(listener.addr.port);
      await conn.send(
        "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
      );
      await waitFor("the backend to be asked", () => connections === 2);
    }
    accept();
    await backend.closedByProxy(1);
    await waitFor("nothing in flight", () => activity.totalInFlight() === 0);
  } finally {
    await listener.shutdown({ timeoutMs: 2_000 });
    proxy.close();
    await backend.close();
  }
});
