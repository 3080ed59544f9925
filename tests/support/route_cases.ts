/**
 * Test support: the one shared table of routing cases,
 * `(Ingresses, host, path) → expected backend or status`, run against the
 * compiled route table and against the reference matcher.
 *
 * Expected values: a Service name (`web` means backend `default/web:80`,
 * served), `503 <service>` (the route exists, the backend cannot serve), or
 * `404` (nothing matches). A fourth element, when present, is the expected
 * `Match.tls`.
 *
 * @module
 */

import type { IngressSketch } from "./route_world.ts";

/** One request and what it should get. */
export type RouteRequest = readonly [host: string, path: string, expected: string, tls?: boolean];

/** A set of Ingresses and requests against them. */
export interface RouteCase {
  readonly name: string;
  readonly ingresses: readonly IngressSketch[];
  /** `--default-backend-service`. */
  readonly defaultBackendService?: string;
  readonly requests: readonly RouteRequest[];
}

const H = "shop.example.com";

/** One Ingress on host `shop.example.com` with the given paths. */
function paths(...list: [path: string, pathType: string, service: string][]): IngressSketch[] {
  return [{ name: "docs", rules: [[H, list]] }];
}

/**
 * Every row of the path-matching table in the Kubernetes Ingress documentation
 * ("Examples" under "Path types"), then Sluice's host, merge and default rules.
 */
