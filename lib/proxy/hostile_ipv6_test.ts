/**
 * Hostile IPv6 and dual-stack tests of the data plane: the proxy handler
 * behind a real `Deno.serve` on `::1`, IPv6 clients, IPv6 endpoints (an echo
 * backend on `::1`), IPv4-mapped peers, IPv6 trusted-proxy ranges, bracketed
 * `[v6]:port` hosts in routing, forwarding fields, redirects and logs, and a
 * dual-stack backend (one pod reached on both families) in the balancer.
 *
 * Only loopback is used (`::1`, `127.0.0.1`): documentation and ULA
 * addresses appear only as header values or as endpoints never connected to.
 *
 * Run: tools/deno test -A lib/proxy/hostile_ipv6_test.ts
 *
 * @module
 */
import { assert, assertEquals, assertStringIncludes } from "../../tests/support/assert.ts";
import { type EchoBackend, startEchoBackend } from "../../tests/support/echo_backend.ts";
import { type LoggedWarning, recordingLogger } from "../../tests/support/proxy_harness.ts";
import { headerValue, RawConnection, type RawResponse } from "../../tests/support/raw_http.ts";
import { type StaticRoute, staticSnapshot } from "../../tests/support/static_snapshot.ts";
import { createCidrMatcher, normalizeIp, parseIp } from "./cidr.ts";
import { EndpointBalancer } from "./endpoint_balancer.ts";
import { forwardRequestHeaders, realClientIp } from "./forwarded_headers.ts";
import {
  type AccessLogEntry,
  createProxyHandler,
  type ProxyHandler,
  type ProxyHandlerOptions,
} from "./proxy_handler.ts";
import { parseRequestTarget } from "./request_target.ts";
import { endpointKey } from "./upstream_pool.ts";
import { normaliseRequestHost } from "../routing/host.ts";
import type { Backend, Endpoint } from "../routing/snapshot.ts";

/** The proxy handler behind `Deno.serve` on `hostname` (default `::1`). */
interface V6Proxy {
  readonly port: number;
  readonly handler: ProxyHandler;
  readonly accessLog: AccessLogEntry[];
  readonly warnings: LoggedWarning[];
  close(): Promise<void>;
}

function startProxyOn(
  routes: readonly StaticRoute[],
  options: Partial<Omit<ProxyHandlerOptions, "snapshot">> & { hostname?: string } = {},
): V6Proxy {
  const { hostname = "::1", ...rest } = options;
  const snapshot = staticSnapshot(routes);
  const accessLog: AccessLogEntry[] = [];
  const warnings: LoggedWarning[] = [];
  const handler = createProxyHandler({
    logger: recordingLogger(warnings),
    onAccess: (entry) => accessLog.push(entry),
    newRequestId: () => "id-1",
    ...rest,
    snapshot: () => snapshot,
  });
  let port = 0;
  const server = Deno.serve(
    { hostname, port: 0, onListen() {}, onError: () => new Response(null, { status: 500 }) },
    (req, info) =>
      handler(req, { remoteAddr: info.remoteAddr as Deno.NetAddr, secure: false, localPort: port }),
  );
  port = server.addr.port;
  return {
    port,
    handler,
    accessLog,
    warnings,
    async close() {
      await server.shutdown();
      handler.close();
    },
  };
}

/** One request on a fresh connection to `[::1]:port` (or `hostname`). */
async function exchange(
  port: number,
  head: string,
  hostname = "::1",
): Promise<RawResponse> {
  using conn = await RawConnection.open(port, hostname);
  await conn.send(head);
  return await conn.readResponse({ timeoutMs: 5_000 });
}

/** What the echo backend says it received. */
interface Echoed {
  readonly host: string;
  readonly target: string;
  readonly headers: [string, string][];
}

function echoed(response: RawResponse): Echoed {
  assertEquals(response.status, 200, new TextDecoder().decode(response.body));
  return JSON.parse(new TextDecoder().decode(response.body)) as Echoed;
}

function field(e: Echoed, name: string): string | undefined {
  return headerValue(e.headers, name);
}

async function withV6Backend(body: (backend: EchoBackend, at: Endpoint) => Promise<void>) {
  const backend = await startEchoBackend({ hostname: "::1", name: "web", pod: "v6" });
  try {
    await body(backend, { address: "::1", port: backend.port });
  } finally {
    await backend.close();
  }
}

// ---------------------------------------------------------------------------
// IPv6 endpoints and IPv6 clients, end to end over real sockets
// ---------------------------------------------------------------------------

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

