/**
 * A client that leaves: the backend exchange is aborted (before a connect, during
 * a slow connect, while waiting for the answer, mid-download), its connection
 * closed and never pooled, the request logged 499, and nothing marked down. An
 * HTTP/1.x exchange on a pooled connection reads its client's signal only once
 * it has waited 50 to 100 ms (`UpstreamPool.watchClient`); the `watch:` tests
 * attack that over the real listeners (plain HTTP/1.x, HTTP/1.1 over TLS, h2c
 * and h2 over TLS) with a scripted backend that answers, holds or half-answers:
 * a watch must never outlive its exchange. Also `sendUpstream()`'s
 * `clientSignal` on its own, and a client that half-closes.
 *
 * @module
 */
import { assert, assertEquals, assertStrictEquals } from "../../tests/support/assert.ts";
import { PLAIN_INFO, startProxy } from "../../tests/support/proxy_harness.ts";
import {
  closeQuietly,
  latin1,
  RawConnection,
  type RawResponse,
} from "../../tests/support/raw_http.ts";
import {
  type ScriptedBackend,
  type ScriptedConn,
  startScriptedBackend,
} from "../../tests/support/scripted_backend.ts";
import { staticSnapshot } from "../../tests/support/static_snapshot.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import { openH2, withH2World } from "../../tests/support/raw_h2.ts";
import { createProxyHandler } from "./proxy_handler.ts";
import { sendUpstream, type UpstreamRequest } from "../upstream/upstream_client.ts";
import { UpstreamError } from "../upstream/upstream_error.ts";
import { UpstreamPool } from "../upstream/upstream_pool.ts";
import { HTTP1_HOST, overPlainListener } from "../../tests/support/http1_world.ts";
import { ECHO_HOST, sendRaw, withEchoProxy } from "../../tests/support/echo_proxy.ts";
import { startEchoBackend } from "../../tests/support/echo_backend.ts";
import {
  blackholedPort,
  startBackend as startUpstreamBackend,
  UPSTREAM_HOST,
  withProxyTo,
} from "../../tests/support/upstream_backends.ts";
import {
  bigBackend,
  connectHttp,
  readUntil,
  routeTo,
  writeAll,
} from "../../tests/support/stream_backends.ts";

const HOST = "watch.example";
const OK = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/** A backend whose answer each request's path picks; counts held requests and their ends. */
interface Backend extends ScriptedBackend {
  /** Requests now held without an answer. */
  readonly holding: number;
  /** Held requests whose connection the proxy closed. */
  readonly hangUps: number;
  /** Every request path received, in order. */
  readonly paths: string[];
}

/**
 * `/fast` answers at once; `/hold` never answers; `/interim` sends 103 and
 * holds; `/partial` sends a head and 3 of 10 body bytes and holds;
 * `/late?ms=N` answers after N ms.
 */
