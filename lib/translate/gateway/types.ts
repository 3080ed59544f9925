/**
 * The shapes of a Gateway API translation (gateway.networking.k8s.io v1,
 * standard channel of Gateway API v1.6): the objects read (GatewayClass,
 * Gateway, HTTPRoute, ReferenceGrant, Namespace; Services and Secrets from
 * `lib/k8s/objects.ts`), the options, and the frozen output (compiled routes
 * per listener port and hostname, statuses to publish, issues).
 *
 * Types only. Every input field may be absent or malformed: readers check.
 * Output is plain, JSON-serialisable data, sorted and deterministic.
 *
 * @module
 */

import type { KubeObject, Secret, Service } from "../../k8s/objects.ts";
import type { Issue } from "../issues.ts";
import type { HttpRouteMemo } from "./http_route_memo.ts";

export type { Issue };

// ---------------------------------------------------------------------------
// Input objects (only the fields read)
// ---------------------------------------------------------------------------

/** A label selector (`matchLabels` and `matchExpressions`). */
export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: {
    key?: string;
    operator?: "In" | "NotIn" | "Exists" | "DoesNotExist" | string;
    values?: string[];
  }[];
}

/** v1 Namespace: its labels feed `allowedRoutes.namespaces.selector`. */
export type Namespace = KubeObject;

/** gateway.networking.k8s.io/v1 GatewayClass. */
export interface GatewayClass extends KubeObject {
  spec?: { controllerName?: string; parametersRef?: ObjectRef };
}

/** A reference from a Gateway or route to another object. */
export interface ObjectRef {
  group?: string;
  kind?: string;
  name?: string;
  namespace?: string;
}

/** `spec.listeners[]` of a Gateway. */
export interface Listener {
  name?: string;
  hostname?: string;
  port?: number;
  protocol?: string;
  tls?: { mode?: string; certificateRefs?: ObjectRef[] };
  allowedRoutes?: {
    namespaces?: { from?: "Same" | "All" | "Selector" | string; selector?: LabelSelector };
    kinds?: { group?: string; kind?: string }[];
  };
}

/** gateway.networking.k8s.io/v1 Gateway. */
export interface Gateway extends KubeObject {
  spec?: { gatewayClassName?: string; listeners?: Listener[] };
  /** Read for the addresses it shows (see `gateway_addresses.ts`). */
  status?: { addresses?: { type?: string; value?: string }[] };
}

/** `spec.parentRefs[]` of a route. */
export interface ParentRef extends ObjectRef {
  sectionName?: string;
  port?: number;
}

/** `backendRefs[]` (with `weight` and `filters` on rule backends). */
export interface BackendObjectRef extends ObjectRef {
  port?: number;
  weight?: number;
}

/** `matches[]` of an HTTPRoute rule. */
export interface HTTPRouteMatchInput {
  path?: { type?: string; value?: string };
  headers?: { type?: string; name?: string; value?: string }[];
  queryParams?: { type?: string; name?: string; value?: string }[];
  method?: string;
}

/** `filters[]` of an HTTPRoute rule. */
export interface HTTPRouteFilterInput {
  type?: string;
  requestHeaderModifier?: HeaderModifierInput;
  responseHeaderModifier?: HeaderModifierInput;
  requestRedirect?: {
    scheme?: string;
    hostname?: string;
    path?: PathModifierInput;
    port?: number;
    statusCode?: number;
  };
  urlRewrite?: { hostname?: string; path?: PathModifierInput };
  requestMirror?: {
    backendRef?: BackendObjectRef;
    percent?: number;
    fraction?: { numerator?: number; denominator?: number };
  };
  extensionRef?: ObjectRef;
}

/** `requestHeaderModifier` / `responseHeaderModifier`. */
export interface HeaderModifierInput {
  set?: { name?: string; value?: string }[];
  add?: { name?: string; value?: string }[];
  remove?: string[];
}

/** `path` of `requestRedirect` and `urlRewrite`. */
export interface PathModifierInput {
  type?: string;
  replaceFullPath?: string;
  replacePrefixMatch?: string;
}

/** gateway.networking.k8s.io/v1 HTTPRoute. */
export interface HTTPRoute extends KubeObject {
  spec?: {
    parentRefs?: ParentRef[];
    hostnames?: string[];
    rules?: {
      name?: string;
      matches?: HTTPRouteMatchInput[];
      filters?: HTTPRouteFilterInput[];
      backendRefs?: BackendObjectRef[];
      timeouts?: { request?: string; backendRequest?: string };
    }[];
  };
}

