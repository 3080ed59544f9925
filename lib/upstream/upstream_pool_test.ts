/**
 * The keep-alive pool of backend connections: reuse (sequential requests, a
 * connection taken and released unused), bounds (`maxIdlePerEndpoint`, idle
 * timeout, the backend's Keep-Alive hint), connections dropped when the backend
 * closes or half-closes them, after every kind of failed exchange and when an
 * endpoint leaves the snapshot, DNS names followed past `dnsMaxAgeMs`,
 * `endpointKey()`, and names that resolve to loopback refused before any byte.
 *
 * @module
 */
import {
  assert,
  assertEquals,
  assertRejects,
  assertStrictEquals,
} from "../../tests/support/assert.ts";
import { type EchoBackend, startEchoBackend } from "../../tests/support/echo_backend.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import type { Endpoint } from "../routing/snapshot.ts";
import { sendUpstream } from "./upstream_client.ts";
import { type Connector, endpointKey, UpstreamPool } from "./upstream_pool.ts";
import { ECHO_HOST, sendRaw, withEchoProxy } from "../../tests/support/echo_proxy.ts";
import {
  backendGet,
  bodyText,
  countingBackend,
  drainBody,
  getRequest,
  ok,
  proxyGet,
  proxyPost,
  readBody,
  requestLine,
  scriptedServer,
  startBackend,
  tally,
  withProxyTo,
} from "../../tests/support/upstream_backends.ts";
import { latin1 } from "../../tests/support/raw_http.ts";
import { UpstreamError } from "./upstream_error.ts";

const NAME = "lb.example";

/**
 * A resolver standing in for DNS: `NAME` leads to the loopback port `port()`
 * says at the time of the connect, reported with a pod-network peer address
 * (192.0.2.10) as a real answer for an ExternalName would be (the refusal of
 * names that lead to loopback is tested further down). Every
 * lookup of `NAME` is recorded in `lookups`. Other addresses connect as given.
 */
