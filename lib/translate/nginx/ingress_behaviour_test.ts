/**
 * `readIngressBehaviour()`: the served annotations of one Ingress into typed
 * data, with ingress-nginx's defaults and precedence, and a problem per value
 * that does not parse; `parseRedirectUrl()`: redirect targets with nginx
 * variables, only those that cannot send the client to another host.
 *
 * @module
 */

import { assertEquals, assertStringIncludes } from "../../../tests/support/assert.ts";
import {
  CORS_DEFAULTS,
  type IngressBehaviour,
  type LocationPart,
  parseRedirectUrl,
  readIngressBehaviour,
} from "./ingress_behaviour.ts";

function read(annotations: Record<string, string>) {
  return readIngressBehaviour((name) => annotations[name]);
}

interface Case {
  readonly name: string;
  readonly annotations: Record<string, string>;
  readonly behaviour?: IngressBehaviour;
  /** The annotations with a problem. */
  readonly problems?: readonly string[];
}

const CASES: readonly Case[] = [
  { name: "nothing set", annotations: {} },
  {
    // Found by review: they passed parsing, then every request failed building its Location.
    name: "a redirect or app-root holding characters other than ASCII",
    annotations: { "permanent-redirect": "https://example.com/€", "app-root": "/\u2028" },
    problems: ["permanent-redirect", "app-root"],
  },
  {
    name: "from-to-www-redirect",
    annotations: { "from-to-www-redirect": "true" },
    behaviour: { fromToWww: true },
  },
  {
    name: "from-to-www-redirect not a boolean",
    annotations: { "from-to-www-redirect": "yes" },
    problems: ["from-to-www-redirect"],
  },
  {
    name: "upstream-vhost and x-forwarded-prefix",
    annotations: { "upstream-vhost": "internal.example.com:8080", "x-forwarded-prefix": "/api" },
    behaviour: { upstreamVhost: "internal.example.com:8080", forwardedPrefix: "/api" },
  },
  {
    name: "upstream-vhost an nginx variable, x-forwarded-prefix not a path",
    annotations: { "upstream-vhost": "$host", "x-forwarded-prefix": "api" },
    problems: ["upstream-vhost", "x-forwarded-prefix"],
  },
  {
    name: "upstream-vhost with a space, x-forwarded-prefix with a quote",
    annotations: { "upstream-vhost": "a.example b", "x-forwarded-prefix": '/a"b' },
    problems: ["upstream-vhost", "x-forwarded-prefix"],
  },
  {
    name: "limit-rps with the default burst multiplier of 5",
    annotations: { "limit-rps": "10" },
    behaviour: { limits: { rps: 10, burstMultiplier: 5 } },
  },
  {
    name: "limit-rpm, limit-connections, a multiplier and an allowlist",
    annotations: {
      "limit-rpm": "300",
      "limit-connections": "4",
      "limit-burst-multiplier": "2",
      "limit-whitelist": "10.0.0.0/8, 192.0.2.1",
    },
    behaviour: {
      limits: { rpm: 300, burstMultiplier: 2, connections: 4, exempt: ["10.0.0.0/8", "192.0.2.1"] },
    },
  },
  {
    name: "limit-allowlist wins over its older name",
    annotations: {
      "limit-rps": "1",
      "limit-allowlist": "10.0.0.0/8",
      "limit-whitelist": "192.0.2.0/24",
    },
    behaviour: { limits: { rps: 1, burstMultiplier: 5, exempt: ["10.0.0.0/8"] } },
  },
  { name: "limits of zero limit nothing", annotations: { "limit-rps": "0", "limit-rpm": "0" } },
  {
    name: "a limit not a whole number",
    annotations: { "limit-rps": "1.5", "limit-burst-multiplier": "x5" },
    problems: ["limit-rps", "limit-burst-multiplier"],
  },
  {
    name: "ssl-redirect false and force-ssl-redirect true",
    annotations: { "ssl-redirect": "false", "force-ssl-redirect": "true" },
    behaviour: { sslRedirect: false, forceSslRedirect: true },
  },
  {
    name: "ssl-redirect with a ParseBool spelling",
    annotations: { "ssl-redirect": "0", "force-ssl-redirect": "F" },
    behaviour: { sslRedirect: false, forceSslRedirect: false },
  },
  {
    name: "ssl-redirect not a boolean",
    annotations: { "ssl-redirect": "no" },
    problems: ["ssl-redirect"],
  },
  { name: "app-root", annotations: { "app-root": "/app" }, behaviour: { appRoot: "/app" } },
  {
    name: "app-root naming another host",
    annotations: { "app-root": "//evil.example/app" },
    problems: ["app-root"],
  },
  {
    name: "app-root an absolute URL",
    annotations: { "app-root": "https://evil.example/app" },
    problems: ["app-root"],
  },
  {
    name: "permanent-redirect with the default 301",
    annotations: { "permanent-redirect": "https://new.example.com" },
    behaviour: { redirect: { location: ["https://new.example.com"], status: 301 } },
  },
  {
    name: "permanent-redirect with its code",
    annotations: {
      "permanent-redirect": "https://new.example.com$request_uri",
      "permanent-redirect-code": "308",
    },
    behaviour: {
      redirect: {
        location: ["https://new.example.com", { variable: "request_uri" }],
        status: 308,
      },
    },
  },
  {
    name: "temporal-redirect with the default 302",
    annotations: { "temporal-redirect": "https://maintenance.example.com/" },
    behaviour: { redirect: { location: ["https://maintenance.example.com/"], status: 302 } },
  },
  {
    name: "temporal-redirect wins over permanent-redirect (ingress-nginx reads it first)",
    annotations: {
      "temporal-redirect": "https://t.example.com/",
      "temporal-redirect-code": "307",
      "permanent-redirect": "https://p.example.com/",
      "permanent-redirect-code": "308",
    },
    behaviour: { redirect: { location: ["https://t.example.com/"], status: 307 } },
  },
  {
    name: "a redirect code alone does nothing",
    annotations: { "permanent-redirect-code": "308" },
  },
  {
    name: "a redirect code that is not a redirect",
    annotations: {
      "permanent-redirect": "https://p.example.com/",
      "permanent-redirect-code": "200",
    },
    problems: ["permanent-redirect-code"],
  },
  {
    name: "a redirect to a variable host",
    annotations: { "permanent-redirect": "https://$host/" },
    problems: ["permanent-redirect"],
  },
  {
    name: "a redirect with a header variable",
    annotations: { "temporal-redirect": "https://a.example.com/$http_x_target" },
    problems: ["temporal-redirect"],
  },
  {
    name: "allowlist and denylist",
    annotations: {
      "allowlist-source-range": "10.0.0.0/8, 2001:db8::/32",
      "denylist-source-range": "10.1.0.0/16",
    },
    behaviour: { allow: ["10.0.0.0/8", "2001:db8::/32"], deny: ["10.1.0.0/16"] },
  },
  {
    name: "whitelist-source-range, the older name",
    annotations: { "whitelist-source-range": "192.168.0.0/16" },
    behaviour: { allow: ["192.168.0.0/16"] },
  },
  {
    name: "allowlist-source-range wins over whitelist-source-range",
    annotations: {
      "allowlist-source-range": "10.0.0.0/8",
      "whitelist-source-range": "0.0.0.0/0",
    },
    behaviour: { allow: ["10.0.0.0/8"] },
  },
  {
    name: "an invalid allowlist is a problem, never an open door",
    annotations: { "whitelist-source-range": "10.0.0.0/33" },
    problems: ["whitelist-source-range"],
  },
  {
    name: "a blank allowlist is a problem",
    annotations: { "allowlist-source-range": " " },
    problems: ["allowlist-source-range"],
  },
  {
    name: "an invalid denylist is a problem",
    annotations: { "denylist-source-range": "10.0.0.0/8,,10.1.0.0/16" },
    problems: ["denylist-source-range"],
  },
  {
    name: "proxy-body-size 8m",
    annotations: { "proxy-body-size": "8m" },
    behaviour: { maxBodyBytes: 8 * 1024 ** 2 },
  },
  {
    name: "proxy-body-size 0",
    annotations: { "proxy-body-size": "0" },
    behaviour: { maxBodyBytes: 0 },
  },
  {
    name: "proxy-body-size 1.5m",
    annotations: { "proxy-body-size": "1.5m" },
    problems: ["proxy-body-size"],
  },
  {
    name: "proxy-body-size -1",
    annotations: { "proxy-body-size": "-1" },
    problems: ["proxy-body-size"],
  },
  {
    name: "enable-cors with ingress-nginx's defaults",
    annotations: { "enable-cors": "true" },
    behaviour: { cors: CORS_DEFAULTS },
  },
  {
    name: "CORS fields without enable-cors do nothing, even invalid",
    annotations: { "cors-allow-origin": "not an origin", "cors-max-age": "x" },
  },
  {
    name: "enable-cors false",
    annotations: { "enable-cors": "false", "cors-allow-origin": "https://a.example.com" },
  },
  {
    name: "enable-cors with every field",
    annotations: {
      "enable-cors": "true",
      "cors-allow-origin": "https://A.example.com, https://*.example.org:8443",
      "cors-allow-methods": "GET, POST",
      "cors-allow-headers": "X-Custom, Content-Type",
      "cors-allow-credentials": "false",
      "cors-expose-headers": "X-Total, *",
      "cors-max-age": "600",
    },
    behaviour: {
      cors: {
        origins: ["https://a.example.com", "https://*.example.org:8443"],
        methods: "GET, POST",
        headers: "X-Custom, Content-Type",
        credentials: false,
        exposeHeaders: "X-Total, *",
        maxAgeSeconds: 600,
      },
    },
  },
  {
    name: "cors-allow-origin *",
    annotations: { "enable-cors": "true", "cors-allow-origin": "*" },
    behaviour: { cors: CORS_DEFAULTS },
  },
  {
    name: "cors-allow-origin mixing * with origins",
    annotations: { "enable-cors": "true", "cors-allow-origin": "*, https://a.example.com" },
    problems: ["cors-allow-origin"],
  },
  {
    name: "cors-allow-origin with a path",
    annotations: { "enable-cors": "true", "cors-allow-origin": "https://a.example.com/x" },
    problems: ["cors-allow-origin"],
  },
  {
    name: "cors-allow-origin with a wildcard in the middle",
    annotations: { "enable-cors": "true", "cors-allow-origin": "https://a.*.example.com" },
    problems: ["cors-allow-origin"],
  },
  {
    name: "cors-allow-methods with a header-injection attempt",
    annotations: { "enable-cors": "true", "cors-allow-methods": "GET\r\nX-Injected: 1" },
    problems: ["cors-allow-methods"],
  },
  {
    name: "cors-allow-headers with a quote",
    annotations: { "enable-cors": "true", "cors-allow-headers": "X-A'; more_set_headers 'X: y" },
    problems: ["cors-allow-headers"],
  },
  {
    name: "cors-max-age negative",
    annotations: { "enable-cors": "true", "cors-max-age": "-1" },
    problems: ["cors-max-age"],
  },
  {
    name: "enable-cors not a boolean",
    annotations: { "enable-cors": "yes" },
    problems: ["enable-cors"],
  },
  {
    name: "several invalid values: one problem each",
    annotations: {
      "ssl-redirect": "nope",
      "proxy-body-size": "big",
      "denylist-source-range": "x",
      "app-root": "/ok",
    },
    problems: ["ssl-redirect", "denylist-source-range", "proxy-body-size"],
    behaviour: { appRoot: "/ok" },
  },
];

