/**
 * Retries and replays: which failed exchanges the proxy tries again on another
 * endpoint (a refused or reset connect, a reused connection closed under an
 * idempotent request, a GET whose answer does not come within the read
 * timeout), which it never sends twice (a POST once its head was sent, a
 * request that timed out mid-answer), how attempts are bounded, and what the
 * access log and metrics count for them. Real handler on `Deno.serve` or
 * `sendUpstream()` itself, real loopback backends (scripted byte by byte where
 * the failure must be exact), raw clients.
 *
 * @module
 */
import { latin1, RawConnection, rawRequest } from "../../tests/support/raw_http.ts";
import {
  BOOKS_HOST,
  recordingBackend,
  requestIdOf,
  withBooks,
} from "../../tests/support/accounted_proxy.ts";
import {
  backendGet,
  bodyText,
  closedPort,
  countingBackend,
  ok,
  proxyGet,
  proxyPost,
  requestLine,
  scriptedServer,
  silentBackend,
  startBackend,
  UPSTREAM_HOST,
  withProxyTo,
} from "../../tests/support/upstream_backends.ts";
import {
  assert,
  assertEquals,
  assertRejects,
  assertStrictEquals,
} from "../../tests/support/assert.ts";
import { waitFor } from "../../tests/support/wait.ts";
import { ECHO_HOST, echoJson, sendRaw, withEchoProxy } from "../../tests/support/echo_proxy.ts";
import { UpstreamPool } from "../upstream/upstream_pool.ts";
import { sendUpstream, type UpstreamRequest } from "../upstream/upstream_client.ts";
import { UpstreamError } from "../upstream/upstream_error.ts";

function get(port: number, target: string, extra = "") {
  return rawRequest(port, `GET ${target} HTTP/1.1\r\nHost: ${BOOKS_HOST}\r\n${extra}\r\n`);
}

Deno.test("a retry after a reset before any answer logs 2 attempts, the endpoint that answered, and no connect error", async () => {
  await using resetting = startBackend(async (conn) => {
    await conn.readHead();
    conn.close();
  });
  await using good = recordingBackend("good");
  await withBooks([resetting.endpoint, good.endpoint], async (books) => {
    const response = await get(books.port, "/item?id=7");
    assertEquals(response.status, 200);
    await waitFor("a line", () => books.lines.length === 1);
    const line = books.lines[0]!;
    assertEquals(
      [line.status, line.bytes, line.attempts, line.upstream, line.path, line.error],
      [200, 4, 2, `127.0.0.1:${good.port}`, "/item", undefined],
    );
    assertEquals(line.request_id, requestIdOf(good.heads[0]!));
    assert(line.request_id.length > 0);
    assertEquals(await books.sample("sluice_upstream_retries_total"), 1);
    assertEquals(await books.sample("sluice_upstream_connect_errors_total"), 0);
    assertEquals(await books.sample("sluice_requests_total", { status: "2xx" }), 1);
  }, { endpointDownMs: 60_000 });
});

Deno.test("a retry after a refused connect counts one connect error and one retry", async () => {
  await using good = recordingBackend("good");
  const dead = { address: "127.0.0.1", port: closedPort() };
  await withBooks([dead, good.endpoint], async (books) => {
    assertEquals((await get(books.port, "/")).status, 200);
    await waitFor("a line", () => books.lines.length === 1);
    const line = books.lines[0]!;
    assertEquals([line.attempts, line.upstream], [2, `127.0.0.1:${good.port}`]);
    assertEquals(await books.sample("sluice_upstream_connect_errors_total"), 1);
    assertEquals(await books.sample("sluice_upstream_retries_total"), 1);
  }, { endpointDownMs: 60_000 });
});

Deno.test("proxy answers 502 when every endpoint refuses the connection", async () => {
  const closed = closedPort();
  await withEchoProxy(async ({ proxy }) => {
    const response = await sendRaw(proxy, `GET / HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`);
    assertEquals([response.status, latin1(response.body)], [502, "Bad Gateway\n"]);
    assertStrictEquals(proxy.accessLog[0]?.error, "connect-failed");
  }, { routes: () => [{ host: ECHO_HOST, endpoints: [{ address: "127.0.0.1", port: closed }] }] });
});

