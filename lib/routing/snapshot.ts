/**
 * The contract between the control plane and the data plane: what a routing
 * snapshot offers to the code that serves requests and TLS handshakes.
 *
 * A snapshot is built from plain, structured-clonable data (so it can be
 * posted to every worker) and compiled once per worker into lookup
 * structures. Nothing here knows about Kubernetes objects or Deno APIs.
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

/** The result of looking up a request. */
export interface Match {
  /** The Ingress that contributed the matching rule, `namespace/name`; empty for the controller-wide default backend. */
  readonly ingress: string;
  /** The rule's host as written (`shop.example.com`, `*.example.com`) or empty for a rule without host. */
  readonly host: string;
  /** The rule's path (`/` for default backends). */
  readonly path: string;
  /** How the rule matched. */
  readonly pathType: "Exact" | "Prefix" | "Default";
  readonly backend: Backend;
  /** The request's host is listed in a `spec.tls[].hosts` of an Ingress of ours: HTTP is redirected to HTTPS and HSTS is sent. */
  readonly tls: boolean;
}

/** A compiled, immutable routing table. */
export interface RouteTable {
  /**
   * Looks up a request. `host` is normalised by the table (case, port, trailing dot);
   * `path` is the URL path without the query string. Returns `undefined` when nothing
   * matches (Sluice answers 404).
   */
  lookup(host: string, path: string): Match | undefined;
}

/** A certificate and key ready to hand to a TLS handshake. */
export interface ServingCertificate {
  /** Where it came from: the Secret `namespace/name`, or `sluice/self-signed` for the generated default. */
  readonly source: string;
  readonly certPem: string;
  readonly keyPem: string;
}

/** Certificate selection for the SNI resolver: exact host, then wildcard, then the default. */
export interface CertificateTable {
  resolve(serverName: string | undefined): ServingCertificate;
  /** Changes whenever any certificate or its host assignment changes; listeners rotate on change. */
  readonly fingerprint: string;
}

/** What the data plane reads, once per request or handshake. */
export interface Snapshot {
  /** Monotonic version, for logs, metrics and change detection. */
  readonly version: number;
  readonly routes: RouteTable;
  readonly certificates: CertificateTable;
}