for (const c of CASES) {
  Deno.test(`readIngressBehaviour() reads ${c.name}`, () => {
    const { behaviour, problems } = read(c.annotations);
    // With a problem the Ingress is refused (judgeAnnotations): what else was read is moot.
    if (c.problems === undefined || c.behaviour !== undefined) assertEquals(behaviour, c.behaviour);
    assertEquals(problems.map((p) => p.annotation).sort(), [...(c.problems ?? [])].sort());
    for (const p of problems) {
      if (c.annotations[p.annotation]!.trim() === "") continue;
      assertStringIncludes(p.problem, `"`);
    }
  });
}

const REDIRECTS: readonly [text: string, parts?: readonly LocationPart[]][] = [
  ["https://new.example.com", ["https://new.example.com"]],
  ["http://new.example.com:8080/x?y=1", ["http://new.example.com:8080/x?y=1"]],
  ["https://new.example.com$request_uri", ["https://new.example.com", { variable: "request_uri" }]],
  [
    "https://new.example.com${request_uri}",
    ["https://new.example.com", { variable: "request_uri" }],
  ],
  [
    "https://new.example.com/base$uri$is_args$args",
    [
      "https://new.example.com/base",
      { variable: "uri" },
      { variable: "is_args" },
      { variable: "args" },
    ],
  ],
  [
    "https://new.example.com/from/$scheme/$host",
    ["https://new.example.com/from/", { variable: "scheme" }, "/", { variable: "host" }],
  ],
  // A `$` not followed by a variable name is text.
  ["https://new.example.com/price$", ["https://new.example.com/price$"]],
  // Refused: a variable where the scheme or host is.
  ["$scheme://new.example.com/"],
  ["https://$host/"],
  ["https://${host}/"],
  ["$request_uri"],
  // Refused: variables outside the list.
  ["https://new.example.com/$http_x_target"],
  ["https://new.example.com/$cookie_session"],
  ["https://new.example.com/$arg_next"],
  ["https://new.example.com/$request_uri_x"],
  ["https://new.example.com/${http_host}"],
  // Refused: not an absolute http(s) URL.
  ["/relative"],
  ["//new.example.com/"],
  ["javascript:alert(1)"],
  ["ftp://new.example.com/"],
  [""],
  // Refused: text nginx would read as syntax, or write into the header.
  ["https://new.example.com/a b"],
  ["https://new.example.com/\r\nSet-Cookie: a=b"],
  ["https://new.example.com/;return 200"],
  ["https://new.example.com/'x'"],
  ['https://new.example.com/"x"'],
  ["https://new.example.com/{x}"],
  ["https://new.example.com/\\x"],
  ["https://new.example.com/\u007f"],
];

