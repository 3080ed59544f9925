/**
 * Forwarding fields: what `forwardRequestHeaders()` and `forwardResponseHeaders()`
 * send (Host once, X-Forwarded-*, X-Real-IP, X-Request-ID, hop-by-hop fields
 * removed, HSTS) and, through the real handler, that an untrusted peer cannot
 * forge them (any case, underscore spellings, Connection tricks, IPv6 peers)
 * while a trusted proxy's are appended to, also for IPv6 and IPv4-mapped peers.
 *
 * @module
 */
import { assert, assertEquals, assertMatch } from "../../tests/support/assert.ts";
import { createCidrMatcher } from "../net/cidr.ts";
import {
  forwardRequestHeaders,
  forwardResponseHeaders,
  isWebSocketUpgrade,
  realClientIp,
} from "./forwarded_headers.ts";
import { ECHO_HOST, echoJson, sendRaw, withEchoProxy } from "../../tests/support/echo_proxy.ts";
import {
  headerValue,
  headerValues,
  latin1,
  RawConnection,
  type RawResponse,
} from "../../tests/support/raw_http.ts";
import { type EchoBackend, startEchoBackend } from "../../tests/support/echo_backend.ts";
import { type HarnessOptions, startProxy } from "../../tests/support/proxy_harness.ts";
import {
  askEcho,
  type Echo,
  type HostileWorld,
  probe,
  type RuleSketch,
  worldRunner,
} from "../../tests/support/echo_world.ts";
import {
  type Echoed,
  echoed,
  exchange,
  field,
  startProxyOn,
  withV6Backend,
} from "../../tests/support/ipv6_proxy.ts";
import { staticSnapshot } from "../../tests/support/static_snapshot.ts";
import { type AccessLogEntry, createProxyHandler } from "./proxy_handler.ts";

const context = {
  authority: "Shop.example.com",
  peer: "203.0.113.7",
  scheme: "https",
  port: 443,
} as const;
const untrusted = { trusted: createCidrMatcher([]), newRequestId: () => "generated-id" };
const trusted = { trusted: createCidrMatcher(["10.0.0.0/8"]), newRequestId: () => "generated-id" };

Deno.test("forwardRequestHeaders() keeps order, case and duplicates and appends forwarding fields", () => {
  const out = forwardRequestHeaders(
    [
      ["Host", "Shop.example.com"],
      ["Zeta", "1"],
      ["Cookie", "a=1"],
      ["x-dup", "one"],
      ["X-Dup", "two"],
      ["Content-Length", "5"],
    ],
    context,
    untrusted,
  );
  assertEquals(out.headers, [
    ["Host", "Shop.example.com"],
    ["Zeta", "1"],
    ["Cookie", "a=1"],
    ["x-dup", "one"],
    ["X-Dup", "two"],
    ["Content-Length", "5"],
    ["X-Request-ID", "generated-id"],
    ["X-Real-IP", "203.0.113.7"],
    ["X-Forwarded-For", "203.0.113.7"],
    ["X-Forwarded-Host", "Shop.example.com"],
    ["X-Forwarded-Port", "443"],
    ["X-Forwarded-Proto", "https"],
  ]);
});

/** What Sluice appends for an untrusted peer on plain HTTP port 80, authority `a`. */
function appended(requestId = "generated-id"): [string, string][] {
  return [
    ["X-Request-ID", requestId],
    ["X-Real-IP", "203.0.113.7"],
    ["X-Forwarded-For", "203.0.113.7"],
    ["X-Forwarded-Host", "a"],
    ["X-Forwarded-Port", "80"],
    ["X-Forwarded-Proto", "http"],
  ];
}

