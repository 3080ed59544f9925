/**
 * IngressClass selection: the table of selection cases, and odd IngressClass
 * combinations decided through `translate()` without throwing or reporting
 * foreign Ingresses.
 *
 * @module
 */
import { assertEquals } from "../../tests/support/assert.ts";
import type { Ingress, IngressClass } from "../k8s/objects.ts";
import { type ClassSelectionOptions, createClassSelector } from "./class_selection.ts";
import {
  clusterWith,
  GOOD_OPTIONS,
  issuesOf,
  routesOf,
  SVC,
} from "../../tests/support/good_cluster.ts";
import { translate } from "./translate.ts";

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

Deno.test("translate() decides odd IngressClass combinations without throwing or reporting foreign Ingresses", () => {
  const foreign = (name: string, extra: Record<string, unknown> = {}) => ({
    metadata: { name, ...extra },
    spec: { controller: "example.com/other" },
  });
  const ours = (name: string, extra: Record<string, unknown> = {}) => ({
    metadata: { name, ...extra },
    spec: { controller: "sluice.dev/ingress-controller" },
  });
  const DEFAULT = { annotations: { "ingressclass.kubernetes.io/is-default-class": "true" } };
  const ingress = (spec: Record<string, unknown>, annotations: Record<string, string> = {}) => ({
    metadata: { namespace: "c", name: "i", annotations },
    spec: { defaultBackend: SVC({ number: 80 }), ...spec },
  });
  const cases: [string, unknown[], unknown, boolean][] = [
    [
      "two default classes, ours among them",
      [foreign("other", DEFAULT), ours("s", DEFAULT)],
      ingress({}),
      true,
    ],
    [
      "two default classes, both foreign",
      [foreign("a", DEFAULT), foreign("b", DEFAULT)],
      ingress({}),
      false,
    ],
    [
      "our class name held by another controller",
      [foreign("sluice")],
      ingress({ ingressClassName: "sluice" }),
      false,
    ],
    [
      "spec.ingressClassName wins over our annotation",
      [ours("sluice"), foreign("other")],
      ingress({ ingressClassName: "other" }, { "kubernetes.io/ingress.class": "sluice" }),
      false,
    ],
    [
      "spec.ingressClassName ours beats a foreign annotation",
      [ours("sluice")],
      ingress({ ingressClassName: "sluice" }, { "kubernetes.io/ingress.class": "nginx" }),
      true,
    ],
    [
      'is-default-class not exactly "true"',
      [ours("sluice", { annotations: { "ingressclass.kubernetes.io/is-default-class": "True" } })],
      ingress({}),
      false,
    ],
    [
      "is-default-class a boolean",
      [ours("sluice", { annotations: { "ingressclass.kubernetes.io/is-default-class": true } })],
      ingress({}),
      false,
    ],
    [
      "class with null spec and null metadata",
      [{ metadata: null, spec: null }, { metadata: { name: "x" }, spec: null }, ours("sluice")],
      ingress({ ingressClassName: "x" }),
      false,
    ],
    [
      "ingressClassName a number falls back to the annotation",
      [ours("sluice")],
      ingress({ ingressClassName: 5 }, { "kubernetes.io/ingress.class": "sluice" }),
      true,
    ],
    [
      "two classes of one name in a stale cache: the last wins",
      [ours("dup"), foreign("dup")],
      ingress({ ingressClassName: "dup" }),
      false,
    ],
  ];
  for (const [what, classes, ingressObject, expected] of cases) {
    const objects = clusterWith({ ingresses: [ingressObject], ingressClasses: classes }, true);
    // The good Ingress names "sluice": keep it routable where "sluice" is not ours.
    const translation = translate(objects, GOOD_OPTIONS);
    const routes = routesOf(translation, "c/i");
    assertEquals(routes.length > 0, expected, what);
    if (!expected) assertEquals(issuesOf(translation, "c", "i"), [], what);
  }
});