export const ROUTE_CASES: readonly RouteCase[] = [
  // --- Kubernetes docs, Ingress "Examples" table, row by row -----------------
  {
    name: "docs: Prefix / matches all paths",
    ingresses: paths(["/", "Prefix", "root"]),
    requests: [[H, "/", "root"], [H, "/foo", "root"], [H, "/foo/bar/", "root"], [H, "//x", "root"]],
  },
  {
    name: "docs: Exact /foo matches /foo",
    ingresses: paths(["/foo", "Exact", "foo"]),
    requests: [[H, "/foo", "foo"]],
  },
  {
    name: "docs: Exact /foo does not match /bar",
    ingresses: paths(["/foo", "Exact", "foo"]),
    requests: [[H, "/bar", "404"]],
  },
  {
    name: "docs: Exact /foo does not match /foo/",
    ingresses: paths(["/foo", "Exact", "foo"]),
    requests: [[H, "/foo/", "404"]],
  },
  {
    name: "docs: Exact /foo/ does not match /foo",
    ingresses: paths(["/foo/", "Exact", "foo"]),
    requests: [[H, "/foo", "404"], [H, "/foo/", "foo"]],
  },
  {
    name: "docs: Prefix /foo matches /foo and /foo/",
    ingresses: paths(["/foo", "Prefix", "foo"]),
    requests: [[H, "/foo", "foo"], [H, "/foo/", "foo"]],
  },
  {
    name: "docs: Prefix /foo/ matches /foo and /foo/",
    ingresses: paths(["/foo/", "Prefix", "foo"]),
    requests: [[H, "/foo", "foo"], [H, "/foo/", "foo"]],
  },
  {
    name: "docs: Prefix /aaa/bb does not match /aaa/bbb",
    ingresses: paths(["/aaa/bb", "Prefix", "bb"]),
    requests: [[H, "/aaa/bbb", "404"]],
  },
  {
    name: "docs: Prefix /aaa/bbb matches /aaa/bbb",
    ingresses: paths(["/aaa/bbb", "Prefix", "bbb"]),
    requests: [[H, "/aaa/bbb", "bbb"]],
  },
  {
    name: "docs: Prefix /aaa/bbb/ matches /aaa/bbb, ignoring the trailing slash",
    ingresses: paths(["/aaa/bbb/", "Prefix", "bbb"]),
    requests: [[H, "/aaa/bbb", "bbb"]],
  },
  {
    name: "docs: Prefix /aaa/bbb matches /aaa/bbb/, matching the trailing slash",
    ingresses: paths(["/aaa/bbb", "Prefix", "bbb"]),
    requests: [[H, "/aaa/bbb/", "bbb"]],
  },
  {
    name: "docs: Prefix /aaa/bbb matches the subpath /aaa/bbb/ccc",
    ingresses: paths(["/aaa/bbb", "Prefix", "bbb"]),
    requests: [[H, "/aaa/bbb/ccc", "bbb"]],
  },
  {
    name: "docs: Prefix /aaa/bbb does not match the string prefix /aaa/bbbxyz",
    ingresses: paths(["/aaa/bbb", "Prefix", "bbb"]),
    requests: [[H, "/aaa/bbbxyz", "404"]],
  },
  {
    name: "docs: Prefix / and /aaa: /aaa/ccc matches /aaa",
    ingresses: paths(["/", "Prefix", "root"], ["/aaa", "Prefix", "aaa"]),
    requests: [[H, "/aaa/ccc", "aaa"]],
  },
  {
    name: "docs: Prefix /, /aaa and /aaa/bbb: /aaa/bbb matches /aaa/bbb",
    ingresses: paths(["/", "Prefix", "root"], ["/aaa", "Prefix", "aaa"], [
      "/aaa/bbb",
      "Prefix",
      "bbb",
    ]),
    requests: [[H, "/aaa/bbb", "bbb"]],
  },
  {
    name: "docs: Prefix /, /aaa and /aaa/bbb: /ccc matches /",
    ingresses: paths(["/", "Prefix", "root"], ["/aaa", "Prefix", "aaa"], [
      "/aaa/bbb",
      "Prefix",
      "bbb",
    ]),
    requests: [[H, "/ccc", "root"]],
  },
  {
    name: "docs: Prefix /aaa: /ccc uses the default backend",
    ingresses: [{
      name: "docs",
      rules: [[H, [["/aaa", "Prefix", "aaa"]]]],
      defaultBackend: "dflt",
    }],
    requests: [[H, "/ccc", "dflt"], [H, "/aaa", "aaa"]],
  },
  {
    name: "docs: Prefix /foo and Exact /foo: /foo prefers Exact",
    ingresses: paths(["/foo", "Prefix", "prefix"], ["/foo", "Exact", "exact"]),
    requests: [[H, "/foo", "exact"], [H, "/foo/", "prefix"], [H, "/foo/x", "prefix"]],
  },

  // --- Paths ------------------------------------------------------------------
  {
    name: "Exact beats Prefix of the same path whatever the order",
    ingresses: [
      { name: "a", created: 1, rules: [[H, [["/p", "Exact", "exact"]]]] },
      { name: "b", created: 2, rules: [[H, [["/p", "Prefix", "prefix"]]]] },
      {
        name: "c",
        created: 3,
        rules: [[H, [["/q", "Prefix", "prefix"], ["/q", "Exact", "exact"]]]],
      },
    ],
    requests: [[H, "/p", "exact"], [H, "/q", "exact"], [H, "/q/1", "prefix"]],
  },
  {
    name: "the longest matching path wins across merged Ingresses",
    ingresses: [
      { name: "short", created: 1, rules: [[H, [["/a", "Prefix", "short"]]]] },
      { name: "long", created: 2, rules: [[H, [["/a/b/c", "Prefix", "long"]]]] },
      { name: "mid", created: 3, namespace: "other", rules: [[H, [["/a/b", "Prefix", "mid"]]]] },
    ],
    requests: [
      [H, "/a/b/c/d", "long"],
      [H, "/a/b/cd", "other/mid:80"],
      [H, "/a/bc", "short"],
      [H, "/ab", "404"],
    ],
  },
  {
    name: "Exact paths are case-sensitive and Prefix paths too",
    ingresses: paths(["/Foo", "Exact", "exact"], ["/Bar", "Prefix", "prefix"]),
    requests: [[H, "/foo", "404"], [H, "/Foo", "exact"], [H, "/bar/x", "404"], [
      H,
      "/Bar/x",
      "prefix",
    ]],
  },
  {
    name: "ImplementationSpecific behaves as Prefix",
    ingresses: paths(["/impl", "ImplementationSpecific", "impl"]),
    requests: [[H, "/impl", "impl"], [H, "/impl/x", "impl"], [H, "/implx", "404"]],
  },
  {
    name: "query strings never take part in matching",
    ingresses: paths(["/search", "Exact", "search"], ["/", "Prefix", "root"]),
    requests: [[H, "/search?q=1", "search"], [H, "/search/?q=1", "root"], [H, "/?/search", "root"]],
  },
  {
    name: "an empty path, or one empty before its query, is read as /",
    ingresses: paths(["/", "Exact", "root"]),
    requests: [[H, "", "root"], [H, "/", "root"], [H, "?q=1", "root"], [H, "?", "root"]],
  },
  {
    name: "repeated slashes in a request are elements of their own",
    ingresses: paths(["/a", "Prefix", "a"], ["/a/b", "Prefix", "ab"]),
    requests: [[H, "/a//b", "a"], [H, "/a/b//", "ab"], [H, "//a", "404"]],
  },

  {
    name: "rule paths a URL cannot hold raw match the percent-encoded request path",
    ingresses: paths(["/über", "Prefix", "uber"], ["/a b", "Exact", "space"], [
      "/q?x",
      "Exact",
      "question",
    ]),
    requests: [
      [H, "/%C3%BCber", "uber"],
      [H, "/%C3%BCber/stra%C3%9Fe", "uber"],
      [H, "/%C3%BCberall", "404"],
      [H, "/a%20b", "space"],
      [H, "/q%3Fx", "question"],
      [H, "/q?x", "404"],
    ],
  },
  {
    name: "escapes in rule paths compare in normal form: unreserved decoded, others uppercase",
    ingresses: paths(["/caf%c3%a9", "Exact", "cafe"], ["/%7Euser", "Prefix", "tilde"]),
    requests: [
      [H, "/caf%C3%A9", "cafe"],
      [H, "/~user/x", "tilde"],
      [H, "/%7Euser", "404"],
    ],
  },

  // --- Hosts ------------------------------------------------------------------
  {
    name: "an exact host beats a wildcard host",
    ingresses: [
      { name: "wild", created: 1, rules: [["*.example.com", [["/", "Prefix", "wild"]]]] },
      { name: "exact", created: 2, rules: [[H, [["/", "Prefix", "exact"]]]] },
    ],
    requests: [[H, "/", "exact"], ["other.example.com", "/", "wild"]],
  },
  {
    name: "a wildcard host matches exactly one label",
    ingresses: [{ name: "wild", rules: [["*.example.com", [["/", "Prefix", "wild"]]]] }],
    requests: [
      ["a.example.com", "/", "wild"],
      ["example.com", "/", "404"],
      ["a.b.example.com", "/", "404"],
      [".example.com", "/", "404"],
      ["aexample.com", "/", "404"],
    ],
  },
  {
    name: "request hosts are matched case-insensitively without port or trailing dot",
    ingresses: [{
      name: "h",
      rules: [[H, [["/", "Prefix", "web"]]], ["*.wild.test", [[
        "/",
        "Prefix",
        "wild",
      ]]]],
    }],
    requests: [
      ["SHOP.Example.COM", "/", "web"],
      ["shop.example.com:8443", "/", "web"],
      ["shop.example.com.", "/", "web"],
      ["Shop.Example.Com.:80", "/", "web"],
      ["A.Wild.Test:1", "/", "wild"],
      ["shop.example.co", "/", "404"],
    ],
  },
  {
    name: "rule hosts are matched case-insensitively",
    ingresses: [{ name: "h", rules: [["Shop.EXAMPLE.com", [["/", "Prefix", "web"]]]] }],
    requests: [[H, "/", "web"], ["SHOP.example.com", "/x", "web"]],
  },
  {
    name: "a rule without host matches any host, after host-specific rules",
    ingresses: [
      {
        name: "any",
        created: 1,
        rules: [["", [["/", "Prefix", "any"], ["/api", "Prefix", "any-api"]]]],
      },
      { name: "host", created: 2, rules: [[H, [["/api", "Prefix", "host-api"]]]] },
    ],
    requests: [
      [H, "/api/x", "host-api"],
      [H, "/other", "any"],
      ["unknown.test", "/api", "any-api"],
      ["10.0.0.1:8080", "/", "any"],
      ["[::1]:8080", "/api", "any-api"],
      ["::1", "/", "any"],
      ["", "/", "any"],
    ],
  },
  {
    name: "an exact host falls through to the wildcard host, then to rules without host",
    ingresses: [
      { name: "exact", rules: [[H, [["/checkout", "Prefix", "exact"]]]] },
      { name: "wild", rules: [["*.example.com", [["/static", "Prefix", "wild"]]]] },
      { name: "any", rules: [["", [["/", "Prefix", "any"]]]] },
    ],
    requests: [[H, "/checkout", "exact"], [H, "/static/a.css", "wild"], [H, "/", "any"]],
  },
  {
    name: "the host tier decides before the path length",
    ingresses: [
      { name: "exact", rules: [[H, [["/", "Prefix", "exact"]]]] },
      { name: "any", rules: [["", [["/very/long/path", "Prefix", "any"]]]] },
    ],
    requests: [[H, "/very/long/path", "exact"], ["x.test", "/very/long/path", "any"]],
  },
  {
    name: "rules for the same host from several namespaces merge",
    ingresses: [
      { name: "cart", namespace: "cart", rules: [[H, [["/cart", "Prefix", "web"]]]] },
      { name: "shop", namespace: "shop", rules: [[H, [["/", "Prefix", "web"]]]] },
    ],
    requests: [[H, "/cart/1", "cart/web:80"], [H, "/", "shop/web:80"]],
  },
  {
    name: "a conflict goes to the oldest Ingress, then by namespace/name",
    ingresses: [
      { name: "new", created: 20, rules: [[H, [["/x", "Prefix", "new"]]]] },
      { name: "old", created: 10, rules: [[H, [["/x/", "Prefix", "old"]]]] },
      { name: "b", namespace: "tie", created: 5, rules: [[H, [["/y", "Exact", "tie-b"]]]] },
      { name: "a", namespace: "tie", created: 5, rules: [[H, [["/y", "Exact", "tie-a"]]]] },
    ],
    requests: [[H, "/x", "old"], [H, "/y", "tie/tie-a:80"]],
  },

  // --- Default backends -------------------------------------------------------
  {
    name: "an Ingress default backend catches unmatched paths of its hosts only",
    ingresses: [
      { name: "a", rules: [[H, [["/a", "Prefix", "a"]]]], defaultBackend: "a-default" },
      { name: "b", rules: [["b.example.com", [["/b", "Prefix", "b"]]]] },
    ],
    requests: [[H, "/a", "a"], [H, "/zzz", "a-default"], ["b.example.com", "/zzz", "404"]],
  },
  {
    name: "a host's default backend comes before rules without host",
    ingresses: [
      { name: "a", rules: [[H, [["/a", "Prefix", "a"]]]], defaultBackend: "a-default" },
      { name: "any", rules: [["", [["/", "Prefix", "any"]]]] },
    ],
    requests: [[H, "/zzz", "a-default"], ["x.test", "/zzz", "any"]],
  },
  {
    name: "a stand-alone default backend catches any host no rule matches",
    ingresses: [
      { name: "catch-all", defaultBackend: "catch" },
      { name: "a", rules: [[H, [["/a", "Prefix", "a"]]]] },
      { name: "any", rules: [["", [["/api", "Exact", "any-api"]]]] },
    ],
    requests: [
      [H, "/a", "a"],
      [H, "/b", "catch"],
      ["x.test", "/", "catch"],
      ["x.test", "/api", "any-api"],
    ],
  },
  {
    name: "of several stand-alone default backends the oldest wins",
    ingresses: [
      { name: "newer", created: 9, defaultBackend: "newer" },
      { name: "older", created: 1, defaultBackend: "older" },
    ],
    requests: [["x.test", "/", "older"]],
  },
  {
    name: "the controller-wide default backend answers what no Ingress matches",
    ingresses: [
      { name: "a", rules: [[H, [["/a", "Prefix", "a"]]]] },
      {
        name: "fallback",
        namespace: "sluice",
        rules: [["fallback.test", [["/", "Prefix", "fallback"]]]],
      },
    ],
    defaultBackendService: "sluice/fallback",
    requests: [[H, "/a", "a"], [H, "/b", "sluice/fallback"], ["x.test", "/", "sluice/fallback"]],
  },
  {
    name: "a missing controller-wide default backend Service answers 503",
    ingresses: [{ name: "a", rules: [[H, [["/a", "Prefix", "a"]]]] }],
    defaultBackendService: "sluice/missing:http",
    requests: [[H, "/b", "503 sluice/missing:http"]],
  },
  {
    name: "nothing matches without any default backend: 404",
    ingresses: [{ name: "a", rules: [[H, [["/a", "Exact", "a"]]]] }],
    requests: [[H, "/b", "404"], ["x.test", "/a", "404"]],
  },

  // --- Backends and TLS -------------------------------------------------------
  {
    name: "a route to a missing Service exists and answers 503",
    ingresses: [{
      name: "a",
      rules: [[H, [["/gone", "Prefix", "missing"], ["/", "Prefix", "web"]]]],
    }],
    requests: [[H, "/gone/x", "503 missing"], [H, "/x", "web"]],
  },
  {
    name: "Match.tls is set for hosts listed in spec.tls of our Ingresses",
    ingresses: [
      { name: "a", rules: [[H, [["/", "Prefix", "web"]]]], tlsHosts: [H] },
      {
        name: "w",
        rules: [["*.secure.test", [["/", "Prefix", "wild"]]]],
        tlsHosts: ["*.secure.test"],
      },
      { name: "any", rules: [["", [["/", "Prefix", "any"]]]] },
    ],
    requests: [
      [H, "/", "web", true],
      ["SHOP.example.com:443", "/", "web", true],
      ["a.secure.test", "/", "wild", true],
      ["a.b.secure.test", "/", "any", false],
      ["plain.test", "/", "any", false],
      ["www.shop.example.com", "/", "any", false],
    ],
  },
];

/** Turns an expected value into `{ key, status }`. */
export function expectedOf(expected: string): { key: string; status: 200 | 503 } | undefined {
  if (expected === "404") return undefined;
  const unavailable = expected.startsWith("503 ");
  const name = unavailable ? expected.slice(4) : expected;
  const key = name.includes("/") ? name : `default/${name}:80`;
  return { key, status: unavailable ? 503 : 200 };
}
