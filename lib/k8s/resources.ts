/**
 * The Kubernetes resources Sluice reads and writes, and how their REST paths
 * are formed. Knows nothing about HTTP clients or credentials.
 *
 * @module
 */

/** A REST resource of the Kubernetes API. */
export interface Resource {
  /** API group; empty for the core group. */
  readonly group: string;
  readonly version: string;
  /** Plural, lower-case resource name as it appears in paths. */
  readonly plural: string;
  readonly kind: string;
  readonly namespaced: boolean;
}

function resource(
  group: string,
  version: string,
  plural: string,
  kind: string,
  namespaced = true,
): Resource {
  return Object.freeze({ group, version, plural, kind, namespaced });
}

export const NAMESPACES: Resource = resource("", "v1", "namespaces", "Namespace", false);
export const SERVICES: Resource = resource("", "v1", "services", "Service");
export const SECRETS: Resource = resource("", "v1", "secrets", "Secret");
export const EVENTS: Resource = resource("", "v1", "events", "Event");
export const ENDPOINT_SLICES: Resource = resource(
  "discovery.k8s.io",
  "v1",
  "endpointslices",
  "EndpointSlice",
);
export const INGRESSES: Resource = resource("networking.k8s.io", "v1", "ingresses", "Ingress");
export const INGRESS_CLASSES: Resource = resource(
  "networking.k8s.io",
  "v1",
  "ingressclasses",
  "IngressClass",
  false,
);
/** Gateway API v1 (standard channel): CRDs the user installs; Sluice goes on without them. */
export const GATEWAY_API_GROUP = "gateway.networking.k8s.io";
export const GATEWAY_CLASSES: Resource = resource(
  GATEWAY_API_GROUP,
  "v1",
  "gatewayclasses",
  "GatewayClass",
  false,
);
export const GATEWAYS: Resource = resource(GATEWAY_API_GROUP, "v1", "gateways", "Gateway");
export const HTTP_ROUTES: Resource = resource(GATEWAY_API_GROUP, "v1", "httproutes", "HTTPRoute");
export const REFERENCE_GRANTS: Resource = resource(
  GATEWAY_API_GROUP,
  "v1",
  "referencegrants",
  "ReferenceGrant",
);
export const LEASES: Resource = resource("coordination.k8s.io", "v1", "leases", "Lease");

/** `apiVersion` as written in objects: `v1`, `networking.k8s.io/v1`. */
export function apiVersionOf(r: Resource): string {
  return r.group === "" ? r.version : `${r.group}/${r.version}`;
}

/** Where an object (or a collection) of `r` lives. */
export interface Location {
  /** Omit for all namespaces, or for cluster-scoped resources. */
  readonly namespace?: string | undefined;
  readonly name?: string | undefined;
  /** `status`, `token`, … */
  readonly subresource?: string | undefined;
}

/**
 * The URL path of a resource collection or object, e.g.
 * `/apis/networking.k8s.io/v1/namespaces/shop/ingresses/web/status`.
 */
export function resourcePath(r: Resource, at: Location = {}): string {
  let path = r.group === "" ? `/api/${r.version}` : `/apis/${r.group}/${r.version}`;
  if (r.namespaced && at.namespace !== undefined) {
    path += `/namespaces/${encodeURIComponent(at.namespace)}`;
  } else if (!r.namespaced && at.namespace !== undefined) {
    throw new Error(
      `Cannot address ${r.kind} in namespace "${at.namespace}": it is cluster-scoped`,
    );
  }
  path += `/${r.plural}`;
  if (at.name !== undefined) path += `/${encodeURIComponent(at.name)}`;
  else if (at.subresource !== undefined) {
    throw new Error(`Cannot address subresource "${at.subresource}" of ${r.kind} without a name`);
  }
  if (at.subresource !== undefined) path += `/${at.subresource}`;
  return path;
}
