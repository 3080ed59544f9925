/**
 * Test support for the robustness tests of translation: the good cluster every
 * case runs beside (one Ingress of ours, its Service and EndpointSlice, our
 * IngressClass), {@linkcode runBesideGood} which translates it plus the objects
 * under test and checks what must hold for any input (no throw, the good route
 * intact, plain JSON data, deterministic, the same with a memo, a compilable
 * table), and builders of bad Ingresses.
 *
 * @module
 */
import type {
  ClusterObjects,
  InspectCertificate,
  Issue,
  TranslateOptions,
  Translation,
} from "../../lib/translate/translation.ts";
import type {
  EndpointSlice,
  Ingress,
  IngressClass,
  Secret,
  Service,
} from "../../lib/k8s/objects.ts";
import { webIngressSpec } from "./fixture_objects.ts";
import { translate } from "../../lib/translate/translate.ts";
import { compileRouteTable } from "../../lib/routing/route_table.ts";
import { assertEquals } from "./assert.ts";
import { createTranslationMemo } from "../../lib/translate/translation_memo.ts";

export const GOOD_NOW = Date.parse("2030-01-01T00:00:00Z");

/** Accepts every certificate except one whose PEM says "garbage" (then throws, as a broken parser might). */
export const INSPECT: InspectCertificate = (pems) => {
  if (pems.certPem?.includes("garbage")) throw new Error("inspector exploded");
  if (pems.certPem === undefined || pems.keyPem === undefined) {
    return { ok: false, reason: "tls.crt or tls.key is missing" };
  }
  return {
    ok: true,
    notBefore: "2024-01-01T00:00:00Z",
    notAfter: "2124-01-01T00:00:00Z",
    dnsNames: [],
    fingerprint: "f",
  };
};
export const GOOD_OPTIONS: TranslateOptions = { now: GOOD_NOW, inspectCertificate: INSPECT };

export const OUR_CLASS: IngressClass = {
  metadata: { name: "sluice" },
  spec: { controller: "sluice.dev/ingress-controller" },
};

export const GOOD_CLUSTER_INGRESS: Ingress = {
  metadata: { namespace: "good", name: "web", creationTimestamp: "2024-01-01T00:00:00Z" },
  spec: webIngressSpec("good.test"),
};
export const GOOD_SERVICE: Service = {
  metadata: { namespace: "good", name: "web" },
  spec: { ports: [{ port: 80 }] },
};
export const GOOD_SLICE: EndpointSlice = {
  metadata: { namespace: "good", name: "web-1", labels: { "kubernetes.io/service-name": "web" } },
  addressType: "IPv4",
  ports: [{ port: 80 }],
  endpoints: [{ addresses: ["10.0.0.1"] }],
};

/** Collections of extra objects, typed loosely on purpose: they are what a cache could hold. */
export interface ExtraObjects {
  readonly ingresses?: readonly unknown[];
  readonly ingressClasses?: readonly unknown[];
  readonly services?: readonly unknown[];
  readonly endpointSlices?: readonly unknown[];
  readonly secrets?: readonly unknown[];
}

/** The good cluster plus `extra`; classes replace ours only when given `replaceClasses`. */
export function clusterWith(extra: ExtraObjects, replaceClasses = false): ClusterObjects {
  return {
    ingresses: [GOOD_CLUSTER_INGRESS, ...(extra.ingresses ?? [])] as Ingress[],
    ingressClasses: [
      ...(replaceClasses ? [] : [OUR_CLASS]),
      ...(extra.ingressClasses ?? []),
    ] as IngressClass[],
    services: [GOOD_SERVICE, ...(extra.services ?? [])] as Service[],
    endpointSlices: [GOOD_SLICE, ...(extra.endpointSlices ?? [])] as EndpointSlice[],
    secrets: [...(extra.secrets ?? [])] as Secret[],
  };
}

/**
 * Translates the good cluster plus `extra` and checks what must hold for any
 * input: no throw, the good route intact, plain JSON data, deterministic,
 * the same with a memo, and a compilable table.
 */
export function runBesideGood(
  extra: ExtraObjects,
  options: Partial<TranslateOptions> = {},
  what = "",
): Translation {
  const objects = clusterWith(extra);
  const all = { ...GOOD_OPTIONS, ...options };
  const translation = translate(objects, all);
  const table = compileRouteTable(translation);
  const match = table.lookup("good.test", "/x");
  assertEquals(match?.backend.key, "good/web:80", `good route lost ${what}`);
  assertEquals(match?.backend.endpoints, [{ address: "10.0.0.1", port: 80 }], what);
  assertEquals(JSON.parse(JSON.stringify(translation)), structuredClone(translation), what);
  const again = JSON.stringify(translate(clusterWith(extra), all));
  assertEquals(again, JSON.stringify(translation), `not deterministic ${what}`);
  const memo = createTranslationMemo();
  translate(objects, { ...all, memo });
  assertEquals(JSON.stringify(translate(objects, { ...all, memo })), again, `memo differs ${what}`);
  return translation;
}

/** An Ingress of ours in namespace `bad` with the given spec (class set unless `spec` is not an object). */
export function badIngress(
  name: string,
  spec: unknown,
  metadata: Record<string, unknown> = {},
): unknown {
  const withClass = spec !== null && typeof spec === "object" && !Array.isArray(spec)
    ? { ingressClassName: "sluice", ...spec }
    : spec;
  return {
    metadata: {
      namespace: "bad",
      name,
      creationTimestamp: "2020-01-01T00:00:00Z",
      annotations: { "kubernetes.io/ingress.class": "sluice" },
      ...metadata,
    },
    spec: withClass,
  };
}

/** One rule for `bad.test` with one path. */
export function onePath(
  path: Record<string, unknown>,
  host: unknown = "bad.test",
): Record<string, unknown> {
  return { rules: [{ host, http: { paths: [path] } }] };
}

export const SVC = (port: unknown, name: unknown = "web") => ({ service: { name, port } });
export const PREFIX = (backend: unknown, path: unknown = "/") => ({
  path,
  pathType: "Prefix",
  backend,
});

export function issuesOf(translation: Translation, namespace: string, name: string): Issue[] {
  return translation.issues.filter((i) => i.namespace === namespace && i.name === name);
}

export function routesOf(translation: Translation, ingress: string) {
  return translation.routes.filter((r) => r.ingress === ingress);
}
