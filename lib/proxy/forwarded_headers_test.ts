import { assertEquals } from "../../tests/support/assert.ts";
import { createCidrMatcher } from "./cidr.ts";
import {
  forwardRequestHeaders,
  forwardResponseHeaders,
  isWebSocketUpgrade,
  realClientIp,
} from "./forwarded_headers.ts";

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