function startBackend(): Backend {
  let holding = 0;
  let hangUps = 0;
  const paths: string[] = [];
  const hold = async (io: ScriptedConn) => {
    holding++;
    while ((await io.readSome()) !== null) {
      // Bytes after a held request are ignored.
    }
    holding--;
    hangUps++;
  };
  const server = startScriptedBackend(async (io) => {
    for (;;) {
      const head = await io.readHead();
      if (head === null) return;
      const path = head.split(" ")[1] ?? "/";
      paths.push(path);
      const url = new URL(path, "http://backend");
      switch (url.pathname) {
        case "/fast":
          await io.write(OK);
          break;
        case "/late": {
          const ms = Number(url.searchParams.get("ms") ?? 300);
          await new Promise((resolve) => setTimeout(resolve, ms));
          await io.write(OK);
          break;
        }
        case "/interim":
          await io.write("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n");
          return await hold(io);
        case "/partial":
          await io.write("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
          return await hold(io);
        default:
          return await hold(io);
      }
    }
  });
  return {
    port: server.port,
    connections: server.connections,
    get open() {
      return server.open;
    },
    close: () => server.close(),
    get holding() {
      return holding;
    },
    get hangUps() {
      return hangUps;
    },
    paths,
  };
}

interface World {
  backend: Backend;
  pool: UpstreamPool;
  proxy: Awaited<ReturnType<typeof startProxy>>;
}

async function withWorld(
  fn: (world: World) => Promise<void>,
  options: { maxIdle?: number; clientCheckMs?: number } = {},
): Promise<void> {
  const backend = startBackend();
  const pool = new UpstreamPool({
    maxIdlePerEndpoint: options.maxIdle ?? 64,
    ...(options.clientCheckMs === undefined ? {} : { clientCheckMs: options.clientCheckMs }),
  });
  const endpoints = [{ address: "127.0.0.1", port: backend.port }];
  const proxy = await startProxy({ routes: [{ host: HOST, endpoints }], pool });
  try {
    await fn({ backend, pool, proxy });
  } finally {
    await proxy.close();
    pool.close();
    await backend.close();
  }
}

/** Leaves `n` pooled backend connections (n concurrent fast exchanges). */
async function warm(world: World, n = 1): Promise<void> {
  const conns = await Promise.all(
    Array.from({ length: n }, () => RawConnection.open(world.proxy.port)),
  );
  try {
    await Promise.all(conns.map((c) => c.send(`GET /fast HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`)));
    for (const c of conns) assertEquals((await c.readResponse()).status, 200);
  } finally {
    for (const c of conns) c.close();
  }
  await waitFor(`${n} idle connections`, () => world.pool.stats().idle >= n);
}

/** After a client left a held request: the backend connection closed, 499 logged, nothing active. */
async function expectAbandoned(world: World, hangUps: number, logged: number): Promise<void> {
  await waitFor(`${hangUps} backend hang-ups`, () => world.backend.hangUps === hangUps, {
    timeoutMs: 5_000,
  });
  await waitFor(`${logged} access log entries`, () => world.proxy.accessLog.length === logged);
  const last = world.proxy.accessLog[logged - 1];
  assertEquals(last?.error, "aborted");
  assertEquals(last?.status, 499);
  await waitFor("no active connection", () => world.pool.stats().active === 0);
}

/** A client on a pooled connection that leaves its last request held; earlier ones are answered. */
interface Leaving {
  readonly name: string;
  readonly requests: readonly string[];
  /** All sent at once rather than each after the previous answer. */
  readonly pipelined?: boolean;
  readonly clientCheckMs?: number;
}

const get = (path: string, version = "1.1") =>
  `GET ${path} HTTP/${version}\r\nHost: ${HOST}\r\n\r\n`;

const LEAVING: readonly Leaving[] = [
  {
    name: "a keep-alive client leaving its second request",
    requests: [get("/fast"), get("/hold")],
  },
  {
    // The watch reads the signal 0.4 to 0.8 s after the request: the client left long before.
    name: "an HTTP/1.1 client gone before its signal is first read (Deno reports a past hang-up)",
    requests: [get("/hold")],
    clientCheckMs: 400,
  },
  { name: "a client leaving after an interim 103 answer", requests: [get("/interim")] },
  { name: "a client leaving while a small body is half read", requests: [get("/partial")] },
  { name: "an HTTP/1.0 client leaving a pooled exchange", requests: [get("/hold", "1.0")] },
  {
    name: "a client leaving a buffered POST on a pooled connection",
    requests: [`POST /hold HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: 5\r\n\r\nhello`],
  },
  {
    name: "a client leaving after its first pipelined answer",
    requests: [get("/fast"), get("/hold")],
    pipelined: true,
  },
];

for (const { name, requests, pipelined, clientCheckMs } of LEAVING) {
  Deno.test(`watch: ${name} closes the pooled backend connection and is logged 499`, async () => {
    await withWorld(async (world) => {
      await warm(world);
      const conn = await RawConnection.open(world.proxy.port);
      if (pipelined) await conn.send(requests.join(""));
      for (const [i, text] of requests.entries()) {
        if (!pipelined) await conn.send(text);
        if (i < requests.length - 1) assertEquals((await conn.readResponse()).status, 200);
      }
      await waitFor("the request held", () => world.backend.holding === 1);
      assertEquals(
        world.backend.connections.length,
        1,
        "the held request took the pooled connection",
      );
      conn.close();
      await expectAbandoned(world, 1, requests.length + 1);
    }, clientCheckMs === undefined ? {} : { clientCheckMs });
  });
}

Deno.test("watch: a slow exchange whose client stays is answered, and its connection is reused", async () => {
  await withWorld(async (world) => {
    await warm(world);
    const conn = await RawConnection.open(world.proxy.port);
    try {
      for (let i = 0; i < 3; i++) {
        await conn.send(`GET /late?ms=180 HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
        const response = await conn.readResponse();
        assertEquals(response.status, 200);
        assertEquals(latin1(response.body), "ok");
      }
    } finally {
      conn.close();
    }
    assertEquals(world.backend.connections.length, 1, "one backend connection for all");
    assertEquals(world.pool.stats().connectsTotal, 1);
    assert(world.proxy.accessLog.every((entry) => entry.status === 200));
  });
});

Deno.test("watch: hundreds of clients leaving held pooled exchanges at once close every backend connection", async () => {
  const n = 120;
  await withWorld(async (world) => {
    await warm(world, n);
    const before = world.backend.connections.length;
    const conns = await Promise.all(
      Array.from({ length: n }, () => RawConnection.open(world.proxy.port)),
    );
    await Promise.all(conns.map((c) => c.send(`GET /hold HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`)));
    await waitFor("every request held", () => world.backend.holding === n);
    assertEquals(world.backend.connections.length, before, "all took pooled connections");
    for (const c of conns) c.close();
    await waitFor("every backend hang-up", () => world.backend.hangUps === n, { timeoutMs: 5_000 });
    await waitFor("every access log entry", () => world.proxy.accessLog.length === 2 * n);
    assertEquals(
      world.proxy.accessLog.slice(n).filter((entry) => entry.error === "aborted").length,
      n,
    );
    await waitFor("no active connection", () => world.pool.stats().active === 0);
  }, { maxIdle: 256 });
});

Deno.test("watch: a client leaving one held exchange disturbs no other pooled exchange", async () => {
  await withWorld(async (world) => {
    await warm(world, 2);
    const leaver = await RawConnection.open(world.proxy.port);
    const stayer = await RawConnection.open(world.proxy.port);
    try {
      await leaver.send(`GET /hold HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
      await waitFor("the request held", () => world.backend.holding === 1);
      await stayer.send(`GET /late?ms=400 HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
      await waitFor("both sent", () => world.backend.paths.length === 4);
      leaver.close();
      await waitFor("the hang-up", () => world.backend.hangUps === 1);
      const response = await stayer.readResponse();
      assertEquals(response.status, 200);
      assertEquals(latin1(response.body), "ok");
    } finally {
      leaver.close();
      stayer.close();
    }
    assertEquals(world.backend.connections.length, 2);
  });
});

// Direct handler tests: the client's signal is an AbortController's, so "the client leaves"
// can happen at an exact point, including after its response is complete.

Deno.test("watch: a client's signal read by a slow exchange does not close the connection once pooled again", async () => {
  const backend = startBackend();
  const pool = new UpstreamPool();
  const endpoints = [{ address: "127.0.0.1", port: backend.port }];
  const handler = createProxyHandler({
    snapshot: () => staticSnapshot([{ host: HOST, endpoints }]),
    pool,
  });
  const info = PLAIN_INFO;
  const ask = (path: string, signal?: AbortSignal) =>
    handler(
      new Request(`http://${HOST}${path}`, { headers: { Host: HOST }, signal: signal ?? null }),
      info,
    );
  try {
    await (await ask("/fast")).arrayBuffer();
    const first = new AbortController();
    // Slow enough that its watch reads (and listens on) this client's signal.
    const slow = await ask("/late?ms=250", first.signal);
    assertEquals(await slow.text(), "ok");
    assertEquals(pool.stats().idle, 1);
    // The next exchange takes the same connection and holds; the first client now leaves.
    const held = ask("/hold");
    await waitFor("the request held", () => backend.holding === 1);
    first.abort();
    // Still held: the connection belongs to the second exchange now.
    await new Promise((resolve) => setTimeout(resolve, 150));
    assertEquals(
      backend.hangUps,
      0,
      "the first client's leaving closed a connection it no longer used",
    );
    pool.close();
    const response = await within(2_000, "the held answer", held);
    await response.body?.cancel();
  } finally {
    handler.close();
    await backend.close();
  }
});

Deno.test("watch: the check timer stops with pool.close() while a watch is pending", async () => {
  const backend = startBackend();
  const pool = new UpstreamPool({ clientCheckMs: 20 });
  const endpoint = { address: "127.0.0.1", port: backend.port };
  const request = (target: string): UpstreamRequest => ({
    method: "GET",
    target,
    headers: [["Host", HOST]],
    body: null,
    clientSignal: () => new AbortController().signal,
  });
  try {
    await (await sendUpstream(pool, endpoint, request("/fast"))).done;
    const held = sendUpstream(pool, endpoint, request("/hold")).then(
      () => undefined,
      (error: unknown) => error,
    );
    await waitFor("the request held", () => backend.holding === 1);
    pool.close();
    const error = await within(2_000, "the failure", held);
    assert(error instanceof UpstreamError, String(error));
    // The op sanitizer fails this test if the check interval is still running.
  } finally {
    pool.close();
    await backend.close();
  }
});

// Was a bug (with a host field): proxy_handler.ts took any `host` field for HTTP/1.x and gave the
// request a lazy signal, but an h2 client may send `host` too (RFC 9113 section 8.3.1), and
// Deno.serve's `req.signal` read after an h2 stream reset, or after the client closed its whole
// connection, never aborts (measured: read 150 ms after RST_STREAM, `aborted` false and no event
// within 1.5 s; read before it, aborted). So the watch never noticed the client leaving: the
// backend connection and its work stayed held until the backend answered or the read timeout, per
// reset stream. Only a Host field spelt with a capital (which HTTP/2 cannot carry) now counts as
// HTTP/1.x.
for (const transport of ["h2c", "tls"] as const) {
  for (const withHost of [true, false]) {
    for (const leave of ["reset", "close"] as const) {
      Deno.test(
        `watch: an ${transport === "tls" ? "h2-over-TLS" : "h2c"} client ${
          leave === "reset" ? "resetting its stream" : "closing its connection"
        } ${withHost ? "with" : "without"} a host field closes the pooled backend connection`,
        async () => {
          const backend = startBackend();
          const pool = new UpstreamPool();
          const endpoints = [{ address: "127.0.0.1", port: backend.port }];
          try {
            await withH2World([{ host: "a.test", endpoints }], async (world) => {
              const gone = async () => {
                await waitFor("the hang-up", () => backend.hangUps === 1, { timeoutMs: 5_000 });
                await waitFor("two access log entries", () => world.accessLog.length === 2);
                assertEquals(world.accessLog[1]?.error, "aborted");
                await waitFor("no active connection", () => pool.stats().active === 0);
                assertEquals(backend.connections.length, 1);
              };
              const h2 = await openH2(world, transport);
              try {
                const head = (path: string): [string, string][] => [
                  [":method", "GET"],
                  [":scheme", transport === "tls" ? "https" : "http"],
                  [":authority", "a.test"],
                  [":path", path],
                  ...(withHost ? [["host", "a.test"] as [string, string]] : []),
                ];
                await h2.finished(await h2.request(head("/fast")));
                await waitFor("an idle connection", () => pool.stats().idle === 1);
                const id = await h2.request(head("/hold"));
                await waitFor("the request held", () => backend.holding === 1);
                // A reset is checked with the connection still open (its close would give it away).
                if (leave === "reset") {
                  await h2.reset(id);
                  await gone();
                }
              } finally {
                await h2.close();
              }
              if (leave === "close") await gone();
            }, { pool });
          } finally {
            pool.close();
            await backend.close();
          }
        },
      );
    }
  }
}

Deno.test("watch: an HTTP/1.1 client over TLS leaving a pooled exchange closes the backend connection", async () => {
  const backend = startBackend();
  const pool = new UpstreamPool();
  const endpoints = [{ address: "127.0.0.1", port: backend.port }];
  const open = async (port: number, caCert: string) => {
    const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
    const tls = await Deno.startTls(tcp, {
      hostname: "a.test",
      caCerts: [caCert],
      alpnProtocols: ["http/1.1"],
    });
    await tls.handshake();
    return RawConnection.wrap(tls);
  };
  try {
    await withH2World([{ host: "a.test", endpoints }], async (world) => {
      const first = await open(world.httpsPort, world.caCert);
      try {
        await first.send("GET /fast HTTP/1.1\r\nHost: a.test\r\n\r\n");
        assertEquals((await first.readResponse()).status, 200);
      } finally {
        first.close();
      }
      await waitFor("an idle connection", () => pool.stats().idle === 1);
      const conn = await open(world.httpsPort, world.caCert);
      await conn.send("GET /hold HTTP/1.1\r\nHost: a.test\r\n\r\n");
      await waitFor("the request held", () => backend.holding === 1);
      conn.close();
      await waitFor("the hang-up", () => backend.hangUps === 1, { timeoutMs: 5_000 });
      await waitFor("two access log entries", () => world.accessLog.length === 2);
      assertEquals(world.accessLog[1]?.error, "aborted");
      await waitFor("no active connection", () => pool.stats().active === 0);
      assertEquals(backend.connections.length, 1);
    }, { pool });
  } finally {
    pool.close();
    await backend.close();
  }
});

Deno.test("watch: a half-closed client is treated alike whether its signal is read at once or late", async () => {
  await withWorld(async (world) => {
    await warm(world);
    const outcomes: string[] = [];
    for (
      const text of [
        // A Host field: the lazy signal.
        `GET /late?ms=300 HTTP/1.0\r\nHost: ${HOST}\r\n\r\n`,
        // No Host field (absolute form): the signal read at once.
        `GET http://${HOST}/late?ms=300 HTTP/1.0\r\n\r\n`,
      ]
    ) {
      const before = world.proxy.accessLog.length;
      const tcp = await Deno.connect({ hostname: "127.0.0.1", port: world.proxy.port });
      const conn = RawConnection.wrap(tcp);
      try {
        await conn.send(text);
        await tcp.closeWrite();
        const bytes = await conn.readToEnd(5_000);
        await waitFor("the access log entry", () => world.proxy.accessLog.length === before + 1);
        const entry = world.proxy.accessLog[before];
        outcomes.push(`${entry?.status} ${entry?.error ?? ""} ${latin1(bytes).split("\r\n")[0]}`);
      } finally {
        conn.close();
      }
    }
    assertEquals(outcomes[0], outcomes[1], outcomes.join(" | "));
    assert(outcomes[0]?.startsWith("499 aborted"), outcomes[0]);
  });
});

// --- A client leaving outside the watch: half-closed, waiting, mid-download, during a connect. ---

async function open(port: number): Promise<{ raw: Deno.TcpConn; conn: RawConnection }> {
  const raw = await Deno.connect({ hostname: "127.0.0.1", port });
  return { raw, conn: RawConnection.wrap(raw) };
}

function h1Get(target: string, extra = "", version = "1.1"): string {
  return `GET ${target} HTTP/${version}\r\nHost: ${HTTP1_HOST}\r\n${extra}\r\n`;
}

function h1Text(response: RawResponse): string {
  return latin1(response.body);
}

Deno.test("a client that half-closes while its answer is pending is treated as gone, as nginx does: 499 logged, the backend connection closed", async () => {
  // Deno.serve (hyper without half-close support) drops the connection on the client's FIN
  // unless the response is already there; nginx likewise ends such a request with 499. What
  // must hold: nothing hangs, the access log says so, and the backend connection is not
  // parked with an answer still to come.
  const gates: PromiseWithResolvers<void>[] = [];
  await overPlainListener({
    "/slow": async (conn) => {
      await gates.at(-1)!.promise;
      await conn.write("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nslow").catch(() => {});
    },
  }, async (world, mode) => {
    const gate = Promise.withResolvers<void>();
    gates.push(gate);
    const { raw, conn } = await open(world.port);
    try {
      await conn.send(h1Get("/slow", "Connection: close\r\n"));
      await waitFor("the request to reach the backend", () => world.received.length === 1);
      await raw.closeWrite();
      const entry = await waitFor("the access entry", () => world.access[0]);
      assertEquals([entry.status, entry.error], [499, "aborted"], mode);
      assert(await conn.closedByPeer(5_000), mode);
    } finally {
      gate.resolve();
      conn.close();
    }
    // The late answer on that backend connection is never taken for another request's.
    using next = await RawConnection.open(world.port);
    await next.send(h1Get("/next"));
    assertEquals(h1Text(await next.readResponse()), "/next", mode);
    assertEquals(world.received.map((r) => r.conn), [0, 1], mode);
  });
});

Deno.test("proxy aborts the upstream request when the client leaves while waiting", async () => {
  await withEchoProxy(async ({ proxy, backend }) => {
    const conn = await RawConnection.open(proxy.port);
    await conn.send(`GET /?delay=60000 HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`);
    await backend.waitFor(() => backend.requests.length === 1 && backend.connectionsOpen === 1);
    conn.close();
    await backend.waitFor(() => backend.connectionsOpen === 0);
    await waitUntil(() => proxy.accessLog.length === 1);
    assertStrictEquals(proxy.accessLog[0]?.error, "aborted");
  });
});

Deno.test("proxy aborts the upstream request when the client leaves while a pooled connection waits", async () => {
  await withEchoProxy(async ({ proxy, backend }) => {
    // A first request leaves a pooled connection: the second takes it without connecting, so
    // its client is watched only once the backend is slow to answer.
    assertStrictEquals(
      (await sendRaw(proxy, `GET / HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`)).status,
      200,
    );
    await backend.waitFor(() => backend.connectionsOpen === 1);
    const conn = await RawConnection.open(proxy.port);
    await conn.send(`GET /?delay=60000 HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`);
    await backend.waitFor(() => backend.requests.length === 2);
    assertStrictEquals(backend.connectionsOpen, 1, "the slow request took the pooled connection");
    conn.close();
    await backend.waitFor(() => backend.connectionsOpen === 0);
    await waitUntil(() => proxy.accessLog.length === 2);
    assertStrictEquals(proxy.accessLog[1]?.error, "aborted");
  });
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
    snapshot: () => staticSnapshot([{ host: ECHO_HOST, endpoints }]),
    pool,
  });
  const info = PLAIN_INFO;
  const url = `http://${ECHO_HOST}/`;
  const host = { Host: ECHO_HOST };
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
      () => new CountingRequest(url, { headers: { host: ECHO_HOST } }),
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

Deno.test("a client leaving mid-download closes the backend connection and pools nothing", async () => {
  const size = 8 * 1024 * 1024;
  const block = new Uint8Array(64 * 1024).fill(100);
  await using big = startUpstreamBackend(async (conn) => {
    for (;;) {
      if ((await conn.readHead()) === null) return;
      await conn.write(`HTTP/1.1 200 OK\r\nContent-Length: ${size}\r\n\r\n`);
      for (let sent = 0; sent < size; sent += block.length) await conn.write(block);
    }
  });
  await withProxyTo([big.endpoint], async (proxy) => {
    const conn = await RawConnection.open(proxy.port);
    await conn.send(`GET /big HTTP/1.1\r\nHost: ${UPSTREAM_HOST}\r\n\r\n`);
    await waitFor("the backend to start sending", () => (big.connections[0]?.written ?? 0) > 0);
    conn.close();
    await waitFor("the backend connection to close", () => big.open === 0);
    await waitFor("the access entry", () => proxy.accessLog.length === 1);
    assertEquals(proxy.accessLog[0]?.error, "aborted");
    assertEquals(proxy.handler.pool.stats(), { active: 0, idle: 0, connectsTotal: 1 });
  });
});

// Was a bug: the connect went on for the whole connect timeout after the client had left, then
// counted as the endpoint's failure.
Deno.test("a client leaving during a slow connect stops the connect at once and marks nothing down", async () => {
  const hole = await blackholedPort();
  const dialled: number[] = [];
  const pool = new UpstreamPool({
    connectTimeoutMs: 10_000,
    connect: (options) => {
      dialled.push(options.port);
      return Deno.connect({
        hostname: options.hostname,
        port: options.port,
        signal: options.signal,
      });
    },
  });
  const endpoint = { address: "127.0.0.1", port: hole.port };
  try {
    await withProxyTo([endpoint], async (proxy) => {
      const conn = await RawConnection.open(proxy.port);
      await conn.send(`GET / HTTP/1.1\r\nHost: ${UPSTREAM_HOST}\r\n\r\n`);
      await waitFor("the connect to start", () => dialled.length === 1);
      conn.close();
      const entry = await waitFor("the access entry", () => proxy.accessLog[0], {
        timeoutMs: 3_000,
      });
      assertEquals([entry.status, entry.error, entry.attempts], [499, "aborted", 1]);
      assert(!proxy.handler.balancer.isDown(endpoint), "the endpoint was marked down");
    }, { pool });
  } finally {
    pool.close();
    hole.close();
  }
});

const enc = new TextEncoder();

Deno.test("http/1.1: a client leaving mid-download aborts the upstream exchange and its connection is not reused", async () => {
  const backend = bigBackend();
  try {
    await withH2World([routeTo(undefined, backend.port, "t/big")], async (world) => {
      const conn = await connectHttp(world);
      await writeAll(conn, enc.encode("GET /big HTTP/1.1\r\nHost: a.test\r\n\r\n"));
      let received = 0;
      const buffer = new Uint8Array(64 * 1024);
      while (received < 1 << 20) received += (await conn.read(buffer)) ?? Infinity;
      conn.close();
      await waitFor("the upstream connection to close", () => backend.open === 0);
      const again = await connectHttp(world);
      try {
        await writeAll(again, enc.encode("GET /small HTTP/1.1\r\nHost: a.test\r\n\r\n"));
        const answer = await readUntil(again, (t) => t.endsWith("\r\n\r\nok"));
        assert(answer.startsWith("HTTP/1.1 200"), answer);
      } finally {
        closeQuietly(again);
      }
      assertEquals(backend.connections.length, 2, "a fresh connection for /small");
      await waitFor("the access log", () => world.accessLog.length === 2);
      assertEquals(world.accessLog[0]!.error, "aborted");
    });
  } finally {
    await backend.close();
  }
});