Deno.test("Host [::1]:port routes to a host-less rule and reaches the backend unchanged in Host and X-Forwarded-Host", async () => {
  await withV6Backend(async (_backend, at) => {
    const proxy = startProxyOn([{ host: "named.test", endpoints: [] }, { endpoints: [at] }]);
    try {
      const authority = `[::1]:${proxy.port}`;
      const e = echoed(
        await exchange(
          proxy.port,
          `GET /x HTTP/1.1\r\nHost: ${authority}\r\nConnection: close\r\n\r\n`,
        ),
      );
      assertEquals(e.host, authority);
      assertEquals(field(e, "x-forwarded-host"), authority);
      assertEquals(field(e, "x-forwarded-port"), String(proxy.port));
      assertEquals(proxy.accessLog.at(-1)!.host, authority);
    } finally {
      await proxy.close();
    }
  });
});

Deno.test("an absolute-form target with an IPv6 authority routes on it and sends it as Host", async () => {
  await withV6Backend(async (_backend, at) => {
    const proxy = startProxyOn([{ endpoints: [at] }]);
    try {
      const e = echoed(
        await exchange(
          proxy.port,
          "GET http://[fd00::5]:8080/p HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n",
        ),
      );
      assertEquals(e.host, "[fd00::5]:8080");
      assertEquals(e.target, "/p");
    } finally {
      await proxy.close();
    }
  });
});

Deno.test("the HTTPS redirect of a request to [v6]:port keeps the brackets and drops only the port", async () => {
  const proxy = startProxyOn([{ tls: true, endpoints: [{ address: "::1", port: 9 }] }]);
  try {
    const authority = `[::1]:${proxy.port}`;
    const response = await exchange(
      proxy.port,
      `GET /p?q=1 HTTP/1.1\r\nHost: ${authority}\r\nConnection: close\r\n\r\n`,
    );
    assertEquals(response.status, 308);
    assertEquals(headerValue(response.headers, "location"), "https://[::1]/p?q=1");
  } finally {
    await proxy.close();
  }
  const other = startProxyOn([{ tls: true, endpoints: [{ address: "::1", port: 9 }] }], {
    httpsRedirectPort: 8443,
  });
  try {
    const response = await exchange(
      other.port,
      "GET / HTTP/1.1\r\nHost: [FD00::1]\r\nConnection: close\r\n\r\n",
    );
    assertEquals(response.status, 308);
    assertEquals(headerValue(response.headers, "location"), "https://[FD00::1]:8443/");
  } finally {
    await other.close();
  }
});

Deno.test("an IPv6 peer in a trusted IPv6 range has its X-Forwarded-For appended to, and X-Real-IP is the right-most untrusted address", async () => {
  await withV6Backend(async (_backend, at) => {
    const proxy = startProxyOn([{ endpoints: [at] }], {
      trustedProxyCidrs: ["::1/128", "fd12:3456::/32"],
    });
    try {
      const e = echoed(
        await exchange(
          proxy.port,
          "GET / HTTP/1.1\r\nHost: a.test\r\nX-Forwarded-For: 2001:db8::7, fd12:3456::9\r\n" +
            "X-Forwarded-Host: [2001:db8::1]:8443\r\nX-Forwarded-Proto: https\r\nConnection: close\r\n\r\n",
        ),
      );
      assertEquals(field(e, "x-forwarded-for"), "2001:db8::7, fd12:3456::9, ::1");
      assertEquals(field(e, "x-real-ip"), "2001:db8::7");
      assertEquals(field(e, "x-forwarded-host"), "[2001:db8::1]:8443");
      assertEquals(field(e, "x-forwarded-proto"), "https");
      assertEquals(proxy.accessLog.at(-1)!.clientIp, "2001:db8::7");
    } finally {
      await proxy.close();
    }
  });
});

Deno.test("an IPv6 peer outside the trusted ranges cannot forge X-Forwarded-For, X-Real-IP or X-Forwarded-Host", async () => {
  await withV6Backend(async (_backend, at) => {
    const proxy = startProxyOn([{ endpoints: [at] }], {
      // IPv4 loopback and an IPv4-mapped range: neither covers the IPv6 peer ::1.
      trustedProxyCidrs: ["127.0.0.0/8", "::ffff:0:0/96", "0.0.0.0/0"],
    });
    try {
      const e = echoed(
        await exchange(
          proxy.port,
          "GET / HTTP/1.1\r\nHost: a.test\r\nX-Forwarded-For: 1.2.3.4\r\nX-Real-IP: 1.2.3.4\r\n" +
            "X-Forwarded-Host: evil.test\r\nConnection: close\r\n\r\n",
        ),
      );
      assertEquals(field(e, "x-forwarded-for"), "::1");
      assertEquals(field(e, "x-real-ip"), "::1");
      assertEquals(field(e, "x-forwarded-host"), "a.test");
    } finally {
      await proxy.close();
    }
  });
});

