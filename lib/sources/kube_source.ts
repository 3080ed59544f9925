/**
 * The Kubernetes API as a source of objects: one {@linkcode Reflector} per
 * kind (Ingress, IngressClass, Service, EndpointSlice, Secret), or, with
 * `--watch-namespace a,b`, one per namespace for each namespaced kind.
 * Secrets are listed without the types Sluice never reads (Helm releases,
 * service-account tokens): TLS Secrets for certificates, `Opaque` ones for
 * ingress-nginx's `auth-secret`.
 *
 * When namespaces are limited, the `--default-ssl-certificate` Secret, the
 * `--default-backend-service` Service (with its EndpointSlices) and the
 * `--publish-service` Service may live elsewhere: each gets a reflector
 * pinned to just that object, whose lists replace only that object in the
 * store (never the rest of its namespace).
 *
 * Owns which reflectors exist and where their events go. Knows nothing about
 * what the objects mean.
 *
 * @module
 */
import type { Logger } from "../log/logging.ts";
import type { KubeObject } from "../k8s/kube_client.ts";
import {
  Reflector,
  type ReflectorClient,
  type ReflectorEvent,
  type ReflectorOptions,
} from "../k8s/reflector.ts";
import {
  ENDPOINT_SLICES,
  GATEWAY_CLASSES,
  GATEWAYS,
  HTTP_ROUTES,
  INGRESS_CLASSES,
  INGRESSES,
  NAMESPACES,
  REFERENCE_GRANTS,
  type Resource,
  SECRETS,
  SERVICES,
} from "../k8s/resources.ts";
import type { Kind } from "../store/matters.ts";
import { SERVICE_NAME_LABEL } from "../k8s/labels.ts";
import { parseObjectRefOption } from "../translate/option_refs.ts";
import type { KubeSourceStatus, ObjectSource, StoreWriter } from "./source.ts";

/** The field selector of TLS Secrets (the pinned `--default-ssl-certificate`). */
export const TLS_SECRET_SELECTOR = "type=kubernetes.io/tls";

/**
 * The field selector of the Secrets Sluice reads: all but the types it never
 * uses and that are many or large (Helm keeps every release in a Secret).
 */
export const SECRET_SELECTOR = "type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token";

/** One reflector to run. */
export interface ReflectorPlan {
  readonly kind: Kind;
  readonly resource: Resource;
  /** Undefined: all namespaces (or cluster-scoped). */
  readonly namespace?: string;
  readonly fieldSelector?: string;
  readonly labelSelector?: string;
  /** For a pinned reflector: what its lists cover (the pinned name or label). */
  readonly pinned?: { readonly name?: string; readonly labels?: Readonly<Record<string, string>> };
  /** The resource is a CRD that may not be installed (Gateway API): absent, it reads as empty. */
  readonly optional?: boolean;
}

/** Options of {@linkcode planReflectors}. */
export interface PlanOptions {
  /** `--watch-namespace`; empty or absent for all namespaces. */
  readonly watchNamespaces?: readonly string[] | undefined;
  readonly defaultSslCertificate?: string | undefined;
  readonly defaultBackendService?: string | undefined;
  /** `--publish-service`: its addresses go into Ingress status. */
  readonly publishService?: string | undefined;
  /** `--gateway-api`: also watch GatewayClasses, Gateways, HTTPRoutes, ReferenceGrants, Namespaces. */
  readonly gatewayApi?: boolean | undefined;
}

const NAMESPACED: readonly [Kind, Resource, string | undefined][] = [
  ["Ingress", INGRESSES, undefined],
  ["Service", SERVICES, undefined],
  ["EndpointSlice", ENDPOINT_SLICES, undefined],
  ["Secret", SECRETS, SECRET_SELECTOR],
];

/** Gateway API's namespaced kinds (all optional: their CRDs may be missing). */
const GATEWAY_NAMESPACED: readonly [Kind, Resource][] = [
  ["Gateway", GATEWAYS],
  ["HTTPRoute", HTTP_ROUTES],
  ["ReferenceGrant", REFERENCE_GRANTS],
];

/** Which reflectors to run for the given namespaces and options. */
export function planReflectors(options: PlanOptions = {}): ReflectorPlan[] {
  const plans = planIngressReflectors(options);
  if (options.gatewayApi !== true) return plans;
  const namespaces = [...new Set((options.watchNamespaces ?? []).filter((n) => n !== ""))].sort();
  plans.push({ kind: "GatewayClass", resource: GATEWAY_CLASSES, optional: true });
  // Labels of Namespaces feed `allowedRoutes` selectors: all of them, even
  // with --watch-namespace (a route's namespace is judged, not watched).
  plans.push({ kind: "Namespace", resource: NAMESPACES });
  for (const [kind, resource] of GATEWAY_NAMESPACED) {
    if (namespaces.length === 0) plans.push({ kind, resource, optional: true });
    for (const namespace of namespaces) plans.push({ kind, resource, namespace, optional: true });
  }
  return plans;
}

