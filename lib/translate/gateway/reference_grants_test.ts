import { assertEquals } from "../../../tests/support/assert.ts";
import { isReferenceAllowed } from "./reference_grants.ts";
import type { ReferenceGrant } from "./types.ts";

const route = { group: "gateway.networking.k8s.io", kind: "HTTPRoute", namespace: "shop" };
const service = { group: "", kind: "Service", namespace: "data", name: "web" };

function grant(namespace: string, toName?: string, fromKind = "HTTPRoute"): ReferenceGrant {
  return {
    metadata: { name: "g", namespace },
    spec: {
      from: [{ group: "gateway.networking.k8s.io", kind: fromKind, namespace: "shop" }],
      to: [{ group: "", kind: "Service", ...(toName === undefined ? {} : { name: toName }) }],
    },
  };
}

Deno.test("isReferenceAllowed() needs a matching grant in the target namespace", () => {
  const cases: [ReferenceGrant[], typeof service, boolean, string][] = [
    [[], { ...service, namespace: "shop" }, true, "same namespace"],
    [[], service, false, "no grant"],
    [[grant("data")], service, true, "grant for every Service"],
    [[grant("data", "web")], service, true, "grant naming the Service"],
    [[grant("data", "api")], service, false, "grant naming another Service"],
    [[grant("shop")], service, false, "grant in the source namespace"],
    [[grant("data", undefined, "Gateway")], service, false, "grant from another kind"],
  ];
  for (const [grants, to, expected, label] of cases) {
    assertEquals(isReferenceAllowed(grants, route, to), expected, label);
  }
});
