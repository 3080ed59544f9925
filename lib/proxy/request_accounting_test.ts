/**
 * Whether the access log and the data plane's metrics tell the truth about what
 * the proxy did: one entry per request, the status logged is the one the client
 * received, and host (the rule's, as written), bytes, duration, upstream
 * (bracketed for IPv6), attempts and request id match what happened, for
 * Sluice's own answers, cut bodies, clients that leave and upgrades. Real
 * handler on `Deno.serve`, real loopback backends (scripted where the failure
 * must be exact), raw clients; the entries go through the worker's own
 * `accessLogFields()` and `observeRequest()` (`tests/support/accounted_proxy.ts`).
 * The counts of retries are in `retries_test.ts`.
 *
 * @module
 */
import {
  assert,
  assertBetween,
  assertEquals,
  assertMatch,
  assertStrictEquals,
  assertStringIncludes,
} from "../../tests/support/assert.ts";
import { RawConnection, rawRequest } from "../../tests/support/raw_http.ts";
import { waitFor } from "../../tests/support/wait.ts";
import {
  closedPort,
  startBackend,
  type UpstreamBackend,
} from "../../tests/support/upstream_backends.ts";
import { upgradeHead } from "../../tests/support/echo_world.ts";
import {
  BOOKS_HOST,
  recordingBackend,
  requestIdOf,
  withBooks,
} from "../../tests/support/accounted_proxy.ts";
import { ECHO_HOST, sendRaw, withEchoProxy } from "../../tests/support/echo_proxy.ts";
import { type AccessLogEntry, createProxyHandler } from "./proxy_handler.ts";
import { staticSnapshot } from "../../tests/support/static_snapshot.ts";
import {
  echoed,
  exchange,
  field,
  startProxyOn,
  withV6Backend,
} from "../../tests/support/ipv6_proxy.ts";
import type { Endpoint } from "../routing/snapshot.ts";

function get(port: number, target: string, extra = "") {
  return rawRequest(port, `GET ${target} HTTP/1.1\r\nHost: ${BOOKS_HOST}\r\n${extra}\r\n`);
}

Deno.test("Sluice's own 414, 400 (ambiguous path) and 308 are logged and counted with the status the client got", async () => {
  await using backend = recordingBackend("x");
  await withBooks([backend.endpoint], async (books) => {
    const long = await get(books.port, `/a?q=${"x".repeat(9000)}`);
    const ambiguous = await get(books.port, "/public/..%2Fadmin?token=s3cret");
    assertEquals([long.status, ambiguous.status], [414, 400]);
    await waitFor("two lines", () => books.lines.length === 2);
    for (const [i, status] of [414, 400].entries()) {
      const line = books.lines[i]!;
      assertEquals([line.status, line.upstream, line.attempts], [status, "", 0]);
      // Was a bug: answers given before routing were logged with an empty request_id.
      assertMatch(line.request_id, /^[0-9a-f]{32}$/);
      assert(!line.path.includes("?"), `path ${line.path} carries no query`);
      assert(!line.path.includes("xxxxxxxx") && !line.path.includes("s3cret"));
    }
    assertEquals(backend.heads.length, 0);
    assertEquals(await books.sample("sluice_requests_total", { status: "4xx" }), 2);
  });
  await withBooks([backend.endpoint], async (books) => {
    const redirect = await get(books.port, "/cart?session=abc");
    assertEquals(redirect.status, 308);
    await waitFor("a line", () => books.lines.length === 1);
    const line = books.lines[0]!;
    assertEquals([line.status, line.path, line.upstream, line.attempts, line.bytes], [
      308,
      "/cart",
      "",
      0,
      0,
    ]);
    assertEquals(line.ingress, "shop/web");
    assertMatch(line.request_id, /^[0-9a-f]{32}$/);
    assertEquals(
      await books.sample("sluice_requests_total", { status: "3xx", host: BOOKS_HOST }),
      1,
    );
    assertEquals(backend.heads.length, 0);
  }, { tls: true });
});