Deno.test("proxy retries the next endpoint after a refused connect and marks the failing one down", async () => {
  const closed = closedPort();
  await withEchoProxy(async ({ proxy, backend }) => {
    const dead = { address: "127.0.0.1", port: closed };
    for (let i = 0; i < 4; i++) {
      const response = await sendRaw(
        proxy,
        `POST /r${i} HTTP/1.1\r\nHost: ${ECHO_HOST}\r\nContent-Length: 2\r\n\r\nhi`,
      );
      assertStrictEquals(response.status, 200);
      assertStrictEquals(echoJson(response).body.length, 2);
    }
    assertStrictEquals(backend.requests.length, 4);
    assert(proxy.handler.balancer.isDown(dead));
    // Only the first request paid for the dead endpoint; later ones skip it.
    assertEquals(proxy.accessLog.map((e) => e.attempts), [2, 1, 1, 1]);
  }, {
    routes: (backend) => [{
      host: ECHO_HOST,
      endpoints: [{ address: "127.0.0.1", port: closed }, {
        address: "127.0.0.1",
        port: backend.port,
      }],
    }],
  });
});

Deno.test("sendUpstream() replays an idempotent request when a reused connection was closed under it", async () => {
  const server = scriptedServer(async (io, index) => {
    await io.nextHead();
    await io.write("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst");
    if (index === 0) {
      // Take the next request, then hang up without a byte: a stale keep-alive connection.
      await io.nextHead();
      return;
    }
  });
  const pool = new UpstreamPool();
  const endpoint = { address: "127.0.0.1", port: server.port };
  try {
    assertStrictEquals(
      await bodyText((await sendUpstream(pool, endpoint, backendGet("/1"))).body),
      "first",
    );
    const second = await sendUpstream(pool, endpoint, backendGet("/2"));
    assertStrictEquals(await bodyText(second.body), "first");
    assertStrictEquals(server.accepted, 2);
  } finally {
    pool.close();
    await server.close();
  }
});

Deno.test("sendUpstream() does not replay a POST after a reused connection failed", async () => {
  const server = scriptedServer(async (io) => {
    await io.nextHead();
    await io.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    await io.nextHead();
  });
  const pool = new UpstreamPool();
  const endpoint = { address: "127.0.0.1", port: server.port };
  try {
    await bodyText((await sendUpstream(pool, endpoint, backendGet("/1"))).body);
    const post: UpstreamRequest = {
      ...backendGet("/2"),
      method: "POST",
      body: new TextEncoder().encode("x"),
    };
    const error = await assertRejects(() => sendUpstream(pool, endpoint, post), UpstreamError);
    assertEquals([error.kind, error.staleConnection], ["reset", true]);
    assertStrictEquals(server.accepted, 1);
  } finally {
    pool.close();
    await server.close();
  }
});

Deno.test("attempts are bounded and go to distinct endpoints when every endpoint refuses", async () => {
  const endpoints = Array.from({ length: 5 }, () => ({ address: "127.0.0.1", port: closedPort() }));
  const dialled: string[] = [];
  const pool = new UpstreamPool({
    connect: (options) => {
      dialled.push(`${options.hostname}:${options.port}`);
      return Deno.connect({ hostname: options.hostname, port: options.port });
    },
  });
  try {
    await withProxyTo(endpoints, async (proxy) => {
      const response = await proxyGet(proxy, "/");
      assertEquals([response.status, latin1(response.body)], [502, "Bad Gateway\n"]);
      assertEquals(dialled.length, 3);
      assertEquals(new Set(dialled).size, 3, `dialled ${dialled.join(", ")}`);
      assertEquals(proxy.accessLog[0]?.attempts, 3);
      assertEquals(proxy.accessLog[0]?.error, "connect-failed");
      // The next request tries the two endpoints not marked down yet first.
      assertEquals((await proxyGet(proxy, "/")).status, 502);
      const second = dialled.slice(3, 5);
      assertEquals(new Set(second).size, 2);
      assert(!dialled.slice(0, 3).some((key) => second.includes(key)), dialled.join(", "));
    }, { pool, endpointDownMs: 60_000 });
  } finally {
    pool.close();
  }
});

