import { assertEquals, assertThrows } from "../../tests/support/assert.ts";
import { apiVersionOf, INGRESS_CLASSES, INGRESSES, resourcePath, SERVICES } from "./resources.ts";

Deno.test("resourcePath() forms core, grouped, namespaced, cluster-scoped and subresource paths", () => {
  const cases: [string, string][] = [
    [resourcePath(SERVICES), "/api/v1/services"],
    [resourcePath(SERVICES, { namespace: "shop" }), "/api/v1/namespaces/shop/services"],
    [
      resourcePath(SERVICES, { namespace: "shop", name: "web" }),
      "/api/v1/namespaces/shop/services/web",
    ],
    [resourcePath(INGRESSES), "/apis/networking.k8s.io/v1/ingresses"],
    [
      resourcePath(INGRESSES, { namespace: "shop", name: "web", subresource: "status" }),
      "/apis/networking.k8s.io/v1/namespaces/shop/ingresses/web/status",
    ],
    [
      resourcePath(INGRESS_CLASSES, { name: "sluice" }),
      "/apis/networking.k8s.io/v1/ingressclasses/sluice",
    ],
    [
      resourcePath(SERVICES, { namespace: "a b", name: "x/y" }),
      "/api/v1/namespaces/a%20b/services/x%2Fy",
    ],
  ];
  for (const [actual, expected] of cases) assertEquals(actual, expected);
});

Deno.test("resourcePath() refuses a namespace for a cluster-scoped resource and a subresource without a name", () => {
  assertThrows(() => resourcePath(INGRESS_CLASSES, { namespace: "x" }), Error, "cluster-scoped");
  assertThrows(() => resourcePath(INGRESSES, { subresource: "status" }), Error, "without a name");
});

Deno.test("apiVersionOf() omits the empty core group", () => {
  assertEquals(apiVersionOf(SERVICES), "v1");
  assertEquals(apiVersionOf(INGRESSES), "networking.k8s.io/v1");
});
