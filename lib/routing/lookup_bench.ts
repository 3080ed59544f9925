/**
 * Lookup cost of the compiled route table for 100, 1,000 and 10,000
 * Ingresses (5 paths each), against a linear scan over all routes in the same
 * run. Target: compiled lookup flat within 2× from 100 to 10,000 Ingresses and
 * under 2 µs.
 *
 *   tools/deno bench -A lib/routing/lookup_bench.ts
 *
 * @module
 */

import { translate } from "../translate/translate.ts";
import type { Translation } from "../translate/translation.ts";
import { canonicalPrefix } from "../translate/paths.ts";
import { compileRouteTable } from "./route_table.ts";
import { normaliseRequestHost } from "./host.ts";
import { BENCH_OPTIONS, benchCluster, benchRequests } from "../../tests/support/bench_cluster.ts";

/** The baseline: test every route on every request, keep the best. */
function linearScan(translation: Translation) {
  const routes = translation.routes.map((route) => ({
    route,
    wildcard: route.host.startsWith("*.") ? route.host.slice(1) : undefined,
    prefix: route.pathType === "Prefix" ? canonicalPrefix(route.path) : "",
  }));
  return (rawHost: string, path: string) => {
    const host = normaliseRequestHost(rawHost);
    let best: (typeof routes)[number] | undefined;
    let bestRank = Infinity;
    for (const candidate of routes) {
      const { route, wildcard, prefix } = candidate;
      const hostRank = route.host === host
        ? 0
        : wildcard !== undefined && host.endsWith(wildcard) &&
            host.indexOf(".") === host.length - wildcard.length
        ? 1
        : route.host === ""
        ? 2
        : -1;
      if (hostRank < 0) continue;
      let length: number;
      if (route.pathType === "Exact") length = route.path === path ? path.length + 0.5 : -1;
      else if (route.pathType === "Prefix") {
        length = path === prefix || path.startsWith(prefix + "/") ? prefix.length : -1;
      } else length = 0;
      if (length < 0) continue;
      const rank = hostRank * 1e6 - length + (route.pathType === "Default" ? 1e5 : 0);
      if (rank < bestRank) {
        bestRank = rank;
        best = candidate;
      }
    }
    return best?.route;
  };
}

for (const n of [100, 1_000, 10_000]) {
  const translation = translate(benchCluster(n), BENCH_OPTIONS);
  const table = compileRouteTable(translation);
  const scan = linearScan(translation);
  const requests = benchRequests(n);
  // Sanity: both engines agree on which route wins (the baseline is a real matcher).
  for (const [host, path] of requests) {
    const a = table.lookup(host, path);
    const b = scan(host, path);
    if ((a?.ingress ?? "") !== (b?.ingress ?? "") || (a?.path ?? "") !== (b?.path ?? "")) {
      throw new Error(`Cannot benchmark: engines disagree on ${host} ${path}`);
    }
  }
  let i = 0;
  let sink = 0;
  Deno.bench({
    name: `lookup, compiled table, ${n} Ingresses`,
    group: `lookup ${n}`,
    fn: () => {
      const [host, path] = requests[i++ & 1023]!;
      sink += table.lookup(host, path) === undefined ? 0 : 1;
    },
  });
  Deno.bench({
    name: `lookup, linear scan, ${n} Ingresses`,
    group: `lookup ${n}`,
    baseline: true,
    fn: () => {
      const [host, path] = requests[i++ & 1023]!;
      sink += scan(host, path) === undefined ? 0 : 1;
    },
  });
  Deno.bench({
    name: `lookup, compiled table, ${n} Ingresses (flatness)`,
    group: "lookup flatness",
    baseline: n === 100,
    fn: () => {
      const [host, path] = requests[i++ & 1023]!;
      sink += table.lookup(host, path) === undefined ? 0 : 1;
    },
  });
  if (sink < 0) throw new Error("unreachable");
}
