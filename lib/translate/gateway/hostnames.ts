/**
 * Gateway API hostnames: validation and the intersection of a listener's
 * hostname with a route's hostnames.
 *
 * Owns the wildcard rules of Gateway API (where `*` stands for one or more
 * labels, unlike Ingress). Knows nothing about listeners or routes beyond
 * their hostname strings.
 *
 * @module
 */

import { normaliseRuleHost } from "../hosts.ts";

/** A valid hostname, lowercase, or why not. `""` (absent) means any host. */
export function validateHostname(raw: unknown): { ok: true; host: string } | {
  ok: false;
  message: string;
} {
  // Gateway API (Hostname): "a fully qualified domain name … IPs are not
  // allowed … may be prefixed with a wildcard label (`*.`)", the same rule as
  // Ingress hosts, so the Ingress validator is reused.
  return normaliseRuleHost(raw);
}

/**
 * Whether `host` (exact or wildcard) is covered by the wildcard `pattern`.
 *
 * Gateway API (Listener.hostname): "`*.example.com` would match both
 * `test.example.com`, and `foo.test.example.com`, but not `example.com`."
 */
export function wildcardCovers(pattern: string, host: string): boolean {
  return pattern.startsWith("*.") && host.length > pattern.length - 1 &&
    host.endsWith(pattern.slice(1));
}

/**
 * The hostname a route hostname serves on a listener, or `undefined` when
 * they do not intersect. `""` stands for "any" on either side.
 *
 * Gateway API (HTTPRouteSpec.hostnames): a listener hostname and a route
 * hostname intersect when they are equal, or one is a wildcard covering the
 * other; the more specific of the two is served. "If both the Listener and
 * HTTPRoute have specified hostnames, and none match … the route is not
 * accepted" (NoMatchingListenerHostname).
 */
export function intersectHostname(listener: string, route: string): string | undefined {
  if (listener === "") return route;
  if (route === "" || route === listener) return listener;
  if (wildcardCovers(listener, route)) return route;
  if (wildcardCovers(route, listener)) return listener;
  return undefined;
}

/**
 * The hostnames a route serves on a listener: each route hostname
 * intersected, deduplicated and sorted; the listener's own when the route has
 * none ("If no hostnames are specified, … the Listener's hostname").
 */
export function routeHostnamesOn(listener: string, routeHostnames: readonly string[]): string[] {
  if (routeHostnames.length === 0) return [listener];
  const out = new Set<string>();
  for (const host of routeHostnames) {
    const served = intersectHostname(listener, host);
    if (served !== undefined) out.add(served);
  }
  return [...out].sort();
}

/**
 * Whether entries attached under `general` also serve requests for `specific`:
 * `""` covers everything, a wildcard covers what it matches, a name itself.
 */
export function hostnameCovers(general: string, specific: string): boolean {
  return general === "" || general === specific || wildcardCovers(general, specific);
}
