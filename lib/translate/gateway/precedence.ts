/**
 * HTTPRoute match precedence: the order in which compiled entries are tried.
 *
 * @module
 */

import { compareStrings } from "../_order.ts";
import type { RouteEntry } from "./types.ts";

/** An entry with what ties are broken by. */
export interface RankedEntry {
  readonly entry: RouteEntry;
  /** `metadata.creationTimestamp` of the route (RFC 3339), `""` when unknown. */
  readonly created: string;
}

/** Hostname specificity: exact names first, then by number of characters; `""` last. */
function compareHostnames(a: string, b: string): number {
  const aExact = a !== "" && !a.startsWith("*.");
  const bExact = b !== "" && !b.startsWith("*.");
  if (aExact !== bExact) return aExact ? -1 : 1;
  return b.length - a.length || compareStrings(a, b);
}

/**
 * Compares two entries; negative when `a` takes precedence.
 *
 * Gateway API (HTTPRouteRule, "Proxy or Load Balancer routing configuration
 * generated from HTTPRoutes MUST prioritize matches based on the following
 * criteria, continuing on ties"):
 * 1. characters in a matching non-wildcard hostname;
 * 2. characters in a matching hostname;
 * 3. the longest matching path: an Exact path match, then the PathPrefix with
 *    the most characters;
 * 4. method match;
 * 5. largest number of header matches;
 * 6. largest number of query param matches.
 * "If ties still exist across multiple Routes, matching precedence MUST be
 * determined in order of the following criteria, continuing on ties: the
 * oldest Route based on creation timestamp; the Route appearing first in
 * alphabetical order by `{namespace}/{name}`." "If ties still exist within an
 * HTTPRoute, matching precedence MUST be granted to the FIRST matching rule (in
 * list order) with a match meeting the above criteria."
 */
export function comparePrecedence(a: RankedEntry, b: RankedEntry): number {
  const x = a.entry;
  const y = b.entry;
  return compareHostnames(x.hostname, y.hostname) ||
    (x.matches.path.type === y.matches.path.type ? 0 : x.matches.path.type === "Exact" ? -1 : 1) ||
    y.matches.path.value.length - x.matches.path.value.length ||
    Number(y.matches.method !== undefined) - Number(x.matches.method !== undefined) ||
    y.matches.headers.length - x.matches.headers.length ||
    y.matches.queryParams.length - x.matches.queryParams.length ||
    compareCreated(a.created, b.created) ||
    compareStrings(x.route, y.route) ||
    x.rule - y.rule || x.match - y.match;
}

/** Older first; a route without a timestamp after those with one. */
function compareCreated(a: string, b: string): number {
  if (a === b) return 0;
  if (a === "") return 1;
  if (b === "") return -1;
  const ta = Date.parse(a);
  const tb = Date.parse(b);
  if (Number.isNaN(ta) || Number.isNaN(tb)) return compareStrings(a, b);
  return ta - tb;
}
