/**
 * Request host normalisation cases.
 *
 * @module
 */

import { assertEquals } from "../../tests/support/assert.ts";
import { normaliseRequestHost, wildcardSuffix } from "./host.ts";

Deno.test("normaliseRequestHost() lowercases and strips port and trailing dot", () => {
  const cases: [string, string][] = [
    ["shop.example.com", "shop.example.com"],
    ["Shop.Example.COM", "shop.example.com"],
    ["shop.example.com:8080", "shop.example.com"],
    ["shop.example.com.", "shop.example.com"],
    ["SHOP.example.com.:443", "shop.example.com"],
    ["[::1]:8080", "[::1]"],
    ["[2001:DB8::1]", "[2001:db8::1]"],
    ["[::1", "[::1"],
    ["::1", "::1"],
    ["10.0.0.1:80", "10.0.0.1"],
    ["", ""],
    ["localhost:", "localhost"],
  ];
  for (const [input, expected] of cases) assertEquals(normaliseRequestHost(input), expected, input);
});

Deno.test("wildcardSuffix() drops exactly the first label", () => {
  assertEquals(wildcardSuffix("a.example.com"), "example.com");
  assertEquals(wildcardSuffix("a.b.example.com"), "b.example.com");
  assertEquals(wildcardSuffix("example"), undefined);
  assertEquals(wildcardSuffix(".example.com"), undefined);
});