/** gateway.networking.k8s.io/v1 ReferenceGrant. */
export interface ReferenceGrant extends KubeObject {
  spec?: {
    from?: { group?: string; kind?: string; namespace?: string }[];
    to?: { group?: string; kind?: string; name?: string }[];
  };
}

/** The objects a Gateway translation reads. Any collection may be omitted. */
export interface GatewayObjects {
  readonly gatewayClasses?: Iterable<GatewayClass>;
  readonly gateways?: Iterable<Gateway>;
  readonly httpRoutes?: Iterable<HTTPRoute>;
  readonly referenceGrants?: Iterable<ReferenceGrant>;
  readonly services?: Iterable<Service>;
  readonly secrets?: Iterable<Secret>;
  readonly namespaces?: Iterable<Namespace>;
}

/** How to translate. */
export interface GatewayTranslateOptions {
  /** `spec.controllerName` of GatewayClasses that are ours. Default `sluice.dev/ingress-controller`. */
  readonly controllerName?: string;
  /** Written to `status.supportedFeatures` of our GatewayClasses (sorted). */
  readonly supportedFeatures?: readonly string[];
  /**
   * RFC 3339 time written as `lastTransitionTime` on every condition; the
   * status writer keeps an earlier time when a condition's status did not change.
   */
  readonly now?: string;
  /**
   * The Gateway listener ports Sluice serves (80 for `--http-port`, 443 for
   * `--https-port`); a listener on another port is not accepted
   * (`PortUnavailable`). Absent: every port.
   */
  readonly servedPorts?: readonly number[];
  /**
   * Why the certificate of a TLS Secret (`namespace/name`, one that exists
   * with both keys) cannot be served: unparsable, key mismatch, expired…; a
   * listener naming it is `InvalidCertificateRef`. Injected (as the Ingress
   * translation's certificate inspector) to keep this module free of crypto.
   * Absent: every such Secret is usable.
   */
  readonly certificateProblem?: (secretKey: string) => string | undefined;
  /**
   * `--gateway-addresses`: local addresses Sluice also listens on, one given
   * to each Gateway (see `gateway_addresses.ts`); a Gateway then serves its
   * routes on its own address only, and one left without is not programmed.
   * Absent or empty: every Gateway is served on the main listeners.
   */
  readonly gatewayAddresses?: readonly string[];
  /** HTTPRoutes compiled by earlier translations of the same store (`http_route_memo.ts`). */
  readonly memo?: HttpRouteMemo;
}

// ---------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------

/** A `metav1.Condition` as written to status. */
export interface Condition {
  readonly type: string;
  readonly status: "True" | "False" | "Unknown";
  readonly reason: string;
  readonly message: string;
  readonly observedGeneration: number;
  readonly lastTransitionTime: string;
}

/** One GatewayClass of ours. */
export interface ClassModel {
  readonly name: string;
  /** False when the class is rejected (InvalidParameters): its Gateways are left alone. */
  readonly accepted: boolean;
}

/** One listener of an accepted Gateway, as the data plane will open it. */
export interface ListenerModel {
  readonly name: string;
  readonly port: number;
  readonly protocol: "HTTP" | "HTTPS";
  /** Lowercase; `""` matches any host. */
  readonly hostname: string;
  /** TLS Secrets `namespace/name` (HTTPS only), in listed order. */
  readonly certificates: readonly string[];
  /** False when the listener is Conflicted or has unresolved references: it serves nothing. */
  readonly ready: boolean;
}

/** One Gateway of ours. */
export interface GatewayModel {
  /** `namespace/name`. */
  readonly gateway: string;
  readonly className: string;
  /** Its own address from `gatewayAddresses`; absent: the main listeners. */
  readonly address?: string;
  readonly listeners: readonly ListenerModel[];
}

/** A header or query parameter to match exactly. Header names are lowercase. */
export interface NameValue {
  readonly name: string;
  readonly value: string;
}

/** How a compiled entry matches a request. */
export interface RouteMatch {
  readonly path: { readonly type: "Exact" | "PathPrefix"; readonly value: string };
  readonly method?: string;
  /** Sorted by name. */
  readonly headers: readonly NameValue[];
  /** Sorted by name. */
  readonly queryParams: readonly NameValue[];
}

/** `set`/`add` by lowercase name, `remove` as lowercase names. */
export interface HeaderModifier {
  readonly set: readonly NameValue[];
  readonly add: readonly NameValue[];
  readonly remove: readonly string[];
}