Deno.test("forwardRequestHeaders() sends one Host, drops underscore spellings of its own fields and keeps only a sane request id, row by row", () => {
  const cases: [name: string, client: [string, string][], sent: [string, string][]][] = [
    // Host: always exactly one, holding the authority, where the client's first one was. HTTP/1.x
    // listeners refuse a second Host (Deno.serve answers 400); an h2 or h2c client's second `host`
    // field reaches the handler.
    ["two Host fields", [["Host", "a"], ["Host", "b"]], [["Host", "a"], ...appended()]],
    ["two equal Host fields", [["Host", "a"], ["Host", "a"]], [["Host", "a"], ...appended()]],
    [
      "Host fields in two spellings",
      [["host", "b"], ["Accept", "*/*"], ["HOST", "c"]],
      [["host", "a"], ["Accept", "*/*"], ...appended()],
    ],
    [
      "h2: two host fields after other fields",
      [["accept", "*/*"], ["host", "b"], ["host", "c"]],
      [["accept", "*/*"], ["host", "a"], ...appended()],
    ],
    ["h2: no host field", [["accept", "*/*"]], [["host", "a"], ["accept", "*/*"], ...appended()]],
    // CGI-style backends (PHP, WSGI, Rack) read `X_Forwarded_For` as `X-Forwarded-For`.
    ["X_Forwarded_For", [["Host", "a"], ["X_Forwarded_For", "1.2.3.4"]], [
      ["Host", "a"],
      ...appended(),
    ]],
    ["x_forwarded_for", [["Host", "a"], ["x_forwarded_for", "1.2.3.4"]], [
      ["Host", "a"],
      ...appended(),
    ]],
    ["X-Forwarded_For", [["Host", "a"], ["X-Forwarded_For", "1.2.3.4"]], [
      ["Host", "a"],
      ...appended(),
    ]],
    ["X_Forwarded-For", [["Host", "a"], ["X_Forwarded-For", "1.2.3.4"]], [
      ["Host", "a"],
      ...appended(),
    ]],
    ["X_Real_IP", [["Host", "a"], ["X_Real_IP", "1.2.3.4"]], [["Host", "a"], ...appended()]],
    ["X_Forwarded_Host", [["Host", "a"], ["X_Forwarded_Host", "evil"]], [
      ["Host", "a"],
      ...appended(),
    ]],
    ["X_Forwarded_Port", [["Host", "a"], ["X_Forwarded_Port", "1"]], [
      ["Host", "a"],
      ...appended(),
    ]],
    [
      "X_Forwarded_Proto",
      [["Host", "a"], ["X_Forwarded_Proto", "https"]],
      [["Host", "a"], ...appended()],
    ],
    [
      "X_Request_ID (dropped, and not taken as the id)",
      [["Host", "a"], ["X_Request_ID", "client-id"]],
      [["Host", "a"], ...appended()],
    ],
    [
      "underscores in a name Sluice does not set",
      [["Host", "a"], ["X_Custom_Field", "1"], ["Accept_Language", "en"]],
      [["Host", "a"], ["X_Custom_Field", "1"], ["Accept_Language", "en"], ...appended()],
    ],
    // X-Request-ID: kept when 1 to 200 visible ASCII characters (trimmed), else generated.
    [
      "a 200-character request id",
      [["Host", "a"], ["X-Request-ID", "r".repeat(200)]],
      [["Host", "a"], ...appended("r".repeat(200))],
    ],
    [
      "a 201-character request id",
      [["Host", "a"], ["X-Request-ID", "r".repeat(201)]],
      [["Host", "a"], ...appended()],
    ],
    [
      "a padded request id",
      [["Host", "a"], ["X-Request-ID", "  id-1 "]],
      [["Host", "a"], ...appended("id-1")],
    ],
    ["an empty request id", [["Host", "a"], ["X-Request-ID", ""]], [["Host", "a"], ...appended()]],
    [
      "a request id with a space",
      [["Host", "a"], ["X-Request-ID", "a b"]],
      [["Host", "a"], ...appended()],
    ],
    [
      "a request id with a non-ASCII character",
      [["Host", "a"], ["X-Request-ID", "idé"]],
      [["Host", "a"], ...appended()],
    ],
    [
      "two request ids: the first counts",
      [["Host", "a"], ["X-Request-ID", "first"], ["X-Request-ID", "second"]],
      [["Host", "a"], ...appended("first")],
    ],
  ];
  for (const [name, client, sent] of cases) {
    const out = forwardRequestHeaders(
      client,
      { ...context, authority: "a", scheme: "http", port: 80 },
      untrusted,
    );
    assertEquals(out.headers, sent, name);
    assertEquals(out.requestId, sent.find(([n]) => n === "X-Request-ID")?.[1], name);
  }
});

