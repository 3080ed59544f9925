/**
 * Table of rule host normalisation and wildcard coverage cases.
 *
 * @module
 */

import { assertEquals } from "../../tests/support/assert.ts";
import { hostCoveredBy, normaliseRuleHost } from "./hosts.ts";

Deno.test("normaliseRuleHost() lowercases, drops a trailing dot and rejects what the spec forbids", () => {
  const cases: [unknown, string | null][] = [
    [undefined, ""],
    ["", ""],
    ["shop.example.com", "shop.example.com"],
    ["Shop.Example.COM.", "shop.example.com"],
    ["*.example.com", "*.example.com"],
    ["*.Example.com", "*.example.com"],
    ["localhost", "localhost"],
    ["xn--bcher-kva.example", "xn--bcher-kva.example"],
    ["*", null],
    ["*.", null],
    ["a.*.com", null],
    ["*a.example.com", null],
    ["*.*.example.com", null],
    ["shop.example.com:80", null],
    ["10.0.0.1", null],
    ["[::1]", null],
    ["under_score.test", null],
    ["-lead.test", null],
    ["a..b", null],
    ["a".repeat(254), null],
    [5, null],
  ];
  for (const [input, expected] of cases) {
    const result = normaliseRuleHost(input);
    assertEquals(result.ok ? result.host : null, expected, String(input));
  }
});

Deno.test("hostCoveredBy() matches equal hosts and one-label wildcards", () => {
  const cases: [string, string, boolean][] = [
    ["a.example.com", "a.example.com", true],
    ["a.example.com", "*.example.com", true],
    ["example.com", "*.example.com", false],
    ["a.b.example.com", "*.example.com", false],
    ["*.example.com", "*.example.com", true],
    ["*.a.example.com", "*.example.com", false],
    ["a.example.com", "b.example.com", false],
  ];
  for (const [host, pattern, covered] of cases) {
    assertEquals(hostCoveredBy(host, pattern), covered, `${host} by ${pattern}`);
  }
});
