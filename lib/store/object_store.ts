/**
 * The current objects, per kind, keyed `namespace/name` (IngressClasses,
 * being cluster-scoped, by `name`), as every source delivers them: a list
 * replaces one kind (in one namespace, or in all), a change adds, updates or
 * deletes one object.
 *
 * Objects are stored without the API server's bookkeeping (managed
 * fields, kubectl's last-applied copy; see `slim_object.ts`).
 *
 * Each write answers whether it {@linkcode Change.matters} for translation
 * (see `matters.ts`); the store keeps the index that answer needs (which
 * Services and Secrets each Ingress names, and which Ingresses are ours,
 * decided by the translation's own class selection). Objects are stored
 * whatever the verdict.
 *
 * Knows nothing about where objects come from (watch or files) or how they
 * are translated.
 *
 * @module
 */
import type { Ingress, IngressClass, KubeObject } from "../k8s/objects.ts";
import {
  type ClassSelectionOptions,
  type ClassSelector,
  createClassSelector,
} from "../translate/class_selection.ts";
import { parseObjectRefOption } from "../translate/option_refs.ts";
import type { ClusterObjects } from "../translate/translation.ts";
import {
  type Change,
  type ChangeReason,
  classifyChange,
  isNamespaced,
  type Kind,
  KINDS,
  type MattersContext,
  storeKey,
} from "./matters.ts";
import { gatewayReferences, type IngressReferences, ingressReferences } from "./references.ts";
import { slimObject } from "./slim_object.ts";

/** Options of {@linkcode ObjectStore}: the controller options that decide what matters. */
export interface ObjectStoreOptions extends ClassSelectionOptions {
  /** `--default-ssl-certificate`, `namespace/name`. */
  readonly defaultSslCertificate?: string | undefined;
  /** `--default-backend-service`, `namespace/name[:port]`. */
  readonly defaultBackendService?: string | undefined;
}

/**
 * Where a list applies: one namespace, or all of them when `namespace` is
 * absent; narrowed further, for a list read with a selector that pins one
 * object, to objects of that `name` and carrying those `labels`. Objects
 * outside the scope are left alone (another list covers them).
 */
export interface ReplaceScope {
  readonly namespace?: string | undefined;
  /** Only the object of this name (a `metadata.name=` field selector). */
  readonly name?: string | undefined;
  /** Only objects carrying every one of these labels (an equality label selector). */
  readonly labels?: Readonly<Record<string, string>> | undefined;
}

function inScope(object: KubeObject, scope: ReplaceScope, namespaced: boolean): boolean {
  const metadata = object.metadata;
  if (namespaced && scope.namespace !== undefined && metadata?.namespace !== scope.namespace) {
    return false;
  }
  if (scope.name !== undefined && metadata?.name !== scope.name) return false;
  if (scope.labels !== undefined) {
    for (const [key, value] of Object.entries(scope.labels)) {
      if (metadata?.labels?.[key] !== value) return false;
    }
  }
  return true;
}

/** Counts of verdicts, by reason. */
export type ChangeCounts = Readonly<Record<ChangeReason, number>>;

function zeroCounts(): Record<ChangeReason, number> {
  return {
    added: 0,
    changed: 0,
    deleted: 0,
    absent: 0,
    unchanged: 0,
    "status-only": 0,
    "foreign-ingress": 0,
    "unreferenced-secret": 0,
    "unreferenced-service": 0,
    "unreferenced-endpoint-slice": 0,
    "same-labels": 0,
  };
}

function addRef(index: Map<string, Set<string>>, target: string, ingress: string): void {
  let set = index.get(target);
  if (set === undefined) index.set(target, set = new Set());
  set.add(ingress);
}

function removeRef(index: Map<string, Set<string>>, target: string, ingress: string): void {
  const set = index.get(target);
  if (set === undefined) return;
  set.delete(ingress);
  if (set.size === 0) index.delete(target);
}

/** Prefix of a Gateway's or HTTPRoute's key in the reference indexes (Ingresses have none). */
const GATEWAY_REFERRER = "gateway-api:";