Deno.test("a HEAD request logs 0 bytes and the backend's status", async () => {
  await using backend = startBackend(async (conn) => {
    for (;;) {
      const head = await conn.readHead();
      if (head === null) return;
      await conn.write("HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n");
    }
  });
  await withBooks([backend.endpoint], async (books) => {
    const response = await rawRequest(
      books.port,
      `HEAD / HTTP/1.1\r\nHost: ${BOOKS_HOST}\r\n\r\n`,
      {
        head: true,
      },
    );
    assertEquals(response.status, 200);
    await waitFor("a line", () => books.lines.length === 1);
    assertEquals([books.lines[0]!.status, books.lines[0]!.bytes], [200, 0]);
    assertEquals(await books.sample("sluice_requests_total", { method: "HEAD", status: "2xx" }), 1);
  });
});

/** A backend sending a 200 head of `total` bytes, `first` of them at once, then nothing until closed. */
function stallingBackend(total: number, first: number): UpstreamBackend {
  return startBackend(async (conn) => {
    await conn.readHead();
    await conn.write(`HTTP/1.1 200 OK\r\nContent-Length: ${total}\r\n\r\n`);
    await conn.write("y".repeat(first));
    await conn.readSome(); // until the proxy closes it
  });
}

Deno.test("a body stalled past the read timeout is logged with the 200 already sent, the bytes relayed and error timeout", async () => {
  await using backend = stallingBackend(500_000, 100_000);
  await withBooks([backend.endpoint], async (books) => {
    const conn = await RawConnection.open(books.port);
    try {
      await conn.send(`GET /big?k=v HTTP/1.1\r\nHost: ${BOOKS_HOST}\r\n\r\n`);
      const response = await conn.readResponse({ head: true });
      assertEquals(response.status, 200);
      await waitFor("a line", () => books.lines.length === 1, { timeoutMs: 5_000 });
      const line = books.lines[0]!;
      assertEquals([line.status, line.bytes, line.error, line.path], [
        200,
        100_000,
        "timeout",
        "/big",
      ]);
      assertBetween(line.duration_ms, 250, 5_000);
      // The histogram times the whole response too (its help said "to response headers").
      assertBetween(await books.sample("sluice_request_duration_seconds_sum"), 0.25, 5);
    } finally {
      conn.close();
    }
  }, { readTimeoutMs: 300 });
});

Deno.test("a client leaving mid-download is logged with the status sent, the bytes relayed so far and error aborted", async () => {
  await using backend = stallingBackend(500_000, 100_000);
  await withBooks([backend.endpoint], async (books) => {
    const conn = await RawConnection.open(books.port);
    await conn.send(`GET /big HTTP/1.1\r\nHost: ${BOOKS_HOST}\r\n\r\n`);
    const response = await conn.readResponse({ head: true });
    assertEquals(response.status, 200);
    conn.close();
    await waitFor("a line", () => books.lines.length === 1, { timeoutMs: 4_000 });
    const line = books.lines[0]!;
    assertEquals([line.status, line.error], [200, "aborted"]);
    assertBetween(line.bytes, 1, 100_000);
  }, { readTimeoutMs: 10_000 });
});

Deno.test("a client that never reads a large body is cut by the stall timeout and logged with error timeout", async () => {
  const total = 8 * 1024 * 1024;
  await using backend = startBackend(async (conn) => {
    await conn.readHead();
    await conn.write(`HTTP/1.1 200 OK\r\nContent-Length: ${total}\r\n\r\n`);
    const chunk = "z".repeat(64 * 1024);
    for (let sent = 0; sent < total; sent += chunk.length) await conn.write(chunk);
  });
  await withBooks([backend.endpoint], async (books) => {
    const conn = await RawConnection.open(books.port);
    try {
      await conn.send(`GET /huge HTTP/1.1\r\nHost: ${BOOKS_HOST}\r\n\r\n`);
      // Never read: the proxy's writes back up and its consumer stalls.
      await waitFor("a line", () => books.lines.length === 1, { timeoutMs: 6_000 });
      const line = books.lines[0]!;
      assertEquals([line.status, line.error], [200, "timeout"]);
      assertBetween(line.bytes, 1, total - 1);
    } finally {
      conn.close();
    }
  }, { readTimeoutMs: 400 });
});

