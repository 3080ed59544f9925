/**
 * The proxy's timeouts toward backends: connect, read (idle-based, so a slow
 * but steady answer or upload is never cut), a backend half-closing before its
 * answer, and a client that stops reading a download. Real handler on
 * `Deno.serve`, real loopback backends, raw clients.
 *
 * @module
 */

import { latin1, RawConnection } from "../../tests/support/raw_http.ts";
import { waitFor } from "../../tests/support/wait.ts";
import {
  assertClosedUnused,
  ok,
  request,
  trickle,
  withAnswers,
} from "../../tests/support/scripted_proxy_world.ts";
import {
  assert,
  assertEquals,
  assertRejects,
  assertStrictEquals,
} from "../../tests/support/assert.ts";
import { ECHO_HOST, sendRaw, withEchoProxy } from "../../tests/support/echo_proxy.ts";
import {
  countingBackend,
  proxyGet,
  startBackend,
  UPSTREAM_HOST,
  withProxyTo,
} from "../../tests/support/upstream_backends.ts";

Deno.test("a backend that goes silent inside its head or a small body gets 504 after the read timeout", async () => {
  const answers: Record<string, string> = {
    "/half-head": "HTTP/1.1 200 OK\r\nContent-Le",
    "/half-body": "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nonly",
  };
  await withAnswers(answers, async ({ proxy, closed }) => {
    for (const target of Object.keys(answers)) {
      const response = await request(proxy, target);
      assertEquals([response.status, latin1(response.body)], [504, "Gateway Timeout\n"], target);
      await assertClosedUnused(closed, target);
    }
    assertEquals(proxy.accessLog.map((entry) => entry.error), ["timeout", "timeout"]);
  }, { readTimeoutMs: 200 });
});

Deno.test("a backend trickling its answer a byte at a time is not cut off by the idle timeout", async () => {
  // Each byte comes well within the 250 ms idle timeout; the whole answer takes far longer.
  await withAnswers({ "/trickle": trickle(ok("trickled"), 30) }, async ({ proxy }) => {
    const started = performance.now();
    const response = await request(proxy, "/trickle");
    assertEquals([response.status, latin1(response.body)], [200, "trickled"]);
    assert(performance.now() - started > 250 * 2, "the answer took longer than the timeout");
  }, { readTimeoutMs: 250 });
});

Deno.test("proxy answers 504 when the backend stays silent past the read timeout", async () => {
  await withEchoProxy(async ({ proxy }) => {
    const started = performance.now();
    const response = await sendRaw(
      proxy,
      `GET /?delay=60000 HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`,
    );
    assertEquals([response.status, latin1(response.body)], [504, "Gateway Timeout\n"]);
    assert(performance.now() - started < 10_000);
    assertStrictEquals(proxy.accessLog[0]?.error, "timeout");
  }, { readTimeoutMs: 300 });
});

Deno.test("proxy read timeout is idle-based: a slow but steady stream completes", async () => {
  await withEchoProxy(async ({ proxy }) => {
    const response = await sendRaw(
      proxy,
      `GET /sse?n=6&interval=150 HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`,
    );
    assertStrictEquals(latin1(response.body).split("\n\n").length - 1, 6);
  }, { readTimeoutMs: 400 });
});

Deno.test("proxy cuts a body short when the backend stalls mid-stream", async () => {
  await withEchoProxy(async ({ proxy }) => {
    const response = await fetch(`${proxy.url}/bytes?n=${1024 * 1024}&stall=1`);
    assertStrictEquals(response.status, 200);
    // A truncated body must not look complete.
    await assertRejects(() => response.arrayBuffer());
    await waitUntil(() => proxy.accessLog.length === 1);
    assertStrictEquals(proxy.accessLog[0]?.error, "timeout");
  }, { readTimeoutMs: 300 });
});