Deno.test("forwardRequestHeaders() from a trusted proxy still drops underscore spellings rather than believe them", () => {
  const out = forwardRequestHeaders(
    [
      ["Host", "a"],
      ["X-Forwarded-For", "198.51.100.1"],
      ["X_Forwarded_For", "192.0.2.66"],
      ["X_Forwarded_Host", "evil"],
      ["X_Forwarded_Proto", "https"],
    ],
    { ...context, authority: "a", peer: "10.9.9.9", scheme: "http", port: 80 },
    trusted,
  );
  assertEquals(out.headers, [
    ["Host", "a"],
    ["X-Request-ID", "generated-id"],
    ["X-Real-IP", "198.51.100.1"],
    ["X-Forwarded-For", "198.51.100.1, 10.9.9.9"],
    ["X-Forwarded-Host", "a"],
    ["X-Forwarded-Port", "80"],
    ["X-Forwarded-Proto", "http"],
  ]);
});

Deno.test("forwardRequestHeaders() removes hop-by-hop fields and whatever Connection names", () => {
  const out = forwardRequestHeaders(
    [
      ["Host", "a"],
      ["Connection", "keep-alive, X-Secret, Upgrade"],
      ["X-Secret", "s"],
      ["Keep-Alive", "timeout=5"],
      ["Proxy-Connection", "keep-alive"],
      ["TE", "trailers"],
      ["Trailer", "X-T"],
      ["Transfer-Encoding", "chunked"],
      ["Upgrade", "h2c"],
      ["HTTP2-Settings", "AAA"],
      ["Expect", "100-continue"],
      ["Proxy", "http://evil"],
      ["Proxy-Authorization", "Basic eA=="],
      ["Accept", "*/*"],
    ],
    { ...context, authority: "a" },
    untrusted,
  );
  assertEquals(out.headers.slice(0, 3), [["Host", "a"], ["Proxy-Authorization", "Basic eA=="], [
    "Accept",
    "*/*",
  ]]);
  assertEquals(out.headers.length, 9);
});

Deno.test("forwardRequestHeaders() replaces client forwarding fields from an untrusted peer", () => {
  const out = forwardRequestHeaders(
    [
      ["Host", "a"],
      ["X-Forwarded-For", "1.2.3.4"],
      ["X-Forwarded-Proto", "https"],
      ["X-Forwarded-Host", "evil"],
      ["X-Forwarded-Port", "1"],
      ["X-Real-IP", "1.2.3.4"],
      ["X-Request-ID", "client-id"],
    ],
    { ...context, authority: "a", scheme: "http", port: 80 },
    untrusted,
  );
  assertEquals(out.headers, [
    ["Host", "a"],
    ["X-Request-ID", "client-id"],
    ["X-Real-IP", "203.0.113.7"],
    ["X-Forwarded-For", "203.0.113.7"],
    ["X-Forwarded-Host", "a"],
    ["X-Forwarded-Port", "80"],
    ["X-Forwarded-Proto", "http"],
  ]);
  assertEquals(out.requestId, "client-id");
});

