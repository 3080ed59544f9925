import { createHash } from "node:crypto";
import {
  type EchoBackend,
  GZIP_PLAIN,
  patternBytes,
  patternSha256,
  startEchoBackend,
} from "../../tests/support/echo_backend.ts";
import {
  type HarnessOptions,
  PLAIN_INFO,
  type ProxyHarness,
  startProxy,
} from "../../tests/support/proxy_harness.ts";
import {
  headerValue,
  headerValues,
  latin1,
  RawConnection,
  type RawResponse,
} from "../../tests/support/raw_http.ts";
import {
  assert,
  assertEquals,
  assertRejects,
  assertStrictEquals,
} from "../../tests/support/assert.ts";
import { type StaticRoute, staticSnapshot } from "../../tests/support/static_snapshot.ts";
import { type AccessLogEntry, createProxyHandler } from "./proxy_handler.ts";
import { UpstreamPool } from "./upstream_pool.ts";
import { closedPort } from "../../tests/support/upstream_backends.ts";
import { gunzipSync } from "node:zlib";

const HOST = "shop.example.com";

interface Setup {
  backend: EchoBackend;
  proxy: ProxyHarness;
}

/** One echo backend behind the proxy at `HOST` (and any host), cleaned up afterwards. */
async function withProxy(
  fn: (setup: Setup) => Promise<void>,
  options: Partial<Omit<HarnessOptions, "routes">> & {
    routes?: (backend: EchoBackend) => StaticRoute[];
  } = {},
): Promise<void> {
  const backend = await startEchoBackend({ name: "shop/web", pod: "web-1" });
  const endpoints = [{ address: "127.0.0.1", port: backend.port }];
  const { routes, ...rest } = options;
  const proxy = await startProxy({
    routes: routes?.(backend) ?? [{ host: HOST, endpoints }, { endpoints, service: "any/host" }],
    ...rest,
  });
  try {
    await fn({ backend, proxy });
  } finally {
    await proxy.close();
    await backend.close();
  }
}

/** Sends raw request text on a fresh connection and reads one response. */
async function raw(
  proxy: ProxyHarness,
  text: string,
  options: { head?: boolean } = {},
): Promise<RawResponse> {
  const conn = await RawConnection.open(proxy.port);
  try {
    await conn.send(text);
    return await conn.readResponse(options);
  } finally {
    conn.close();
  }
}

function echoJson(response: RawResponse): {
  target: string;
  host: string;
  headers: [string, string][];
  body: { length: number; sha256: string };
} {
  return JSON.parse(latin1(response.body));
}

function withoutForwarding(headers: [string, string][]): [string, string][] {
  const forwarding = new Set([
    "x-request-id",
    "x-real-ip",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-proto",
  ]);
  return headers.filter(([name]) => !forwarding.has(name.toLowerCase()));
}

Deno.test("proxy sends the backend the client's fields in wire order and case, duplicates apart, nothing added but forwarding fields", async () => {
  await withProxy(async ({ proxy }) => {
    const response = await raw(
      proxy,
      `GET /a/../b?q=%20x&y HTTP/1.1\r\nHost: ${HOST}\r\nZeta: 1\r\nX-Dup: one\r\nalpha: 2\r\n` +
        "x-dup: two\r\nAccept-Encoding: gzip\r\nUser-Agent: raw-test\r\n\r\n",
    );
    assertStrictEquals(response.status, 200);
    const echo = echoJson(response);
    assertStrictEquals(echo.target, "/b?q=%20x&y");
    assertEquals(withoutForwarding(echo.headers), [
      ["Host", HOST],
      ["Zeta", "1"],
      ["X-Dup", "one"],
      ["alpha", "2"],
      ["x-dup", "two"],
      ["Accept-Encoding", "gzip"],
      ["User-Agent", "raw-test"],
    ]);
  });
});

