import { assertEquals } from "../../tests/support/assert.ts";
import type { RouteCanary } from "../translate/nginx/canary.ts";
import { choosesCanary, compileCanary } from "./canary_choice.ts";

const BACKEND = { key: "shop/canary:80", service: "shop/canary", endpoints: [] };

function choose(
  rule: Partial<RouteCanary>,
  request: { header?: string; cookie?: string; random?: number },
): boolean {
  const canary = compileCanary({
    ingress: "shop/canary",
    backend: BACKEND.key,
    weight: 0,
    weightTotal: 100,
    ...rule,
  }, BACKEND);
  return choosesCanary(canary, {
    header: (name) => name === "x-canary" ? request.header : undefined,
    cookie: (name) => name === "canary" ? request.cookie : undefined,
    random: request.random ?? 0.99,
  });
}

Deno.test("choosesCanary() follows ingress-nginx's order: header, then cookie, then weight", () => {
  const byHeader = { header: "x-canary" };
  const byCookie = { cookie: "canary" };
  const cases: [string, Partial<RouteCanary>, Parameters<typeof choose>[1], boolean][] = [
    ["header always", byHeader, { header: "always" }, true],
    ["header never beats cookie always", { ...byHeader, ...byCookie }, {
      header: "never",
      cookie: "always",
    }, false],
    [
      "header never beats the whole weight",
      { ...byHeader, weight: 100 },
      { header: "never" },
      false,
    ],
    ["other header value: the cookie decides", { ...byHeader, ...byCookie }, {
      header: "maybe",
      cookie: "always",
    }, true],
    ["header value equal", { ...byHeader, headerValue: "beta" }, { header: "beta" }, true],
    ["header value differs: not always either", { ...byHeader, headerValue: "beta" }, {
      header: "always",
    }, false],
    ["header value case matters", { ...byHeader, headerValue: "beta" }, { header: "Beta" }, false],
    ["header pattern matches", { ...byHeader, headerPattern: "^be" }, { header: "beta" }, true],
    [
      "header pattern does not match",
      { ...byHeader, headerPattern: "^be" },
      { header: "ab" },
      false,
    ],
    [
      "a header longer than 1,024 never matches a pattern",
      { ...byHeader, headerPattern: "^be" },
      { header: "be" + "x".repeat(1024) },
      false,
    ],
    ["no header: the weight decides", { ...byHeader, weight: 100 }, {}, true],
    ["cookie never beats the weight", { ...byCookie, weight: 100 }, { cookie: "never" }, false],
    [
      "cookie other value: the weight decides",
      { ...byCookie, weight: 0 },
      { cookie: "yes" },
      false,
    ],
    ["weight 30 of 100, draw 0.29", { weight: 30 }, { random: 0.29 }, true],
    ["weight 30 of 100, draw 0.30", { weight: 30 }, { random: 0.3 }, false],
    ["weight 1 of 1000, draw 0.0009", { weight: 1, weightTotal: 1000 }, { random: 0.0009 }, true],
    ["weight 1 of 1000, draw 0.001", { weight: 1, weightTotal: 1000 }, { random: 0.001 }, false],
    ["weight 0 never", { weight: 0 }, { random: 0 }, false],
  ];
  for (const [name, rule, request, expected] of cases) {
    assertEquals(choose(rule, request), expected, name);
  }
});