Deno.test("forwardRequestHeaders() appends to and believes a trusted proxy's fields", () => {
  const out = forwardRequestHeaders(
    [
      ["Host", "a"],
      ["X-Forwarded-For", "198.51.100.1, 10.1.1.1"],
      ["X-Forwarded-For", "10.2.2.2"],
      ["X-Forwarded-Proto", "https"],
      ["X-Forwarded-Host", "public.example"],
      ["X-Forwarded-Port", "443"],
    ],
    { ...context, authority: "a", peer: "::ffff:10.9.9.9", scheme: "http", port: 8080 },
    trusted,
  );
  assertEquals(out.headers.slice(1), [
    ["X-Request-ID", "generated-id"],
    ["X-Real-IP", "198.51.100.1"],
    ["X-Forwarded-For", "198.51.100.1, 10.1.1.1, 10.2.2.2, 10.9.9.9"],
    ["X-Forwarded-Host", "public.example"],
    ["X-Forwarded-Port", "443"],
    ["X-Forwarded-Proto", "https"],
  ]);
  assertEquals(out.clientIp, "198.51.100.1");
});

Deno.test("forwardRequestHeaders() puts Host first for HTTP/2 and regenerates odd request ids", () => {
  const out = forwardRequestHeaders(
    [["accept", "*/*"], ["x-request-id", "bad id with spaces"]],
    { ...context, authority: "h2.example" },
    untrusted,
  );
  assertEquals(out.headers[0], ["host", "h2.example"]);
  assertEquals(out.requestId, "generated-id");
});

Deno.test("forwardRequestHeaders() keeps Upgrade and sends Connection: Upgrade for upgrades", () => {
  const out = forwardRequestHeaders(
    [
      ["Host", "a"],
      ["Connection", "keep-alive, Upgrade"],
      ["Upgrade", "websocket"],
      ["Sec-WebSocket-Key", "k"],
      ["Sec-WebSocket-Extensions", "permessage-deflate"],
    ],
    { ...context, authority: "a", upgrade: true, drop: new Set(["sec-websocket-extensions"]) },
    untrusted,
  );
  assertEquals(out.headers.slice(0, 4), [
    ["Host", "a"],
    ["Connection", "Upgrade"],
    ["Upgrade", "websocket"],
    ["Sec-WebSocket-Key", "k"],
  ]);
  assertEquals(out.headers.length, 10);
});

Deno.test("realClientIp() walks right to left past trusted proxies", () => {
  const t = createCidrMatcher(["10.0.0.0/8"]);
  assertEquals(realClientIp("1.1.1.1, 2.2.2.2, 10.0.0.2", "10.0.0.1", t), "2.2.2.2");
  assertEquals(realClientIp("10.0.0.3, 10.0.0.2", "10.0.0.1", t), "10.0.0.3");
  assertEquals(realClientIp("garbage, 10.0.0.2", "10.0.0.1", t), "10.0.0.2");
  assertEquals(realClientIp("", "10.0.0.1", t), "10.0.0.1");
});

Deno.test("forwardResponseHeaders() strips hop-by-hop fields, keeps cookies apart and sets HSTS", () => {
  const out = forwardResponseHeaders([
    ["Set-Cookie", "a=1"],
    ["Connection", "X-Hop"],
    ["X-Hop", "1"],
    ["Keep-Alive", "timeout=5"],
    ["Transfer-Encoding", "chunked"],
    ["Trailer", "X-T"],
    ["Upgrade", "h2c"],
    ["Strict-Transport-Security", "max-age=1"],
    ["set-cookie", "b=2"],
    ["Content-Encoding", "gzip"],
  ], { connectionTokens: ["x-hop"], hsts: "max-age=31536000; includeSubDomains" });
  assertEquals(out, [
    ["Set-Cookie", "a=1"],
    ["set-cookie", "b=2"],
    ["Content-Encoding", "gzip"],
    ["Strict-Transport-Security", "max-age=31536000; includeSubDomains"],
  ]);
  const noHsts = forwardResponseHeaders([["Strict-Transport-Security", "max-age=1"]], {
    connectionTokens: [],
  });
  assertEquals(noHsts, [["Strict-Transport-Security", "max-age=1"]]);
});