Deno.test("proxy sets X-Forwarded-* and X-Real-IP from the peer, replacing an untrusted client's values", async () => {
  await withProxy(async ({ proxy }) => {
    const response = await raw(
      proxy,
      `GET / HTTP/1.1\r\nHost: ${HOST}\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\n` +
        "X-Real-IP: 6.6.6.6\r\nX-Forwarded-Host: evil.example\r\nX-Request-ID: trace-123\r\n\r\n",
    );
    const fields = echoJson(response).headers;
    assertEquals(headerValues(fields, "x-forwarded-for"), ["127.0.0.1"]);
    assertEquals(headerValues(fields, "x-real-ip"), ["127.0.0.1"]);
    assertEquals(headerValues(fields, "x-forwarded-proto"), ["http"]);
    assertEquals(headerValues(fields, "x-forwarded-host"), [HOST]);
    assertEquals(headerValues(fields, "x-forwarded-port"), [String(proxy.port)]);
    assertEquals(headerValues(fields, "x-request-id"), ["trace-123"]);
  });
});

Deno.test("proxy appends to X-Forwarded-For and keeps X-Forwarded-Proto from a trusted proxy", async () => {
  await withProxy(async ({ proxy }) => {
    const response = await raw(
      proxy,
      `GET / HTTP/1.1\r\nHost: ${HOST}\r\nX-Forwarded-For: 198.51.100.9\r\nX-Forwarded-Proto: https\r\n\r\n`,
    );
    const fields = echoJson(response).headers;
    assertEquals(headerValues(fields, "x-forwarded-for"), ["198.51.100.9, 127.0.0.1"]);
    assertEquals(headerValues(fields, "x-real-ip"), ["198.51.100.9"]);
    assertEquals(headerValues(fields, "x-forwarded-proto"), ["https"]);
    const id = headerValue(fields, "x-request-id") ?? "";
    assert(/^[0-9a-f]{32}$/.test(id), id);
  }, { trustedProxyCidrs: ["127.0.0.0/8"] });
});

