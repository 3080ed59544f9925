/**
 * Canary Ingresses (ingress-nginx `canary: "true"`): an Ingress whose paths
 * add an alternative backend to the same host and path of an ordinary
 * Ingress, chosen per request by a header, then a cookie, then a weight
 * (`canary-by-header` (+`-value` or `-pattern`), `canary-by-cookie`,
 * `canary-weight` (+`-total`)), instead of routes of its own.
 *
 * {@linkcode readCanary} parses the annotations with strict grammars;
 * {@linkcode attachCanaries} pairs canary route candidates with the winning
 * ordinary routes of the same host, path and path type. Pure.
 *
 * @module
 */

import type { Issue } from "../issues.ts";
import type { RouteCandidate } from "../route_candidates.ts";
import { conflictKey } from "../route_conflicts.ts";
import { parseBool, parseHeaderName, parseInteger } from "./annotation_values.ts";

/** How requests pick the canary backend; the precedence is ingress-nginx's. */
export interface CanaryRule {
  /** `canary-by-header`, lowercase: its value `always` / `never` decides, unless value or pattern is set. */
  readonly header?: string;
  /** `canary-by-header-value`: the header equal to it picks the canary. */
  readonly headerValue?: string;
  /** `canary-by-header-pattern`: a regular expression the header must match (when no value is set). */
  readonly headerPattern?: string;
  /** `canary-by-cookie`: the cookie `always` / `never` decides. */
  readonly cookie?: string;
  /** `canary-weight` out of `weightTotal`: the share of the remaining requests. */
  readonly weight: number;
  readonly weightTotal: number;
}

/** The canary of one route: its Ingress, its backend's key and its rule. */
export interface RouteCanary extends CanaryRule {
  /** The canary Ingress, `namespace/name`. */
  readonly ingress: string;
  /** Key of its backend in `Translation.backends`. */
  readonly backend: string;
}

/** The canary of an Ingress's `metadata.annotations` (see {@linkcode readCanary}). */
export function readCanaryAnnotations(annotations: unknown) {
  return readCanary((name) => {
    if (annotations === null || typeof annotations !== "object") return undefined;
    const key = `nginx.ingress.kubernetes.io/${name}`;
    if (!Object.hasOwn(annotations, key)) return undefined;
    const value = (annotations as Record<string, unknown>)[key];
    const text = typeof value === "string"
      ? value
      : typeof value === "number" || typeof value === "boolean"
      ? String(value)
      : "";
    return text === "" ? undefined : text;
  });
}

/** The longest header value a pattern is matched against (longer ones never pick the canary). */
export const MAX_CANARY_HEADER = 1024;

/** Longest header pattern accepted. */
const MAX_PATTERN = 256;

/**
 * Reads an Ingress's canary annotations (names without prefix, through
 * `read`): undefined when it is not a canary, the rule, or the problem that
 * makes the canary unusable (then it is not served at all).
 */
export function readCanary(
  read: (name: string) => string | undefined,
): { rule?: CanaryRule; problem?: { annotation: string; problem: string } } {
  const on = read("canary");
  if (on === undefined) return {};
  const enabled = parseBool(on);
  if (enabled.problem !== undefined) return fail("canary", enabled.problem);
  if (!enabled.value) return {};
  const rule: { -readonly [K in keyof CanaryRule]: CanaryRule[K] } = {
    weight: 0,
    weightTotal: 100,
  };
  const header = read("canary-by-header");
  if (header !== undefined) {
    const parsed = parseHeaderName(header);
    if (parsed.problem !== undefined) return fail("canary-by-header", parsed.problem);
    rule.header = parsed.value;
    const value = read("canary-by-header-value");
    const pattern = read("canary-by-header-pattern");
    if (value !== undefined) {
      if (!/^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/.test(value) || value.length > 1024) {
        return fail("canary-by-header-value", `${JSON.stringify(value)} is not a header value`);
      }
      rule.headerValue = value;
    } else if (pattern !== undefined) {
      const problem = patternProblem(pattern);
      if (problem !== undefined) return fail("canary-by-header-pattern", problem);
      rule.headerPattern = pattern;
    }
  }
  const cookie = read("canary-by-cookie");
  if (cookie !== undefined) {
    if (!/^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,256}$/.test(cookie)) {
      return fail("canary-by-cookie", `${JSON.stringify(cookie)} is not a cookie name`);
    }
    rule.cookie = cookie;
  }
  const total = read("canary-weight-total");
  if (total !== undefined) {
    const parsed = parseInteger(total, 1, 1_000_000);
    if (parsed.problem !== undefined) return fail("canary-weight-total", parsed.problem);
    rule.weightTotal = parsed.value;
  }
  const weight = read("canary-weight");
  if (weight !== undefined) {
    const parsed = parseInteger(weight, 0, rule.weightTotal);
    if (parsed.problem !== undefined) return fail("canary-weight", parsed.problem);
    rule.weight = parsed.value;
  }
  return { rule };
}