Deno.test("a streamed upload goes whole to the next endpoint when the first refuses the connect", async () => {
  await using good = countingBackend("good");
  const dead = { address: "127.0.0.1", port: closedPort() };
  const size = 200_000;
  const body = "u".repeat(size);
  await withProxyTo([dead, good.endpoint], async (proxy) => {
    const declared = await proxyPost(proxy, "/declared", body);
    assertEquals([declared.status, latin1(declared.body)], [200, "good"]);
    const conn = await RawConnection.open(proxy.port);
    try {
      await conn.send(
        `POST /chunked HTTP/1.1\r\nHost: ${UPSTREAM_HOST}\r\nTransfer-Encoding: chunked\r\n\r\n` +
          `${size.toString(16)}\r\n${body}\r\n0\r\n\r\n`,
      );
      const chunked = await conn.readResponse();
      assertEquals([chunked.status, latin1(chunked.body)], [200, "good"]);
    } finally {
      conn.close();
    }
    assertEquals(good.seen, [`POST /declared ${size}`, `POST /chunked ${size}`]);
    assertEquals(proxy.accessLog.map((e) => e.attempts), [2, 2]);
  }, { endpointDownMs: 1 });
});

Deno.test("a stale pooled connection on a pod going away: a GET is replayed on another endpoint, a POST is never sent twice", async () => {
  for (const method of ["GET", "POST"]) {
    const heads: string[] = [];
    // Serves the first request; at the next one it stops listening and hangs up without a byte.
    const dying = startBackend(async (conn, self) => {
      for (;;) {
        const head = await conn.readHead();
        if (head === null) return;
        heads.push(requestLine(head));
        if (heads.length > 1) {
          self.stopListening();
          return;
        }
        await conn.write(ok("first"));
      }
    });
    const good = countingBackend("good");
    try {
      await withProxyTo([dying.endpoint], async (proxy) => {
        assertEquals(latin1((await proxyGet(proxy, "/warm")).body), "first");
        assertEquals(proxy.handler.pool.stats().idle, 1);
        // The round-robin cursor is at the second place now: the dying pod comes next.
        proxy.setRoutes([{ endpoints: [good.endpoint, dying.endpoint] }]);
        const response = method === "GET"
          ? await proxyGet(proxy, "/again")
          : await proxyPost(proxy, "/again", "pay once");
        assertEquals(heads, ["GET /warm", `${method} /again`]);
        if (method === "GET") {
          assertEquals([response.status, latin1(response.body)], [200, "good"]);
          assertEquals(good.seen, ["GET /again 0"]);
          assert(proxy.handler.balancer.isDown(dying.endpoint), "the dead pod is marked down");
        } else {
          assertEquals([response.status, latin1(response.body)], [502, "Bad Gateway\n"]);
          assertEquals(good.seen, [], "the POST reached a second endpoint");
        }
      }, { endpointDownMs: 60_000 });
    } finally {
      await dying.close();
      await good.close();
    }
  }
});

Deno.test("a backend that keeps closing connections under requests costs one replay, not a loop", async () => {
  // Serves one request on its first connection; every later request is taken and hung up on.
  let heads = 0;
  await using flaky = startBackend(async (conn) => {
    for (;;) {
      if ((await conn.readHead()) === null) return;
      if (++heads > 1) return;
      await conn.write(ok("once"));
    }
  });
  await withProxyTo([flaky.endpoint], async (proxy) => {
    assertEquals(latin1((await proxyGet(proxy, "/")).body), "once");
    const response = await proxyGet(proxy, "/");
    assertEquals(response.status, 502);
    // The stale pooled connection, then one fresh one: two heads for that request, no more.
    assertEquals([heads, flaky.connections.length], [3, 2]);
  });
});

// Was a bug: a backend that accepts and resets before answering (a pod shutting down, a sidecar
// whose app is not up) failed every GET sent to it with 502 and was never marked down, while
// nginx's default `proxy_next_upstream error` retries an idempotent request on the next endpoint.
Deno.test({
  name: "a GET whose fresh connection is reset before any answer is retried on another endpoint",
  fn: async () => {
    const resetting = startBackend(async (conn) => {
      await conn.readHead();
    });
    const good = countingBackend("good");
    try {
      await withProxyTo([resetting.endpoint, good.endpoint], async (proxy) => {
        const answers: number[] = [];
        for (let i = 0; i < 4; i++) answers.push((await proxyGet(proxy, `/${i}`)).status);
        assertEquals(answers, [200, 200, 200, 200]);
      });
    } finally {
      await resetting.close();
      await good.close();
    }
  },
});

