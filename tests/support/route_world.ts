/**
 * Test support: compact builders for Ingress sets used by the
 * routing case table, the property test and the benchmarks. Every Service an
 * Ingress names exists with one ready endpoint, unless its name starts with
 * `missing`.
 *
 * @module
 */

import type {
  EndpointSlice,
  Ingress,
  IngressBackend,
  IngressClass,
  Service,
} from "../../lib/k8s/objects.ts";
import type { ClusterObjects, TranslateOptions } from "../../lib/translate/translation.ts";

/** `[path, pathType, service]`; the port is always 80. */
export type PathSketch = readonly [path: string, pathType: string, service: string];
/** `[host, paths]`; host `""` for a rule without host. */
export type RuleSketch = readonly [host: string, paths: readonly PathSketch[]];

/** A compact Ingress description. */
export interface IngressSketch {
  readonly name: string;
  readonly namespace?: string;
  /** Seconds after 2024-01-01T00:00:00Z. */
  readonly created?: number;
  readonly rules?: readonly RuleSketch[];
  /** A Service name for `spec.defaultBackend`. */
  readonly defaultBackend?: string;
  readonly tlsHosts?: readonly string[];
}

const EPOCH = Date.parse("2024-01-01T00:00:00Z");

function serviceBackend(name: string): IngressBackend {
  return { service: { name, port: { number: 80 } } };
}

/** Builds an Ingress of class `sluice` from a sketch. */
export function ingressOf(sketch: IngressSketch): Ingress {
  const spec: NonNullable<Ingress["spec"]> = { ingressClassName: "sluice" };
  if (sketch.rules !== undefined) {
    spec.rules = sketch.rules.map(([host, paths]) => ({
      ...(host === "" ? {} : { host }),
      http: {
        paths: paths.map(([path, pathType, service]) => ({
          path,
          pathType,
          backend: serviceBackend(service),
        })),
      },
    }));
  }
  if (sketch.defaultBackend !== undefined) {
    spec.defaultBackend = serviceBackend(sketch.defaultBackend);
  }
  if (sketch.tlsHosts !== undefined) spec.tls = [{ hosts: [...sketch.tlsHosts] }];
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "Ingress",
    metadata: {
      name: sketch.name,
      namespace: sketch.namespace ?? "default",
      creationTimestamp: new Date(EPOCH + (sketch.created ?? 0) * 1000).toISOString(),
    },
    spec,
  };
}

/** The IngressClass `sluice`, ours. */
export const SLUICE_CLASS: IngressClass = {
  metadata: { name: "sluice" },
  spec: { controller: "sluice.dev/ingress-controller" },
};

/** Builds the objects for a set of sketches: Ingresses, their Services and EndpointSlices. */
export function worldOf(sketches: readonly IngressSketch[]): ClusterObjects {
  const ingresses = sketches.map(ingressOf);
  const services = new Map<string, Service>();
  const slices: EndpointSlice[] = [];
  let address = 1;
  const ensure = (namespace: string, name: string) => {
    const key = `${namespace}/${name}`;
    if (name.startsWith("missing") || services.has(key)) return;
    services.set(key, {
      metadata: { namespace, name },
      spec: { ports: [{ port: 80, targetPort: 8080 }] },
    });
    const n = address++;
    slices.push({
      metadata: {
        namespace,
        name: `${name}-abcde`,
        labels: { "kubernetes.io/service-name": name },
      },
      addressType: "IPv4",
      ports: [{ port: 8080 }],
      endpoints: [{ addresses: [`10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`] }],
    });
  };
  for (const sketch of sketches) {
    const namespace = sketch.namespace ?? "default";
    for (const [, paths] of sketch.rules ?? []) {
      for (const [, , service] of paths) ensure(namespace, service);
    }
    if (sketch.defaultBackend !== undefined) ensure(namespace, sketch.defaultBackend);
  }
  return {
    ingresses,
    ingressClasses: [SLUICE_CLASS],
    services: [...services.values()],
    endpointSlices: slices,
    secrets: [],
  };
}

/** Translation options for tests: a fixed clock and an inspector that is never reached. */
export const TEST_OPTIONS: TranslateOptions = {
  now: Date.parse("2030-01-01T00:00:00Z"),
  inspectCertificate: () => ({ ok: false, reason: "no certificates in routing tests" }),
};
