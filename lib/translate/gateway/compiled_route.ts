/**
 * One HTTPRoute compiled on its own: its hostnames, its rules, their issues,
 * and the entries of its valid rules under a served hostname. Independent of
 * parents, listeners and status; references resolve through the passed-in
 * {@linkcode RuleContext}, so the result can be remembered between
 * translations (see `http_route_memo.ts`).
 *
 * @module
 */

import type { Issue } from "../issues.ts";
import { validateHostname } from "./hostnames.ts";
import { type CompiledRule, compileRule, type RuleContext } from "./http_route_rules.ts";
import type { HTTPRoute, RouteEntry } from "./types.ts";

/** What an HTTPRoute compiles to before it is attached to any listener. */
export interface CompiledRoute {
  /** `namespace/name`. */
  readonly key: string;
  /** `metadata.creationTimestamp` (RFC 3339), `""` when unknown. */
  readonly created: string;
  /** Its valid hostnames, lowercase; empty: any. */
  readonly hostnames: readonly string[];
  readonly rules: readonly CompiledRule[];
  /** How many rules are dropped. */
  readonly invalidRules: number;
  /** The first unresolved reference of a valid rule (route ResolvedRefs False). */
  readonly unresolved: { readonly reason: string; readonly message: string } | undefined;
  /** Problems with its hostnames and rules. */
  readonly issues: readonly Issue[];
  /** Entries by served hostname, made on first use (see {@linkcode routeEntriesOn}). */
  readonly entries: Map<string, readonly RouteEntry[]>;
}

/** Compiles `route` (`namespace/name`), resolving references through `refs`. Never throws for bad input. */
export function compileRoute(
  route: HTTPRoute,
  refs: RuleContext & { readonly name: string },
): CompiledRoute {
  const { namespace, name } = refs;
  const issues: Issue[] = [];
  const issue = (field: string, message: string) =>
    issues.push({ kind: "HTTPRoute", namespace, name, field, message });

  const hostnames: string[] = [];
  for (
    const [i, raw] of (Array.isArray(route.spec?.hostnames) ? route.spec.hostnames : []).entries()
  ) {
    const host = validateHostname(raw);
    if (host.ok && host.host !== "") hostnames.push(host.host);
    else issue(`spec.hostnames[${i}]`, host.ok ? "Cannot use an empty hostname" : host.message);
  }

  // Gateway API (HTTPRouteSpec.rules): default one rule matching every request.
  const rawRules = Array.isArray(route.spec?.rules) && route.spec.rules.length > 0
    ? route.spec.rules
    : [{}];
  const rules = rawRules.map((rule, i) => compileRule(rule, i, refs));
  let unresolved: { reason: string; message: string } | undefined;
  for (const rule of rules) {
    if (!rule.ok) issue(rule.field, rule.message);
    else {
      for (const [field, message] of rule.notes) issue(field, message);
      unresolved ??= rule.unresolved;
    }
  }
  return {
    key: `${namespace}/${name}`,
    created: typeof route.metadata?.creationTimestamp === "string"
      ? route.metadata.creationTimestamp
      : "",
    hostnames,
    rules,
    invalidRules: rules.filter((r) => !r.ok).length,
    unresolved,
    issues,
    entries: new Map(),
  };
}

/**
 * The entries of every valid rule and match of `compiled` under `hostname`,
 * in rule then match order; made once per hostname and shared afterwards
 * (read them, do not change them).
 */
export function routeEntriesOn(compiled: CompiledRoute, hostname: string): readonly RouteEntry[] {
  let entries = compiled.entries.get(hostname);
  if (entries !== undefined) return entries;
  const made: RouteEntry[] = [];
  for (const [r, rule] of compiled.rules.entries()) {
    if (!rule.ok) continue;
    for (const [m, matches] of rule.matches.entries()) {
      made.push({
        route: compiled.key,
        rule: r,
        match: m,
        hostname,
        matches,
        filters: rule.filters,
        backends: rule.backends,
        ...(rule.timeouts === undefined ? {} : { timeouts: rule.timeouts }),
        ...(rule.respond === undefined ? {} : { respond: rule.respond }),
      });
    }
  }
  entries = made;
  compiled.entries.set(hostname, entries);
  return entries;
}
