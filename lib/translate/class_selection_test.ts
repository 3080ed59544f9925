/**
 * Table of IngressClass selection cases.
 *
 * @module
 */

import { assertEquals } from "../../tests/support/assert.ts";
import type { Ingress, IngressClass } from "../k8s/objects.ts";
import { type ClassSelectionOptions, createClassSelector } from "./class_selection.ts";

const OURS: IngressClass = {
  metadata: { name: "sluice" },
  spec: { controller: "sluice.dev/ingress-controller" },
};
const OURS_DEFAULT: IngressClass = {
  metadata: {
    name: "sluice",
    annotations: { "ingressclass.kubernetes.io/is-default-class": "true" },
  },
  spec: { controller: "sluice.dev/ingress-controller" },
};
const NGINX: IngressClass = {
  metadata: { name: "nginx" },
  spec: { controller: "k8s.io/ingress-nginx" },
};

function ingress(className?: string, annotation?: string): Ingress {
  return {
    metadata: {
      name: "i",
      namespace: "n",
      ...(annotation === undefined
        ? {}
        : { annotations: { "kubernetes.io/ingress.class": annotation } }),
    },
    spec: className === undefined ? {} : { ingressClassName: className },
  };
}

const CASES: [
  name: string,
  classes: IngressClass[],
  options: ClassSelectionOptions,
  ingress: Ingress,
  ours: boolean,
][] = [
  ["ingressClassName naming our IngressClass", [OURS], {}, ingress("sluice"), true],
  ["ingressClassName naming a foreign IngressClass", [OURS, NGINX], {}, ingress("nginx"), false],
  ["ingressClassName naming no IngressClass", [OURS], {}, ingress("traefik"), false],
  ["legacy annotation with our class", [], {}, ingress(undefined, "sluice"), true],
  ["legacy annotation with another class", [OURS], {}, ingress(undefined, "nginx"), false],
  [
    "ingressClassName wins over the annotation",
    [OURS, NGINX],
    {},
    ingress("nginx", "sluice"),
    false,
  ],
  ["no class, no default class", [OURS], {}, ingress(), false],
  ["no class, our class is the default", [OURS_DEFAULT], {}, ingress(), true],
  [
    "no class, watchIngressWithoutClass",
    [OURS],
    { watchIngressWithoutClass: true },
    ingress(),
    true,
  ],
  ["empty ingressClassName counts as none", [OURS_DEFAULT], {}, ingress(""), true],
  [
    "custom controller name",
    [{ metadata: { name: "edge" }, spec: { controller: "x/edge" } }],
    {
      controllerName: "x/edge",
    },
    ingress("edge"),
    true,
  ],
  [
    "default controller name is not ours under a custom one",
    [OURS],
    { controllerName: "x/edge" },
    ingress("sluice"),
    false,
  ],
  ["custom legacy class", [], { ingressClass: "edge" }, ingress(undefined, "edge"), true],
  [
    "malformed IngressClass objects are skipped",
    [{} as IngressClass, OURS],
    {},
    ingress("sluice"),
    true,
  ],
];

Deno.test("createClassSelector() decides which Ingresses are ours", () => {
  for (const [name, classes, options, subject, ours] of CASES) {
    assertEquals(createClassSelector(classes, options)(subject).ours, ours, name);
  }
});

Deno.test("createClassSelector() explains an Ingress naming our class before the IngressClass exists", () => {
  assertEquals(createClassSelector([], {})(ingress("sluice")), {
    ours: false,
    problem: {
      field: "spec.ingressClassName",
      message:
        'Cannot select IngressClass "sluice": no such IngressClass; create it with spec.controller ' +
        '"sluice.dev/ingress-controller"',
    },
  });
  assertEquals(createClassSelector([], {})(ingress("nginx")), { ours: false });
});
