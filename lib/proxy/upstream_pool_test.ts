import { assert, assertEquals, assertStrictEquals } from "../../tests/support/assert.ts";
import { type EchoBackend, startEchoBackend } from "../../tests/support/echo_backend.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import type { Endpoint } from "../routing/snapshot.ts";
import { sendUpstream } from "./upstream_client.ts";
import { type Connector, UpstreamPool } from "./upstream_pool.ts";

const NAME = "lb.example";

/**
 * A resolver standing in for DNS: `NAME` leads to the loopback port `port()`
 * says at the time of the connect, reported with a pod-network peer address
 * (192.0.2.10) as a real answer for an ExternalName would be (the refusal of
 * names that lead to loopback is tested in hostile_upstream_test.ts). Every
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