Deno.test("forwardResponseHeaders() with hsts null drops the backend's HSTS in any case and adds none", () => {
  const out = forwardResponseHeaders([
    ["strict-transport-security", "max-age=1"],
    ["Content-Type", "text/plain"],
    ["STRICT-TRANSPORT-SECURITY", "max-age=2"],
  ], { connectionTokens: [], hsts: null });
  assertEquals(out, [["Content-Type", "text/plain"]]);
});

Deno.test("isWebSocketUpgrade() needs GET, Upgrade: websocket and Connection: upgrade", () => {
  assertEquals(
    isWebSocketUpgrade("GET", [["Upgrade", "WebSocket"], ["Connection", "keep-alive, Upgrade"]]),
    true,
  );
  assertEquals(
    isWebSocketUpgrade("POST", [["Upgrade", "websocket"], ["Connection", "Upgrade"]]),
    false,
  );
  assertEquals(isWebSocketUpgrade("GET", [["Upgrade", "h2c"], ["Connection", "Upgrade"]]), false);
  assertEquals(isWebSocketUpgrade("GET", [["Upgrade", "websocket"]]), false);
});

Deno.test("proxy sets X-Forwarded-* and X-Real-IP from the peer, replacing an untrusted client's values", async () => {
  await withEchoProxy(async ({ proxy }) => {
    const response = await sendRaw(
      proxy,
      `GET / HTTP/1.1\r\nHost: ${ECHO_HOST}\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\n` +
        "X-Real-IP: 6.6.6.6\r\nX-Forwarded-Host: evil.example\r\nX-Request-ID: trace-123\r\n\r\n",
    );
    const fields = echoJson(response).headers;
    assertEquals(headerValues(fields, "x-forwarded-for"), ["127.0.0.1"]);
    assertEquals(headerValues(fields, "x-real-ip"), ["127.0.0.1"]);
    assertEquals(headerValues(fields, "x-forwarded-proto"), ["http"]);
    assertEquals(headerValues(fields, "x-forwarded-host"), [ECHO_HOST]);
    assertEquals(headerValues(fields, "x-forwarded-port"), [String(proxy.port)]);
    assertEquals(headerValues(fields, "x-request-id"), ["trace-123"]);
  });
});

Deno.test("proxy appends to X-Forwarded-For and keeps X-Forwarded-Proto from a trusted proxy", async () => {
  await withEchoProxy(async ({ proxy }) => {
    const response = await sendRaw(
      proxy,
      `GET / HTTP/1.1\r\nHost: ${ECHO_HOST}\r\nX-Forwarded-For: 198.51.100.9\r\nX-Forwarded-Proto: https\r\n\r\n`,
    );
    const fields = echoJson(response).headers;
    assertEquals(headerValues(fields, "x-forwarded-for"), ["198.51.100.9, 127.0.0.1"]);
    assertEquals(headerValues(fields, "x-real-ip"), ["198.51.100.9"]);
    assertEquals(headerValues(fields, "x-forwarded-proto"), ["https"]);
    const id = headerValue(fields, "x-request-id") ?? "";
    assert(/^[0-9a-f]{32}$/.test(id), id);
  }, { trustedProxyCidrs: ["127.0.0.0/8"] });
});

const HOST = "shop.example.com";

async function raw(port: number, text: string): Promise<RawResponse> {
  using conn = await RawConnection.open(port);
  await conn.send(text);
  return await conn.readResponse();
}

/** An echo backend behind the proxy for any host; `fn` gets the proxy's port and the backend. */
async function withEcho(
  fn: (port: number, backend: EchoBackend) => Promise<void>,
  options: Partial<Omit<HarnessOptions, "routes">> = {},
): Promise<void> {
  const backend = await startEchoBackend({ name: "shop/web" });
  const proxy = await startProxy({
    routes: [{ endpoints: [{ address: "127.0.0.1", port: backend.port }] }],
    ...options,
  });
  try {
    await fn(proxy.port, backend);
  } finally {
    await proxy.close();
    await backend.close();
  }
}