function fail(annotation: string, problem: string) {
  return { problem: { annotation, problem } };
}

/**
 * Why a header pattern is refused: too long, not a valid regular expression,
 * or a shape that can backtrack without end (a quantified group that itself
 * holds a quantifier, or an alternation under a quantifier), since it runs on
 * every request with the client's header.
 */
function patternProblem(pattern: string): string | undefined {
  if (pattern.length === 0 || pattern.length > MAX_PATTERN) {
    return `the pattern is empty or longer than ${MAX_PATTERN} characters`;
  }
  try {
    new RegExp(pattern);
  } catch (error) {
    return `${JSON.stringify(pattern)} is not a regular expression (${(error as Error).message})`;
  }
  // Patterns that cannot take long on a bounded header (MAX_CANARY_HEADER): no back-reference,
  // no quantified group (`(…)*`, `(…)+`, `(…){n}`: nested repetition backtracks without end),
  // and at most one unbounded repetition (`*`, `+`, `{n,}`: two make the cost grow as a power
  // of the header's length).
  const body = pattern.replace(/\\./g, "x").replace(/\[(?:[^\]\\]|\\.)*\]/g, "x");
  const unbounded = (body.match(/[*+]|\{\d+,\}/g) ?? []).length;
  if (/\\[1-9k]/.test(pattern) || /\)[*+{]/.test(body) || unbounded > 1) {
    return `${JSON.stringify(pattern)} could take too long to match: back-references, ` +
      "repeated groups and more than one unbounded repetition (*, +, {n,}) are refused";
  }
  return undefined;
}

/**
 * Pairs each winning ordinary route with the first canary candidate (in
 * precedence order) of the same host, path and path type. A canary
 * candidate with no such route, or a second one for a route, is not served,
 * with an issue. `canaryOf` gives a canary Ingress's rule; `backendKey`
 * resolves a candidate's backend to its key.
 */
export function attachCanaries(
  winners: readonly RouteCandidate[],
  canaries: readonly RouteCandidate[],
  options: {
    readonly canaryOf: (ingress: string) => CanaryRule;
    readonly backendKey: (candidate: RouteCandidate) => string;
    readonly issues: Issue[];
  },
): Map<RouteCandidate, RouteCanary> {
  const byKey = new Map<string, RouteCandidate>();
  for (const w of winners) byKey.set(routeKey(w), w);
  const attached = new Map<RouteCandidate, RouteCanary>();
  for (const candidate of canaries) {
    const main = byKey.get(routeKey(candidate));
    const at = {
      kind: "Ingress",
      namespace: candidate.namespace,
      name: candidate.name,
      field: candidate.field,
    };
    if (main === undefined) {
      options.issues.push({
        ...at,
        message:
          `Cannot serve canary path "${candidate.path}" of host "${candidate.host}": no ordinary ` +
          "Ingress routes this host and path, so the canary is not served",
      });
      continue;
    }
    const existing = attached.get(main);
    if (existing !== undefined) {
      options.issues.push({
        ...at,
        message: `Cannot serve canary path "${candidate.path}" of host "${candidate.host}": ` +
          `canary Ingress "${existing.ingress}" already serves it`,
      });
      continue;
    }
    attached.set(main, {
      ...options.canaryOf(candidate.ingress),
      ingress: candidate.ingress,
      backend: options.backendKey(candidate),
    });
  }
  return attached;
}

/** The same requests: host, path type and path in normal form (`route_conflicts.ts`). */
function routeKey(c: RouteCandidate): string {
  return conflictKey(c);
}