/** The current objects of every kind, and what each change means for translation. */
export class ObjectStore {
  readonly #objects = new Map<Kind, Map<string, KubeObject>>(
    KINDS.map((kind) => [kind, new Map()]),
  );
  readonly #classOptions: ClassSelectionOptions;
  readonly #defaultSecret: string | undefined;
  readonly #defaultService: string | undefined;
  /** Service / Secret `namespace/name` → the Ingresses (any class) naming it. */
  readonly #serviceRefs = new Map<string, Set<string>>();
  readonly #secretRefs = new Map<string, Set<string>>();
  readonly #ingressRefs = new Map<string, IngressReferences>();
  #selector: ClassSelector | undefined;
  #version = 0;
  readonly #counts = zeroCounts();
  readonly #context: MattersContext;

  constructor(options: ObjectStoreOptions = {}) {
    this.#classOptions = {
      ...(options.controllerName !== undefined ? { controllerName: options.controllerName } : {}),
      ...(options.ingressClass !== undefined ? { ingressClass: options.ingressClass } : {}),
      ...(options.watchIngressWithoutClass !== undefined
        ? { watchIngressWithoutClass: options.watchIngressWithoutClass }
        : {}),
    };
    const secret = options.defaultSslCertificate === undefined
      ? undefined
      : parseObjectRefOption(options.defaultSslCertificate);
    this.#defaultSecret = secret && `${secret.namespace}/${secret.name}`;
    const service = options.defaultBackendService === undefined
      ? undefined
      : parseObjectRefOption(options.defaultBackendService, { allowPort: true });
    this.#defaultService = service && `${service.namespace}/${service.name}`;
    const relevant = (ingress: Ingress) => {
      const decision = this.#select()(ingress);
      // An Ingress that is not ours but about which translation reports a
      // problem (it names our class, which does not exist) still counts.
      return decision.ours || decision.problem !== undefined;
    };
    const referenced = (index: Map<string, Set<string>>, key: string) => {
      const ingresses = index.get(key);
      if (ingresses === undefined) return false;
      const map = this.#objects.get("Ingress")!;
      for (const ingressKey of ingresses) {
        // A Gateway or an HTTPRoute: every one counts (see `matters.ts`).
        if (ingressKey.startsWith(GATEWAY_REFERRER)) return true;
        const ingress = map.get(ingressKey);
        if (ingress !== undefined && relevant(ingress as Ingress)) return true;
      }
      return false;
    };
    this.#context = {
      relevantIngress: relevant,
      secretReferenced: (key) => key === this.#defaultSecret || referenced(this.#secretRefs, key),
      serviceReferenced: (key) =>
        key === this.#defaultService || referenced(this.#serviceRefs, key),
    };
  }

  /** Increases with every write that matters. */
  get version(): number {
    return this.#version;
  }

  /** How many writes got each verdict so far (a list counts once per object it changes). */
  get counts(): ChangeCounts {
    return { ...this.#counts };
  }

  /** The number of objects of a kind. */
  size(kind: Kind): number {
    return this.#objects.get(kind)!.size;
  }

  /** One object by `namespace/name` (or `name` for IngressClasses). */
  get(kind: Kind, key: string): KubeObject | undefined {
    return this.#objects.get(kind)!.get(key);
  }

  /** The objects of a kind, in no particular order. */
  list(kind: Kind): KubeObject[] {
    return [...this.#objects.get(kind)!.values()];
  }

  /** Everything, in the shape translation reads. Arrays are fresh copies; objects are shared. */
  objects(): ClusterObjects {
    return {
      ingresses: this.list("Ingress"),
      ingressClasses: this.list("IngressClass"),
      services: this.list("Service"),
      endpointSlices: this.list("EndpointSlice"),
      secrets: this.list("Secret"),
      gatewayClasses: this.list("GatewayClass"),
      gateways: this.list("Gateway"),
      httpRoutes: this.list("HTTPRoute"),
      referenceGrants: this.list("ReferenceGrant"),
      namespaces: this.list("Namespace"),
    } as ClusterObjects;
  }

  /** Adds or updates one object. Objects without a usable name are refused (`absent`). */
  upsert(kind: Kind, object: KubeObject): Change {
    const key = storeKey(kind, object);
    if (key === undefined) {
      return this.#count(classifyChange(kind, undefined, undefined, this.#context));
    }
    return this.#count(this.#set(kind, key, object));
  }

  /** Deletes one object (its `namespace/name` is what counts). */
  delete(kind: Kind, object: KubeObject): Change {
    const key = storeKey(kind, object);
    if (key === undefined) {
      return this.#count(classifyChange(kind, undefined, undefined, this.#context));
    }
    return this.#count(this.#remove(kind, key));
  }

  /**
   * Replaces every object of `kind` within `scope` by `items`: objects of that
   * scope missing from `items` are deleted, objects outside it (other
   * namespaces, other names or labels) are left alone, and so are items
   * outside it. Returns the first change that matters, else `unchanged`.
   */
  replace(kind: Kind, items: Iterable<KubeObject>, scope: ReplaceScope = {}): Change {
    const namespaced = isNamespaced(kind);
    const map = this.#objects.get(kind)!;
    const fresh = new Map<string, KubeObject>();
    for (const item of items) {
      const key = storeKey(kind, item);
      if (key === undefined) continue;
      if (!inScope(item, scope, namespaced)) continue;
      fresh.set(key, item);
    }
    let result: Change | undefined;
    const note = (change: Change) => {
      this.#count(change);
      if (change.matters) result ??= change;
    };
    for (const [key, object] of [...map]) {
      if (fresh.has(key)) continue;
      if (!inScope(object, scope, namespaced)) continue;
      note(this.#remove(kind, key));
    }
    for (const [key, object] of fresh) note(this.#set(kind, key, object));
    return result ?? { matters: false, reason: "unchanged" };
  }

  #count(change: Change): Change {
    this.#counts[change.reason]++;
    if (change.matters) this.#version++;
    return change;
  }

  #select(): ClassSelector {
    this.#selector ??= createClassSelector(
      this.#objects.get("IngressClass")!.values() as Iterable<IngressClass>,
      this.#classOptions,
    );
    return this.#selector;
  }

  #set(kind: Kind, key: string, received: KubeObject): Change {
    const object = slimObject(received);
    const map = this.#objects.get(kind)!;
    const before = map.get(key);
    // Judged before the write: for Ingresses, against the references and
    // classes as they are; the class set does not change with an Ingress.
    const change = classifyChange(kind, before, object, this.#context);
    if (change.reason === "unchanged" && before !== undefined) {
      // Keep the newer copy (it may carry a newer status), without reindexing
      // when nothing else moved.
      map.set(key, object);
      return change;
    }
    map.set(key, object);
    if (kind === "Ingress") this.#index(key, ingressReferences(object as Ingress));
    if (kind === "Gateway" || kind === "HTTPRoute") {
      this.#index(`${GATEWAY_REFERRER}${kind}/${key}`, gatewayReferences(kind, object));
    }
    if (kind === "IngressClass") this.#selector = undefined;
    return change;
  }

  #remove(kind: Kind, key: string): Change {
    const map = this.#objects.get(kind)!;
    const before = map.get(key);
    const change = classifyChange(kind, before, undefined, this.#context);
    if (before === undefined) return change;
    map.delete(key);
    if (kind === "Ingress") this.#index(key, undefined);
    if (kind === "Gateway" || kind === "HTTPRoute") {
      this.#index(`${GATEWAY_REFERRER}${kind}/${key}`, undefined);
    }
    if (kind === "IngressClass") this.#selector = undefined;
    return change;
  }

  /** Indexes what `key` (an Ingress, Gateway or HTTPRoute) refers to; nothing once deleted. */
  #index(key: string, refs: IngressReferences | undefined): void {
    const old = this.#ingressRefs.get(key);
    if (old !== undefined) {
      for (const service of old.services) removeRef(this.#serviceRefs, service, key);
      for (const secret of old.secrets) removeRef(this.#secretRefs, secret, key);
      this.#ingressRefs.delete(key);
    }
    if (refs === undefined) return;
    if (refs.services.length === 0 && refs.secrets.length === 0) return;
    this.#ingressRefs.set(key, refs);
    for (const service of refs.services) addRef(this.#serviceRefs, service, key);
    for (const secret of refs.secrets) addRef(this.#secretRefs, secret, key);
  }
}