function echoHeaders(response: RawResponse): [string, string][] {
  return (JSON.parse(latin1(response.body)) as { headers: [string, string][] }).headers;
}

const FORGED = "X-Forwarded-For: 6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nX-Forwarded-Proto: https\r\n" +
  "X-Forwarded-Host: evil.example\r\nX-Forwarded-Port: 1\r\n";

Deno.test("trusted proxy CIDRs that do not hold the peer trust none of its forwarding fields", async () => {
  await withEcho(async (port) => {
    const fields = echoHeaders(await raw(port, `GET / HTTP/1.1\r\nHost: ${HOST}\r\n${FORGED}\r\n`));
    assertEquals(headerValues(fields, "x-forwarded-for"), ["127.0.0.1"]);
    assertEquals(headerValues(fields, "x-real-ip"), ["127.0.0.1"]);
    assertEquals(headerValues(fields, "x-forwarded-proto"), ["http"]);
    assertEquals(headerValues(fields, "x-forwarded-host"), [HOST]);
    assertEquals(headerValues(fields, "x-forwarded-port"), [String(port)]);
  }, { trustedProxyCidrs: ["10.0.0.0/8", "::1/128", "127.0.0.2/32"] });
});

Deno.test("a trusted proxy's X-Forwarded-Host, -Port and -Proto are kept, and its X-Forwarded-For appended to", async () => {
  await withEcho(async (port) => {
    const fields = echoHeaders(
      await raw(
        port,
        `GET / HTTP/1.1\r\nHost: ${HOST}\r\nX-Forwarded-For: 203.0.113.9\r\n` +
          "X-Forwarded-Host: public.example\r\nX-Forwarded-Port: 443\r\nX-Forwarded-Proto: https\r\n\r\n",
      ),
    );
    assertEquals(headerValues(fields, "x-forwarded-for"), ["203.0.113.9, 127.0.0.1"]);
    assertEquals(headerValues(fields, "x-real-ip"), ["203.0.113.9"]);
    assertEquals(headerValues(fields, "x-forwarded-host"), ["public.example"]);
    assertEquals(headerValues(fields, "x-forwarded-port"), ["443"]);
    assertEquals(headerValues(fields, "x-forwarded-proto"), ["https"]);
    // Host itself is the client's, never the forwarded one.
    assertEquals(headerValues(fields, "host"), [HOST]);
  }, { trustedProxyCidrs: ["127.0.0.0/8"] });
});

const SHOP = "shop.example.com";
const HOST_RULES: RuleSketch[] = [
  [SHOP, "/", "Prefix", "shop/public"],
  [SHOP, "/admin", "Prefix", "shop/admin"],
  [SHOP, "/über", "Exact", "shop/uber"],
  ["*.example.com", "/", "Prefix", "wild/web"],
  ["localhost", "/", "Prefix", "local/dev"],
  ["", "/", "Prefix", "any/web"],
];
const FORWARDING = [
  "x-forwarded-for",
  "x-real-ip",
  "x-forwarded-host",
  "x-forwarded-port",
  "x-forwarded-proto",
  "x-request-id",
];

const withHostsWorld = worldRunner(HOST_RULES);

function get(target: string, host = SHOP, extra = ""): string {
  return `GET ${target} HTTP/1.1\r\nHost: ${host}\r\n${extra}\r\n`;
}

/** What the backend received for `GET /` to the shop carrying `fields` (lines ending in CRLF). */
function echoWith(world: HostileWorld, fields: string): Promise<Echo> {
  return askEcho(world.port, get("/", SHOP, fields));
}

