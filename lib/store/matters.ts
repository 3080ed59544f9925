/**
 * Whether a change to one object can change the translation, and so whether
 * it should trigger a rebuild.
 *
 * A change does NOT matter when it is:
 * - a same-resourceVersion update (or, for objects without one, such as
 *   manifests, an identical object);
 * - an Ingress whose only change is its `status` (our own status writes come
 *   back this way);
 * - an Ingress of another class: not ours before and not ours now (class
 *   selection itself is `lib/translate/class_selection.ts`, injected through
 *   {@linkcode MattersContext.relevantIngress});
 * - a Secret that no Ingress of ours refers to and that is not the
 *   `--default-ssl-certificate`;
 * - a Service, or an EndpointSlice of a Service, that no Ingress of ours
 *   refers to and that is not the `--default-backend-service`;
 * - a Gateway API object (GatewayClass, Gateway, HTTPRoute, ReferenceGrant)
 *   whose only change is its `status` (the leader's writes come back);
 * - a Namespace whose labels did not change (only labels are read, by
 *   `allowedRoutes` selectors).
 *
 * Secrets and Services named by a Gateway or an HTTPRoute count as
 * referenced, whatever their class (a superset).
 *
 * Everything else matters. The rule that keeps this correct: objects are
 * always stored whatever the verdict, and every input translation reads is
 * either covered by a rule here or matters; so skipping a rebuild never
 * leaves a snapshot that differs from translating the store.
 *
 * Pure: no clock, no I/O. Knows the object shapes and the
 * EndpointSlice→Service label; nothing about routes.
 *
 * @module
 */
import type { EndpointSlice, Ingress, KubeObject } from "../k8s/objects.ts";
import { SERVICE_NAME_LABEL } from "../k8s/labels.ts";
import { jsonEqual, sameEntries } from "./json_equal.ts";

/** The kinds of object Sluice reads: the Ingress API's, then Gateway API's (and Namespaces for it). */
export type Kind =
  | "Ingress"
  | "IngressClass"
  | "Service"
  | "EndpointSlice"
  | "Secret"
  | "GatewayClass"
  | "Gateway"
  | "HTTPRoute"
  | "ReferenceGrant"
  | "Namespace";

/** Every {@linkcode Kind}, in a stable order. */
export const KINDS: readonly Kind[] = Object.freeze([
  "Ingress",
  "IngressClass",
  "Service",
  "EndpointSlice",
  "Secret",
  "GatewayClass",
  "Gateway",
  "HTTPRoute",
  "ReferenceGrant",
  "Namespace",
]);

const CLUSTER_SCOPED: ReadonlySet<Kind> = new Set(["IngressClass", "GatewayClass", "Namespace"]);

/** Whether a kind's objects live in namespaces. */
export function isNamespaced(kind: Kind): boolean {
  return !CLUSTER_SCOPED.has(kind);
}

/** Why a change matters or not. */
export type ChangeReason =
  // These matter:
  | "added"
  | "changed"
  | "deleted"
  // These do not:
  | "absent"
  | "unchanged"
  | "status-only"
  | "foreign-ingress"
  | "unreferenced-secret"
  | "unreferenced-service"
  | "unreferenced-endpoint-slice"
  | "same-labels";

/** The verdict on one change. */
export interface Change {
  readonly matters: boolean;
  readonly reason: ChangeReason;
}

/** What the verdict needs to know about the rest of the store. */
export interface MattersContext {
  /** Whether an Ingress is ours, or nearly ours (translation reports a problem about it). */
  relevantIngress(ingress: Ingress): boolean;
  /** Whether an Ingress of ours (or `--default-ssl-certificate`) names the Secret `namespace/name`. */
  secretReferenced(key: string): boolean;
  /** Whether an Ingress of ours (or `--default-backend-service`) names the Service `namespace/name`. */
  serviceReferenced(key: string): boolean;
}

/**
 * Left out when judging "only the status changed". `kind` and `apiVersion`
 * too: LIST items come without them, watch events with them.
 */
const IGNORED_INGRESS_FIELDS: ReadonlySet<string> = new Set([
  "status",
  "metadata",
  "kind",
  "apiVersion",
]);
const IGNORED_METADATA_FIELDS: ReadonlySet<string> = new Set(["resourceVersion", "managedFields"]);

function record(value: unknown): Record<string, unknown> {
  return value !== null && typeof value === "object" ? value as Record<string, unknown> : {};
}

/** Whether two versions of an object are the same version. */
export function sameVersion(before: KubeObject, after: KubeObject): boolean {
  const a = before.metadata?.resourceVersion;
  const b = after.metadata?.resourceVersion;
  if (typeof a === "string" && a !== "" && typeof b === "string" && b !== "") return a === b;
  return jsonEqual(before, after);
}