// Was a bug: the metrics counted every attempt but the last as a connect error, also a GET
// retried because its endpoint connected and then reset: the access log now says which it was.
Deno.test("the access log tells a retry after a reset from a retry after a connect failure", async () => {
  await using resetting = startBackend(async (conn) => {
    await conn.readHead();
  });
  await using good = countingBackend("good");
  const refusing = { address: "127.0.0.1", port: closedPort() };
  const cases = [[resetting.endpoint, undefined], [refusing, 1]] as const;
  for (const [first, failures] of cases) {
    await withProxyTo([first, good.endpoint], async (proxy) => {
      assertEquals((await proxyGet(proxy, "/")).status, 200);
      await waitFor("the access-log entry", () => proxy.accessLog.length === 1);
      assertEquals(proxy.accessLog[0]?.attempts, 2);
      assertEquals(proxy.accessLog[0]?.connectFailures, failures);
    });
  }
});

Deno.test("a POST whose connection is reset after its head was sent is answered 502 and sent nowhere else", async () => {
  const heads: string[] = [];
  await using resetting = startBackend(async (conn) => {
    const head = await conn.readHead();
    if (head !== null) heads.push(requestLine(head));
  });
  await using good = countingBackend("good");
  await withProxyTo([resetting.endpoint, good.endpoint], async (proxy) => {
    const response = await proxyPost(proxy, "/pay", "once");
    assertEquals([response.status, latin1(response.body)], [502, "Bad Gateway\n"]);
    assertEquals(heads, ["POST /pay"]);
    assertEquals(good.seen, []);
    assertEquals(proxy.accessLog[0]?.attempts, 1);
  });
});

// Was a bug (by ingress-nginx's default `proxy-next-upstream: error timeout`): a GET whose
// backend stayed silent past the read timeout (a node gone with keep-alive connections open to its
// pods) was answered 504, and that endpoint kept its turn.
Deno.test("a GET whose answer does not come within the read timeout goes to the next endpoint, which is then preferred", async () => {
  await using silent = silentBackend();
  const heads = silent.heads;
  await using good = countingBackend("good");
  await withProxyTo([silent.endpoint, good.endpoint], async (proxy) => {
    const response = await proxyGet(proxy, "/slow");
    assertEquals([response.status, latin1(response.body)], [200, "good"]);
    assertEquals(heads, ["GET /slow"]);
    assertEquals(good.seen, ["GET /slow 0"]);
    assertEquals(proxy.accessLog[0]?.attempts, 2);
    await waitFor("the timed-out connection to close", () => silent.open === 0);
    // Marked down: the next request does not wait on the silent endpoint again.
    assertEquals((await proxyGet(proxy, "/next")).status, 200);
    assertEquals(heads, ["GET /slow"]);
  }, { readTimeoutMs: 200 });
});

Deno.test("a POST that times out is answered 504 and never sent to a second endpoint", async () => {
  await using silent = silentBackend();
  const heads = silent.heads;
  await using good = countingBackend("good");
  await withProxyTo([silent.endpoint, good.endpoint], async (proxy) => {
    const response = await proxyPost(proxy, "/slow", "once");
    assertEquals([response.status, latin1(response.body)], [504, "Gateway Timeout\n"]);
    assertEquals(heads, ["POST /slow"]);
    assertEquals(good.seen, []);
    await waitFor("the timed-out connection to close", () => silent.open === 0);
    assertEquals(proxy.handler.pool.stats(), { active: 0, idle: 0, connectsTotal: 1 });
  }, { readTimeoutMs: 200 });
});

// A read timeout after part of the answer came is no silent backend: the request may have been
// served, so it is not sent again (only a timeout before any byte of the answer is retried).
Deno.test("a GET whose backend stalls within its answer's head is answered 504 and never sent to a second endpoint", async () => {
  const heads: string[] = [];
  await using stalling = startBackend(async (conn) => {
    const head = await conn.readHead();
    if (head !== null) heads.push(requestLine(head));
    await conn.write("HTTP/1.1 200 OK\r\n");
    await conn.readHead();
  });
  await using good = countingBackend("good");
  await withProxyTo([stalling.endpoint, good.endpoint], async (proxy) => {
    const response = await proxyGet(proxy, "/slow");
    assertEquals([response.status, latin1(response.body)], [504, "Gateway Timeout\n"]);
    assertEquals(heads, ["GET /slow"]);
    assertEquals(good.seen, []);
    assertEquals(proxy.accessLog[0]?.attempts, 1);
    await waitFor("the timed-out connection to close", () => stalling.open === 0);
  }, { readTimeoutMs: 200 });
});
