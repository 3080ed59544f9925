/**
 * The shapes of a translation: what goes in (cluster objects, options) and what
 * comes out (routes, backends, certificates, issues).
 *
 * Everything here is plain data, structured-clonable and JSON-serialisable, so a
 * translation can be posted to Web Workers and pinned by golden fixtures. This
 * module knows the Kubernetes object shapes only through type imports and knows
 * nothing about I/O, clocks or how lookups are compiled.
 *
 * @module
 */

import type { EndpointSlice, Ingress, IngressClass, Secret, Service } from "../k8s/objects.ts";
import type { Backend } from "./backend.ts";
import type { Issue } from "./issues.ts";
import type { TranslationMemo } from "./translation_memo.ts";
import type { IngressBehaviour } from "./nginx/ingress_behaviour.ts";
import type { RouteCanary } from "./nginx/canary.ts";
import type {
  Gateway,
  GatewayClass,
  GatewayTranslation,
  HTTPRoute,
  Namespace,
  ReferenceGrant,
} from "./gateway/types.ts";

export type { Backend, Issue };

/** The objects a translation reads. Any collection may be omitted (read as empty). */
export interface ClusterObjects {
  readonly ingresses?: Iterable<Ingress>;
  readonly ingressClasses?: Iterable<IngressClass>;
  readonly services?: Iterable<Service>;
  readonly endpointSlices?: Iterable<EndpointSlice>;
  readonly secrets?: Iterable<Secret>;
  /** Gateway API (read only with {@linkcode TranslateOptions.gatewayApi}). */
  readonly gatewayClasses?: Iterable<GatewayClass>;
  readonly gateways?: Iterable<Gateway>;
  readonly httpRoutes?: Iterable<HTTPRoute>;
  readonly referenceGrants?: Iterable<ReferenceGrant>;
  /** Their labels feed Gateway `allowedRoutes` namespace selectors. */
  readonly namespaces?: Iterable<Namespace>;
}

/** The PEM texts of a TLS Secret; a field is absent when the Secret lacks that key. */
export interface CertificatePems {
  readonly certPem?: string;
  readonly keyPem?: string;
}

/** What a certificate inspector found: usable, with its validity and names, or not, with why. */
export type CertificateInspection =
  | {
    readonly ok: true;
    /** RFC 3339. */
    readonly notBefore: string;
    /** RFC 3339. */
    readonly notAfter: string;
    /** `subjectAltName` DNS names, lowercase. */
    readonly dnsNames: readonly string[];
    /** SHA-256 fingerprint of the leaf certificate. */
    readonly fingerprint: string;
    /**
     * SHA-256 of the whole `tls.crt` (leaf and intermediates): changes whenever the
     * served chain does, also when the leaf stays (an intermediate added or replaced).
     */
    readonly chainFingerprint?: string;
  }
  | { readonly ok: false; readonly reason: string };

/**
 * Parses and validates a certificate and key (missing, unparsable, key mismatch,
 * expired at `now`). Injected so that translation stays free of crypto imports;
 * `lib/tls/certificate_inspector.ts` provides the real one.
 */
export type InspectCertificate = (
  pems: CertificatePems,
  options: { readonly now: number },
) => CertificateInspection;

/** How to translate. */
export interface TranslateOptions {
  /** `spec.controller` of IngressClasses that are ours. Default `sluice.dev/ingress-controller`. */
  readonly controllerName?: string;
  /** Value of the legacy `kubernetes.io/ingress.class` annotation that is ours. Default `sluice`. */
  readonly ingressClass?: string;
  /** Treat Ingresses without any class as ours even when no IngressClass of ours is the default. */
  readonly watchIngressWithoutClass?: boolean;
  /**
   * Controller-wide default backend: `namespace/name` (the Service's first port) or
   * `namespace/name:port` (a port number or name).
   */
  readonly defaultBackendService?: string;
  /** A TLS Secret `namespace/name` served when no Ingress certificate matches. */
  readonly defaultSslCertificate?: string;
  /**
   * Serve Ingresses whose ingress-nginx annotations ask for access control
   * Sluice does not enforce (`--ignore-access-annotations`); by default their
   * routes answer 503 (see `nginx/ingress_annotations.ts`).
   */
  readonly ignoreAccessAnnotations?: boolean;
  /**
   * `--allow-cross-namespace-secrets`: an Ingress's `auth-secret` may name a
   * Secret of another namespace (`namespace/name`).
   */
  readonly allowCrossNamespaceSecrets?: boolean;
  /**
   * Translate Gateway API objects too (`--gateway-api`), for GatewayClasses
   * whose `spec.controllerName` is {@linkcode TranslateOptions.controllerName}.
   */
  readonly gatewayApi?: boolean;
  /** Gateway API features Sluice claims, written to GatewayClass status. */
  readonly gatewaySupportedFeatures?: readonly string[];
  /** `--gateway-addresses`: an address of its own for each Gateway (see `gateway_addresses.ts`). */
  readonly gatewayAddresses?: readonly string[];
  /** The current time, milliseconds since the epoch (certificate expiry is judged against it). */
  readonly now: number;
  readonly inspectCertificate: InspectCertificate;
  /**
   * Results kept from earlier translations of the same objects (see
   * `translation_memo.ts`); without one, everything is computed.
   */
  readonly memo?: TranslationMemo;
}

