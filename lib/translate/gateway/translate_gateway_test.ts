import { assertEquals } from "../../../tests/support/assert.ts";
import { translateGateway } from "./translate_gateway.ts";

Deno.test("translateGateway() of nothing is empty and frozen", () => {
  const translation = translateGateway({});
  assertEquals(translation, {
    classes: [],
    gateways: [],
    routes: [],
    issues: [],
    statuses: { gatewayClasses: [], gateways: [], httpRoutes: [] },
  });
  assertEquals(Object.isFrozen(translation.statuses), true);
});

Deno.test("translateGateway() claims classes of sluice.dev/ingress-controller by default", () => {
  const gatewayClasses = [
    { metadata: { name: "ours" }, spec: { controllerName: "sluice.dev/ingress-controller" } },
    { metadata: { name: "theirs" }, spec: { controllerName: "example.com/other" } },
  ];
  assertEquals(translateGateway({ gatewayClasses }).classes, [{ name: "ours", accepted: true }]);
  assertEquals(
    translateGateway({ gatewayClasses }, { controllerName: "example.com/other" }).classes,
    [{ name: "theirs", accepted: true }],
  );
});

Deno.test("translateGateway() writes the passed-in time and the generation on conditions", () => {
  const { statuses } = translateGateway({
    gatewayClasses: [{
      metadata: { name: "ours", generation: 7 },
      spec: { controllerName: "sluice.dev/ingress-controller" },
    }],
  }, { now: "2031-05-06T07:08:09Z" });
  const condition = statuses.gatewayClasses[0]!.conditions[0]!;
  assertEquals(condition.lastTransitionTime, "2031-05-06T07:08:09Z");
  assertEquals(condition.observedGeneration, 7);
});