Deno.test("an untrusted client's forged forwarding fields are replaced, whatever their case or Connection says", async () => {
  await withHostsWorld(async (world) => {
    const echo = await echoWith(
      world,
      "x-forwarded-for: 1.1.1.1\r\nX-FORWARDED-FOR: 2.2.2.2\r\nX-Real-Ip: 3.3.3.3\r\n" +
        "x-forwarded-host: evil.example\r\nX-Forwarded-Port: 1\r\nX-Forwarded-Proto: https\r\n" +
        "Connection: X-Forwarded-For, X-Real-IP, X-Forwarded-Host, X-Request-ID, Host\r\n" +
        "X-Request-ID: trace-1\r\n",
    );
    assertEquals(headerValues(echo.headers, "host"), [SHOP]);
    assertEquals(headerValues(echo.headers, "x-forwarded-for"), ["127.0.0.1"]);
    assertEquals(headerValues(echo.headers, "x-real-ip"), ["127.0.0.1"]);
    assertEquals(headerValues(echo.headers, "x-forwarded-host"), [SHOP]);
    assertEquals(headerValues(echo.headers, "x-forwarded-port"), [String(world.port)]);
    assertEquals(headerValues(echo.headers, "x-forwarded-proto"), ["http"]);
    assertEquals(headerValues(echo.headers, "x-request-id").length, 1);
    assertEquals(headerValues(echo.headers, "connection"), []);
  });
});

Deno.test("an untrusted client cannot pass forwarding fields spelled with underscores", async () => {
  // Was a bug: CGI-style backends (PHP, WSGI, Rack) read `X_Forwarded_For` as the same variable
  // as Sluice's own field, so an untrusted client could forge its address that way.
  await withHostsWorld(async (world) => {
    const echo = await echoWith(
      world,
      "X_Forwarded_For: 6.6.6.6\r\nX_Real_IP: 6.6.6.6\r\nX-Forwarded_Host: evil.example\r\n" +
        "X_Forwarded_Proto: https\r\n",
    );
    const names = echo.headers.map(([name]) => name.toLowerCase().replaceAll("_", "-"));
    for (const name of FORWARDING) {
      assertEquals(names.filter((n) => n === name).length, 1, name);
    }
    assert(!JSON.stringify(echo.headers).includes("6.6.6.6"));
  });
});

Deno.test("a trusted proxy's X-Forwarded-For fields are joined and appended to, and its X-Real-IP is recomputed", async () => {
  await withHostsWorld(
    async (world) => {
      const echo = await echoWith(
        world,
        "X-Forwarded-For: 203.0.113.7\r\nX-Real-IP: 6.6.6.6\r\nx-forwarded-for: 10.1.1.1\r\n" +
          "X-Forwarded-Proto: https\r\n",
      );
      assertEquals(headerValues(echo.headers, "x-forwarded-for"), [
        "203.0.113.7, 10.1.1.1, 127.0.0.1",
      ]);
      assertEquals(headerValues(echo.headers, "x-real-ip"), ["203.0.113.7"]);
      assertEquals(headerValues(echo.headers, "x-forwarded-proto"), ["https"]);
    },
    HOST_RULES,
    { proxy: { trustedProxyCidrs: ["127.0.0.0/8", "10.0.0.0/8"] } },
  );
});

Deno.test("a hostile X-Request-ID is replaced by a generated one; a plain one is kept once", async () => {
  await withHostsWorld(async (world) => {
    const hostile = ["r".repeat(10_000), "a b", "caf\xe9", "x".repeat(201)];
    for (const id of hostile) {
      const echo = await echoWith(world, `X-Request-ID: ${id}\r\n`);
      const ids = headerValues(echo.headers, "x-request-id");
      assertEquals(ids.length, 1, id.slice(0, 20));
      assertMatch(ids[0] ?? "", /^[0-9a-f]{32}$/, id.slice(0, 20));
    }
    const two = await echoWith(world, "X-Request-ID: first\r\nX-Request-ID: second\r\n");
    assertEquals(headerValues(two.headers, "x-request-id"), ["first"]);
    // CR inside a value never reaches Sluice: Deno.serve answers 400.
    const seen = world.mark();
    const cr = await probe(world.port, get("/", SHOP, "X-Request-ID: a\rX-Injected: 1\r\n"));
    assertEquals(cr.map((r) => r.status), [400]);
    assertEquals(seen(), []);
  });
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