async function acceptKey(key: string): Promise<string> {
  const digest = await crypto.subtle.digest(
    "SHA-1",
    new TextEncoder().encode(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"),
  );
  return btoa(String.fromCharCode(...new Uint8Array(digest)));
}

// Was a bug: proxy_handler.ts logged a relayed WebSocket the moment the handshake was answered,
// so its duration was the handshake's and a session still open was already "done".
Deno.test({
  name: "a relayed WebSocket is logged once the session ends, with the session's duration",
  async fn() {
    const { promise: release, resolve: end } = Promise.withResolvers<void>();
    await using backend = startBackend(async (conn) => {
      const head = (await conn.readHead())!;
      const key = /\r\nsec-websocket-key:\s*([^\r]*)/i.exec(head)![1]!;
      await conn.write(
        `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
          `Sec-WebSocket-Accept: ${await acceptKey(key)}\r\n\r\n`,
      );
      await release;
    });
    await withBooks([backend.endpoint], async (books) => {
      const conn = await RawConnection.open(books.port);
      try {
        await conn.send(upgradeHead(BOOKS_HOST) + "\r\n");
        assertEquals((await conn.readResponse({ head: true })).status, 101);
        const opened = performance.now();
        await waitFor("300 ms of session", () => performance.now() - opened > 300);
        assertEquals(books.lines.length, 0, "a session still open is not logged yet");
        end();
        await waitFor("a line", () => books.lines.length === 1);
        assertEquals(books.lines[0]!.status, 101);
        assertBetween(books.lines[0]!.duration_ms, 300, 10_000);
      } finally {
        end();
        conn.close();
      }
    });
  },
});

Deno.test("the request id logged is the one the backend received, also when the client sent its own", async () => {
  await using backend = recordingBackend("ok");
  await withBooks([backend.endpoint], async (books) => {
    await get(books.port, "/a?x=1");
    await get(books.port, "/b", "X-Request-ID: client-chosen-1\r\n");
    await waitFor("two lines", () => books.lines.length === 2);
    for (const [i, line] of books.lines.entries()) {
      assertEquals(line.request_id, requestIdOf(backend.heads[i]!));
      assert(line.request_id.length > 0);
    }
    assertEquals(books.lines.map((l) => l.path), ["/a", "/b"]);
  });
});

Deno.test("proxy logs one access entry per request with route and endpoint", async () => {
  await withEchoProxy(async ({ proxy, backend }) => {
    await sendRaw(
      proxy,
      `GET /logged?x=1 HTTP/1.1\r\nHost: ${ECHO_HOST}\r\nX-Request-ID: abc\r\n\r\n`,
    );
    await waitUntil(() => proxy.accessLog.length === 1);
    const entry = proxy.accessLog[0]!;
    assertEquals(
      [
        entry.requestId,
        entry.method,
        entry.host,
        entry.target,
        entry.status,
        entry.ingress,
        entry.service,
      ],
      ["abc", "GET", ECHO_HOST, "/logged?x=1", 200, "test/ingress", "test/service"],
    );
    assertStrictEquals(entry.endpoint, `127.0.0.1:${backend.port}`);
    assertEquals([entry.ruleHost, entry.backend], [ECHO_HOST, "test/service:80"]);
    assert(entry.bytes > 0);
  });
});

Deno.test("proxy access entries carry the rule's host as written, never the client's Host", async () => {
  await withEchoProxy(async ({ proxy }) => {
    for (
      const [host, path] of [["a.wild.example", "/x"], ["other.example", "/x"], [
        "other.example",
        "/y",
      ]]
    ) {
      await sendRaw(proxy, `GET ${path} HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
    }
    await waitUntil(() => proxy.accessLog.length === 3);
    assertEquals(
      proxy.accessLog.map((e) => [e.host, e.ruleHost, e.backend, e.status]),
      [
        ["a.wild.example", "*.wild.example", "shop/wild:8080", 200],
        ["other.example", "", "shop/any:80", 200],
        ["other.example", "", undefined, 404],
      ],
    );
  }, {
    routes: (backend) => {
      const endpoints = [{ address: "127.0.0.1", port: backend.port }];
      return [
        { host: "*.wild.example", endpoints, service: "shop/wild", key: "shop/wild:8080" },
        { path: "/x", pathType: "Exact", endpoints, service: "shop/any" },
      ];
    },
  });
});

Deno.test("proxy access entry names the endpoint it could not connect to", async () => {
  const closed = closedPort();
  await withEchoProxy(async ({ proxy }) => {
    const response = await sendRaw(proxy, `GET / HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`);
    assertStrictEquals(response.status, 502);
    const entry = proxy.accessLog[0]!;
    assertEquals(
      [entry.error, entry.attempts, entry.endpoint, entry.ruleHost, entry.backend],
      ["connect-failed", 1, `127.0.0.1:${closed}`, ECHO_HOST, "test/service:80"],
    );
  }, { routes: () => [{ host: ECHO_HOST, endpoints: [{ address: "127.0.0.1", port: closed }] }] });
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

Deno.test("proxy access entries name the URL's authority for HTTP/2 requests, which carry no Host", async () => {
  const entries: AccessLogEntry[] = [];
  const handler = createProxyHandler({
    snapshot: () => staticSnapshot([{ host: ECHO_HOST, endpoints: [], service: "shop/down" }]),
    onAccess: (e) => entries.push(e),
  });
  try {
    // A Request built from a URL alone has no Host field, as Deno hands over an h2 request.
    const response = await handler(new Request(`https://${ECHO_HOST}/status`), {
      remoteAddr: { hostname: "127.0.0.1", port: 40000 },
      secure: true,
      localPort: 8443,
    });
    await response.body?.cancel();
    assertStrictEquals(response.status, 503);
    assertEquals(entries.map((e) => [e.host, e.ruleHost, e.status]), [[ECHO_HOST, ECHO_HOST, 503]]);
  } finally {
    handler.close();
  }
});

Deno.test("an IPv6 client is proxied to an IPv6 endpoint, and the log names it bracketed with its port", async () => {
  await withV6Backend(async (backend, at) => {
    const proxy = startProxyOn([{ host: "v6.test", endpoints: [at] }]);
    try {
      const e = echoed(
        await exchange(
          proxy.port,
          "GET /a?b=1 HTTP/1.1\r\nHost: v6.test\r\nConnection: close\r\n\r\n",
        ),
      );
      assertEquals(e.host, "v6.test");
      assertEquals(e.target, "/a?b=1");
      assertEquals(field(e, "x-forwarded-for"), "::1");
      assertEquals(field(e, "x-real-ip"), "::1");
      const entry = proxy.accessLog.at(-1)!;
      assertEquals(entry.endpoint, `[::1]:${backend.port}`);
      assertEquals(entry.remoteAddress, "::1");
      assertEquals(entry.clientIp, "::1");
    } finally {
      await proxy.close();
    }
  });
});

Deno.test("a connect failure to an IPv6 endpoint is reported with the address bracketed, and the next endpoint serves", async () => {
  await withV6Backend(async (backend, at) => {
    // A port on ::1 nobody listens on: bound then released.
    const probe = Deno.listen({ hostname: "::1", port: 0 });
    const deadPort = (probe.addr as Deno.NetAddr).port;
    probe.close();
    const dead: Endpoint = { address: "::1", port: deadPort };
    const proxy = startProxyOn([{ host: "dead.test", endpoints: [dead] }, {
      endpoints: [dead, at],
    }]);
    try {
      const failed = await exchange(
        proxy.port,
        "GET / HTTP/1.1\r\nHost: dead.test\r\nConnection: close\r\n\r\n",
      );
      assertEquals(failed.status, 502);
      assertEquals(proxy.accessLog.at(-1)!.endpoint, `[::1]:${deadPort}`);
      const text = JSON.stringify(proxy.warnings);
      assertStringIncludes(text, `Cannot connect to \\"[::1]:${deadPort}\\"`);
      assert(!text.includes(`"::1:${deadPort}`) && !text.includes(` ::1:${deadPort}`), text);
      assert(proxy.handler.balancer.isDown(dead), "the dead IPv6 endpoint is marked down");

      const response = await exchange(
        proxy.port,
        "GET / HTTP/1.1\r\nHost: any.test\r\nConnection: close\r\n\r\n",
      );
      assertEquals(response.status, 200);
      const entry = proxy.accessLog.at(-1)!;
      assertEquals(entry.endpoint, `[::1]:${backend.port}`);
      assert(!proxy.handler.balancer.isDown(at), "the live one is not down");
    } finally {
      await proxy.close();
    }
  });
});
