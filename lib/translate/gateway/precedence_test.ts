import { assertEquals } from "../../../tests/support/assert.ts";
import { comparePrecedence, type RankedEntry } from "./precedence.ts";
import type { RouteMatch } from "./types.ts";

function ranked(
  over: { route?: string; rule?: number; match?: number; hostname?: string; created?: string },
  matches: Partial<RouteMatch> = {},
): RankedEntry {
  return {
    created: over.created ?? "2030-01-01T00:00:00Z",
    entry: {
      route: over.route ?? "ns/r",
      rule: over.rule ?? 0,
      match: over.match ?? 0,
      hostname: over.hostname ?? "",
      matches: {
        path: { type: "PathPrefix", value: "/" },
        headers: [],
        queryParams: [],
        ...matches,
      },
      filters: [],
      backends: [],
    },
  };
}

const h = { name: "x", value: "1" };

Deno.test("comparePrecedence() orders by each criterion of the spec in turn", () => {
  // [winner, loser, criterion]
  const cases: [RankedEntry, RankedEntry, string][] = [
    [
      ranked({ hostname: "a.example.com" }),
      ranked({ hostname: "*.example.com" }),
      "exact hostname",
    ],
    [
      ranked({ hostname: "*.a.example.com" }),
      ranked({ hostname: "*.example.com" }),
      "longer wildcard",
    ],
    [ranked({ hostname: "*.example.com" }), ranked({ hostname: "" }), "any hostname last"],
    [
      ranked({}, { path: { type: "Exact", value: "/a" } }),
      ranked({}, { path: { type: "PathPrefix", value: "/abc" } }),
      "Exact first",
    ],
    [
      ranked({}, { path: { type: "PathPrefix", value: "/abc" } }),
      ranked({}, { path: { type: "PathPrefix", value: "/a" } }),
      "longest prefix",
    ],
    [ranked({}, { method: "GET" }), ranked({}, { headers: [h, h] }), "method before headers"],
    [
      ranked({}, { headers: [h, h] }),
      ranked({}, { headers: [h], queryParams: [h, h] }),
      "most headers",
    ],
    [ranked({}, { queryParams: [h] }), ranked({}), "most query params"],
    [
      ranked({ route: "z/z", created: "2029-01-01T00:00:00Z" }),
      ranked({ route: "a/a" }),
      "oldest route",
    ],
    [ranked({ route: "a/a" }), ranked({ route: "b/a" }), "namespace/name"],
    [ranked({ rule: 0, match: 5 }), ranked({ rule: 1, match: 0 }), "first rule"],
    [ranked({ match: 0 }), ranked({ match: 1 }), "first match"],
  ];
  for (const [winner, loser, criterion] of cases) {
    assertEquals(comparePrecedence(winner, loser) < 0, true, criterion);
    assertEquals(comparePrecedence(loser, winner) > 0, true, `${criterion} (reversed)`);
  }
  assertEquals(comparePrecedence(ranked({}), ranked({})), 0);
});
