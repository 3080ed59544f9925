/**
 * The per-route steps of ingress-nginx annotations, called as pure functions:
 * the rewrite phase in ingress-nginx's order (app-root, CORS preflight,
 * permanent/temporal redirect, HTTPS redirect), redirect variables expanded
 * from the request, the access phase (deny before allow), and the CORS fields
 * of the backend's answer.
 *
 * @module
 */

import { assertEquals } from "../../tests/support/assert.ts";
import { compileRouteBehaviour } from "../routing/route_behaviour.ts";
import {
  CORS_DEFAULTS,
  type IngressBehaviour,
  parseRedirectUrl,
} from "../translate/nginx/ingress_behaviour.ts";
import {
  corsHeaders,
  ingressAccess,
  ingressAnswer,
  type IngressRequest,
  type StepAnswer,
} from "./ingress_steps.ts";

function request(overrides: Partial<IngressRequest> = {}): IngressRequest {
  return {
    method: "GET",
    secure: false,
    hostname: "shop.example.com",
    authority: "shop.example.com",
    path: "/",
    requestUri: "/",
    query: "",
    origin: undefined,
    ...overrides,
  };
}

/** A request for `target` (path and query). */
function at(target: string, overrides: Partial<IngressRequest> = {}): IngressRequest {
  const q = target.indexOf("?");
  return request({
    path: q < 0 ? target : target.slice(0, q),
    requestUri: target,
    query: q < 0 ? "" : target.slice(q + 1),
    ...overrides,
  });
}

function location(url: string) {
  const parsed = parseRedirectUrl(url);
  if (parsed.problem !== undefined) throw new Error(parsed.problem);
  return parsed.value;
}

const OPTIONS = { sslRedirect: true, redirectPort: 443, tls: false };
const CORS = { ...CORS_DEFAULTS, origins: ["https://app.example.com"] };
const ALL: IngressBehaviour = {
  appRoot: "/app",
  cors: CORS,
  redirect: { location: location("https://new.example.com$request_uri"), status: 301 },
  forceSslRedirect: true,
};

function answer(
  source: IngressBehaviour | undefined,
  req: IngressRequest,
  options: Partial<typeof OPTIONS> = {},
): StepAnswer | undefined {
  return ingressAnswer(source === undefined ? undefined : compileRouteBehaviour(source), req, {
    ...OPTIONS,
    ...options,
  });
}

function redirectTo(status: number, to: string): StepAnswer {
  return { status, headers: [["Location", to]] };
}

const PREFLIGHT_FIELDS: [string, string][] = [
  ["Access-Control-Allow-Origin", "https://app.example.com"],
  ["Access-Control-Allow-Credentials", "true"],
  ["Access-Control-Allow-Methods", CORS_DEFAULTS.methods],
  ["Access-Control-Allow-Headers", CORS_DEFAULTS.headers],
  ["Access-Control-Max-Age", "1728000"],
  ["Content-Type", "text/plain charset=UTF-8"],
  ["Content-Length", "0"],
];

