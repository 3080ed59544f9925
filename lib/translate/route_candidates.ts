/**
 * Route candidates: what one Ingress asks for, before conflicts between
 * Ingresses are resolved. Covers `spec.rules[]` (hosts × paths) and
 * `spec.defaultBackend`.
 *
 * Owns the walk over one Ingress's rules and its default backend, with an
 * issue for every malformed part (a bad part is skipped, never the whole
 * Ingress). Knows nothing about other Ingresses, Services or certificates.
 *
 * @module
 */

import type { BackendRef } from "./backends.ts";
import { parseBackend } from "./backends.ts";
import { normaliseRuleHost } from "./hosts.ts";
import type { Issue } from "./issues.ts";
import { validatePath } from "./paths.ts";
import type { OwnedIngress } from "./ingress_selection.ts";
import type { RoutePathType } from "./translation.ts";

/** One route an Ingress asks for. */
export interface RouteCandidate {
  readonly host: string;
  readonly path: string;
  readonly pathType: RoutePathType;
  /** The Ingress, `namespace/name`. */
  readonly ingress: string;
  readonly namespace: string;
  readonly name: string;
  readonly backend: BackendRef;
  /** Where the candidate comes from, e.g. `spec.rules[0].http.paths[2]` or `spec.defaultBackend`. */
  readonly field: string;
}

/** The route candidates and issues of one Ingress's rules. */
export interface IngressCandidates {
  readonly candidates: readonly RouteCandidate[];
  readonly issues: readonly Issue[];
}

/**
 * Collects the route candidates of one Ingress: one per valid path of each
 * rule, then its default backend.
 *
 * Kubernetes rules (IngressSpec, networking.k8s.io/v1): each rule's `http.paths`
 * map paths to backends for the rule's host (absent host: every host).
 * `defaultBackend` "is the backend that should handle requests that don't match
 * any rule": Sluice attaches it to the hosts the Ingress's rules name (their
 * paths no rule matches), and, for an Ingress without rules, to every host.
 */
export function collectRouteCandidates(owned: OwnedIngress): IngressCandidates {
  const candidates: RouteCandidate[] = [];
  const issues: Issue[] = [];
  collect(owned, candidates, issues);
  return { candidates, issues };
}

function collect(owned: OwnedIngress, out: RouteCandidate[], issues: Issue[]): void {
  const { key, namespace, name, ingress } = owned;
  const report = (field: string, message: string) =>
    issues.push({ kind: "Ingress", namespace, name, field, message });
  const spec = ingress.spec;
  if (spec === undefined || spec === null || typeof spec !== "object") {
    report("spec", "Cannot route: spec is missing");
    return;
  }

  const rules = spec.rules;
  // A Set, not an array: an Ingress may name tens of thousands of hosts.
  const namedHosts = new Set<string>();
  const hasRules = Array.isArray(rules) && rules.length > 0;
  const unreadableRules = rules !== undefined && rules !== null && !Array.isArray(rules);
  if (unreadableRules) report("spec.rules", "Cannot read spec.rules: not a list");
  if (hasRules) {
    rules.forEach((rule, i) => {
      const ruleField = `spec.rules[${i}]`;
      if (rule === null || typeof rule !== "object") {
        report(ruleField, "Cannot read rule: not an object");
        return;
      }
      const host = normaliseRuleHost(rule.host);
      if (!host.ok) {
        report(`${ruleField}.host`, host.message);
        return;
      }
      namedHosts.add(host.host);
      const http: unknown = rule.http;
      if (http !== undefined && http !== null && typeof http !== "object") {
        report(`${ruleField}.http`, "Cannot read http: not an object");
        return;
      }
      const paths = rule.http?.paths;
      if (paths === undefined || paths === null) return;
      if (!Array.isArray(paths)) {
        report(`${ruleField}.http.paths`, "Cannot read http.paths: not a list");
        return;
      }
      paths.forEach((entry, j) => {
        const field = `${ruleField}.http.paths[${j}]`;
        if (entry === null || typeof entry !== "object") {
          report(field, "Cannot read path: not an object");
          return;
        }
        const path = validatePath(entry.path, entry.pathType);
        if (!path.ok) {
          report(`${field}.${path.field}`, path.message);
          return;
        }
        const backend = parseBackend(entry.backend, namespace);
        if (!backend.ok) {
          report(
            `${field}.backend${backend.field === "" ? "" : `.${backend.field}`}`,
            backend.message,
          );
          return;
        }
        out.push({
          host: host.host,
          path: path.path,
          pathType: path.pathType,
          ingress: key,
          namespace,
          name,
          backend: backend.ref,
          field,
        });
      });
    });
  }

  const defaultBackend = spec.defaultBackend;
  if (defaultBackend === undefined || defaultBackend === null) {
    if (!hasRules) {
      report("spec", "Cannot route: the Ingress has neither rules nor a defaultBackend");
    } else if (out.length === 0 && issues.length === 0) {
      // Rules with hosts but no paths (often `http:` mis-indented in YAML): nothing routes.
      report("spec", "Cannot route: no rule has an http path, and there is no defaultBackend");
    }
    return;
  }
  const backend = parseBackend(defaultBackend, namespace);
  if (!backend.ok) {
    report(
      `spec.defaultBackend${backend.field === "" ? "" : `.${backend.field}`}`,
      backend.message,
    );
    return;
  }
  // Only an Ingress without rules has a stand-alone defaultBackend (every host).
  // Unreadable or all-invalid rules must not turn a host's default into a
  // catch-all that takes every other host's unmatched requests.
  const standAlone = !hasRules && !unreadableRules;
  if (!standAlone && namedHosts.size === 0) {
    report(
      "spec.defaultBackend",
      "Cannot use the defaultBackend: no usable rule names a host for it",
    );
    return;
  }
  for (const host of standAlone ? [""] : namedHosts) {
    out.push({
      host,
      path: "/",
      pathType: "Default",
      ingress: key,
      namespace,
      name,
      backend: backend.ref,
      field: "spec.defaultBackend",
    });
  }
}
