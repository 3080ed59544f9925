import { assertEquals, assertStrictEquals } from "../../tests/support/assert.ts";
import type { KubeObject } from "../k8s/objects.ts";
import { LAST_APPLIED_ANNOTATION, slimObject } from "./slim_object.ts";

const FIELDS = [{ manager: "kubectl", operation: "Update", fieldsV1: { "f:spec": {} } }];

const CASES: { name: string; input: KubeObject; want: KubeObject }[] = [
  {
    name: "managedFields are dropped, everything else kept",
    input: {
      kind: "Ingress",
      metadata: { name: "a", namespace: "n", managedFields: FIELDS, labels: { x: "1" } } as never,
    },
    want: { kind: "Ingress", metadata: { name: "a", namespace: "n", labels: { x: "1" } } },
  },
  {
    name: "the last-applied annotation is dropped, other annotations kept",
    input: {
      metadata: {
        name: "a",
        annotations: { [LAST_APPLIED_ANNOTATION]: '{"big":"copy"}', "sluice.dev/x": "y" },
      },
    },
    want: { metadata: { name: "a", annotations: { "sluice.dev/x": "y" } } },
  },
  {
    name: "both at once",
    input: {
      metadata: {
        name: "a",
        managedFields: FIELDS,
        annotations: { [LAST_APPLIED_ANNOTATION]: "{}" },
      } as never,
    },
    want: { metadata: { name: "a", annotations: {} } },
  },
];

for (const { name, input, want } of CASES) {
  Deno.test(`slimObject(): ${name}`, () => {
    const before = structuredClone(input);
    assertEquals(slimObject(input), want);
    assertEquals(input, before, "the input is left unchanged");
  });
}

Deno.test("slimObject() returns the object itself when there is nothing to drop", () => {
  for (
    const object of [
      { metadata: { name: "a", annotations: { "sluice.dev/x": "y" } } },
      { metadata: { name: "a" } },
      { kind: "Service" },
    ] as KubeObject[]
  ) {
    assertStrictEquals(slimObject(object), object);
  }
});