for (const [text, parts] of REDIRECTS) {
  Deno.test(`parseRedirectUrl() ${parts === undefined ? "refuses" : "accepts"} ${JSON.stringify(text)}`, () => {
    const parsed = parseRedirectUrl(text);
    if (parts === undefined) assertEquals(typeof parsed.problem, "string", JSON.stringify(parsed));
    else assertEquals(parsed, { value: [...parts] });
  });
}

Deno.test({
  name:
    "parseRedirectUrl() refuses a variable right after the host, where it would extend the host",
  // Was an open redirect: only the text before the first variable was checked for
  // `scheme://host`, so with `https://app.example.com$args` a request `GET /?@evil.example`
  // went to `https://app.example.com@evil.example` (host evil.example). `$uri` and
  // `$request_uri` always start with `/`, so `https://app.example.com$request_uri` stays valid.
  fn() {
    for (
      const text of [
        "https://app.example.com$args",
        "https://app.example.com.$host",
        "https://app.example.com$scheme",
        "https://app.example.com:$args",
        "https://user@app.example.com/",
        "https://evil.example\\@app.example.com/",
      ]
    ) {
      assertEquals(typeof parseRedirectUrl(text).problem, "string", text);
    }
    for (
      const text of [
        "https://app.example.com$request_uri",
        "https://app.example.com$uri",
        "https://app.example.com/$args",
        "https://app.example.com?$args",
        "https://app.example.com:8443/x$is_args$args",
      ]
    ) {
      assertEquals(parseRedirectUrl(text).problem, undefined, text);
    }
  },
});
