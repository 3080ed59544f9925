import { assertEquals } from "../../../tests/support/assert.ts";
import { selectorMatches, selectorProblem } from "./label_selector.ts";
import type { LabelSelector } from "./types.ts";

Deno.test("selectorMatches() evaluates matchLabels and each operator", () => {
  const labels = { team: "shop", env: "prod" };
  const cases: [LabelSelector, boolean][] = [
    [{}, true],
    [{ matchLabels: { team: "shop" } }, true],
    [{ matchLabels: { team: "blog" } }, false],
    [{ matchLabels: { missing: "" } }, false],
    [{ matchExpressions: [{ key: "env", operator: "In", values: ["prod", "dev"] }] }, true],
    [{ matchExpressions: [{ key: "env", operator: "In", values: ["dev"] }] }, false],
    [{ matchExpressions: [{ key: "nope", operator: "In", values: ["x"] }] }, false],
    [{ matchExpressions: [{ key: "env", operator: "NotIn", values: ["dev"] }] }, true],
    [{ matchExpressions: [{ key: "env", operator: "NotIn", values: ["prod"] }] }, false],
    // NotIn also matches objects without the label.
    [{ matchExpressions: [{ key: "nope", operator: "NotIn", values: ["x"] }] }, true],
    [{ matchExpressions: [{ key: "team", operator: "Exists" }] }, true],
    [{ matchExpressions: [{ key: "nope", operator: "Exists" }] }, false],
    [{ matchExpressions: [{ key: "nope", operator: "DoesNotExist" }] }, true],
    [{ matchExpressions: [{ key: "team", operator: "DoesNotExist" }] }, false],
    // Requirements are ANDed.
    [{
      matchLabels: { team: "shop" },
      matchExpressions: [{ key: "env", operator: "In", values: ["dev"] }],
    }, false],
    // Malformed selectors match nothing.
    [{ matchExpressions: [{ key: "env", operator: "Like", values: ["prod"] }] }, false],
    [{ matchExpressions: [{ key: "env", operator: "In", values: [] }] }, false],
    [{ matchExpressions: [{ key: "env", operator: "Exists", values: ["x"] }] }, false],
  ];
  for (const [selector, expected] of cases) {
    assertEquals(selectorMatches(selector, labels), expected, JSON.stringify(selector));
  }
});

Deno.test("selectorProblem() names what is malformed", () => {
  assertEquals(selectorProblem({}), undefined);
  assertEquals(selectorProblem(null), "selector is not an object");
  assertEquals(
    selectorProblem({ matchExpressions: [{ key: "a", operator: "Like" }] }),
    'matchExpressions[0] has unknown operator "Like"',
  );
  assertEquals(
    selectorProblem({ matchExpressions: [{ operator: "Exists" }] }),
    "matchExpressions[0] has no key",
  );
});
