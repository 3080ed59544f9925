import { assert, assertEquals } from "../../tests/support/assert.ts";
import { RawConnection } from "../../tests/support/raw_http.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import { ConnectionActivity } from "./connection_activity.ts";
import { HttpConnectionReaper } from "./http_connection_reaper.ts";
import { listenHttp } from "./http_listener.ts";
import type { ConnectionInfo } from "./listener.ts";

const TIMEOUTS = { firstBytesTimeoutMs: 300, idleTimeoutMs: 400, intervalMs: 50 };
/** Sweeps that cover three idle timeouts: long enough for any timeout to have acted. */
const SWEEPS_PAST_TIMEOUTS = 3 * TIMEOUTS.idleTimeoutMs / TIMEOUTS.intervalMs;

interface World extends AsyncDisposable {
  readonly port: number;
  readonly reaper: HttpConnectionReaper;
  /** Resolves the pending `/slow` requests. */
  release(): void;
  /** Resolves once the `/big` response's body was cancelled (the client went away). */
  readonly bigCancelled: Promise<void>;
  /** Waits for `n` more sweeps. */
  sweeps(n: number): Promise<void>;
}

function world(): World {
  const activity = new ConnectionActivity();
  let release = () => {};
  const released = new Promise<void>((resolve) => release = resolve);
  let bigCancelled = () => {};
  const cancelled = new Promise<void>((resolve) => bigCancelled = resolve);
  const handler = async (req: Request, info: ConnectionInfo) => {
    const path = new URL(req.url).pathname;
    if (path === "/slow") {
      await released;
      return new Response("done");
    }
    if (path === "/big") {
      const chunk = new Uint8Array(1024 * 1024);
      let sent = 0;
      return new Response(
        new ReadableStream({
          pull(controller) {
            if (sent++ < 256) controller.enqueue(chunk);
            else controller.close();
          },
          cancel: () => bigCancelled(),
        }),
      );
    }
    if (path === "/ws") {
      const { socket, response } = Deno.upgradeWebSocket(req);
      const slot = info.activity?.begin(info.remoteAddr);
      socket.onmessage = (event) => socket.send(event.data);
      socket.onclose = () => slot !== undefined && info.activity!.end(slot);
      return response;
    }
    return new Response("ok");
  };
  const listener = listenHttp(handler, { hostname: "127.0.0.1", port: 0, activity });
  const reaper = new HttpConnectionReaper({
    port: listener.addr.port,
    activity,
    ...TIMEOUTS,
    onUnavailable: (reason) => {
      throw new Error(reason);
    },
  });
  reaper.start();
  return {
    port: listener.addr.port,
    reaper,
    release,
    bigCancelled: cancelled,
    async sweeps(n) {
      const target = reaper.stats.sweeps + n;
      await waitFor(`${n} sweeps`, () => reaper.stats.sweeps >= target);
    },
    async [Symbol.asyncDispose]() {
      release();
      await reaper.stop();
      await listener.shutdown({ timeoutMs: 2_000 });
    },
  };
}

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
  const closed = conn.closedByPeer(10_000);
  let open = true;
  void closed.then(() => open = false);
  // One byte of a header every 50 ms, until the server ends it: never idle, never a request.
  await within(
    10_000,
    "the trickle to be cut",
    (async () => {
      while (open) {
        await conn.send("x").catch(() => open = false);
        // Pacing the trickle (what is being tested), not waiting for anything.
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    })(),
  );
  assert(await closed, "closed");
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
