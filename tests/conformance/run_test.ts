/**
 * Tests of how `deno task conformance --check` judges a fresh report
 * against the checked-in one.
 *
 * @module
 */
import { assertEquals } from "../support/assert.ts";
import { compareReports, goTestPattern } from "./run.ts";

function report(
  core: string[],
  corePassed: number,
  features: string[],
  extendedFailed: string[] = [],
) {
  return {
    profiles: [{
      name: "GATEWAY-HTTP",
      core: { failedTests: core, statistics: { Passed: corePassed } },
      extended: {
        failedTests: extendedFailed,
        statistics: { Passed: features.length },
        supportedFeatures: features,
      },
    }],
  };
}

Deno.test("compareReports() fails new failures, fewer passes and dropped features, and lists known failures", () => {
  const checkedIn = report(["HTTPRouteMultipleGateways"], 35, ["HTTPRouteMethodMatching"]);
  const cases: [string, ReturnType<typeof report> | { profiles: [] }, string[], string[]][] = [
    ["the same", checkedIn, [], ["GATEWAY-HTTP core: HTTPRouteMultipleGateways"]],
    ["the known failure fixed", report([], 36, ["HTTPRouteMethodMatching"]), [], []],
    [
      "a new core failure",
      report(["HTTPRouteMultipleGateways", "HTTPRouteSimpleSameNamespace"], 34, [
        "HTTPRouteMethodMatching",
      ]),
      [
        "GATEWAY-HTTP core: HTTPRouteSimpleSameNamespace",
        "GATEWAY-HTTP core: 34 passed, 35 before",
      ],
      ["GATEWAY-HTTP core: HTTPRouteMultipleGateways"],
    ],
    [
      "an extended failure",
      report(["HTTPRouteMultipleGateways"], 35, ["HTTPRouteMethodMatching"], [
        "HTTPRouteMethodMatching",
      ]),
      ["GATEWAY-HTTP extended: HTTPRouteMethodMatching"],
      [
        "GATEWAY-HTTP core: HTTPRouteMultipleGateways",
      ],
    ],
    ["a feature dropped", report(["HTTPRouteMultipleGateways"], 35, []), [
      "GATEWAY-HTTP extended: 0 passed, 1 before",
      "GATEWAY-HTTP: HTTPRouteMethodMatching no longer claimed",
    ], ["GATEWAY-HTTP core: HTTPRouteMultipleGateways"]],
    ["the profile missing", { profiles: [] }, ["profile GATEWAY-HTTP did not run"], []],
  ];
  for (const [name, fresh, regressions, known] of cases) {
    assertEquals(compareReports(checkedIn, fresh), { regressions, known }, name);
  }
});

Deno.test("goTestPattern() runs the suite's tests by whole name, or takes Go's pattern as given", () => {
  const cases: [string, string][] = [
    ["HTTPRouteRequestMirror", "TestGatewayAPIConformance/^(HTTPRouteRequestMirror)$"],
    [
      "HTTPRouteMultipleGateways, HTTPRouteWeight",
      "TestGatewayAPIConformance/^(HTTPRouteMultipleGateways|HTTPRouteWeight)$",
    ],
    ["TestGatewayAPIConformance/HTTPRoute", "TestGatewayAPIConformance/HTTPRoute"],
    ["TestGatewayAPIConformance", "TestGatewayAPIConformance"],
  ];
  for (const [run, pattern] of cases) assertEquals(goTestPattern(run), pattern, run);
});
