/**
 * Table of path and pathType validation cases.
 *
 * @module
 */

import { assertEquals } from "../../tests/support/assert.ts";
import { canonicalPrefix, normalRulePath, validatePath } from "./paths.ts";

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
