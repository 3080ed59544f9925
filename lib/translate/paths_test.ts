/**
 * Rule paths: the table of path and pathType validation cases, and through
 * `translate()` ImplementationSpecific paths that look like regexes kept
 * literal, 10,000 paths of one Ingress and a 1 MB Exact path.
 *
 * @module
 */
import { assertEquals } from "../../tests/support/assert.ts";
import { canonicalPrefix, normalRulePath, validatePath } from "./paths.ts";
import {
  badIngress,
  issuesOf,
  PREFIX,
  routesOf,
  runBesideGood,
  SVC,
} from "../../tests/support/good_cluster.ts";
import { compileRouteTable } from "../routing/route_table.ts";

Deno.test("validatePath() accepts Exact and Prefix, reads ImplementationSpecific as Prefix", () => {
  const cases: [unknown, unknown, string][] = [
    ["/foo", "Exact", "Exact /foo"],
    ["/foo/", "Prefix", "Prefix /foo/"],
    ["/", "Prefix", "Prefix /"],
    ["/foo", "ImplementationSpecific", "Prefix /foo"],
    [undefined, "ImplementationSpecific", "Prefix /"],
    ["", "ImplementationSpecific", "Prefix /"],
    ["/a//b", "ImplementationSpecific", "Prefix /a//b"],
    ["/foo", undefined, "pathType"],
    ["/foo", "Regex", "pathType"],
    ["/foo", "exact", "pathType"],
    ["foo", "Prefix", "path"],
    [undefined, "Exact", "path"],
    [7, "Prefix", "path"],
    ["/a//b", "Prefix", "path"],
    ["/a/./b", "Exact", "path"],
    ["/a/../b", "Prefix", "path"],
    ["/a/.", "Prefix", "path"],
    ["/a/..", "Exact", "path"],
    ["/a%2fb", "Prefix", "path"],
    ["relative", "ImplementationSpecific", "path"],
  ];
  for (const [path, pathType, expected] of cases) {
    const result = validatePath(path, pathType);
    assertEquals(
      result.ok ? `${result.pathType} ${result.path}` : result.field,
      expected,
      `${path} ${pathType}`,
    );
  }
});

Deno.test("canonicalPrefix() removes trailing slashes so / becomes empty", () => {
  const cases: [string, string][] = [["/", ""], ["/foo", "/foo"], ["/foo/", "/foo"], [
    "/foo//",
    "/foo",
  ], ["//", ""]];
  for (const [input, expected] of cases) assertEquals(canonicalPrefix(input), expected, input);
});

Deno.test("normalRulePath() brings rule paths to the normal form requests are routed in", () => {
  const cases: [string, string][] = [
    ["/foo", "/foo"],
    ["/foo/", "/foo/"],
    ["/", "/"],
    ["/api//v1", "/api/v1"],
    ["//", "/"],
    ["/a/./b", "/a/b"],
    ["/a/b/..", "/a/"],
    ["/..", "/"],
    ["/a/%2e%2E/b", "/b"],
    ["/a\\b", "/a/b"],
    ["/über", "/%C3%BCber"],
    ["/a%2fb", "/a%2Fb"],
    ["/a..b/.c", "/a..b/.c"],
    ["/q?x", "/q%3Fx"],
  ];
  for (const [input, expected] of cases) assertEquals(normalRulePath(input), expected, input);
});

Deno.test("translate() keeps ImplementationSpecific paths that look like regexes literal", () => {
  const paths = ["/api/(.*)", "/v[0-9]+/", "/files/*", "/a|b", "/x$", "/(?<name>.)"].map((
    path,
  ) => ({ path, pathType: "ImplementationSpecific", backend: SVC({ number: 80 }) }));
  const translation = runBesideGood({
    ingresses: [badIngress("regex", { rules: [{ host: "re.test", http: { paths } }] })],
  });
  assertEquals(routesOf(translation, "bad/regex").map((r) => `${r.pathType} ${r.path}`).sort(), [
    "Prefix /(?<name>.)",
    "Prefix /api/(.*)",
    "Prefix /a|b",
    "Prefix /files/*",
    "Prefix /v[0-9]+/",
    "Prefix /x$",
  ]);
  const table = compileRouteTable(translation);
  // Taken literally: none of them matches what a regex would.
  assertEquals(table.lookup("re.test", "/api/v1"), undefined);
  assertEquals(table.lookup("re.test", "/v1/"), undefined);
  assertEquals(table.lookup("re.test", "/files/a"), undefined);
  assertEquals(table.lookup("re.test", "/a"), undefined);
  assertEquals(table.lookup("re.test", "/files/*/a")?.path, "/files/*");
  assertEquals(table.lookup("re.test", "/x$")?.path, "/x$");
});

Deno.test("translate() routes 10,000 paths of one Ingress and a 1 MB Exact path", () => {
  const paths: unknown[] = Array.from(
    { length: 10_000 },
    (_, i) => PREFIX(SVC({ number: 80 }), `/p${i}`),
  );
  const long = `/${"a".repeat(1 << 20)}`;
  paths.push({ path: long, pathType: "Exact", backend: SVC({ number: 80 }) });
  const translation = runBesideGood({
    ingresses: [badIngress("many", { rules: [{ host: "many.test", http: { paths } }] })],
    services: [{ metadata: { namespace: "bad", name: "web" }, spec: { ports: [{ port: 80 }] } }],
  });
  assertEquals(routesOf(translation, "bad/many").length, 10_001);
  const table = compileRouteTable(translation);
  assertEquals(table.lookup("many.test", "/p9999/x")?.path, "/p9999");
  assertEquals(table.lookup("many.test", long)?.pathType, "Exact");
  assertEquals(table.lookup("many.test", `${long}/`), undefined);
  // One issue for the backend without endpoints, not one per path.
  assertEquals(issuesOf(translation, "bad", "many").length, 1);
});
