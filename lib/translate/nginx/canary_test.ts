import { assertEquals } from "../../../tests/support/assert.ts";
import { readCanary } from "./canary.ts";

function read(annotations: Record<string, string>) {
  return readCanary((name) => annotations[name]);
}

Deno.test("readCanary() reads the canary annotations with strict grammars", () => {
  const cases: [string, Record<string, string>, ReturnType<typeof readCanary>][] = [
    ["not a canary", {}, {}],
    ["canary false", { canary: "false" }, {}],
    ["weights default to 0 of 100", { canary: "true" }, { rule: { weight: 0, weightTotal: 100 } }],
    ["header, lowercased", { canary: "true", "canary-by-header": "X-Canary" }, {
      rule: { weight: 0, weightTotal: 100, header: "x-canary" },
    }],
    ["header value wins over pattern", {
      canary: "true",
      "canary-by-header": "x-canary",
      "canary-by-header-value": "beta",
      "canary-by-header-pattern": "^b",
    }, { rule: { weight: 0, weightTotal: 100, header: "x-canary", headerValue: "beta" } }],
    ["value without header is ignored", { canary: "true", "canary-by-header-value": "beta" }, {
      rule: { weight: 0, weightTotal: 100 },
    }],
    ["cookie and weight", {
      canary: "true",
      "canary-by-cookie": "canary",
      "canary-weight": "250",
      "canary-weight-total": "1000",
    }, { rule: { weight: 250, weightTotal: 1000, cookie: "canary" } }],
    ["weight above the total", { canary: "true", "canary-weight": "101" }, {
      problem: { annotation: "canary-weight", problem: "101 is not between 0 and 100" },
    }],
    ["canary not a boolean", { canary: "yes" }, {
      problem: { annotation: "canary", problem: '"yes" is not a boolean (true or false)' },
    }],
    ["header name with a space", { canary: "true", "canary-by-header": "x canary" }, {
      problem: { annotation: "canary-by-header", problem: '"x canary" is not a header name' },
    }],
    ["cookie name with a semicolon", { canary: "true", "canary-by-cookie": "a;b" }, {
      problem: { annotation: "canary-by-cookie", problem: '"a;b" is not a cookie name' },
    }],
  ];
  for (const [name, annotations, expected] of cases) {
    assertEquals(read(annotations), expected, name);
  }
});

Deno.test("readCanary() refuses header patterns that are invalid or may backtrack without end", () => {
  const base = { canary: "true", "canary-by-header": "x-canary" };
  for (
    const pattern of [
      "(a+)+$",
      "(a|aa)*b",
      "(x*)*",
      "(a)\\1",
      "[",
      "x".repeat(257),
      // Found by review: nested groups and several unbounded repetitions.
      "((a+))+$",
      "((a)+)+$",
      "((a*)b?)+$",
      "a*a*a*a*a*a*b",
    ]
  ) {
    const result = read({ ...base, "canary-by-header-pattern": pattern });
    assertEquals(result.problem?.annotation, "canary-by-header-pattern", pattern);
  }
  for (
    const pattern of ["^beta$", "^(alpha|beta)$", "v[0-9]+", "^user-[a-z]{1,8}$", "(ab)?c+"]
  ) {
    assertEquals(
      read({ ...base, "canary-by-header-pattern": pattern }).rule?.headerPattern,
      pattern,
    );
  }
});