Deno.test("proxy removes hop-by-hop fields in both directions", async () => {
  await withProxy(async ({ proxy }) => {
    const request = await raw(
      proxy,
      `GET / HTTP/1.1\r\nHost: ${HOST}\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\n` +
        "Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nUpgrade: h2c\r\n" +
        "Proxy: http://evil\r\nX-Kept: yes\r\n\r\n",
    );
    assertEquals(withoutForwarding(echoJson(request).headers), [["Host", HOST], ["X-Kept", "yes"]]);

    const response = await raw(proxy, `GET /hop HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
    assertStrictEquals(latin1(response.body), "hop\n");
    const names = response.headers.map(([name]) => name.toLowerCase());
    for (const hop of ["x-hop-named", "keep-alive", "proxy-connection", "upgrade", "trailer"]) {
      assert(!names.includes(hop), `${hop} leaked: ${names}`);
    }
    assert(!(headerValue(response.headers, "connection") ?? "").toLowerCase().includes("x-hop"));
    assertStrictEquals(headerValue(response.headers, "x-end-to-end"), "passes");
    assertEquals(response.trailers, []);
  });
});

Deno.test("proxy passes a gzip body and its Content-Encoding through byte for byte", async () => {
  await withProxy(async ({ proxy }) => {
    const response = await raw(
      proxy,
      `GET /gzip HTTP/1.1\r\nHost: ${HOST}\r\nAccept-Encoding: gzip\r\n\r\n`,
    );
    assertStrictEquals(headerValue(response.headers, "content-encoding"), "gzip");
    assertStrictEquals(
      Number(headerValue(response.headers, "content-length")),
      response.body.length,
    );
    assertStrictEquals(
      createHash("sha256").update(response.body).digest("hex"),
      headerValue(response.headers, "x-body-sha256"),
    );
    assertStrictEquals(new TextDecoder().decode(gunzipSync(response.body)), GZIP_PLAIN);
  });
});

Deno.test("proxy keeps several Set-Cookie fields separate and passes 3xx through unfollowed", async () => {
  await withProxy(async ({ proxy }) => {
    const cookies = await raw(proxy, `GET /cookies?n=3 HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
    assertEquals(headerValues(cookies.headers, "set-cookie"), [
      "c0=v0; Path=/; HttpOnly",
      "c1=v1; Path=/; HttpOnly",
      "c2=v2; Path=/; HttpOnly",
    ]);
    for (const status of [301, 302, 307, 308]) {
      const redirect = await raw(
        proxy,
        `GET /redirect?status=${status}&to=/next%3Fa HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`,
      );
      assertStrictEquals(redirect.status, status);
      assertStrictEquals(headerValue(redirect.headers, "location"), "/next?a");
      assertStrictEquals(headerValue(redirect.headers, "set-cookie"), "r=1; Path=/");
    }
  });
});

Deno.test("proxy answers HEAD, 204 and 304 without a body and keeps HEAD's Content-Length", async () => {
  await withProxy(async ({ proxy }) => {
    const conn = await RawConnection.open(proxy.port);
    try {
      await conn.send(`HEAD /bytes?n=12345 HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
      const head = await conn.readResponse({ head: true });
      assertStrictEquals(head.status, 200);
      assertStrictEquals(headerValue(head.headers, "content-length"), "12345");
      for (const status of [204, 304]) {
        await conn.send(`GET /?status=${status} HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
        const response = await conn.readResponse();
        assertStrictEquals(response.status, status);
        assertStrictEquals(response.body.length, 0);
      }
      // The connection is still in sync after the bodiless answers.
      await conn.send(`GET /last HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
      assertStrictEquals(echoJson(await conn.readResponse()).target, "/last");
    } finally {
      conn.close();
    }
  });
});

Deno.test("proxy skips 1xx responses and relays close-delimited and HTTP/1.0 bodies", async () => {
  await withProxy(async ({ proxy }) => {
    const early = await raw(proxy, `GET /1xx HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
    assertEquals([early.status, latin1(early.body)], [200, "after 1xx\n"]);
    const closeDelimited = await raw(proxy, `GET /close HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
    assertStrictEquals(latin1(closeDelimited.body), "close-delimited body\n");
    const old = await raw(proxy, `GET /http10 HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
    assertStrictEquals(latin1(old.body), "http/1.0 body\n");
  });
});

Deno.test("proxy reuses one upstream connection for sequential requests", async () => {
  await withProxy(async ({ proxy, backend }) => {
    for (let i = 0; i < 5; i++) {
      const response = await raw(proxy, `GET /n${i} HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
      assertStrictEquals(response.status, 200);
    }
    assertStrictEquals(backend.connectionsAccepted, 1);
    assertStrictEquals(proxy.handler.pool.stats().idle, 1);
  });
});

Deno.test("proxy streams SSE events to the client before the stream ends", async () => {
  await withProxy(async ({ proxy, backend }) => {
    // Two events an hour apart: only a streaming proxy delivers the first one in time.
    const response = await fetch(`${proxy.url}/sse?n=2&interval=3600000`);
    assertStrictEquals(headerValue([...response.headers], "content-type"), "text/event-stream");
    const reader = response.body!.getReader();
    const first = await reader.read();
    assertStrictEquals(new TextDecoder().decode(first.value), "id: 0\ndata: event 0\n\n");
    // Leaving mid-stream closes the backend connection too.
    await reader.cancel();
    await backend.waitFor(() => backend.connectionsOpen === 0);
  });
});

Deno.test("proxy streams a 64 MiB download and a 64 MiB upload with matching hashes", async () => {
  const size = 64 * 1024 * 1024;
  await withProxy(async ({ proxy, backend }) => {
    for (const chunked of [false, true]) {
      const response = await fetch(`${proxy.url}/bytes?n=${size}${chunked ? "&chunked=1" : ""}`);
      const hash = createHash("sha256");
      let length = 0;
      for await (const chunk of response.body!) {
        hash.update(chunk);
        length += chunk.length;
      }
      assertEquals([length, hash.digest("hex")], [size, patternSha256(size)]);
    }
    // Chunked upload (a stream of unknown length).
    let offset = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (offset >= size) return controller.close();
        controller.enqueue(patternBytes(offset, 256 * 1024));
        offset += 256 * 1024;
      },
    });
    const response = await fetch(`${proxy.url}/upload`, { method: "POST", body });
    const echo = await response.json();
    assertEquals(echo.body, { length: size, sha256: patternSha256(size) });
    assertEquals(headerValues(echo.headers, "transfer-encoding"), ["chunked"]);
    // Content-Length upload, written raw so the length is declared.
    const conn = await RawConnection.open(proxy.port);
    try {
      await conn.send(`PUT /upload HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: ${size}\r\n\r\n`);
      for (let at = 0; at < size; at += 1024 * 1024) await conn.send(patternBytes(at, 1024 * 1024));
      const declared = echoJson(await conn.readResponse({ timeoutMs: 60_000 }));
      assertEquals(declared.body, { length: size, sha256: patternSha256(size) });
      assertEquals(headerValues(declared.headers, "content-length"), [String(size)]);
      assertEquals(headerValues(declared.headers, "transfer-encoding"), []);
    } finally {
      conn.close();
    }
    assertStrictEquals(backend.requests.filter((r) => r.error !== undefined).length, 0);
  });
});

Deno.test("proxy aborts the upstream request when the client leaves while waiting", async () => {
  await withProxy(async ({ proxy, backend }) => {
    const conn = await RawConnection.open(proxy.port);
    await conn.send(`GET /?delay=60000 HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
    await backend.waitFor(() => backend.requests.length === 1 && backend.connectionsOpen === 1);
    conn.close();
    await backend.waitFor(() => backend.connectionsOpen === 0);
    await waitUntil(() => proxy.accessLog.length === 1);
    assertStrictEquals(proxy.accessLog[0]?.error, "aborted");
  });
});

Deno.test("proxy aborts the upstream request when the client leaves while a pooled connection waits", async () => {
  await withProxy(async ({ proxy, backend }) => {
    // A first request leaves a pooled connection: the second takes it without connecting, so
    // its client is watched only once the backend is slow to answer.
    assertStrictEquals((await raw(proxy, `GET / HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`)).status, 200);
    await backend.waitFor(() => backend.connectionsOpen === 1);
    const conn = await RawConnection.open(proxy.port);
    await conn.send(`GET /?delay=60000 HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
    await backend.waitFor(() => backend.requests.length === 2);
    assertStrictEquals(backend.connectionsOpen, 1, "the slow request took the pooled connection");
    conn.close();
    await backend.waitFor(() => backend.connectionsOpen === 0);
    await waitUntil(() => proxy.accessLog.length === 2);
    assertStrictEquals(proxy.accessLog[1]?.error, "aborted");
  });
});

Deno.test("proxy answers 404 without a route and 503 without endpoints", async () => {
  await withProxy(async ({ proxy }) => {
    const none = await raw(proxy, "GET / HTTP/1.1\r\nHost: unknown.example\r\n\r\n");
    assertEquals([none.status, latin1(none.body)], [404, "Not Found\n"]);
    const empty = await raw(proxy, "GET / HTTP/1.1\r\nHost: empty.example\r\n\r\n");
    assertEquals([empty.status, latin1(empty.body)], [503, "Service Unavailable\n"]);
  }, {
    routes: (backend) => [
      { host: HOST, endpoints: [{ address: "127.0.0.1", port: backend.port }] },
      { host: "empty.example", endpoints: [] },
    ],
  });
});

Deno.test("proxy answers 502 when every endpoint refuses the connection", async () => {
  const closed = closedPort();
  await withProxy(async ({ proxy }) => {
    const response = await raw(proxy, `GET / HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
    assertEquals([response.status, latin1(response.body)], [502, "Bad Gateway\n"]);
    assertStrictEquals(proxy.accessLog[0]?.error, "connect-failed");
  }, { routes: () => [{ host: HOST, endpoints: [{ address: "127.0.0.1", port: closed }] }] });
});

Deno.test("proxy retries the next endpoint after a refused connect and marks the failing one down", async () => {
  const closed = closedPort();
  await withProxy(async ({ proxy, backend }) => {
    const dead = { address: "127.0.0.1", port: closed };
    for (let i = 0; i < 4; i++) {
      const response = await raw(
        proxy,
        `POST /r${i} HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: 2\r\n\r\nhi`,
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
      host: HOST,
      endpoints: [{ address: "127.0.0.1", port: closed }, {
        address: "127.0.0.1",
        port: backend.port,
      }],
    }],
  });
});

Deno.test("proxy answers 504 when the backend stays silent past the read timeout", async () => {
  await withProxy(async ({ proxy }) => {
    const started = performance.now();
    const response = await raw(proxy, `GET /?delay=60000 HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
    assertEquals([response.status, latin1(response.body)], [504, "Gateway Timeout\n"]);
    assert(performance.now() - started < 10_000);
    assertStrictEquals(proxy.accessLog[0]?.error, "timeout");
  }, { readTimeoutMs: 300 });
});

Deno.test("proxy read timeout is idle-based: a slow but steady stream completes", async () => {
  await withProxy(async ({ proxy }) => {
    const response = await raw(
      proxy,
      `GET /sse?n=6&interval=150 HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`,
    );
    assertStrictEquals(latin1(response.body).split("\n\n").length - 1, 6);
  }, { readTimeoutMs: 400 });
});

Deno.test("proxy cuts a body short when the backend stalls mid-stream", async () => {
  await withProxy(async ({ proxy }) => {
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
    await withProxy(async ({ proxy }) => {
      const response = await raw(proxy, `GET / HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
      assertEquals([response.status, latin1(response.body)], [504, "Gateway Timeout\n"]);
      assertStrictEquals(proxy.accessLog[0]?.error, "connect-timeout");
      assertStrictEquals(proxy.accessLog[0]?.attempts, 1);
    }, {
      connectTimeoutMs: 300,
      routes: () => [{ host: HOST, endpoints: [{ address: "127.0.0.1", port }] }],
    });
  } finally {
    for (const conn of fillers) conn.close();
    listener.close();
  }
});

Deno.test("proxy answers 502 for malformed backend responses", async () => {
  const kinds = [
    "status",
    "cl-te",
    "cl-dup",
    "cl-bad",
    "fold",
    "space-colon",
    "te-gzip",
    "eof-head",
    "nul",
    "huge-head",
  ];
  await withProxy(async ({ proxy }) => {
    for (const kind of kinds) {
      const response = await raw(
        proxy,
        `GET /malformed?kind=${kind} HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`,
      );
      assertEquals([response.status, latin1(response.body)], [502, "Bad Gateway\n"], kind);
    }
    const dropped = await raw(proxy, `GET /drop HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
    assertStrictEquals(dropped.status, 502);
  });
});

Deno.test("proxy ends the client body when the backend's chunking breaks mid-stream", async () => {
  await withProxy(async ({ proxy }) => {
    const response = await fetch(`${proxy.url}/malformed?kind=chunk-bad`);
    assertStrictEquals(response.status, 200);
    // A broken chunked body must not look complete.
    await assertRejects(() => response.arrayBuffer());
  });
});

Deno.test("proxy answers 502 when a small Content-Length body is cut short", async () => {
  await withProxy(async ({ proxy }) => {
    const response = await raw(
      proxy,
      `GET /malformed?kind=eof-body HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`,
    );
    assertEquals([response.status, latin1(response.body)], [502, "Bad Gateway\n"]);
  });
});

Deno.test("proxy answers 413 for a declared or streamed body over the limit", async () => {
  await withProxy(async ({ proxy, backend }) => {
    const declared = await raw(
      proxy,
      `POST / HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: 2000\r\n\r\n${"x".repeat(2000)}`,
    );
    assertEquals([declared.status, latin1(declared.body)], [413, "Content Too Large\n"]);
    assertStrictEquals(backend.requests.length, 0);

    const chunks = Array.from({ length: 3 }, () => `258\r\n${"y".repeat(600)}\r\n`).join("") +
      "0\r\n\r\n";
    const streamed = await raw(
      proxy,
      `POST / HTTP/1.1\r\nHost: ${HOST}\r\nTransfer-Encoding: chunked\r\n\r\n${chunks}`,
    );
    assertStrictEquals(streamed.status, 413);
    // The backend may have seen the start of the request, never a complete one.
    assert(backend.requests.every((r) => r.error !== undefined || r.bodyLength <= 1000));

    const fits = await raw(
      proxy,
      `POST / HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: 1000\r\n\r\n${"z".repeat(1000)}`,
    );
    assertStrictEquals(fits.status, 200);
  }, { maxBodyBytes: 1000 });
});

Deno.test("proxy answers 431 for oversized header sections, 400 for bad hosts, 501 for GET bodies", async () => {
  await withProxy(async ({ proxy, backend }) => {
    const big = await raw(
      proxy,
      `GET / HTTP/1.1\r\nHost: ${HOST}\r\nX-Big: ${"a".repeat(5000)}\r\n\r\n`,
    );
    assertStrictEquals(big.status, 431);
    const badHost = await raw(proxy, `GET / HTTP/1.1\r\nHost: ${HOST}/admin\r\n\r\n`);
    assertStrictEquals(badHost.status, 400);
    const userinfo = await raw(proxy, `GET / HTTP/1.1\r\nHost: evil@${HOST}\r\n\r\n`);
    assertStrictEquals(userinfo.status, 400);
    const getBody = await raw(
      proxy,
      `GET / HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: 5\r\n\r\nhello`,
    );
    assertStrictEquals(getBody.status, 501);
    const gzipTe = await raw(
      proxy,
      `POST / HTTP/1.1\r\nHost: ${HOST}\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n`,
    );
    assertStrictEquals(gzipTe.status, 501);
    assertStrictEquals(backend.requests.length, 0);
  }, { maxHeaderBytes: 4096 });
});

Deno.test("proxy routes on the normalised path and forwards that path, not the target as sent", async () => {
  await withProxy(async ({ proxy }) => {
    const targets = ["/public/../admin/x", "/%61dmin/x", "//admin/x", "/public/x"];
    for (const target of targets) {
      const response = await raw(proxy, `GET ${target} HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
      assertStrictEquals(
        echoJson(response).target,
        target.startsWith("/public/x") ? target : "/admin/x",
      );
    }
    await waitUntil(() => proxy.accessLog.length === targets.length);
    assertEquals(proxy.accessLog.map((e) => e.service), [
      "admin/web",
      "admin/web",
      "admin/web",
      "public/web",
    ]);
  }, {
    routes: (backend) => [
      {
        host: HOST,
        endpoints: [{ address: "127.0.0.1", port: backend.port }],
        service: "public/web",
      },
      {
        host: HOST,
        path: "/admin",
        endpoints: [{ address: "127.0.0.1", port: backend.port }],
        service: "admin/web",
      },
    ],
  });
});

Deno.test("proxy redirects TLS hosts to HTTPS with 308 and sends HSTS over HTTPS", async () => {
  const routes = (backend: EchoBackend) => [{
    host: HOST,
    tls: true,
    endpoints: [{ address: "127.0.0.1", port: backend.port }],
  }];
  await withProxy(async ({ proxy }) => {
    const response = await raw(
      proxy,
      `POST /a/b?c=d HTTP/1.1\r\nHost: ${HOST}:8080\r\nContent-Length: 0\r\n\r\n`,
    );
    assertStrictEquals(response.status, 308);
    assertStrictEquals(headerValue(response.headers, "location"), `https://${HOST}/a/b?c=d`);
  }, { routes });
  await withProxy(async ({ proxy }) => {
    const response = await raw(proxy, `GET /x HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
    assertStrictEquals(response.status, 200);
    assertStrictEquals(
      headerValue(response.headers, "strict-transport-security"),
      "max-age=31536000; includeSubDomains",
    );
    assertStrictEquals(headerValues(echoJson(response).headers, "x-forwarded-proto")[0], "https");
  }, { routes, secure: true });
  await withProxy(async ({ proxy }) => {
    const response = await raw(proxy, `GET /x HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
    assertStrictEquals(headerValue(response.headers, "strict-transport-security"), undefined);
  }, { routes, secure: true, hsts: { enabled: false } });
});

Deno.test("proxy never sends backend traffic through an environment-configured proxy", async () => {
  const saved = ["HTTP_PROXY", "http_proxy", "ALL_PROXY"].map((k) => [k, Deno.env.get(k)] as const);
  const closed = closedPort();
  for (const [name] of saved) Deno.env.set(name, `http://127.0.0.1:${closed}`);
  try {
    await withProxy(async ({ proxy }) => {
      const response = await raw(proxy, `GET /direct HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
      assertEquals([response.status, echoJson(response).target], [200, "/direct"]);
    });
  } finally {
    for (const [name, value] of saved) {
      if (value === undefined) Deno.env.delete(name);
      else Deno.env.set(name, value);
    }
  }
});

Deno.test("proxy logs one access entry per request with route and endpoint", async () => {
  await withProxy(async ({ proxy, backend }) => {
    await raw(proxy, `GET /logged?x=1 HTTP/1.1\r\nHost: ${HOST}\r\nX-Request-ID: abc\r\n\r\n`);
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
      ["abc", "GET", HOST, "/logged?x=1", 200, "test/ingress", "test/service"],
    );
    assertStrictEquals(entry.endpoint, `127.0.0.1:${backend.port}`);
    assertEquals([entry.ruleHost, entry.backend], [HOST, "test/service:80"]);
    assert(entry.bytes > 0);
  });
});

Deno.test("proxy access entries carry the rule's host as written, never the client's Host", async () => {
  await withProxy(async ({ proxy }) => {
    for (
      const [host, path] of [["a.wild.example", "/x"], ["other.example", "/x"], [
        "other.example",
        "/y",
      ]]
    ) {
      await raw(proxy, `GET ${path} HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
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
  await withProxy(async ({ proxy }) => {
    const response = await raw(proxy, `GET / HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
    assertStrictEquals(response.status, 502);
    const entry = proxy.accessLog[0]!;
    assertEquals(
      [entry.error, entry.attempts, entry.endpoint, entry.ruleHost, entry.backend],
      ["connect-failed", 1, `127.0.0.1:${closed}`, HOST, "test/service:80"],
    );
  }, { routes: () => [{ host: HOST, endpoints: [{ address: "127.0.0.1", port: closed }] }] });
});

async function waitUntil(predicate: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!predicate()) {
    if (performance.now() > deadline) throw new Error("Condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

Deno.test("proxy access entries name the URL's authority for HTTP/2 requests, which carry no Host", async () => {
  const entries: AccessLogEntry[] = [];
  const handler = createProxyHandler({
    snapshot: () => staticSnapshot([{ host: HOST, endpoints: [], service: "shop/down" }]),
    onAccess: (e) => entries.push(e),
  });
  try {
    // A Request built from a URL alone has no Host field, as Deno hands over an h2 request.
    const response = await handler(new Request(`https://${HOST}/status`), {
      remoteAddr: { hostname: "127.0.0.1", port: 40000 },
      secure: true,
      localPort: 8443,
    });
    await response.body?.cancel();
    assertStrictEquals(response.status, 503);
    assertEquals(entries.map((e) => [e.host, e.ruleHost, e.status]), [[HOST, HOST, 503]]);
  } finally {
    handler.close();
  }
});

Deno.test("proxy releases streamed response chunks by default (its responses are for Deno.serve), not when told otherwise", async () => {
  const backend = await startEchoBackend();
  const endpoints = [{ address: "127.0.0.1", port: backend.port }];
  try {
    for (const releaseBodyChunks of [undefined, false]) {
      const handler = createProxyHandler({
        snapshot: () => staticSnapshot([{ host: HOST, endpoints }]),
        ...(releaseBodyChunks === undefined ? {} : { releaseBodyChunks }),
      });
      try {
        const response = await handler(new Request(`http://${HOST}/bytes?n=${4 * 1024 * 1024}`), {
          remoteAddr: { hostname: "127.0.0.1", port: 40000 },
          secure: false,
          localPort: 8080,
        });
        const reader = response.body!.getReader();
        const first = await reader.read();
        assert(!first.done && first.value.length > 0);
        const length = first.value.length;
        await reader.read();
        await reader.read();
        assertStrictEquals(first.value.length, releaseBodyChunks === undefined ? 0 : length);
        await reader.cancel();
      } finally {
        handler.close();
      }
    }
  } finally {
    await backend.close();
  }
});

Deno.test("proxy reads the client's signal at once only where a fast exchange needs it: HTTP/2 (or a lowercase host field) and streamed uploads", async () => {
  /** Counts reads of `signal` (Deno.serve starts a cancellation watch, an async op, on the first). */
  class CountingRequest extends Request {
    signalReads = 0;
    override get signal(): AbortSignal {
      this.signalReads++;
      return super.signal;
    }
  }
  const backend = await startEchoBackend();
  const endpoints = [{ address: "127.0.0.1", port: backend.port }];
  // A check interval no exchange on loopback comes near: "fast" is certain.
  const pool = new UpstreamPool({ clientCheckMs: 60_000 });
  const handler = createProxyHandler({
    snapshot: () => staticSnapshot([{ host: HOST, endpoints }]),
    pool,
  });
  const info = PLAIN_INFO;
  const url = `http://${HOST}/`;
  const host = { Host: HOST };
  const upload = () =>
    new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode("hello"));
        controller.close();
      },
    });
  const cases: [string, () => CountingRequest, boolean][] = [
    ["HTTP/1.x GET", () => new CountingRequest(url, { headers: host }), false],
    ["HTTP/1.x HEAD", () => new CountingRequest(url, { method: "HEAD", headers: host }), false],
    [
      "HTTP/1.x POST with a buffered body",
      () =>
        new CountingRequest(url, {
          method: "POST",
          headers: { ...host, "Content-Length": "5" },
          body: "hello",
        }),
      false,
    ],
    ["HTTP/2 GET (no Host field)", () => new CountingRequest(url), true],
    [
      // HTTP/2 names are lowercase on the wire; an HTTP/1.x one spelt so cannot be told apart.
      "GET with a lowercase host field (HTTP/2, or HTTP/1.x)",
      () => new CountingRequest(url, { headers: { host: HOST } }),
      true,
    ],
    [
      "HTTP/1.x POST streaming a body",
      () => new CountingRequest(url, { method: "POST", headers: host, body: upload() }),
      true,
    ],
  ];
  try {
    // The first exchange connects, and reads the signal to watch the connect.
    const first = new CountingRequest(url, { headers: host });
    await (await handler(first, info)).arrayBuffer();
    assertStrictEquals(first.signalReads, 1, "a request that opens a connection");
    for (const [name, request, readsAtOnce] of cases) {
      const req = request();
      const response = await handler(req, info);
      await response.arrayBuffer();
      assertStrictEquals(response.status, 200, name);
      assertStrictEquals(req.signalReads > 0, readsAtOnce, name);
    }
    assertStrictEquals(pool.stats().connectsTotal, 1);
  } finally {
    handler.close();
    await backend.close();
  }
});
