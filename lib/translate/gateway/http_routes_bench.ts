/**
 * HTTPRoute processing at 1,000 routes on one Gateway after one route
 * changed: with the memo of compiled routes (`http_route_memo.ts`) kept from
 * the previous rebuild, against processing every route from scratch
 * (baseline).
 *
 *   tools/deno bench -A lib/translate/gateway/http_routes_bench.ts
 *
 * @module
 */
import type { Service } from "../../k8s/objects.ts";
import type { Issue } from "../issues.ts";
import { processGateways } from "./gateways.ts";
import type { HttpRouteMemo } from "./http_route_memo.ts";
import { processHttpRoutes } from "./http_routes.ts";
import type { Gateway, HTTPRoute } from "./types.ts";

const ROUTES = 1_000;
const NOW = "2030-01-01T00:00:00Z";
const gateway: Gateway = {
  metadata: { namespace: "bench", name: "gateway" },
  spec: { gatewayClassName: "sluice", listeners: [{ name: "http", port: 80, protocol: "HTTP" }] },
};
const services = new Map<string, Service>([["bench/web", {
  metadata: { namespace: "bench", name: "web" },
  spec: { ports: [{ name: "http", port: 80 }] },
}]]);
const route = (i: number, host: string): HTTPRoute => ({
  metadata: { namespace: "bench", name: `route-${i}`, generation: 1 },
  spec: {
    parentRefs: [{ name: "gateway" }],
    hostnames: [host],
    rules: [{ backendRefs: [{ name: "web", port: 80 }] }],
  },
});
const routes = Array.from({ length: ROUTES }, (_, i) => route(i, `route-${i}.bench.test`));

/** One rebuild's HTTPRoute processing, after route `changed` got a new host. */
function rebuild(changed: number, memo: HttpRouteMemo | undefined): number {
  routes[changed % ROUTES] = route(changed % ROUTES, `changed-${changed}.bench.test`);
  const issues: Issue[] = [];
  const gateways = processGateways([gateway], {
    ourClasses: new Set(["sluice"]),
    secrets: new Map(),
    grants: [],
    now: NOW,
    issues,
  });
  return processHttpRoutes(routes, {
    controllerName: "sluice.dev/ingress-controller",
    gateways: new Map(gateways.map((g) => [g.key, g])),
    namespaceLabels: new Map(),
    services,
    grants: [],
    now: NOW,
    issues,
    memo,
  }).placed.length;
}

let fresh = 0;
Deno.bench({
  name: "1,000 HTTPRoutes, one changed: every route compiled",
  group: "httproutes",
  baseline: true,
  fn: () => void rebuild(fresh++, undefined),
});

const memo: HttpRouteMemo = new WeakMap();
let remembered = 0;
Deno.bench({
  name: "1,000 HTTPRoutes, one changed: the others from the memo",
  group: "httproutes",
  fn: () => void rebuild(remembered++, memo),
});
