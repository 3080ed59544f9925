/**
 * Compiles a translation's routes into an immutable {@linkcode RouteTable}.
 *
 * Owns request matching and precedence, all decided at build time:
 *
 * 1. Host tiers, most specific first: the exact host, then the one-label
 *    wildcard (`*.example.com`), then rules without host (any host). A request
 *    that matches no path of a tier falls through to the next tier.
 * 2. Within a tier: `Exact` (whole path, case-sensitive), then the longest
 *    matching `Prefix` (element-wise on `/`), then the tier's default backend.
 * 3. Then the controller-wide default backend; else no match (404).
 *
 * A lookup is a few map reads and a scan over the request path's `/`
 * positions (bounded by the longest prefix of the tier), independent of the
 * number of hosts or routes. Knows nothing about Kubernetes objects.
 *
 * @module
 */

import type { Translation } from "../translate/translation.ts";
import { canonicalPrefix, normalRulePath } from "../translate/paths.ts";
import { normaliseRequestHost, wildcardSuffix } from "./host.ts";
import { compileRouteBehaviour, type RouteBehaviour } from "./route_behaviour.ts";
import { compileCanary } from "./canary_choice.ts";
import type { Backend, Match, RouteTable } from "./snapshot.ts";

/** What {@linkcode compileRouteTable} reads from a translation. */
export type RouteTableInput = Pick<
  Translation,
  | "routes"
  | "backends"
  | "tlsHosts"
  | "defaultBackend"
  | "behaviours"
  | "appRoots"
  | "wwwRedirects"
>;

/** A precomputed answer: the match without and with `tls`. */
type Answer = readonly [plain: Match, secure: Match];

/** The routes of one host (or of the wildcard, or of "any host"). */
interface Tier {
  readonly exact: Map<string, Answer>;
  /** Keyed by canonical prefix (no trailing slash; `/` is `""`). */
  readonly prefix: Map<string, Answer>;
  maxPrefixLength: number;
  fallback: Answer | undefined;
}

function newTier(): Tier {
  return { exact: new Map(), prefix: new Map(), maxPrefixLength: -1, fallback: undefined };
}

function freezeBackend(backend: Backend): Backend {
  const endpoints = Object.freeze(
    backend.endpoints.map((e) => Object.freeze({ address: e.address, port: e.port })),
  );
  return Object.freeze(
    backend.unavailable === undefined
      ? { key: backend.key, service: backend.service, endpoints }
      : { key: backend.key, service: backend.service, endpoints, unavailable: backend.unavailable },
  );
}

function answer(
  base: Omit<Match, "tls" | "backend">,
  backend: Backend,
): Answer {
  return [
    Object.freeze({ ...base, backend, tls: false }),
    Object.freeze({ ...base, backend, tls: true }),
  ];
}

/** Scans one tier. Kubernetes rules cited in {@linkcode compileRouteTable}. */
function matchTier(tier: Tier, path: string): Answer | undefined {
  const exact = tier.exact.get(path);
  if (exact !== undefined) return exact;
  const prefixes = tier.prefix;
  if (prefixes.size > 0) {
    const max = tier.maxPrefixLength;
    if (path.length <= max) {
      const whole = prefixes.get(path);
      if (whole !== undefined) return whole;
    }
    // Every element boundary, longest first: `/a/b/c` tries `/a/b`, `/a`, "".
    for (let i = Math.min(path.length - 1, max); i >= 0; i--) {
      if (path.charCodeAt(i) !== 47 /* "/" */) continue;
      const found = prefixes.get(path.slice(0, i));
      if (found !== undefined) return found;
    }
  }
  return tier.fallback;
}

/**
 * Compiles routes into a frozen table.
 *
 * Kubernetes rules implemented (Ingress concept docs, "Path types", "Multiple
 * matches", "Hostname wildcards"):
 * - `Exact` matches the URL path exactly, case-sensitively (a trailing slash
 *   matters).
 * - `Prefix` matches element-wise on `/`-separated elements: `/foo` matches
 *   `/foo`, `/foo/`, `/foo/bar`, never `/foobar`; a trailing slash on the rule
 *   is ignored; `/` matches every path.
 * - "Precedence will be given first to the longest matching path. If two paths
 *   are still equally matched, precedence will be given to paths with an exact
 *   path type over prefix path type." An `Exact` match is always at least as
 *   long as any matching `Prefix`, so `Exact` is tried first.
 * - Precise hosts are matched before wildcard hosts; a wildcard matches exactly
 *   one label; rules without host match every host.
 * - `spec.defaultBackend` catches requests that match no rule (see
 *   `lib/translate/route_candidates.ts` for the hosts it applies to).
 * - Rule paths may hold characters a URL path cannot (HTTPIngressPath.path);
 *   they are compared in URL form, percent-encoded as a client sends them, and
 *   in the normal form request paths reach the table in (no `//`, no dot
 *   segments).
 * Query strings never take part: the path is cut at `?` if one slipped in.
 */
