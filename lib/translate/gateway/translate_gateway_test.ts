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

Deno.test("translateGateway() makes a listener whose certificate is malformed InvalidCertificateRef, with an issue", () => {
  const objects = {
    gatewayClasses: [{
      metadata: { name: "ours", generation: 1 },
      spec: { controllerName: "sluice.dev/ingress-controller" },
    }],
    gateways: [{
      metadata: { namespace: "infra", name: "gw", generation: 1 },
      spec: {
        gatewayClassName: "ours",
        listeners: ["good", "bad"].map((name) => ({
          name,
          port: 443,
          protocol: "HTTPS",
          hostname: `${name}.example.com`,
          tls: { certificateRefs: [{ name }] },
        })),
      },
    }],
    secrets: ["good", "bad"].map((name) => ({
      metadata: { namespace: "infra", name },
      type: "kubernetes.io/tls",
      data: { "tls.crt": "eA==", "tls.key": "eA==" },
    })),
  };
  const translation = translateGateway(objects, {
    certificateProblem: (key) =>
      key === "infra/bad" ? "tls.crt is not a PEM certificate" : undefined,
  });
  const listeners = translation.statuses.gateways[0]!.listeners;
  const resolved = (name: string) =>
    listeners.find((l) => l.name === name)!.conditions.find((c) => c.type === "ResolvedRefs");
  assertEquals(resolved("good")?.status, "True");
  assertEquals([resolved("bad")?.status, resolved("bad")?.reason], [
    "False",
    "InvalidCertificateRef",
  ]);
  assertEquals(
    translation.gateways[0]!.listeners.map((l) => [l.name, l.ready]),
    [["good", true], ["bad", false]],
  );
  assertEquals(
    translation.issues.map((i) => i.message).filter((m) => m.includes("infra/bad")).length,
    1,
  );
});
