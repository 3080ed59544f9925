/**
 * Which Ingresses a translation works on, and in what order: ours (by class),
 * with a usable name, sorted by precedence.
 *
 * Owns the precedence order used for every conflict (routes, default backends,
 * certificates): oldest `creationTimestamp` first, then `namespace/name`.
 * Knows nothing about rules, backends or TLS.
 *
 * @module
 */

import type { Ingress } from "../k8s/objects.ts";
import type { ClassSelector } from "./class_selection.ts";
import type { Issue } from "./issues.ts";
import { compareStrings } from "./_order.ts";

/** One Ingress of ours, with its `namespace/name`. */
export interface OwnedIngress {
  readonly key: string;
  readonly namespace: string;
  readonly name: string;
  readonly ingress: Ingress;
  /** `metadata.creationTimestamp` in milliseconds; `Infinity` when absent or unparsable. */
  readonly created: number;
}

/**
 * Selects our Ingresses and sorts them oldest first, then by `namespace/name`.
 * Foreign Ingresses are dropped silently; ours without namespace or name are
 * reported and dropped; duplicates of a `namespace/name` keep the first seen.
 */
export function selectIngresses(
  ingresses: Iterable<Ingress>,
  context: { readonly select: ClassSelector; readonly issues: Issue[] },
): OwnedIngress[] {
  const { select, issues } = context;
  const owned = new Map<string, OwnedIngress>();
  for (const ingress of ingresses) {
    if (ingress === null || typeof ingress !== "object") continue;
    const decision = select(ingress);
    const namespace = ingress.metadata?.namespace;
    const name = ingress.metadata?.name;
    const validName = typeof name === "string" && name !== "";
    const validNamespace = typeof namespace === "string" && namespace !== "";
    if (!decision.ours) {
      if (decision.problem !== undefined && validName && validNamespace) {
        issues.push({ kind: "Ingress", namespace, name, ...decision.problem });
      }
      continue;
    }
    if (!validName || !validNamespace) {
      issues.push({
        kind: "Ingress",
        namespace: typeof namespace === "string" ? namespace : "",
        name: typeof name === "string" ? name : "",
        field: validName ? "metadata.namespace" : "metadata.name",
        message: `Cannot translate Ingress: ${
          validName ? "metadata.namespace" : "metadata.name"
        } is missing`,
      });
      continue;
    }
    const key = `${namespace}/${name}`;
    if (owned.has(key)) continue;
    const stamp = ingress.metadata?.creationTimestamp;
    const parsed = typeof stamp === "string" ? Date.parse(stamp) : NaN;
    owned.set(key, {
      key,
      namespace,
      name,
      ingress,
      created: Number.isNaN(parsed) ? Infinity : parsed,
    });
  }
  return [...owned.values()].sort(comparePrecedence);
}

/**
 * Precedence between Ingresses: the oldest `creationTimestamp` first, then
 * `namespace/name`. An Ingress without a timestamp counts as the newest.
 */
export function comparePrecedence(a: OwnedIngress, b: OwnedIngress): number {
  if (a.created !== b.created) return a.created < b.created ? -1 : 1;
  return compareStrings(a.key, b.key);
}
