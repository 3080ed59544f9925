import { assert, assertEquals } from "../../tests/support/assert.ts";
import { RawConnection } from "../../tests/support/raw_http.ts";
import { within } from "../../tests/support/wait.ts";
import {
  SWEEPS_PAST_TIMEOUTS,
  trickleUntilClosed,
  world,
} from "../../tests/support/reaper_world.ts";

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
