/**
 * Kubernetes label selectors (`matchLabels`, `matchExpressions`) evaluated
 * against an object's labels, for `allowedRoutes.namespaces.selector`.
 *
 * @module
 */

import type { LabelSelector } from "./types.ts";

const OPERATORS = new Set(["In", "NotIn", "Exists", "DoesNotExist"]);

/** Why a selector is malformed, or `undefined` when it is usable. */
export function selectorProblem(selector: unknown): string | undefined {
  if (selector === null || typeof selector !== "object") return "selector is not an object";
  const { matchLabels, matchExpressions } = selector as LabelSelector;
  if (matchLabels !== undefined && (matchLabels === null || typeof matchLabels !== "object")) {
    return "matchLabels is not a map";
  }
  if (matchExpressions === undefined) return undefined;
  if (!Array.isArray(matchExpressions)) return "matchExpressions is not a list";
  for (const [i, e] of matchExpressions.entries()) {
    if (e === null || typeof e !== "object" || typeof e.key !== "string" || e.key === "") {
      return `matchExpressions[${i}] has no key`;
    }
    if (typeof e.operator !== "string" || !OPERATORS.has(e.operator)) {
      return `matchExpressions[${i}] has unknown operator ${JSON.stringify(e.operator)}`;
    }
    // Kubernetes (LabelSelectorRequirement): "If the operator is In or NotIn, the
    // values array must be non-empty. If the operator is Exists or DoesNotExist,
    // the values array must be empty."
    const values = e.values ?? [];
    const setBased = e.operator === "In" || e.operator === "NotIn";
    if (!Array.isArray(values) || setBased !== values.length > 0) {
      return `matchExpressions[${i}] values do not suit operator "${e.operator}"`;
    }
  }
  return undefined;
}

/**
 * Whether labels satisfy a selector: every `matchLabels` pair and every
 * expression (they are ANDed). An empty selector matches everything
 * (Kubernetes: "An empty label selector matches all objects"). A malformed
 * selector matches nothing.
 */
export function selectorMatches(
  selector: LabelSelector,
  labels: Readonly<Record<string, string>>,
): boolean {
  if (selectorProblem(selector) !== undefined) return false;
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) {
    if (labels[key] !== value) return false;
  }
  for (const e of selector.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, e.key!);
    const value = labels[e.key!];
    switch (e.operator) {
      case "In":
        if (!has || !e.values!.includes(value!)) return false;
        break;
      case "NotIn":
        // Kubernetes: NotIn also matches objects without the label.
        if (has && e.values!.includes(value!)) return false;
        break;
      case "Exists":
        if (!has) return false;
        break;
      case "DoesNotExist":
        if (has) return false;
        break;
    }
  }
  return true;
}
