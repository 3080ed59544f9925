/**
 * Problems in users' objects, as data: `{ kind, namespace, name, field, message }`.
 *
 * Owns the Issue shape, how issues are collected during one translation and
 * their canonical order. Knows nothing about logging or Kubernetes Events.
 *
 * @module
 */

import { compareNatural, compareStrings } from "./_order.ts";

/** A problem with one object, for logs and Kubernetes Events. */
export interface Issue {
  /** The object's kind: `Ingress`, `Secret`, `Service`, `IngressClass`… */
  readonly kind: string;
  readonly namespace: string;
  readonly name: string;
  /** The field at fault, e.g. `spec.rules[0].http.paths[1].backend.service.port`; `""` for the whole object. */
  readonly field: string;
  /** Sentence case, the action then the detail, values quoted. */
  readonly message: string;
}

/** Orders issues by kind, namespace, name, field (numbers read as numbers), message. */
export function compareIssues(a: Issue, b: Issue): number {
  return compareStrings(a.kind, b.kind) || compareStrings(a.namespace, b.namespace) ||
    compareStrings(a.name, b.name) || compareNatural(a.field, b.field) ||
    compareStrings(a.message, b.message);
}

/** Returns the issues sorted, without duplicates. */
export function sortIssues(issues: readonly Issue[]): Issue[] {
  const sorted = [...issues].sort(compareIssues);
  return sorted.filter((issue, i) => i === 0 || compareIssues(sorted[i - 1]!, issue) !== 0);
}