export function compileRouteTable(translation: RouteTableInput): RouteTable {
  const backends = new Map<string, Backend>();
  for (const backend of translation.backends) backends.set(backend.key, freezeBackend(backend));
  const backendOf = (key: string): Backend => {
    let backend = backends.get(key);
    if (backend === undefined) {
      backend = freezeBackend({
        key,
        service: "",
        endpoints: [],
        unavailable: `Cannot route to backend "${key}": it is not in the translation`,
      });
      backends.set(key, backend);
    }
    return backend;
  };

  const exactHosts = new Map<string, Tier>();
  const wildcardHosts = new Map<string, Tier>();
  let anyHost: Tier | undefined;
  const tierOf = (host: string): Tier => {
    if (host === "") return anyHost ??= newTier();
    const map = host.startsWith("*.") ? wildcardHosts : exactHosts;
    const key = host.startsWith("*.") ? host.slice(2) : host;
    let tier = map.get(key);
    if (tier === undefined) {
      tier = newTier();
      map.set(key, tier);
    }
    return tier;
  };

  // Compiled once per Ingress, shared by its routes.
  const behaviours = new Map<string, RouteBehaviour>();
  for (const [ingress, behaviour] of Object.entries(translation.behaviours ?? {})) {
    behaviours.set(ingress, compileRouteBehaviour(behaviour, ingress));
  }

  for (const route of translation.routes) {
    const tier = tierOf(route.host);
    const behaviour = behaviours.get(route.ingress);
    const base = {
      ingress: route.ingress,
      host: route.host,
      path: route.path,
      pathType: route.pathType,
    };
    const canary = route.canary === undefined
      ? undefined
      : compileCanary(route.canary, backendOf(route.canary.backend));
    const built = answer(
      {
        ...base,
        ...(behaviour === undefined ? {} : { behaviour }),
        ...(canary === undefined ? {} : { canary }),
      },
      backendOf(route.backend),
    );
    // The translation resolved conflicts; should two routes still collide, the first stays.
    // Keys are rule paths in the normal form requests are routed in: URL form
    // (`/über` → `/%C3%BCber`), slashes merged, dot segments resolved.
    if (route.pathType === "Exact") {
      const key = normalRulePath(route.path);
      if (!tier.exact.has(key)) tier.exact.set(key, built);
    } else if (route.pathType === "Prefix") {
      const key = canonicalPrefix(normalRulePath(route.path));
      if (!tier.prefix.has(key)) {
        tier.prefix.set(key, built);
        if (key.length > tier.maxPrefixLength) tier.maxPrefixLength = key.length;
      }
    } else {
      tier.fallback ??= built;
    }
  }

  const controllerDefault = translation.defaultBackend === undefined ? undefined : answer(
    { ingress: "", host: "", path: "/", pathType: "Default" },
    backendOf(translation.defaultBackend),
  );

  const tlsExact = new Set<string>();
  const tlsWildcard = new Set<string>();
  for (const host of translation.tlsHosts) {
    if (host.startsWith("*.")) tlsWildcard.add(host.slice(2));
    else tlsExact.add(host);
  }
  const hasWildcards = wildcardHosts.size > 0 || tlsWildcard.size > 0;

  const lookup = (host: string, path: string): Match | undefined => {
    const name = normaliseRequestHost(host);
    let requestPath = path === "" ? "/" : path;
    const query = requestPath.indexOf("?");
    if (query >= 0) requestPath = requestPath.slice(0, query) || "/";
    const suffix = hasWildcards ? wildcardSuffix(name) : undefined;

    let found: Answer | undefined;
    const exactTier = exactHosts.get(name);
    if (exactTier !== undefined) found = matchTier(exactTier, requestPath);
    if (found === undefined && suffix !== undefined) {
      const wildcardTier = wildcardHosts.get(suffix);
      if (wildcardTier !== undefined) found = matchTier(wildcardTier, requestPath);
    }
    if (found === undefined && anyHost !== undefined) found = matchTier(anyHost, requestPath);
    found ??= controllerDefault;
    if (found === undefined) return undefined;
    const tls = tlsExact.has(name) || (suffix !== undefined && tlsWildcard.has(suffix));
    return tls ? found[1] : found[0];
  };

  const table: { -readonly [K in keyof RouteTable]: RouteTable[K] } = { lookup };
  if (translation.appRoots !== undefined) {
    // ingress-nginx `app-root`: server level, for the whole host (exact, then wildcard).
    const appRoots = new Map(Object.entries(translation.appRoots));
    table.appRoot = (host: string): string | undefined => {
      const name = normaliseRequestHost(host);
      const exact = appRoots.get(name);
      if (exact !== undefined) return exact;
      const suffix = wildcardSuffix(name);
      return suffix === undefined ? undefined : appRoots.get(`*.${suffix}`);
    };
  }
  if (translation.wwwRedirects !== undefined) {
    const redirects = new Map(Object.entries(translation.wwwRedirects));
    table.wwwRedirect = (host: string) => redirects.get(normaliseRequestHost(host));
  }
  return Object.freeze(table);
}
