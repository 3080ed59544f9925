/**
 * Issue ordering and deduplication.
 *
 * @module
 */

import { assertEquals } from "../../tests/support/assert.ts";
import { type Issue, sortIssues } from "./issues.ts";

const issue = (name: string, field: string, message = "m"): Issue => ({
  kind: "Ingress",
  namespace: "n",
  name,
  field,
  message,
});

Deno.test("sortIssues() orders by object, then field with numbers read as numbers, and drops duplicates", () => {
  const sorted = sortIssues([
    issue("b", "spec"),
    issue("a", "spec.rules[10].host"),
    issue("a", "spec.rules[2].host"),
    issue("a", "spec.rules[2].host"),
    issue("a", "spec.rules[2].host", "another"),
    { ...issue("a", ""), kind: "Secret" },
  ]);
  assertEquals(sorted.map((i) => `${i.kind} ${i.name} ${i.field} ${i.message}`), [
    "Ingress a spec.rules[2].host another",
    "Ingress a spec.rules[2].host m",
    "Ingress a spec.rules[10].host m",
    "Ingress b spec m",
    "Secret a  m",
  ]);
});