Deno.test("an IPv4-mapped peer is told to the backend and the log as dotted IPv4, and an IPv4 range trusts it", async () => {
  await withV6Backend(async (_backend, at) => {
    const snapshot = staticSnapshot([{ endpoints: [at] }]);
    const accessLog: AccessLogEntry[] = [];
    const handler = createProxyHandler({
      snapshot: () => snapshot,
      onAccess: (entry) => accessLog.push(entry),
      trustedProxyCidrs: ["10.0.0.0/8"],
    });
    try {
      // What Deno reports for an IPv4 client of a dual-stack (`::`) socket.
      const send = async (peer: string) => {
        const response = await handler(
          new Request("http://a.test/", { headers: { "x-forwarded-for": "203.0.113.9" } }),
          { remoteAddr: { hostname: peer, port: 40000 }, secure: false, localPort: 80 },
        );
        return JSON.parse(await response.text()) as Echoed;
      };
      const trusted = await send("::ffff:10.1.2.3");
      assertEquals(field(trusted, "x-forwarded-for"), "203.0.113.9, 10.1.2.3");
      assertEquals(field(trusted, "x-real-ip"), "203.0.113.9");
      assertEquals(accessLog.at(-1)!.remoteAddress, "10.1.2.3");
      const untrusted = await send("::FFFF:192.0.2.1");
      assertEquals(field(untrusted, "x-forwarded-for"), "192.0.2.1");
      assertEquals(field(untrusted, "x-real-ip"), "192.0.2.1");
      assertEquals(accessLog.at(-1)!.remoteAddress, "192.0.2.1");
    } finally {
      handler.close();
    }
  });
});

// ---------------------------------------------------------------------------
// Pure pieces: addresses, ranges, hosts, keys
// ---------------------------------------------------------------------------

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

Deno.test("a CIDR matcher takes IPv6 ranges of every prefix length and never lets one family match the other", () => {
  const m = createCidrMatcher(["fd00::/8", "2001:db8:abcd:12::/63", "::1"]);
  for (
    const [address, expected] of [
      ["fd00::1", true],
      ["fdff:ffff::1", true],
      ["fc00::1", false],
      ["2001:db8:abcd:13::5", true],
      ["2001:db8:abcd:14::5", false],
      ["::1", true],
      ["::2", false],
      ["0.0.0.1", false], // ::1's low bits as IPv4
      ["FD00:0:0:0:0:0:0:1", true],
    ] as const
  ) {
    assertEquals(m.contains(address), expected, address);
  }
  const v4 = createCidrMatcher(["0.0.0.0/0"]);
  assertEquals(v4.contains("::1"), false);
  assertEquals(v4.contains("::ffff:1.2.3.4"), true);
  const all6 = createCidrMatcher(["::/0"]);
  // A mapped address is IPv4: an IPv6-everything range does not make IPv4 clients trusted.
  assertEquals(all6.contains("::ffff:1.2.3.4"), false);
  assertEquals(all6.contains("fd00::1"), true);
});

Deno.test("malformed IPv6 ranges are refused with the range named", () => {
  for (
    const bad of [
      "fd00::/129",
      "fd00:::/8",
      "fd00::1::/64",
      "[fd00::]/8",
      "fd00::/",
      "fe80::/10%eth0",
    ]
  ) {
    let error: unknown;
    try {
      createCidrMatcher([bad]);
    } catch (e) {
      error = e;
    }
    assert(error instanceof TypeError, `"${bad}" was accepted`);
    assertStringIncludes(error.message, bad);
  }
});

Deno.test("parseIp() refuses bracketed, ported and over-long IPv6 text, so such X-Forwarded-For entries end the chain", () => {
  for (
    const text of [
      "[::1]",
      "[::1]:80",
      "1:2:3:4:5:6:7:8:9",
      "1:2:3:4:5:6:7",
      "::1:",
      ":1::",
      "g::1",
    ]
  ) {
    assertEquals(parseIp(text), undefined, text);
  }
  const trusted = createCidrMatcher(["::1/128"]);
  // A forged, unparseable entry stops the walk: the trusted peer's left neighbour is not believed past it.
  assertEquals(realClientIp("2001:db8::1, [2001:db8::2]:443", "::1", trusted), "::1");
  assertEquals(realClientIp("2001:db8::1, 2001:db8::2", "::1", trusted), "2001:db8::2");
});