/** `[name, behaviour, request, options, answer]`: the phase order, case by case. */
const ORDER_CASES: readonly [
  string,
  IngressBehaviour | undefined,
  IngressRequest,
  Partial<typeof OPTIONS>,
  StepAnswer | undefined,
][] = [
  ["no behaviour, plain HTTP, no TLS: nothing", undefined, at("/"), {}, undefined],
  [
    "no behaviour, a TLS host over HTTP: the HTTPS redirect",
    undefined,
    at("/p?q=1"),
    { tls: true },
    redirectTo(308, "https://shop.example.com/p?q=1"),
  ],
  [
    "app-root beats the preflight, the redirect and the HTTPS redirect at /",
    ALL,
    at("/", { method: "OPTIONS", origin: "https://app.example.com" }),
    {},
    redirectTo(302, "http://shop.example.com/app"),
  ],
  [
    "app-root compares the path only: / with a query is redirected, without the query",
    { appRoot: "/app" },
    at("/?x=1"),
    {},
    redirectTo(302, "http://shop.example.com/app"),
  ],
  [
    "app-root keeps the scheme and the authority with its port",
    { appRoot: "/app/index.html" },
    at("/", { secure: true, authority: "shop.example.com:8443" }),
    {},
    redirectTo(302, "https://shop.example.com:8443/app/index.html"),
  ],
  ["app-root leaves other paths alone", { appRoot: "/app" }, at("/other"), {}, undefined],
  ["app-root leaves /index.html alone", { appRoot: "/app" }, at("/index.html"), {}, undefined],
  [
    "the preflight with a matching Origin beats the redirect and the HTTPS redirect",
    ALL,
    at("/api", { method: "OPTIONS", origin: "https://app.example.com" }),
    {},
    { status: 204, headers: PREFLIGHT_FIELDS },
  ],
  [
    "OPTIONS with an Origin that does not match: the redirect (no preflight answer)",
    ALL,
    at("/api", { method: "OPTIONS", origin: "https://evil.example" }),
    {},
    redirectTo(301, "https://new.example.com/api"),
  ],
  [
    "OPTIONS without Origin and a list of origins: the redirect",
    ALL,
    at("/api", { method: "OPTIONS" }),
    {},
    redirectTo(301, "https://new.example.com/api"),
  ],
  [
    "OPTIONS with CORS *: the preflight, even without Origin",
    { cors: CORS_DEFAULTS },
    at("/api", { method: "OPTIONS" }),
    {},
    {
      status: 204,
      headers: [
        ["Access-Control-Allow-Origin", "*"],
        ...PREFLIGHT_FIELDS.slice(1),
      ],
    },
  ],
  [
    "a GET with a matching Origin is not a preflight: the redirect",
    ALL,
    at("/api", { origin: "https://app.example.com" }),
    {},
    redirectTo(301, "https://new.example.com/api"),
  ],
  [
    "OPTIONS without CORS is an ordinary request: the HTTPS redirect",
    { forceSslRedirect: true },
    at("/api", { method: "OPTIONS", origin: "https://app.example.com" }),
    {},
    redirectTo(308, "https://shop.example.com/api"),
  ],
  [
    "the redirect beats the HTTPS redirect",
    ALL,
    at("/x?y=1"),
    { tls: true },
    redirectTo(301, "https://new.example.com/x?y=1"),
  ],
  [
    "the redirect applies over HTTPS too",
    ALL,
    at("/x", { secure: true }),
    {},
    redirectTo(301, "https://new.example.com/x"),
  ],
  [
    "ssl-redirect false keeps a TLS host on HTTP",
    { sslRedirect: false },
    at("/p"),
    { tls: true },
    undefined,
  ],
  [
    "ssl-redirect true on a host without TLS does nothing",
    { sslRedirect: true },
    at("/p"),
    { tls: false },
    undefined,
  ],
  [
    "--ssl-redirect=false: no HTTPS redirect for a TLS host",
    { maxBodyBytes: 1 },
    at("/p"),
    { tls: true, sslRedirect: false },
    undefined,
  ],
  [
    "force-ssl-redirect without a TLS section",
    { forceSslRedirect: true },
    at("/p?q"),
    {},
    redirectTo(308, "https://shop.example.com/p?q"),
  ],
  [
    "force-ssl-redirect beats --ssl-redirect=false and ssl-redirect false",
    { forceSslRedirect: true, sslRedirect: false },
    at("/p"),
    { tls: true, sslRedirect: false },
    redirectTo(308, "https://shop.example.com/p"),
  ],
  [
    "force-ssl-redirect false on a TLS host: the default redirect still",
    { forceSslRedirect: false },
    at("/p"),
    { tls: true },
    redirectTo(308, "https://shop.example.com/p"),
  ],
  [
    "force-ssl-redirect over HTTPS: nothing",
    { forceSslRedirect: true },
    at("/p", { secure: true }),
    {},
    undefined,
  ],
  [
    "the HTTPS redirect names the configured port, and the host without the client's port",
    { forceSslRedirect: true },
    at("/p", { authority: "shop.example.com:8080" }),
    { redirectPort: 8443 },
    redirectTo(308, "https://shop.example.com:8443/p"),
  ],
];

for (const [name, source, req, options, expected] of ORDER_CASES) {
  Deno.test(`ingressAnswer(): ${name}`, () => {
    assertEquals(answer(source, req, options), expected);
  });
}