function planIngressReflectors(options: PlanOptions): ReflectorPlan[] {
  const namespaces = [...new Set((options.watchNamespaces ?? []).filter((n) => n !== ""))].sort();
  const plans: ReflectorPlan[] = [{ kind: "IngressClass", resource: INGRESS_CLASSES }];
  const selector = (fieldSelector: string | undefined) =>
    fieldSelector === undefined ? {} : { fieldSelector };
  if (namespaces.length === 0) {
    for (const [kind, resource, fieldSelector] of NAMESPACED) {
      plans.push({ kind, resource, ...selector(fieldSelector) });
    }
    return plans;
  }
  for (const [kind, resource, fieldSelector] of NAMESPACED) {
    for (const namespace of namespaces) {
      plans.push({ kind, resource, namespace, ...selector(fieldSelector) });
    }
  }
  const secret = options.defaultSslCertificate === undefined
    ? undefined
    : parseObjectRefOption(options.defaultSslCertificate);
  if (secret !== undefined && !namespaces.includes(secret.namespace)) {
    plans.push({
      kind: "Secret",
      resource: SECRETS,
      namespace: secret.namespace,
      fieldSelector: `${TLS_SECRET_SELECTOR},metadata.name=${secret.name}`,
      pinned: { name: secret.name },
    });
  }
  const pinService = (ref: { namespace: string; name: string }) => {
    const already = plans.some((p) =>
      p.kind === "Service" && p.namespace === ref.namespace && p.pinned?.name === ref.name
    );
    if (already || namespaces.includes(ref.namespace)) return false;
    plans.push({
      kind: "Service",
      resource: SERVICES,
      namespace: ref.namespace,
      fieldSelector: `metadata.name=${ref.name}`,
      pinned: { name: ref.name },
    });
    return true;
  };
  const service = options.defaultBackendService === undefined
    ? undefined
    : parseObjectRefOption(options.defaultBackendService, { allowPort: true });
  if (service !== undefined && pinService(service)) {
    plans.push({
      kind: "EndpointSlice",
      resource: ENDPOINT_SLICES,
      namespace: service.namespace,
      labelSelector: `${SERVICE_NAME_LABEL}=${service.name}`,
      pinned: { labels: { [SERVICE_NAME_LABEL]: service.name } },
    });
  }
  const published = options.publishService === undefined
    ? undefined
    : parseObjectRefOption(options.publishService);
  if (published !== undefined) pinService(published);
  return plans;
}

/** Reflector settings shared by every reflector of a source (tests shorten them). */
export type ReflectorTuning = Partial<
  Pick<
    ReflectorOptions,
    | "pageSize"
    | "watchTimeoutSeconds"
    | "healthyAfterMs"
    | "minWatchMs"
    | "watchGraceMs"
    | "backoff"
    | "random"
    | "timers"
  >
>;

/** Options of {@linkcode KubeSource}. */
export interface KubeSourceOptions extends PlanOptions {
  readonly client: ReflectorClient;
  readonly logger: Logger;
  readonly reflector?: ReflectorTuning;
  /** How often an absent optional resource (a CRD not installed) is looked for again. Default 30 s. */
  readonly absentRetryMs?: number;
}

/** Objects from the Kubernetes API, kept current by reflectors. */
export class KubeSource implements ObjectSource {
  readonly name = "kubernetes";
  readonly #options: KubeSourceOptions;
  readonly #plans: ReflectorPlan[];
  #reflectors: Reflector[] = [];
  #synced: Promise<void>;
  #resolveSynced!: () => void;
  #isSynced = false;
  #started = false;

  constructor(options: KubeSourceOptions) {
    this.#options = options;
    this.#plans = planReflectors(options);
    this.#synced = new Promise((resolve) => this.#resolveSynced = resolve);
  }

  /** The reflectors this source runs. */
  get plans(): readonly ReflectorPlan[] {
    return this.#plans;
  }

  get synced(): Promise<void> {
    return this.#synced;
  }

  get isSynced(): boolean {
    return this.#isSynced;
  }

  start(writer: StoreWriter): void {
    if (this.#started) return;
    this.#started = true;
    this.#reflectors = this.#plans.map((plan) => {
      const deliver = (event: ReflectorEvent<KubeObject>) => {
        switch (event.type) {
          case "replace":
            writer.replace(plan.kind, event.items, { namespace: event.namespace, ...plan.pinned });
            break;
          case "upsert":
            writer.upsert(plan.kind, event.object);
            break;
          case "delete":
            writer.delete(plan.kind, event.object);
            break;
        }
      };
      return new Reflector<KubeObject>({
        ...this.#options.reflector,
        client: this.#options.client,
        resource: plan.resource,
        namespace: plan.namespace,
        fieldSelector: plan.fieldSelector,
        labelSelector: plan.labelSelector,
        ...(plan.optional === true
          ? { optional: { absentRetryMs: this.#options.absentRetryMs ?? 30_000 } }
          : {}),
        logger: this.#options.logger,
        onEvent: deliver,
      });
    });
    for (const reflector of this.#reflectors) reflector.start();
    void Promise.all(this.#reflectors.map((r) => r.synced)).then(() => {
      this.#isSynced = true;
      this.#options.logger.info("Listed every kind: {reflectors} reflectors in sync", {
        reflectors: this.#reflectors.length,
      });
      this.#resolveSynced();
    });
  }

  status(): KubeSourceStatus {
    return {
      type: "kubernetes",
      synced: this.#isSynced,
      reflectors: this.#reflectors.map((r) => r.status),
    };
  }

  async stop(): Promise<void> {
    await Promise.all(this.#reflectors.map((r) => r.stop()));
  }
}
