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

export type { Backend, Endpoint } from "../translate/backend.ts";
import type { RouteBehaviour } from "./route_behaviour.ts";
import type { CompiledCanary } from "./canary_choice.ts";
import type { Backend } from "../translate/backend.ts";
import type { GatewayTable } from "./gateway_table.ts";

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
  /** What the Ingress's ingress-nginx annotations ask for (`route_behaviour.ts`); undefined: nothing. */
  readonly behaviour?: RouteBehaviour | undefined;
  /** A canary Ingress's backend for this route and how requests pick it (`canary_choice.ts`). */
  readonly canary?: CompiledCanary;
}

/** A compiled, immutable routing table. */
export interface RouteTable {
  /**
   * Looks up a request. `host` is normalised by the table (case, port, trailing dot);
   * `path` is the URL path without the query string. Returns `undefined` when nothing
   * matches (Sluice answers 404).
   */
  lookup(host: string, path: string): Match | undefined;
  /**
   * Where `/` of `host` is redirected (ingress-nginx `app-root`, which applies
   * to the whole host whichever Ingress routes `/`); absent or undefined: nowhere.
   */
  appRoot?(host: string): string | undefined;
  /**
   * The host a request for `host` is redirected to (ingress-nginx
   * `from-to-www-redirect`: its `www.` or bare twin); absent or undefined: none.
   */
  wwwRedirect?(host: string): string | undefined;
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
  /**
   * Gateway API routes (`--gateway-api`), looked up before {@linkcode Snapshot.routes}:
   * a request no HTTPRoute matches falls through to the Ingress routes.
   */
  readonly gateway?: GatewayTable;
}