/** `[redirect URL, request target, Location]`. */
const EXPAND_CASES: readonly [string, string, string][] = [
  ["https://new.example.com", "/a?b=1", "https://new.example.com"],
  ["https://new.example.com$request_uri", "/a/b?c=1&d=2", "https://new.example.com/a/b?c=1&d=2"],
  ["https://new.example.com${request_uri}", "/", "https://new.example.com/"],
  ["https://new.example.com$uri", "/a/b?c=1", "https://new.example.com/a/b"],
  ["https://new.example.com/x$uri$is_args$args", "/a?c=1", "https://new.example.com/x/a?c=1"],
  ["https://new.example.com/x$uri$is_args$args", "/a", "https://new.example.com/x/a"],
  [
    "https://new.example.com/?from=$host&s=$scheme",
    "/",
    "https://new.example.com/?from=shop.example.com&s=http",
  ],
  // A path that looks like another host stays in the path.
  [
    "https://new.example.com$request_uri",
    "//evil.example/x",
    "https://new.example.com//evil.example/x",
  ],
  [
    "https://new.example.com$uri",
    "/%2F%2Fevil.example",
    "https://new.example.com/%2F%2Fevil.example",
  ],
];

for (const [url, target, expected] of EXPAND_CASES) {
  Deno.test(`a redirect to ${url} for ${target} goes to ${expected}`, () => {
    const source: IngressBehaviour = { redirect: { location: location(url), status: 308 } };
    const got = answer(source, at(target));
    assertEquals(got, redirectTo(308, expected));
    assertEquals(new URL(got!.headers[0]![1]).host, "new.example.com");
  });
}

Deno.test("ingressAccess(): the denylist beats the allowlist; no list, no refusal", () => {
  const both = compileRouteBehaviour({ allow: ["10.0.0.0/8"], deny: ["10.1.0.0/16"] });
  assertEquals(ingressAccess(both, "10.2.0.1"), undefined);
  assertEquals(ingressAccess(both, "10.1.0.1"), 403);
  assertEquals(ingressAccess(both, "::ffff:10.1.0.1"), 403);
  assertEquals(ingressAccess(both, "192.0.2.1"), 403);
  const denyOnly = compileRouteBehaviour({ deny: ["192.0.2.0/24"] });
  assertEquals(ingressAccess(denyOnly, "192.0.2.7"), 403);
  assertEquals(ingressAccess(denyOnly, "198.51.100.1"), undefined);
  assertEquals(ingressAccess(denyOnly, "2001:db8::1"), undefined);
  const allowOnly = compileRouteBehaviour({ allow: ["2001:db8::/32"] });
  assertEquals(ingressAccess(allowOnly, "2001:db8::1"), undefined);
  assertEquals(ingressAccess(allowOnly, "10.0.0.1"), 403);
  // An address that does not parse is never allowed.
  assertEquals(ingressAccess(allowOnly, "garbage"), 403);
  assertEquals(ingressAccess(compileRouteBehaviour({ maxBodyBytes: 1 }), "10.0.0.1"), undefined);
  assertEquals(ingressAccess(undefined, "10.0.0.1"), undefined);
});

Deno.test("corsHeaders(): the fields for a matching Origin, none otherwise", () => {
  const behaviour = compileRouteBehaviour({
    cors: {
      ...CORS_DEFAULTS,
      origins: ["https://*.example.com"],
      credentials: false,
      exposeHeaders: "X-Total",
      maxAgeSeconds: 60,
    },
  });
  assertEquals(corsHeaders(behaviour, "https://a.example.com"), [
    ["Access-Control-Allow-Origin", "https://a.example.com"],
    ["Access-Control-Allow-Methods", CORS_DEFAULTS.methods],
    ["Access-Control-Allow-Headers", CORS_DEFAULTS.headers],
    ["Access-Control-Expose-Headers", "X-Total"],
    ["Access-Control-Max-Age", "60"],
  ]);
  assertEquals(corsHeaders(behaviour, "https://a.b.example.com"), undefined);
  assertEquals(corsHeaders(behaviour, undefined), undefined);
  assertEquals(
    corsHeaders(compileRouteBehaviour({ appRoot: "/a" }), "https://a.example.com"),
    undefined,
  );
  assertEquals(corsHeaders(undefined, "https://a.example.com"), undefined);
});