/** How a route matches: `Exact`, `Prefix` (also `ImplementationSpecific`), or `Default` (a default backend). */
export type RoutePathType = "Exact" | "Prefix" | "Default";

/** One routing rule, after class selection, validation and conflict resolution. */
export interface Route {
  /** Lowercase rule host: `shop.example.com`, `*.example.com`, or `""` for any host. */
  readonly host: string;
  /** The path as written in the Ingress (`/` for default backends). */
  readonly path: string;
  readonly pathType: RoutePathType;
  /** The Ingress that contributed the rule, `namespace/name`. */
  readonly ingress: string;
  /** Key of the backend in {@linkcode Translation.backends}. */
  readonly backend: string;
  /** A canary Ingress's backend and the rule choosing it (ingress-nginx `canary`). */
  readonly canary?: RouteCanary;
}

/** A valid TLS Secret and the hosts it serves. PEM texts are carried for the data plane. */
export interface CertificateBinding {
  /** The Secret, `namespace/name`. */
  readonly secret: string;
  /** Lowercase hosts (`shop.example.com`, `*.example.com`), sorted; empty for the default certificate. */
  readonly hosts: readonly string[];
  readonly notBefore: string;
  readonly notAfter: string;
  readonly dnsNames: readonly string[];
  readonly fingerprint: string;
  /** See {@linkcode CertificateInspection}; absent when the inspector gave none. */
  readonly chainFingerprint?: string;
  readonly certPem: string;
  readonly keyPem: string;
}

/** The result of a translation: sorted, deterministic, plain data. */
export interface Translation {
  /** Sorted by host, path, pathType. */
  readonly routes: readonly Route[];
  /** Every backend a route or the default backend refers to, sorted by key. */
  readonly backends: readonly Backend[];
  /** Key of the controller-wide default backend (`--default-backend-service`), if configured. */
  readonly defaultBackend?: string;
  /** Hosts listed in `spec.tls[].hosts` of our Ingresses, lowercase, sorted. */
  readonly tlsHosts: readonly string[];
  /** Valid Ingress certificates sorted by Secret, then Gateway HTTPS listeners' in Gateway order. */
  readonly certificates: readonly CertificateBinding[];
  /** The `--default-ssl-certificate` Secret, when configured and valid. */
  readonly defaultCertificate?: CertificateBinding;
  /** Problems found, sorted. */
  readonly issues: readonly Issue[];
  /**
   * What the served ingress-nginx annotations of Ingresses ask for, by Ingress
   * `namespace/name` (sorted; only Ingresses that carry some and contribute a route).
   */
  readonly behaviours?: Readonly<Record<string, IngressBehaviour>>;
  /**
   * ingress-nginx `app-root` by rule host (sorted): `/` of the host redirects
   * there, whichever Ingress routes `/` (the oldest Ingress's, when several set it).
   */
  readonly appRoots?: Readonly<Record<string, string>>;
  /**
   * ingress-nginx `from-to-www-redirect`, by the host redirected (sorted): its
   * `www.` or bare twin, which an Ingress with the annotation serves and no
   * Ingress routes (308 to the same target there).
   */
  readonly wwwRedirects?: Readonly<Record<string, string>>;
  /**
   * The Gateway API translation (with `gatewayApi`): routes per listener port
   * and hostname, and the statuses the leader writes. Its backends are in
   * {@linkcode Translation.backends}, its problems in `issues` (its own `issues` is empty).
   */
  readonly gateway?: GatewayTranslation;
}
