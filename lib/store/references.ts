/**
 * What an Ingress refers to: the Services of its backends and the Secrets of
 * its `spec.tls`, each as `namespace/name` in the Ingress's namespace.
 *
 * Used only to decide which Service, EndpointSlice and Secret events can
 * change a translation, so it must find a SUPERSET of what translation
 * reads: it takes every name-shaped string where translation might look, and
 * validates nothing (an invalid reference costs a needless rebuild at worst;
 * a missed one would leave a stale snapshot). Knows nothing about routing.
 *
 * @module
 */
import type { Ingress, IngressBackend } from "../k8s/objects.ts";

/** The `namespace/name` keys an Ingress refers to. */
export interface IngressReferences {
  readonly services: readonly string[];
  readonly secrets: readonly string[];
}

const NONE: IngressReferences = Object.freeze({ services: [], secrets: [] });

function serviceName(backend: IngressBackend | undefined | null): string | undefined {
  const name = backend?.service?.name;
  return typeof name === "string" && name !== "" ? name : undefined;
}

function each<T>(value: T[] | undefined | null): T[] {
  return Array.isArray(value) ? value : [];
}

/**
 * Collects the Services (`spec.defaultBackend`, `spec.rules[].http.paths[].backend`)
 * and Secrets (`spec.tls[].secretName`) an Ingress names.
 */
export function ingressReferences(ingress: Ingress): IngressReferences {
  const namespace = ingress?.metadata?.namespace;
  const spec = ingress?.spec;
  if (
    typeof namespace !== "string" || namespace === "" || spec === null || typeof spec !== "object"
  ) {
    return NONE;
  }
  const services = new Set<string>();
  const secrets = new Set<string>();
  const addService = (backend: IngressBackend | undefined | null) => {
    const name = serviceName(backend);
    if (name !== undefined) services.add(`${namespace}/${name}`);
  };
  addService(spec.defaultBackend);
  for (const rule of each(spec.rules)) {
    for (const path of each(rule?.http?.paths)) addService(path?.backend);
  }
  for (const tls of each(spec.tls)) {
    const name = tls?.secretName;
    if (typeof name === "string" && name !== "") secrets.add(`${namespace}/${name}`);
  }
  if (services.size === 0 && secrets.size === 0) return NONE;
  return { services: [...services], secrets: [...secrets] };
}
