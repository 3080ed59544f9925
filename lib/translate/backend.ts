/**
 * What a translation resolves an Ingress backend to: a Service port's ready
 * endpoints. The one home of `Backend` and `Endpoint`; `lib/routing/`
 * re-exports them in its snapshot contract, so translate needs nothing from
 * routing. Plain, structured-clonable data; knows no Kubernetes objects.
 *
 * @module
 */

/** One network destination of a backend: a pod IP (v4 or v6) or, for an ExternalName Service, a DNS name. */
export interface Endpoint {
  readonly address: string;
  readonly port: number;
}

/** Where matching requests go: the ready endpoints of one Service port. */
export interface Backend {
  /** Unique, stable key: `namespace/service:port` (port as written in the Ingress). Keys pools, health and metrics. */
  readonly key: string;
  /** The Service, `namespace/name`. Empty for Sluice's own built-in responses. */
  readonly service: string;
  /** Endpoints to balance across. Empty means the route answers 503. */
  readonly endpoints: readonly Endpoint[];
  /** Why the backend cannot serve (missing Service, port, endpoints, resource backend…); present only when `endpoints` is empty. */
  readonly unavailable?: string;
}
