/**
 * The translation fixtures (`tests/fixtures/*.in.yaml`) as plain object
 * lists, for safety-net tests that replay them through the store or the
 * translation in other ways than the golden test does; an edit of any
 * object that changes something a translation might read; and, for tests
 * that build their own objects, the smallest Ingress that routes (its spec,
 * or the whole object), an Ingress with only a default backend, and Service
 * `web` (one port, or port `http` with its EndpointSlice).
 *
 * @module
 */
import { parseAllDocuments } from "yaml";
import type { IngressSpec, KubeObject } from "../../lib/k8s/objects.ts";
import { type Kind, KINDS } from "../../lib/store/matters.ts";
import type { TranslateOptions } from "../../lib/translate/translation.ts";

const FIXTURES = new URL("../fixtures/", import.meta.url);

/** One fixture: its translation options, clock and objects in file order. */
export interface FixtureObjects {
  readonly name: string;
  readonly options: Omit<TranslateOptions, "now" | "inspectCertificate">;
  readonly now: number;
  readonly objects: { kind: Kind; object: KubeObject }[];
}

/** Every fixture, sorted by file name. */
export async function readFixtureObjects(): Promise<FixtureObjects[]> {
  const fixtures: FixtureObjects[] = [];
  for await (const entry of Deno.readDir(FIXTURES)) {
    if (!entry.name.endsWith(".in.yaml")) continue;
    const text = await Deno.readTextFile(new URL(entry.name, FIXTURES));
    let options = {};
    let now = Date.parse("2030-01-01T00:00:00Z");
    const objects: FixtureObjects["objects"] = [];
    for (const document of parseAllDocuments(text)) {
      const object = document.toJS() as (KubeObject & Record<string, unknown>) | null;
      if (object === null) continue;
      if (object.kind === "Fixture") {
        options = (object.options ?? {}) as FixtureObjects["options"];
        if (typeof object.now === "string") now = Date.parse(object.now);
      } else if (KINDS.includes(object.kind as Kind)) {
        objects.push({ kind: object.kind as Kind, object });
      }
    }
    fixtures.push({ name: entry.name, options, now, objects });
  }
  return fixtures.sort((a, b) => a.name < b.name ? -1 : 1);
}

/** A copy of `object` with something a translation reads changed. */
export function editedObject(kind: Kind, object: KubeObject): KubeObject {
  const copy = structuredClone(object) as KubeObject & Record<string, unknown>;
  switch (kind) {
    case "Secret":
      copy.data = { "tls.crt": "Z2FyYmFnZQ==", "tls.key": "Z2FyYmFnZQ==" };
      break;
    case "Service":
      copy.spec = { ports: [{ name: "other", port: 9999, targetPort: 9999 }] };
      break;
    case "EndpointSlice":
      copy.endpoints = [{ addresses: ["10.99.99.99"], conditions: { ready: true } }];
      break;
    case "Ingress":
      copy.spec = { ...(copy.spec as object), rules: [{ host: "edited.test" }] };
      break;
    case "IngressClass":
      copy.spec = { controller: "example.com/other" };
      break;
  }
  return copy;
}

/**
 * The spec of an Ingress of class `sluice` sending `host` (or each of `hosts`,
 * one rule each), every path, to port 80 of Service `web`.
 */
export function webIngressSpec(hosts: string | readonly string[]): IngressSpec {
  return {
    ingressClassName: "sluice",
    rules: (typeof hosts === "string" ? [hosts] : hosts).map((host) => ({
      host,
      http: {
        paths: [{
          path: "/",
          pathType: "Prefix",
          backend: { service: { name: "web", port: { number: 80 } } },
        }],
      },
    })),
  };
}

/** An Ingress `name` of class `sluice` sending `host` (default `<name>.example.com`) to `web:80`. */
export function webIngress(name: string, host = `${name}.example.com`) {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "Ingress",
    metadata: { name },
    spec: webIngressSpec(host),
  };
}

/** A Service `name` with one port, 80. */
export function port80Service(name: string) {
  return { apiVersion: "v1", kind: "Service", metadata: { name }, spec: { ports: [{ port: 80 }] } };
}

/**
 * An Ingress `name` with only a default backend, port 80 of Service `web`; of
 * class `className`, or of none.
 */
export function defaultBackendIngress(name: string, className?: string) {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "Ingress",
    metadata: { name },
    spec: {
      ...(className === undefined ? {} : { ingressClassName: className }),
      defaultBackend: { service: { name: "web", port: { number: 80 } } },
    },
  };
}

/** Service `web`: port 80 (named `http`) to target port 8080. */
export function webService() {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: "web" },
    spec: { ports: [{ name: "http", port: 80, targetPort: 8080 }] },
  };
}

/** EndpointSlice `web-1` of Service `web`: each of `addresses` ready on port `http` 8080. */
export function webEndpointSlice(addresses: readonly string[], resourceVersion?: string) {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: {
      name: "web-1",
      labels: {
        "kubernetes.io/service-name": "web",
        "endpointslice.kubernetes.io/managed-by": "sluice-tests",
      },
      ...(resourceVersion === undefined ? {} : { resourceVersion }),
    },
    addressType: "IPv4",
    ports: [{ name: "http", port: 8080, protocol: "TCP" }],
    endpoints: addresses.map((address) => ({ addresses: [address], conditions: { ready: true } })),
  };
}
