/**
 * A small snapshot builder for the tests of `lib/server/` and `lib/workers/`
 * and for the benchmarks, which need a snapshot without building a
 * translation: plain, structured-clonable {@linkcode StubSnapshotData} in, a
 * {@linkcode Snapshot} out. Deliberately simple (linear scans, Prefix paths
 * only); it is not the routing model (`lib/routing/snapshot_builder.ts`, used
 * by `sluice_worker.ts`) and must not grow into one.
 *
 * Knows the snapshot contract only; nothing of Kubernetes or Deno APIs.
 *
 * @module
 */
import { compileRouteBehaviour } from "../../lib/routing/route_behaviour.ts";
import type { IngressBehaviour } from "../../lib/translate/nginx/ingress_behaviour.ts";
import type {
  Backend,
  CertificateTable,
  Match,
  RouteTable,
  ServingCertificate,
  Snapshot,
} from "../../lib/routing/snapshot.ts";

/** One route: requests for `host` (exact, `*.suffix`, or `""` for any) under `path` go to `backend`. */
export interface StubRoute {
  readonly host: string;
  readonly path: string;
  readonly backend: Backend;
  readonly tls?: boolean;
  /** ingress-nginx annotation behaviour, compiled as the route table does (`route_behaviour.ts`). */
  readonly behaviour?: IngressBehaviour;
}

/** One certificate and the hosts (exact or `*.suffix`) it serves. */
export interface StubCertificate {
  readonly hosts: readonly string[];
  readonly certificate: ServingCertificate;
}

/** What the control plane posts to workers until the routing model's data format lands. */
export interface StubSnapshotData {
  readonly version: number;
  readonly routes: readonly StubRoute[];
  readonly certificates: readonly StubCertificate[];
  readonly defaultCertificate: ServingCertificate;
}

/** Compiles {@linkcode StubSnapshotData} into a frozen {@linkcode Snapshot}. */
export function compileStubSnapshot(data: StubSnapshotData): Snapshot {
  return Object.freeze({
    version: data.version,
    routes: stubRouteTable(data.routes),
    certificates: stubCertificateTable(data.certificates, data.defaultCertificate),
  });
}

/** A certificate table: exact host, then a one-label wildcard, then `fallback`. */
export function stubCertificateTable(
  entries: readonly StubCertificate[],
  fallback: ServingCertificate,
): CertificateTable {
  const exact = new Map<string, ServingCertificate>();
  const wildcard = new Map<string, ServingCertificate>();
  for (const { hosts, certificate } of entries) {
    for (const host of hosts) {
      const name = host.toLowerCase();
      if (name.startsWith("*.")) wildcard.set(name.slice(2), certificate);
      else exact.set(name, certificate);
    }
  }
  const fingerprint = fnv1a(
    [{ hosts: ["(default)"], certificate: fallback }, ...entries]
      .map(({ hosts, certificate }) => `${hosts.join(",")}\n${certificate.certPem}`)
      .join("\n"),
  );
  return Object.freeze({
    fingerprint,
    resolve(serverName: string | undefined): ServingCertificate {
      if (serverName === undefined) return fallback;
      const name = serverName.toLowerCase().replace(/\.$/, "");
      const found = exact.get(name);
      if (found !== undefined) return found;
      const dot = name.indexOf(".");
      return (dot > 0 ? wildcard.get(name.slice(dot + 1)) : undefined) ?? fallback;
    },
  });
}

function stubRouteTable(routes: readonly StubRoute[]): RouteTable {
  const behaviours = new Map(
    routes.flatMap((r) =>
      r.behaviour === undefined ? [] : [[r, compileRouteBehaviour(r.behaviour, "stub")] as const]
    ),
  );
  return Object.freeze({
    lookup(host: string, path: string): Match | undefined {
      const name = host.toLowerCase().replace(/:\d+$/, "").replace(/\.$/, "");
      let best: StubRoute | undefined;
      for (const route of routes) {
        if (!hostMatches(route.host, name) || !path.startsWith(route.path)) continue;
        if (best === undefined || route.path.length > best.path.length) best = route;
      }
      if (best === undefined) return undefined;
      return {
        ingress: "",
        host: best.host,
        path: best.path,
        pathType: "Prefix",
        backend: best.backend,
        tls: best.tls ?? false,
        ...(behaviours.has(best) ? { behaviour: behaviours.get(best)! } : {}),
      };
    },
  });
}

function hostMatches(pattern: string, host: string): boolean {
  if (pattern === "") return true;
  if (pattern.startsWith("*.")) {
    const dot = host.indexOf(".");
    return dot > 0 && host.slice(dot + 1) === pattern.slice(2);
  }
  return pattern === host;
}

function fnv1a(text: string): string {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return `${text.length.toString(16)}-${hash.toString(16)}`;
}
