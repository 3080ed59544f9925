/**
 * A hand-written routing snapshot for proxy tests: implements the
 * `RouteTable`/`Snapshot` contract of `lib/routing/snapshot.ts` directly
 * (exact and one-label wildcard hosts, Exact and Prefix paths, longest path
 * wins, host rules before host-less ones), so proxy tests do not depend on the
 * compiled table.
 *
 * @module
 */

import type {
  CertificateTable,
  Endpoint,
  Match,
  RouteTable,
  Snapshot,
} from "../../lib/routing/snapshot.ts";

/** One rule of the test table. */
export interface StaticRoute {
  /** Exact host, `*.wildcard`, or omitted for any host. */
  readonly host?: string;
  /** Default "/". */
  readonly path?: string;
  /** Default "Prefix". */
  readonly pathType?: "Exact" | "Prefix";
  readonly endpoints: readonly Endpoint[];
  /** Default false. */
  readonly tls?: boolean;
  /** Default "test/ingress". */
  readonly ingress?: string;
  /** Default "test/service". */
  readonly service?: string;
  /** Backend key; default `${service}:80`. */
  readonly key?: string;
}

/** Builds a snapshot from rules; certificates are not used by the proxy. */
export function staticSnapshot(routes: readonly StaticRoute[], version = 1): Snapshot {
  return { version, routes: staticRouteTable(routes), certificates: NO_CERTIFICATES };
}

/** The route table alone. */
export function staticRouteTable(routes: readonly StaticRoute[]): RouteTable {
  const rules = routes.map((route) => {
    const service = route.service ?? "test/service";
    const match: Match = {
      ingress: route.ingress ?? "test/ingress",
      host: route.host ?? "",
      path: route.path ?? "/",
      pathType: route.pathType ?? "Prefix",
      tls: route.tls ?? false,
      backend: {
        key: route.key ?? `${service}:80`,
        service,
        endpoints: route.endpoints,
        ...(route.endpoints.length === 0 ? { unavailable: "no ready endpoints" } : {}),
      },
    };
    return match;
  });
  return {
    lookup(host: string, path: string): Match | undefined {
      const h = normalizeHost(host);
      let best: Match | undefined;
      let bestScore = -1;
      for (const rule of rules) {
        const hostScore = rule.host === ""
          ? 0
          : rule.host.startsWith("*.")
          ? (h.endsWith(rule.host.slice(1)) && !h.slice(0, -rule.host.length + 1).includes(".")
            ? 1
            : -1)
          : rule.host === h
          ? 2
          : -1;
        if (hostScore < 0 || !pathMatches(rule, path)) continue;
        const score = hostScore * 100_000 + (rule.pathType === "Exact" ? 50_000 : 0) +
          rule.path.length;
        if (score > bestScore) {
          best = rule;
          bestScore = score;
        }
      }
      return best;
    },
  };
}

function pathMatches(rule: Match, path: string): boolean {
  if (rule.pathType === "Exact") return path === rule.path;
  if (rule.path === "/") return true;
  const prefix = rule.path.endsWith("/") ? rule.path.slice(0, -1) : rule.path;
  return path === prefix || path.startsWith(prefix + "/");
}

function normalizeHost(host: string): string {
  let h = host.toLowerCase();
  if (h.startsWith("[")) return h.slice(0, h.indexOf("]") + 1);
  const colon = h.lastIndexOf(":");
  if (colon !== -1) h = h.slice(0, colon);
  return h.endsWith(".") ? h.slice(0, -1) : h;
}

const NO_CERTIFICATES: CertificateTable = {
  fingerprint: "none",
  resolve() {
    throw new Error("Cannot resolve certificates in the static test snapshot");
  },
};