/** Whether two versions of an object differ at most in `status` (and bookkeeping metadata). */
export function onlyStatusDiffers(before: KubeObject, after: KubeObject): boolean {
  return sameEntries(record(before), record(after), IGNORED_INGRESS_FIELDS) &&
    sameEntries(record(before.metadata), record(after.metadata), IGNORED_METADATA_FIELDS);
}

/** `namespace/name` of an object, or `name` for a cluster-scoped one. */
export function storeKey(kind: Kind, object: KubeObject): string | undefined {
  const name = object?.metadata?.name;
  if (typeof name !== "string" || name === "") return undefined;
  if (!isNamespaced(kind)) return name;
  const namespace = object.metadata?.namespace;
  if (typeof namespace !== "string" || namespace === "") return undefined;
  return `${namespace}/${name}`;
}

/** `namespace/name` of the Service an EndpointSlice belongs to, if it says. */
export function sliceServiceKey(slice: EndpointSlice | undefined): string | undefined {
  const namespace = slice?.metadata?.namespace;
  const service = slice?.metadata?.labels?.[SERVICE_NAME_LABEL];
  if (typeof namespace !== "string" || namespace === "") return undefined;
  if (typeof service !== "string" || service === "") return undefined;
  return `${namespace}/${service}`;
}

const verdicts = {
  added: { matters: true, reason: "added" },
  changed: { matters: true, reason: "changed" },
  deleted: { matters: true, reason: "deleted" },
  absent: { matters: false, reason: "absent" },
  unchanged: { matters: false, reason: "unchanged" },
  "status-only": { matters: false, reason: "status-only" },
  "foreign-ingress": { matters: false, reason: "foreign-ingress" },
  "unreferenced-secret": { matters: false, reason: "unreferenced-secret" },
  "unreferenced-service": { matters: false, reason: "unreferenced-service" },
  "unreferenced-endpoint-slice": { matters: false, reason: "unreferenced-endpoint-slice" },
  "same-labels": { matters: false, reason: "same-labels" },
} as const satisfies Record<ChangeReason, Change>;

/**
 * Judges a change of one object from `before` (absent when added) to `after`
 * (absent when deleted).
 */
export function classifyChange(
  kind: Kind,
  before: KubeObject | undefined,
  after: KubeObject | undefined,
  context: MattersContext,
): Change {
  if (before === undefined && after === undefined) return verdicts.absent;
  if (before !== undefined && after !== undefined && sameVersion(before, after)) {
    return verdicts.unchanged;
  }
  const current = (after ?? before)!;
  const changed = before === undefined
    ? verdicts.added
    : after === undefined
    ? verdicts.deleted
    : verdicts.changed;
  switch (kind) {
    case "Ingress": {
      if (
        before !== undefined && after !== undefined &&
        onlyStatusDiffers(before as Ingress, after as Ingress)
      ) {
        return verdicts["status-only"];
      }
      const wasOurs = before !== undefined && context.relevantIngress(before as Ingress);
      const isOurs = after !== undefined && context.relevantIngress(after as Ingress);
      return wasOurs || isOurs ? changed : verdicts["foreign-ingress"];
    }
    case "IngressClass":
      // Classes decide which Ingresses are ours: always rebuild.
      return changed;
    case "Secret": {
      const key = storeKey(kind, current);
      return key !== undefined && context.secretReferenced(key)
        ? changed
        : verdicts["unreferenced-secret"];
    }
    case "Service": {
      const key = storeKey(kind, current);
      return key !== undefined && context.serviceReferenced(key)
        ? changed
        : verdicts["unreferenced-service"];
    }
    case "EndpointSlice": {
      // The label may move a slice from one Service to another: both count.
      const was = sliceServiceKey(before as EndpointSlice | undefined);
      const is = sliceServiceKey(after as EndpointSlice | undefined);
      return (was !== undefined && context.serviceReferenced(was)) ||
          (is !== undefined && context.serviceReferenced(is))
        ? changed
        : verdicts["unreferenced-endpoint-slice"];
    }
    case "GatewayClass":
    case "Gateway":
    case "HTTPRoute":
    case "ReferenceGrant":
      return before !== undefined && after !== undefined && onlyStatusDiffers(before, after)
        ? verdicts["status-only"]
        : changed;
    case "Namespace":
      return before !== undefined && after !== undefined &&
          jsonEqual(before.metadata?.labels ?? {}, after.metadata?.labels ?? {})
        ? verdicts["same-labels"]
        : changed;
  }
}
