/**
 * The plain JSON shapes of the Kubernetes objects Sluice reads, as they arrive
 * on the wire from a raw list or watch (or from a YAML manifest for local runs).
 *
 * Types only: no code, no client library model classes (those turn timestamps
 * into `Date`; here they stay RFC 3339 strings). Only the fields Sluice uses are
 * declared, and every field the API allows to be absent is optional: objects may
 * be malformed, so readers must check before use. Nothing here knows about
 * routing, stores or transport.
 *
 * @module
 */

/** `metadata` of any object. */
export interface ObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  /** RFC 3339 timestamp, for example `2024-05-01T10:00:00Z`. */
  creationTimestamp?: string;
  /** RFC 3339 timestamp; present while the object is being deleted. */
  deletionTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** Fields every object has. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
}

// ---------------------------------------------------------------------------
// networking.k8s.io/v1 Ingress
// ---------------------------------------------------------------------------

/** `spec.rules[].http.paths[].backend.service.port`: exactly one of `number` or `name`. */
export interface ServiceBackendPort {
  number?: number;
  name?: string;
}

/** `backend.service`: a Service in the Ingress's namespace. */
export interface IngressServiceBackend {
  name?: string;
  port?: ServiceBackendPort;
}

/** `backend.resource`: a reference to another object in the Ingress's namespace. */
export interface TypedLocalObjectReference {
  apiGroup?: string;
  kind?: string;
  name?: string;
}

/** An Ingress backend: exactly one of `service` or `resource`. */
export interface IngressBackend {
  service?: IngressServiceBackend;
  resource?: TypedLocalObjectReference;
}

/** `Exact`, `Prefix` or `ImplementationSpecific`; any other string is malformed. */
export type PathType = "Exact" | "Prefix" | "ImplementationSpecific";

/** `spec.rules[].http.paths[]`. */
export interface HTTPIngressPath {
  path?: string;
  /** Declared as `string` because objects from manifests may hold anything. */
  pathType?: PathType | string;
  backend?: IngressBackend;
}

/** `spec.rules[].http`. */
export interface HTTPIngressRuleValue {
  paths?: HTTPIngressPath[];
}

/** `spec.rules[]`. */
export interface IngressRule {
  /** A DNS name, optionally with a leading `*.` label; absent for "any host". */
  host?: string;
  http?: HTTPIngressRuleValue;
}

/** `spec.tls[]`. */
export interface IngressTLS {
  hosts?: string[];
  /** A Secret in the Ingress's namespace. */
  secretName?: string;
}

/** `spec` of an Ingress. */
export interface IngressSpec {
  ingressClassName?: string;
  defaultBackend?: IngressBackend;
  tls?: IngressTLS[];
  rules?: IngressRule[];
}

/** `status.loadBalancer.ingress[].ports[]`. */
export interface PortStatus {
  port?: number;
  protocol?: string;
  error?: string;
}

/** `status.loadBalancer.ingress[]`. */
export interface IngressLoadBalancerIngress {
  ip?: string;
  hostname?: string;
  ports?: PortStatus[];
}

/** `status` of an Ingress. */
export interface IngressStatus {
  loadBalancer?: { ingress?: IngressLoadBalancerIngress[] };
}

/** networking.k8s.io/v1 Ingress. */
export interface Ingress extends KubeObject {
  spec?: IngressSpec;
  status?: IngressStatus;
}

// ---------------------------------------------------------------------------
// networking.k8s.io/v1 IngressClass
// ---------------------------------------------------------------------------

/** `spec.parameters` of an IngressClass. */
export interface IngressClassParametersReference {
  apiGroup?: string;
  kind?: string;
  name?: string;
  namespace?: string;
  scope?: string;
}

/** `spec` of an IngressClass. */
export interface IngressClassSpec {
  /** The controller that implements the class, e.g. `sluice.dev/ingress-controller`. */
  controller?: string;
  parameters?: IngressClassParametersReference;
}

/** networking.k8s.io/v1 IngressClass (cluster-scoped: `metadata.namespace` is absent). */
export interface IngressClass extends KubeObject {
  spec?: IngressClassSpec;
}

// ---------------------------------------------------------------------------
// v1 Service
// ---------------------------------------------------------------------------

/** `spec.ports[]` of a Service. */
export interface ServicePort {
  /** Required when a Service has more than one port; matches `EndpointSlice.ports[].name`. */
  name?: string;
  protocol?: string;
  appProtocol?: string;
  port?: number;
  /** A number, or the name of a container port. */
  targetPort?: number | string;
  nodePort?: number;
}

/** `spec` of a Service. */
export interface ServiceSpec {
  type?: "ClusterIP" | "NodePort" | "LoadBalancer" | "ExternalName" | string;
  ports?: ServicePort[];
  selector?: Record<string, string>;
  clusterIP?: string;
  clusterIPs?: string[];
  /** The DNS name of an `ExternalName` Service. */
  externalName?: string;
  ipFamilies?: string[];
}

/** v1 Service. */
export interface Service extends KubeObject {
  spec?: ServiceSpec;
}

// ---------------------------------------------------------------------------
// discovery.k8s.io/v1 EndpointSlice
// ---------------------------------------------------------------------------

/** `endpoints[].conditions`; each absent condition means "unknown". */
export interface EndpointConditions {
  /** Absent is to be read as ready. */
  ready?: boolean;
  serving?: boolean;
  terminating?: boolean;
}

/** `endpoints[].targetRef`. */
export interface ObjectReference {
  kind?: string;
  namespace?: string;
  name?: string;
  uid?: string;
}

/** `endpoints[]` of an EndpointSlice. */
export interface EndpointSliceEndpoint {
  /** One or more addresses of the slice's `addressType`. */
  addresses?: string[];
  conditions?: EndpointConditions;
  hostname?: string;
  nodeName?: string;
  zone?: string;
  targetRef?: ObjectReference;
}

/** `ports[]` of an EndpointSlice: the resolved target port, named after the Service port. */
export interface EndpointPort {
  /** The Service port's name (empty or absent for an unnamed Service port). */
  name?: string;
  protocol?: string;
  appProtocol?: string;
  port?: number;
}

/** discovery.k8s.io/v1 EndpointSlice; `metadata.labels["kubernetes.io/service-name"]` names its Service. */
export interface EndpointSlice extends KubeObject {
  addressType?: "IPv4" | "IPv6" | "FQDN" | string;
  endpoints?: EndpointSliceEndpoint[];
  ports?: EndpointPort[];
}

// ---------------------------------------------------------------------------
// v1 Secret
// ---------------------------------------------------------------------------

/** v1 Secret. TLS Secrets hold `tls.crt` and `tls.key`. */
export interface Secret extends KubeObject {
  type?: string;
  /** Values are base64-encoded, as on the wire. */
  data?: Record<string, string>;
  /** Plain-text values; only found in manifests (the API server never returns it). */
  stringData?: Record<string, string>;
}