Deno.test("proxy answers 504 when the connect does not complete in time", async () => {
  // A listener whose accept queue is full: the kernel drops further SYNs, so connects hang.
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0, tcpBacklog: 1 });
  const port = (listener.addr as Deno.NetAddr).port;
  const fillers: Deno.Conn[] = [];
  try {
    for (;;) {
      const attempt = await Deno.connect({
        hostname: "127.0.0.1",
        port,
        signal: AbortSignal.timeout(200),
      })
        .catch(() => undefined);
      if (attempt === undefined) break;
      fillers.push(attempt);
    }
    await withEchoProxy(async ({ proxy }) => {
      const response = await sendRaw(proxy, `GET / HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`);
      assertEquals([response.status, latin1(response.body)], [504, "Gateway Timeout\n"]);
      assertStrictEquals(proxy.accessLog[0]?.error, "connect-timeout");
      assertStrictEquals(proxy.accessLog[0]?.attempts, 1);
    }, {
      connectTimeoutMs: 300,
      routes: () => [{ host: ECHO_HOST, endpoints: [{ address: "127.0.0.1", port }] }],
    });
  } finally {
    for (const conn of fillers) conn.close();
    listener.close();
  }
});

async function waitUntil(
  predicate: () => boolean | Promise<boolean>,
  timeoutMs = 5_000,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await predicate())) {
    if (performance.now() > deadline) throw new Error("Condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

// Was a bug: the response-head read started when the request head was written, and the body's
// writes did not count as activity, so an upload steadily sent over longer than the read timeout
// got 504 (nginx arms its read timeout once the request is sent).
Deno.test("a slow but steady upload longer than the read timeout is not cut off", async () => {
  await using good = countingBackend("stored");
  const pieces = 8;
  const piece = "p".repeat(100_000 / pieces);
  await withProxyTo([good.endpoint], async (proxy) => {
    for (const chunked of [false, true]) {
      const conn = await RawConnection.open(proxy.port);
      try {
        await conn.send(
          `POST /upload HTTP/1.1\r\nHost: ${UPSTREAM_HOST}\r\n` +
            (chunked ? "Transfer-Encoding: chunked\r\n\r\n" : "Content-Length: 100000\r\n\r\n"),
        );
        for (let i = 0; i < pieces; i++) {
          // Pacing the client, not synchronising: each piece well within the timeout.
          await new Promise((resolve) => setTimeout(resolve, 80));
          await conn.send(chunked ? `${piece.length.toString(16)}\r\n${piece}\r\n` : piece);
        }
        if (chunked) await conn.send("0\r\n\r\n");
        const response = await conn.readResponse();
        assertEquals(
          [response.status, latin1(response.body)],
          [200, "stored"],
          `chunked ${chunked}`,
        );
      } finally {
        conn.close();
      }
    }
    assertEquals(good.seen, ["POST /upload 100000", "POST /upload 100000"]);
  }, { readTimeoutMs: 250 });
});

Deno.test("a client that stops reading a download frees the backend connection after the idle timeout", async () => {
  const size = 32 * 1024 * 1024;
  const block = new Uint8Array(64 * 1024).fill(120);
  await using big = startBackend(async (conn) => {
    if ((await conn.readHead()) === null) return;
    await conn.write(`HTTP/1.1 200 OK\r\nContent-Length: ${size}\r\n\r\n`);
    for (let sent = 0; sent < size; sent += block.length) await conn.write(block);
  });
  await withProxyTo([big.endpoint], async (proxy) => {
    const conn = await RawConnection.open(proxy.port);
    try {
      await conn.send(`GET /big HTTP/1.1\r\nHost: ${UPSTREAM_HOST}\r\n\r\n`);
      await waitFor("the backend to start sending", () => (big.connections[0]?.written ?? 0) > 0);
      // The client reads nothing: the backend must not be held for longer than the timeout.
      await waitFor("the backend connection to close", () => big.open === 0, {
        timeoutMs: 5_000,
      });
      await waitFor("the access entry", () => proxy.accessLog.length === 1);
      assertEquals(proxy.accessLog[0]?.error, "timeout");
      assertEquals(proxy.handler.pool.stats().active, 0);
    } finally {
      conn.close();
    }
  }, { readTimeoutMs: 300 });
});

Deno.test("a backend half-closing before its answer gets 502 at once, not after the read timeout", async () => {
  await using halfClose = startBackend(async (conn) => {
    if ((await conn.readHead()) === null) return;
    await conn.conn.closeWrite();
    await conn.readHead();
  });
  await withProxyTo([halfClose.endpoint], async (proxy) => {
    const started = performance.now();
    const response = await proxyGet(proxy, "/");
    assertEquals([response.status, latin1(response.body)], [502, "Bad Gateway\n"]);
    assert(performance.now() - started < 2_500, "answered before the 5 s read timeout");
    await waitFor("the connection to close", () => halfClose.open === 0);
    assertEquals(proxy.handler.pool.stats().active, 0);
  });
});
