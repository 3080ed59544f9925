/**
 * Tests of the Gateway API status plan: what is written, what is kept
 * (other controllers' route parents, unchanged conditions' transition
 * times), and that nothing is written when nothing changed.
 *
 * @module
 */
import { assertEquals } from "../../tests/support/assert.ts";
import type { KubeObject } from "../k8s/objects.ts";
import type { Condition, GatewayStatuses } from "../translate/gateway/types.ts";
import { mergeConditions, planGatewayStatus } from "./gateway_status_writer.ts";

const OURS = "sluice.dev/ingress-controller";
const EARLIER = "2026-11-01T00:00:00Z";
const NOW = "2026-12-02T10:00:00Z";

function condition(type: string, status: "True" | "False", reason = type): Condition {
  return {
    type,
    status,
    reason,
    message: "",
    observedGeneration: 1,
    lastTransitionTime: "1970-01-01T00:00:00Z",
  };
}

const PARENT = {
  group: "gateway.networking.k8s.io",
  kind: "Gateway",
  namespace: "ns",
  name: "gateway",
};

const STATUSES: GatewayStatuses = {
  gatewayClasses: [{
    name: "sluice",
    conditions: [condition("Accepted", "True")],
    supportedFeatures: [{ name: "HTTPRoute" }],
  }],
  gateways: [{
    gateway: "ns/gateway",
    conditions: [condition("Accepted", "True"), condition("Programmed", "True")],
    listeners: [{
      name: "http",
      supportedKinds: [{ group: "gateway.networking.k8s.io", kind: "HTTPRoute" }],
      attachedRoutes: 1,
      conditions: [condition("Accepted", "True")],
    }],
  }],
  httpRoutes: [{
    route: "ns/route",
    parents: [{
      parentRef: PARENT,
      controllerName: OURS,
      conditions: [condition("Accepted", "True"), condition("ResolvedRefs", "True")],
    }],
  }],
};

function object(kind: string, name: string, namespace?: string, status?: unknown): KubeObject {
  return {
    kind,
    metadata: { name, ...(namespace ? { namespace } : {}), resourceVersion: "7" },
    ...(status !== undefined ? { status } : {}),
  } as KubeObject;
}

function plan(objects: {
  classStatus?: unknown;
  gatewayStatus?: unknown;
  routeStatus?: unknown;
}) {
  return planGatewayStatus({
    statuses: STATUSES,
    gatewayClasses: [object("GatewayClass", "sluice", undefined, objects.classStatus)],
    gateways: [object("Gateway", "gateway", "ns", objects.gatewayStatus)],
    httpRoutes: [object("HTTPRoute", "route", "ns", objects.routeStatus)],
    controllerName: OURS,
    addresses: [{ ip: "10.0.0.1" }, { hostname: "lb.example.com" }],
    now: NOW,
  });
}

Deno.test("planGatewayStatus() writes every status an object lacks, with the addresses and the time of now", () => {
  const actions = plan({});
  assertEquals(
    actions.map((a) => `${a.resource.kind} ${a.namespace}/${a.name}@${a.resourceVersion}`),
    [
      "GatewayClass /sluice@7",
      "Gateway ns/gateway@7",
      "HTTPRoute ns/route@7",
    ],
  );
  const gateway = actions[1]!.status;
  assertEquals(gateway.addresses, [
    { type: "IPAddress", value: "10.0.0.1" },
    { type: "Hostname", value: "lb.example.com" },
  ]);
  assertEquals(
    (gateway.conditions as Condition[]).map((c) => c.lastTransitionTime),
    [NOW, NOW],
  );
  assertEquals(actions[0]!.status.supportedFeatures, [{ name: "HTTPRoute" }]);
});

Deno.test("planGatewayStatus() writes nothing when every status already says the same", () => {
  const first = plan({});
  const again = plan({
    classStatus: first[0]!.status,
    gatewayStatus: first[1]!.status,
    routeStatus: first[2]!.status,
  });
  assertEquals(again, []);
});

Deno.test("planGatewayStatus() keeps another controller's route parents and replaces only ours", () => {
  const theirs = {
    parentRef: { ...PARENT, name: "other" },
    controllerName: "example.com/other",
    conditions: [condition("Accepted", "False")],
  };
  const stale = {
    parentRef: PARENT,
    controllerName: OURS,
    conditions: [{ ...condition("Accepted", "True"), lastTransitionTime: EARLIER }],
  };
  const [route] = plan({ routeStatus: { parents: [theirs, stale] } }).filter((a) =>
    a.resource.kind === "HTTPRoute"
  );
  const parents = route!.status.parents as { controllerName: string; conditions: Condition[] }[];
  assertEquals(parents.map((p) => p.controllerName), ["example.com/other", OURS]);
  assertEquals(parents[0], theirs);
  // Accepted stayed True: its transition time is kept; ResolvedRefs is new.
  assertEquals(parents[1]!.conditions.map((c) => [c.type, c.lastTransitionTime]), [
    ["Accepted", EARLIER],
    ["ResolvedRefs", NOW],
  ]);
});

Deno.test("mergeConditions() keeps lastTransitionTime while a condition's status stays, and moves it when it changes", () => {
  const cases: [string, unknown, string][] = [
    ["no current conditions", undefined, NOW],
    ["same status", [{ type: "Accepted", status: "True", lastTransitionTime: EARLIER }], EARLIER],
    ["status changed", [{ type: "Accepted", status: "False", lastTransitionTime: EARLIER }], NOW],
    ["other type only", [{ type: "Programmed", status: "True", lastTransitionTime: EARLIER }], NOW],
    ["malformed current", "nonsense", NOW],
  ];
  for (const [name, current, expected] of cases) {
    const [merged] = mergeConditions([condition("Accepted", "True")], current, NOW);
    assertEquals(merged!.lastTransitionTime, expected, name);
  }
});

Deno.test("planGatewayStatus() leaves objects it has no status for, and statuses of objects not in the store", () => {
  const actions = planGatewayStatus({
    statuses: STATUSES,
    gatewayClasses: [object("GatewayClass", "someone-else")],
    gateways: [],
    httpRoutes: [object("HTTPRoute", "unrelated", "ns")],
    controllerName: OURS,
    addresses: [],
    now: NOW,
  });
  assertEquals(actions, []);
});