function resolving(port: () => number, lookups: string[]): Connector {
  return async (options) => {
    if (options.hostname !== NAME) return await Deno.connect(options);
    lookups.push(NAME);
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: port() });
    const remoteAddr: Deno.NetAddr = { transport: "tcp", hostname: "192.0.2.10", port: 80 };
    return new Proxy(conn, {
      get(target, property) {
        if (property === "remoteAddr") return remoteAddr;
        const value = Reflect.get(target, property, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  };
}

/** Which echo backend answered a GET through the pool. */
async function answeredBy(pool: UpstreamPool, endpoint: Endpoint): Promise<string> {
  const response = await sendUpstream(pool, endpoint, {
    method: "GET",
    target: "/",
    headers: [["Host", "backend.test"]],
    body: null,
  });
  if (response.body instanceof ReadableStream) await response.body.cancel();
  await response.done;
  return response.headers.find(([k]) => k.toLowerCase() === "x-echo-service")?.[1] ?? "";
}

Deno.test("a pooled connection to an endpoint named by DNS is not reused past dnsMaxAgeMs, one to an IP address is", async () => {
  const backend = await startEchoBackend();
  const lookups: string[] = [];
  const pool = new UpstreamPool({
    dnsMaxAgeMs: 500,
    connect: resolving(() => backend.port, lookups),
  });
  const named = { address: NAME, port: 80 };
  const literal = { address: "127.0.0.1", port: backend.port };
  try {
    const first = await pool.connect(named);
    const held = await pool.connect(named);
    const direct = await pool.connect(literal);
    pool.release(first, true);
    pool.release(direct, true);
    assertStrictEquals(pool.takeIdle(named), first, "reused within the bound");
    pool.release(first, true);
    assertEquals(direct.expiresAt, Infinity);
    await waitFor(
      "both named connections to pass their bound",
      () => performance.now() > Math.max(first.expiresAt, held.expiresAt),
    );
    // Pooled past the bound: closed instead of reused (by takeIdle, or already by the sweeper).
    assertStrictEquals(pool.takeIdle(named), undefined);
    assert(first.closed, "the idle named connection was closed");
    // Active past the bound: closed when released instead of pooled.
    pool.release(held, true);
    assert(held.closed, "the released named connection was closed");
    assertStrictEquals(pool.takeIdle(literal), direct, "the IP-address connection is kept");
    pool.release(direct, true);
    assertEquals(pool.stats().idle, 1);
    assertEquals(lookups.length, 2);
    // The backend sees the two named connections closed, the IP-address one still open.
    await backend.waitFor(() => backend.connectionsOpen === 1);
    assertEquals(backend.connectionsAccepted, 3);
  } finally {
    pool.close();
    await backend.close();
  }
});

Deno.test("sendUpstream() follows a DNS name to its new address once the pooled connection is past dnsMaxAgeMs", async () => {
  const backends: EchoBackend[] = [];
  try {
    for (const name of ["before", "after", "pinned"]) {
      backends.push(await startEchoBackend({ name }));
    }
    const [before, after, pinned] = backends as [EchoBackend, EchoBackend, EchoBackend];
    let answer = before; // what the name resolves to
    const lookups: string[] = [];
    const pool = new UpstreamPool({
      dnsMaxAgeMs: 500,
      connect: resolving(() => answer.port, lookups),
    });
    const named = { address: NAME, port: 80 };
    const literal = { address: "127.0.0.1", port: pinned.port };
    try {
      assertEquals(await answeredBy(pool, named), "before");
      assertEquals(await answeredBy(pool, literal), "pinned");
      assertEquals(await answeredBy(pool, named), "before");
      assertEquals(before.connectionsAccepted, 1, "reused within the bound");
      answer = after; // a load balancer rotated its address
      // The pool's sweeper closes the idle named connection once it is past its bound.
      await before.waitFor(() => before.connectionsOpen === 0, 5_000);
      assertEquals(await answeredBy(pool, named), "after");
      assertEquals(await answeredBy(pool, literal), "pinned");
      assertEquals(
        [before.connectionsAccepted, after.connectionsAccepted, pinned.connectionsAccepted],
        [1, 1, 1],
      );
      assertEquals(pinned.connectionsOpen, 1, "the IP-address connection lives on");
      assertEquals(lookups.length, 2);
    } finally {
      pool.close();
    }
  } finally {
    await Promise.all(backends.map((b) => b.close()));
  }
});

// Was a bug (latent: no caller released an untouched connection as reusable): parking a
// connection whose idle read was still pending started a second read on the same buffer; the
// answer went to the orphaned one and the next exchange waited for good.
Deno.test("a pooled connection taken and released unused is parked once more and still answers", async () => {
  const backend = await startEchoBackend({ name: "once" });
  const pool = new UpstreamPool();
  const endpoint = { address: "127.0.0.1", port: backend.port };
  try {
    assertEquals(await answeredBy(pool, endpoint), "once");
    const taken = pool.takeIdle(endpoint);
    assert(taken !== undefined, "the first exchange left its connection pooled");
    pool.release(taken, true);
    assertEquals(await within(5_000, "the second exchange", answeredBy(pool, endpoint)), "once");
    assertEquals(pool.stats().connectsTotal, 1);
  } finally {
    pool.close();
    await backend.close();
  }
});

Deno.test("proxy reuses one upstream connection for sequential requests", async () => {
  await withEchoProxy(async ({ proxy, backend }) => {
    for (let i = 0; i < 5; i++) {
      const response = await sendRaw(
        proxy,
        `GET /n${i} HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`,
      );
      assertStrictEquals(response.status, 200);
    }
    assertStrictEquals(backend.connectionsAccepted, 1);
    assertStrictEquals(proxy.handler.pool.stats().idle, 1);
  });
});

Deno.test("pool drops a pooled connection as soon as the backend closes it while idle", async () => {
  let hangUp: () => void = () => {};
  const hungUp = new Promise<void>((resolve) => hangUp = resolve);
  const server = scriptedServer(async (io) => {
    await io.nextHead();
    await io.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    await hungUp;
  });
  const pool = new UpstreamPool();
  try {
    await bodyText(
      (await sendUpstream(pool, { address: "127.0.0.1", port: server.port }, backendGet("/"))).body,
    );
    assertStrictEquals(pool.stats().idle, 1);
    hangUp();
    await waitUntil(() => pool.stats().idle === 0);
  } finally {
    pool.close();
    await server.close();
  }
});

Deno.test("pool keeps at most maxIdlePerEndpoint idle connections and closes idle ones after idleTimeoutMs", async () => {
  const backend = await startEchoBackend();
  const pool = new UpstreamPool({ maxIdlePerEndpoint: 2, idleTimeoutMs: 300 });
  const endpoint = { address: "127.0.0.1", port: backend.port };
  try {
    const responses = await Promise.all(
      Array.from(
        { length: 4 },
        (_, i) => sendUpstream(pool, endpoint, backendGet(`/?delay=50&i=${i}`)),
      ),
    );
    await Promise.all(responses.map((r) => bodyText(r.body)));
    assertStrictEquals(backend.connectionsAccepted, 4);
    assertStrictEquals(pool.stats().idle, 2);
    await backend.waitFor(() => backend.connectionsOpen === 2);
    await waitUntil(() => pool.stats().idle === 0, 5_000);
    await backend.waitFor(() => backend.connectionsOpen === 0);
  } finally {
    pool.close();
    await backend.close();
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

Deno.test("a burst of 300 concurrent requests leaves at most maxIdlePerEndpoint connections, reused afterwards and closed when idle", async () => {
  const backend = await startEchoBackend();
  const endpoint = { address: "127.0.0.1", port: backend.port };
  try {
    await withProxyTo([endpoint], async (proxy) => {
      const burst = await Promise.all(
        Array.from({ length: 300 }, (_, i) => proxyGet(proxy, `/?delay=50&i=${i}`)),
      );
      assert(burst.every((r) => r.status === 200), "every request of the burst served");
      const stats = proxy.handler.pool.stats();
      assertEquals([stats.active, stats.idle], [0, 8]);
      await backend.waitFor(() => backend.connectionsOpen === 8);
      // Sequential requests reuse the pooled connections: no new connect.
      for (let i = 0; i < 20; i++) assertEquals((await proxyGet(proxy, `/after/${i}`)).status, 200);
      assertEquals(proxy.handler.pool.stats().connectsTotal, stats.connectsTotal);
      // Idle past the idle timeout: all closed, on both sides.
      await waitFor("idle connections to close", () => proxy.handler.pool.stats().idle === 0);
      await backend.waitFor(() => backend.connectionsOpen === 0);
    }, { maxIdlePerEndpoint: 8, upstreamIdleTimeoutMs: 400 });
  } finally {
    await backend.close();
  }
});

Deno.test("an endpoint removed from the snapshot finishes its request in flight, is never chosen again, and its pooled connections go", async () => {
  const a = countingBackend("a");
  const b = countingBackend("b");
  const { promise: release, resolve: releaseSlow } = Promise.withResolvers<void>();
  const slow = startBackend(async (conn) => {
    if ((await conn.readHead()) === null) return;
    await release;
    await conn.write(ok("slow"));
    // Keep-alive: only the proxy closes this connection.
    await conn.readHead();
  });
  try {
    await withProxyTo([slow.endpoint], async (proxy) => {
      const inFlight = proxyGet(proxy, "/slow");
      await waitFor("the slow request to arrive", () => slow.connections.length === 1);
      proxy.setRoutes([{ endpoints: [a.endpoint, b.endpoint] }]);
      const later: string[] = [];
      for (let i = 0; i < 10; i++) later.push(latin1((await proxyGet(proxy, `/${i}`)).body));
      assertEquals(tally(later), { a: 5, b: 5 });
      releaseSlow();
      const answer = await inFlight;
      assertEquals([answer.status, latin1(answer.body)], [200, "slow"]);
      assertEquals(slow.connections.length, 1);
      // Its pooled connection is closed when idle, like any other.
      assertEquals(slow.open, 1);
      await waitFor("the removed endpoint's connection to close", () => slow.open === 0);
    }, { upstreamIdleTimeoutMs: 300 });
  } finally {
    releaseSlow();
    await Promise.all([a.close(), b.close(), slow.close()]);
  }
});

Deno.test("a backend half-closing after its answer loses the pooled connection, and the next request is served on a new one", async () => {
  await using halfClose = startBackend(async (conn) => {
    const head = await conn.readHead();
    if (head === null) return;
    await conn.write(ok(`conn ${conn.index}`));
    await conn.conn.closeWrite();
    // Keeps reading: a half-closed socket, not a closed one.
    await conn.readHead();
  });
  await withProxyTo([halfClose.endpoint], async (proxy) => {
    assertEquals(latin1((await proxyGet(proxy, "/")).body), "conn 0");
    await waitFor("the pool to drop it", () => proxy.handler.pool.stats().idle === 0);
    const next = await proxyGet(proxy, "/");
    assertEquals([next.status, latin1(next.body)], [200, "conn 1"]);
  });
});

Deno.test("the pool holds no active connection after every kind of failed exchange", async () => {
  const answers: Record<string, string> = {
    "/garbage": "garbage\r\n\r\n",
    "/cut": "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
    "/cut-big": `HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n${"x".repeat(70_000)}`,
    "/close-delimited": "HTTP/1.1 200 OK\r\n\r\nuntil close",
  };
  const backend = startBackend(async (conn) => {
    const head = await conn.readHead();
    if (head === null) return;
    const target = requestLine(head).split(" ")[1] ?? "";
    const answer = answers[target];
    if (answer !== undefined) await conn.write(answer);
    if (target === "/silent") await conn.readHead();
  });
  const pool = new UpstreamPool({ ioTimeoutMs: 200 });
  try {
    for (const target of [...Object.keys(answers), "/silent"]) {
      try {
        const response = await sendUpstream(pool, backend.endpoint, getRequest(target));
        await drainBody(response.body).catch(() => {});
        await response.done;
      } catch (error) {
        assert(error instanceof UpstreamError, String(error));
      }
      assertEquals(pool.stats().active, 0, target);
      assertEquals(pool.stats().idle, 0, target);
    }
    // And an aborted one.
    const controller = new AbortController();
    const pending = sendUpstream(pool, backend.endpoint, {
      ...getRequest("/silent"),
      signal: controller.signal,
    });
    await waitFor("the request to be sent", () => backend.connections.length === 6);
    controller.abort();
    await assertRejects(() => pending);
    assertEquals(pool.stats().active, 0);
  } finally {
    pool.close();
    await backend.close();
  }
});

// Was a bug: translation refuses ExternalNames that are loopback by spelling (`localhost`,
// `127.1`), but a name that resolves to loopback through /etc/hosts (`ip6-localhost` in every
// Kubernetes pod) reached ports the controller's pod listens on only on loopback.
Deno.test("a backend name that resolves to loopback is refused at connect, before any byte is sent", async () => {
  const victim = countingBackend("loopback-only");
  // A resolver that maps the name to loopback, as /etc/hosts does for `ip6-localhost`.
  const pool = new UpstreamPool({
    connect: (options) =>
      Deno.connect({
        hostname: options.hostname === "alias.example" ? "127.0.0.1" : options.hostname,
        port: options.port,
      }),
  });
  try {
    await assertRejects(
      () => sendUpstream(pool, { address: "alias.example", port: victim.port }, getRequest("/")),
      UpstreamError,
      "loopback",
    );
    // The numeric address itself stays allowed (EndpointSlices from the API never hold it; a
    // manifest directory for a local run may).
    const direct = await sendUpstream(pool, victim.endpoint, getRequest("/"));
    assertEquals(await drainBody(direct.body), "loopback-only");
    await waitFor("both connections to be seen", () => victim.connections.length === 2);
    assertEquals(victim.seen, ["GET / 0"]);
    assertEquals(victim.connections[0]?.read, 0);
  } finally {
    pool.close();
    await victim.close();
  }
});

/** A name /etc/hosts maps to 127.0.0.0/8 or ::1, other than those translation refuses. */
function loopbackAliasFromHosts(): string | undefined {
  let text: string;
  try {
    text = Deno.readTextFileSync("/etc/hosts");
  } catch {
    return undefined;
  }
  for (const line of text.split("\n")) {
    const [address, ...names] = line.replace(/#.*/, "").trim().split(/\s+/);
    if (address === undefined || !(address.startsWith("127.") || address === "::1")) continue;
    const name = names.find((n) => n !== "localhost" && !n.endsWith(".localhost"));
    if (name !== undefined) return name.toLowerCase();
  }
  return undefined;
}

const hostsAlias = loopbackAliasFromHosts();

Deno.test({
  name: "an endpoint named by a loopback alias from /etc/hosts gets 502 and its port sees no byte",
  ignore: hostsAlias === undefined,
  fn: async () => {
    const victim = countingBackend("loopback-only");
    try {
      await withProxyTo([{ address: hostsAlias!, port: victim.port }], async (proxy) => {
        const response = await proxyGet(proxy, "/metrics");
        assertEquals([response.status, latin1(response.body)], [502, "Bad Gateway\n"]);
        assertEquals(victim.seen, []);
        assertEquals(proxy.accessLog[0]?.error, "connect-failed");
      });
    } finally {
      await victim.close();
    }
  },
});

Deno.test("a pooled connection is not reused past the backend's Keep-Alive timeout, so a POST does not meet its close", async () => {
  // Was a bug: `Keep-Alive: timeout=N` (Node's default is 5 s) was ignored, so a connection idle
  // past it was reused as the backend closed it: a GET was replayed, a POST answered 502. The
  // backend here hangs up on any second request on a connection, as a backend does whose
  // keep-alive timeout has just passed; timeout=1 leaves no time to reuse (1 s margin).
  const seen: string[] = [];
  await using backend = startBackend(async (conn) => {
    for (let n = 0;; n++) {
      const head = await conn.readHead();
      if (head === null) return;
      if (n > 0) return;
      seen.push(`${conn.index} ${requestLine(head)}`);
      await readBody(conn, head);
      await conn.write(
        "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=1, max=100\r\nContent-Length: 2\r\n\r\nok",
      );
    }
  });
  await withProxyTo([backend.endpoint], async (proxy) => {
    assertEquals(latin1((await proxyGet(proxy, "/warm")).body), "ok");
    const response = await proxyPost(proxy, "/pay", "once");
    assertEquals([response.status, latin1(response.body)], [200, "ok"]);
    assertEquals(seen, ["0 GET /warm", "1 POST /pay"]);
  });
});

Deno.test("endpointKey() brackets every IPv6 spelling, IPv4-mapped ones included, and never an IPv4 address", () => {
  const cases: [string, string][] = [
    ["fd00::1", "[fd00::1]:8080"],
    ["2001:db8:0:0:0:0:0:1", "[2001:db8:0:0:0:0:0:1]:8080"],
    ["::ffff:10.0.0.1", "[::ffff:10.0.0.1]:8080"],
    ["::", "[::]:8080"],
    ["10.0.0.1", "10.0.0.1:8080"],
  ];
  for (const [address, key] of cases) assertEquals(endpointKey({ address, port: 8080 }), key);
});