/** A path rewrite of a redirect or URL rewrite. */
export type PathModifier =
  | { readonly type: "ReplaceFullPath"; readonly value: string }
  | { readonly type: "ReplacePrefixMatch"; readonly value: string };

/** A compiled filter, applied in order. */
export type RouteFilter =
  | { readonly type: "RequestHeaderModifier"; readonly modifier: HeaderModifier }
  | { readonly type: "ResponseHeaderModifier"; readonly modifier: HeaderModifier }
  | {
    readonly type: "RequestRedirect";
    readonly scheme?: "http" | "https";
    readonly hostname?: string;
    readonly port?: number;
    readonly path?: PathModifier;
    readonly statusCode: 301 | 302 | 303 | 307 | 308;
  }
  | {
    readonly type: "URLRewrite";
    readonly hostname?: string;
    readonly path?: PathModifier;
  }
  | {
    readonly type: "RequestMirror";
    readonly backend: WeightedBackend;
    /** Share of requests mirrored, 0 to 1. */
    readonly fraction: number;
  };

/**
 * A backend of a rule. Keys follow the Ingress translation (`namespace/service:port`),
 * so the same resolver turns them into endpoints.
 */
export interface WeightedBackend {
  readonly key: string;
  /** The Service, `namespace/name`. */
  readonly service: string;
  readonly port: number;
  readonly weight: number;
  /** Set when the reference is invalid: this share of requests answers 500. */
  readonly invalid?: string;
}

/** One compiled (rule, match) of an HTTPRoute. */
export interface RouteEntry {
  /** The HTTPRoute, `namespace/name`. */
  readonly route: string;
  readonly rule: number;
  readonly match: number;
  /** The intersected hostname this entry was attached under (`""`: any). */
  readonly hostname: string;
  readonly matches: RouteMatch;
  readonly filters: readonly RouteFilter[];
  readonly backends: readonly WeightedBackend[];
  /** Gateway API Duration strings, as written. */
  readonly timeouts?: { readonly request?: string; readonly backendRequest?: string };
  /** Set when every request answers this status (no usable backend, unsupported filter). */
  readonly respond?: 500;
}

/**
 * The entries served for one listener port and hostname, in precedence order:
 * the first entry that matches wins. A request picks the most specific
 * hostname group of its port (exact, then the longest wildcard, then `""`);
 * entries of less specific hostnames are already folded in, after its own.
 */
export interface HostRoutes {
  /** The Gateway address these routes are served on; absent: the main listeners. */
  readonly address?: string;
  readonly port: number;
  readonly protocol: "HTTP" | "HTTPS";
  readonly hostname: string;
  /** TLS Secrets `namespace/name` of the listeners serving this host (HTTPS), sorted. */
  readonly certificates: readonly string[];
  readonly entries: readonly RouteEntry[];
}

/** Status of one listener. */
export interface ListenerStatus {
  readonly name: string;
  readonly supportedKinds: readonly { readonly group: string; readonly kind: string }[];
  readonly attachedRoutes: number;
  readonly conditions: readonly Condition[];
}

/** Status to write, per object. */
export interface GatewayStatuses {
  readonly gatewayClasses: readonly {
    readonly name: string;
    readonly conditions: readonly Condition[];
    readonly supportedFeatures: readonly { readonly name: string }[];
  }[];
  readonly gateways: readonly {
    /** `namespace/name`. */
    readonly gateway: string;
    /** Its own address (`gatewayAddresses`); absent: the published addresses are written. */
    readonly address?: string;
    readonly conditions: readonly Condition[];
    readonly listeners: readonly ListenerStatus[];
  }[];
  readonly httpRoutes: readonly {
    /** `namespace/name`. */
    readonly route: string;
    readonly parents: readonly {
      readonly parentRef: {
        readonly group: string;
        readonly kind: string;
        readonly namespace: string;
        readonly name: string;
        readonly sectionName?: string;
        readonly port?: number;
      };
      readonly controllerName: string;
      readonly conditions: readonly Condition[];
    }[];
  }[];
}

/** The result: sorted, deterministic, plain data. */
export interface GatewayTranslation {
  readonly classes: readonly ClassModel[];
  readonly gateways: readonly GatewayModel[];
  /** Sorted by port, then hostname. */
  readonly routes: readonly HostRoutes[];
  readonly issues: readonly Issue[];
  readonly statuses: GatewayStatuses;
}
