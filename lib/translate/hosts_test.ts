/**
 * Rule hosts: the table of normalisation and wildcard coverage cases, and odd
 * but valid hosts routed through `translate()` in their normal form.
 *
 * @module
 */
import { assertEquals } from "../../tests/support/assert.ts";
import { hostCoveredBy, normaliseRuleHost } from "./hosts.ts";
import {
  badIngress,
  onePath,
  PREFIX,
  routesOf,
  runBesideGood,
  SVC,
} from "../../tests/support/good_cluster.ts";
import { compileRouteTable } from "../routing/route_table.ts";

/** A host of `length` characters: four labels, the last three of 63. */
function nameOf(length: number): string {
  return `${"a".repeat(length - 3 * 64)}.${"b".repeat(63)}.${"c".repeat(63)}.${"d".repeat(63)}`;
}

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
    // RFC 1123 labels, as Kubernetes checks a rule host (IsDNS1123Subdomain): letters, digits
    // and hyphens, a letter or digit at each end, no empty label.
    ["-lead.test", null],
    ["trail-.test", null],
    ["shop.test-", null],
    ["shop.-test", null],
    ["-", null],
    ["*.-lead.test", null],
    ["*.trail-.test", null],
    ["a-b--c.test", "a-b--c.test"],
    ["a.b-c.d", "a.b-c.d"],
    ["0.test", "0.test"],
    ["a..b", null],
    [".a.test", null],
    ["a.test..", null],
    [".", null],
    ["*..test", null],
    // A 64-character label passes: Kubernetes caps only the whole name (253), not a label (63).
    [`${"a".repeat(63)}.test`, `${"a".repeat(63)}.test`],
    [`${"a".repeat(64)}.test`, `${"a".repeat(64)}.test`],
    [nameOf(253), nameOf(253)],
    [nameOf(254), null],
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

Deno.test("translate() routes odd but valid hosts in their normal form and a request finds them", () => {
  const cases: [raw: string, normal: string, request: string][] = [
    ["SHOP.Example.COM", "shop.example.com", "shop.example.com"],
    ["shop.example.com.", "shop.example.com", "Shop.Example.com.:8443"],
    ["*.Wild.Test.", "*.wild.test", "a.wild.test"],
    ["xn--bcher-kva.test", "xn--bcher-kva.test", "XN--BCHER-KVA.test"],
    ["*.1.2.3", "*.1.2.3", "a.1.2.3"],
    ["1.2.3.4.example", "1.2.3.4.example", "1.2.3.4.example"],
    [`${"a".repeat(63)}.${"b".repeat(63)}.${"c".repeat(63)}.${"d".repeat(61)}`, "", ""],
  ];
  for (const [raw, normalIn, requestIn] of cases) {
    const normal = normalIn === "" ? raw : normalIn;
    const request = requestIn === "" ? raw : requestIn;
    const translation = runBesideGood(
      {
        ingresses: [badIngress("odd", onePath(PREFIX(SVC({ number: 80 }), "/"), raw))],
      },
      {},
      raw,
    );
    assertEquals(routesOf(translation, "bad/odd").map((r) => r.host), [normal], raw);
    const match = compileRouteTable(translation).lookup(request, "/");
    assertEquals(match?.ingress, "bad/odd", raw);
  }
});
