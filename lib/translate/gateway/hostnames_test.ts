import { assertEquals } from "../../../tests/support/assert.ts";
import { hostnameCovers, intersectHostname, routeHostnamesOn } from "./hostnames.ts";

Deno.test("intersectHostname() follows the Gateway API wildcard rules", () => {
  const cases: [string, string, string | undefined][] = [
    ["", "", ""],
    ["", "shop.example.com", "shop.example.com"],
    ["shop.example.com", "", "shop.example.com"],
    ["shop.example.com", "shop.example.com", "shop.example.com"],
    ["shop.example.com", "blog.example.com", undefined],
    ["*.example.com", "shop.example.com", "shop.example.com"],
    // A Gateway API wildcard stands for one or more labels.
    ["*.example.com", "a.b.example.com", "a.b.example.com"],
    ["*.example.com", "example.com", undefined],
    ["shop.example.com", "*.example.com", "shop.example.com"],
    ["*.example.com", "*.example.com", "*.example.com"],
    ["*.example.com", "*.shop.example.com", "*.shop.example.com"],
    ["*.shop.example.com", "*.example.com", "*.shop.example.com"],
    ["*.example.com", "*.example.org", undefined],
    ["*.example.com", "badexample.com", undefined],
  ];
  for (const [listener, route, expected] of cases) {
    assertEquals(intersectHostname(listener, route), expected, `${listener} ∩ ${route}`);
  }
});

Deno.test("routeHostnamesOn() uses the listener hostname when the route has none", () => {
  assertEquals(routeHostnamesOn("*.example.com", []), ["*.example.com"]);
  assertEquals(routeHostnamesOn("", []), [""]);
  assertEquals(
    routeHostnamesOn("*.example.com", ["b.example.com", "a.example.com", "x.org", "b.example.com"]),
    ["a.example.com", "b.example.com"],
  );
  assertEquals(routeHostnamesOn("shop.example.com", ["blog.example.com"]), []);
});

Deno.test("hostnameCovers() folds less specific hostnames into more specific ones", () => {
  assertEquals(hostnameCovers("", "shop.example.com"), true);
  assertEquals(hostnameCovers("*.example.com", "shop.example.com"), true);
  assertEquals(hostnameCovers("*.example.com", "*.shop.example.com"), true);
  assertEquals(hostnameCovers("shop.example.com", "*.example.com"), false);
  assertEquals(hostnameCovers("shop.example.com", ""), false);
});
