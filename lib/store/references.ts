/**
 * What an Ingress refers to: the Services of its backends, the Secrets of
 * its `spec.tls`, each as `namespace/name` in the Ingress's namespace, and
 * the Secret of its basic authentication (ingress-nginx `auth-secret`,
 * `name` or `namespace/name`); and
 * what a Gateway (certificate Secrets) or HTTPRoute (backend and mirror
 * Services) refers to, in their own or a named namespace.
 *
 * Used only to decide which Service, EndpointSlice and Secret events can
 * change a translation, so it must find a SUPERSET of what translation
 * reads: it takes every name-shaped string where translation might look, and
 * validates nothing (an invalid reference costs a needless rebuild at worst;
 * a missed one would leave a stale snapshot). Knows nothing about routing.
 *
 * @module
 */
import type { Ingress, IngressBackend, KubeObject } from "../k8s/objects.ts";
import type { Gateway, HTTPRoute } from "../translate/gateway/types.ts";

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

/** The annotation naming basic authentication's Secret (ingress-nginx). */
const AUTH_SECRET_ANNOTATION = "nginx.ingress.kubernetes.io/auth-secret";

/**
 * Collects the Services (`spec.defaultBackend`, `spec.rules[].http.paths[].backend`)
 * and Secrets (`spec.tls[].secretName`, the `auth-secret` annotation) an
 * Ingress names. The annotation counts whatever the other annotations say
 * and wherever it points (a superset: translation decides whether it is used).
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
  const auth = authSecretKey(ingress.metadata?.annotations, namespace);
  if (auth !== undefined) secrets.add(auth);
  if (services.size === 0 && secrets.size === 0) return NONE;
  return { services: [...services], secrets: [...secrets] };
}

/** `auth-secret` as `namespace/name`: `name` is in the Ingress's namespace. */
function authSecretKey(annotations: unknown, namespace: string): string | undefined {
  if (annotations === null || typeof annotations !== "object") return undefined;
  const value = (annotations as Record<string, unknown>)[AUTH_SECRET_ANNOTATION];
  if (typeof value !== "string" || value === "") return undefined;
  return value.includes("/") ? value : `${namespace}/${value}`;
}

/** A reference in a Gateway or HTTPRoute (`group`/`kind` default to the core Service/Secret). */
interface GatewayRef {
  group?: unknown;
  kind?: unknown;
  name?: unknown;
  namespace?: unknown;
}

function refKey(
  ref: GatewayRef | null | undefined,
  namespace: string,
  kind: string,
): string | undefined {
  if (ref === null || typeof ref !== "object" || typeof ref.name !== "string" || ref.name === "") {
    return undefined;
  }
  if ((ref.group ?? "") !== "" || (ref.kind ?? kind) !== kind) return undefined;
  const ns = typeof ref.namespace === "string" && ref.namespace !== "" ? ref.namespace : namespace;
  return `${ns}/${ref.name}`;
}

/**
 * Collects the Secrets a Gateway's listeners name (`tls.certificateRefs`) or the
 * Services an HTTPRoute names (`backendRefs`, `requestMirror.backendRef`),
 * whatever the ReferenceGrants say (a superset, as for Ingresses).
 */
export function gatewayReferences(
  kind: "Gateway" | "HTTPRoute",
  object: KubeObject,
): IngressReferences {
  const namespace = object?.metadata?.namespace;
  if (typeof namespace !== "string" || namespace === "") return NONE;
  const services = new Set<string>();
  const secrets = new Set<string>();
  if (kind === "Gateway") {
    const spec = (object as Gateway).spec;
    for (const listener of each(spec?.listeners)) {
      for (const ref of each(listener?.tls?.certificateRefs)) {
        const key = refKey(ref as GatewayRef, namespace, "Secret");
        if (key !== undefined) secrets.add(key);
      }
    }
  } else {
    const spec = (object as HTTPRoute).spec;
    for (const rule of each(spec?.rules)) {
      const refs: unknown[] = [...each(rule?.backendRefs)];
      for (const filter of each(rule?.filters)) refs.push(filter?.requestMirror?.backendRef);
      for (const backend of each(rule?.backendRefs)) {
        const filters = (backend as { filters?: typeof rule.filters })?.filters;
        for (const filter of each(filters)) refs.push(filter?.requestMirror?.backendRef);
      }
      for (const ref of refs) {
        const key = refKey(ref as GatewayRef, namespace, "Service");
        if (key !== undefined) services.add(key);
      }
    }
  }
  if (services.size === 0 && secrets.size === 0) return NONE;
  return { services: [...services], secrets: [...secrets] };
}
