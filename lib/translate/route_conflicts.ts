/**
 * Merging route candidates from all Ingresses: rules for the same host from
 * several Ingresses (in any namespaces) merge; true conflicts are resolved
 * deterministically and the losers reported.
 *
 * Owns what "the same route" means and who wins. Knows nothing about how
 * routes are matched against requests.
 *
 * @module
 */

import type { Issue } from "./issues.ts";
import { canonicalPrefix, normalRulePath } from "./paths.ts";
import type { RouteCandidate } from "./route_candidates.ts";

/** The identity of a route: two candidates with the same key conflict. */
export function conflictKey(candidate: Pick<RouteCandidate, "host" | "path" | "pathType">): string {
  switch (candidate.pathType) {
    // Compared in normal form: `/über` and `/%C3%BCber`, `/a//b` and `/a/b` match the same requests.
    case "Exact":
      return `${candidate.host} E ${normalRulePath(candidate.path)}`;
    case "Prefix":
      // `/foo` and `/foo/` match the same requests (trailing slash ignored).
      return `${candidate.host} P ${canonicalPrefix(normalRulePath(candidate.path))}`;
    case "Default":
      return `${candidate.host} D`;
  }
}

function describe(candidate: RouteCandidate): string {
  const host = candidate.host === "" ? "every host" : `host "${candidate.host}"`;
  return candidate.pathType === "Default"
    ? `Cannot use the default backend for ${host}`
    : `Cannot route ${host} path "${candidate.path}" (${candidate.pathType})`;
}

/**
 * Keeps one candidate per conflict key and reports the others.
 *
 * Candidates must come in precedence order: Ingresses sorted by
 * `creationTimestamp` (oldest first), then `namespace/name`, and each
 * Ingress's candidates in document order. The first candidate of a key wins.
 * (Kubernetes leaves conflicts between Ingresses to the controller; oldest
 * first is the rule most controllers follow, and it keeps a newly created
 * Ingress from hijacking a live host.)
 */
export function mergeRouteCandidates(
  candidates: readonly RouteCandidate[],
  issues: Issue[],
): RouteCandidate[] {
  const winners = new Map<string, RouteCandidate>();
  for (const candidate of candidates) {
    const key = conflictKey(candidate);
    const winner = winners.get(key);
    if (winner === undefined) {
      winners.set(key, candidate);
      continue;
    }
    const by = winner.ingress === candidate.ingress
      ? `${winner.field} of the same Ingress comes first`
      : `Ingress "${winner.ingress}" takes precedence (oldest creationTimestamp, then namespace/name)`;
    issues.push({
      kind: "Ingress",
      namespace: candidate.namespace,
      name: candidate.name,
      field: candidate.field,
      message: `${describe(candidate)}: ${by}`,
    });
  }
  return [...winners.values()];
}
