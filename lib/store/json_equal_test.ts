import { assertEquals } from "../../tests/support/assert.ts";
import { jsonEqual, sameEntries } from "./json_equal.ts";

const cases: [string, unknown, unknown, boolean][] = [
  ["equal scalars", "a", "a", true],
  ["different scalars", 1, "1", false],
  ["null and an object", null, {}, false],
  ["objects in another key order", { a: 1, b: [1, { c: 2 }] }, { b: [1, { c: 2 }], a: 1 }, true],
  ["an extra key", { a: 1 }, { a: 1, b: 2 }, false],
  ["a key that is undefined on one side only", { a: 1, b: undefined }, { a: 1 }, true],
  ["arrays in another order", [1, 2], [2, 1], false],
  ["an array and an object", [], {}, false],
  ["arrays of different lengths", [1], [1, 1], false],
];

for (const [what, a, b, equal] of cases) {
  Deno.test(`jsonEqual() says ${what} ${equal ? "are" : "are not"} equal`, () => {
    assertEquals(jsonEqual(a, b), equal);
    assertEquals(jsonEqual(b, a), equal);
  });
}

Deno.test("sameEntries() skips the ignored keys on both sides", () => {
  const ignore = new Set(["status"]);
  assertEquals(sameEntries({ a: 1, status: 1 }, { a: 1 }, ignore), true);
  assertEquals(sameEntries({ a: 1 }, { a: 2, status: 1 }, ignore), false);
});