Deno.test("normalizeIp() unmaps IPv4-mapped addresses in any spelling and leaves IPv6 ones alone", () => {
  assertEquals(normalizeIp("::ffff:7f00:1"), "127.0.0.1");
  assertEquals(normalizeIp("0:0:0:0:0:FFFF:10.0.0.1"), "10.0.0.1");
  assertEquals(normalizeIp("::ffff:0:10.0.0.1"), "::ffff:0:10.0.0.1"); // IPv4-translated, not mapped
  assertEquals(normalizeIp("ffff::1"), "ffff::1");
  assertEquals(normalizeIp("fd00::1"), "fd00::1");
});

Deno.test("request hosts with IPv6 literals keep their brackets and lose only their port", () => {
  assertEquals(normaliseRequestHost("[::1]:8080"), "[::1]");
  assertEquals(normaliseRequestHost("[FD00::1]"), "[fd00::1]");
  assertEquals(normaliseRequestHost("[::ffff:10.0.0.1]:443"), "[::ffff:10.0.0.1]");
  const target = parseRequestTarget("http://[fd00::1]:8080/a", "[fd00::1]:8080");
  assertEquals(target?.authority, "[fd00::1]:8080");
  assertEquals(target?.hostname, "[fd00::1]");
  assertEquals(parseRequestTarget("http://[fd00::1/a", "[fd00::1"), undefined);
});

Deno.test("forwarding fields for an IPv6 peer name it bare (as nginx's $remote_addr), never bracketed or with a port", () => {
  const forwarded = forwardRequestHeaders([["Host", "[::1]:8080"]], {
    authority: "[::1]:8080",
    peer: "fd00::7",
    scheme: "http",
    port: 8080,
  }, { trusted: createCidrMatcher([]), newRequestId: () => "id" });
  const out = new Map(forwarded.headers.map(([k, v]) => [k.toLowerCase(), v]));
  assertEquals(out.get("x-forwarded-for"), "fd00::7");
  assertEquals(out.get("x-real-ip"), "fd00::7");
  assertEquals(out.get("host"), "[::1]:8080");
  assertEquals(out.get("x-forwarded-host"), "[::1]:8080");
});

// ---------------------------------------------------------------------------
// Dual-stack backends: one pod on both families
// ---------------------------------------------------------------------------

function dualStack(): Backend {
  // As translation builds it: both families' addresses of every pod, sorted.
  return {
    key: "shop/web:80",
    service: "shop/web",
    endpoints: [
      { address: "10.0.0.1", port: 8080 },
      { address: "10.0.0.2", port: 8080 },
      { address: "fd00::1", port: 8080 },
      { address: "fd00::2", port: 8080 },
    ],
  };
}

Deno.test("round-robin over a dual-stack backend gives every pod the same share (each family of each pod once per round)", () => {
  const balancer = new EndpointBalancer({ now: () => 0 });
  const backend = dualStack();
  const counts = new Map<string, number>();
  for (let i = 0; i < 400; i++) {
    const key = endpointKey(balancer.choose(backend)!);
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  assertEquals([...counts.values()], [100, 100, 100, 100]);
});

Deno.test("passive health marks one family of a pod down without the other, and a retry skips the address tried", () => {
  let now = 0;
  const balancer = new EndpointBalancer({ now: () => now, downForMs: 1_000 });
  const backend = dualStack();
  balancer.markDown({ address: "fd00::1", port: 8080 });
  assert(balancer.isDown({ address: "fd00::1", port: 8080 }));
  assert(!balancer.isDown({ address: "10.0.0.1", port: 8080 }));
  const seen = new Set<string>();
  for (let i = 0; i < 6; i++) seen.add(endpointKey(balancer.choose(backend)!));
  assert(!seen.has("[fd00::1]:8080"), [...seen].join());
  assertEquals(seen.size, 3);
  const tried = new Set(["[fd00::2]:8080", "10.0.0.1:8080", "10.0.0.2:8080"]);
  // Everything else tried: the down one is still offered (fail open), as for IPv4.
  assertEquals(endpointKey(balancer.choose(backend, tried)!), "[fd00::1]:8080");
  now = 2_000;
  assert(!balancer.isDown({ address: "fd00::1", port: 8080 }));
});
