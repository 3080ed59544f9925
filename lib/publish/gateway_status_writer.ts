/**
 * Gateway API status: writes what the Gateway translation concluded
 * (`GatewayStatuses`: conditions with `observedGeneration`, supported
 * features, listener statuses, route parents) into the `status` of
 * GatewayClasses, Gateways and HTTPRoutes, with the published addresses on
 * each Gateway.
 *
 * A status is written only when it differs from the object's current one; a
 * condition keeps its `lastTransitionTime` while its `status` stays the same
 * (`metav1.Condition`). An HTTPRoute's `status.parents` entries of other
 * controllers are kept; the write carries the resourceVersion it was planned
 * from, so a fresh write by another controller is never overwritten (the next
 * sync, with the fresh object, plans again).
 *
 * Takes plain data (the statuses, the current objects with their status,
 * the addresses) and writes with merge patches on the `status` subresource.
 * Asks the injected `isLeader()` right before every write.
 *
 * @module
 */
import { KubeApiError, type KubeClient } from "../k8s/kube_client.ts";
import type { KubeObject } from "../k8s/objects.ts";
import { GATEWAY_CLASSES, GATEWAYS, HTTP_ROUTES, type Resource } from "../k8s/resources.ts";
import type { Logger } from "../log/logging.ts";
import { errorText } from "../log/error_text.ts";
import { jsonEqual } from "../store/json_equal.ts";
import type { Condition, GatewayStatuses } from "../translate/gateway/types.ts";
import type { LoadBalancerAddress } from "./status_writer.ts";

/** One status to write. */
export interface GatewayStatusAction {
  readonly resource: Resource;
  /** Empty for GatewayClasses. */
  readonly namespace: string;
  readonly name: string;
  /** The resourceVersion planned from (the write is conditional on it). */
  readonly resourceVersion: string;
  /** The whole `status` to write. */
  readonly status: Record<string, unknown>;
}

/** Input of {@linkcode planGatewayStatus}. */
export interface GatewayStatusPlanInput {
  readonly statuses: GatewayStatuses;
  /** The current objects, with their status. */
  readonly gatewayClasses: Iterable<KubeObject>;
  readonly gateways: Iterable<KubeObject>;
  readonly httpRoutes: Iterable<KubeObject>;
  /** Our `controllerName`: our entries of `status.parents`. */
  readonly controllerName: string;
  /** Written to every Gateway's `status.addresses`. */
  readonly addresses: readonly LoadBalancerAddress[];
  /** RFC 3339, for conditions whose status changed. */
  readonly now: string;
}

type Status = { status?: Record<string, unknown> } & KubeObject;

function byKey(objects: Iterable<KubeObject>, namespaced: boolean): Map<string, Status> {
  const map = new Map<string, Status>();
  for (const o of objects) {
    const name = o?.metadata?.name;
    if (typeof name !== "string") continue;
    map.set(namespaced ? `${o.metadata?.namespace}/${name}` : name, o as Status);
  }
  return map;
}

/** Conditions to write: each keeps the current `lastTransitionTime` while its status stays. */
export function mergeConditions(
  desired: readonly Condition[],
  current: unknown,
  now: string,
): Condition[] {
  const previous = new Map<string, { status?: unknown; lastTransitionTime?: unknown }>();
  if (Array.isArray(current)) {
    for (const c of current) if (typeof c?.type === "string") previous.set(c.type, c);
  }
  return desired.map((c) => {
    const before = previous.get(c.type);
    const kept = before?.status === c.status && typeof before?.lastTransitionTime === "string"
      ? before.lastTransitionTime
      : now;
    return { ...c, lastTransitionTime: kept };
  });
}

function gatewayAddresses(addresses: readonly LoadBalancerAddress[]) {
  return addresses.map((a) =>
    a.ip !== undefined
      ? { type: "IPAddress", value: a.ip }
      : { type: "Hostname", value: a.hostname ?? "" }
  );
}

function action(
  resource: Resource,
  object: Status,
  status: Record<string, unknown>,
): GatewayStatusAction | undefined {
  if (jsonEqual(object.status ?? {}, status)) return undefined;
  return {
    resource,
    namespace: object.metadata?.namespace ?? "",
    name: object.metadata?.name ?? "",
    resourceVersion: object.metadata?.resourceVersion ?? "",
    status,
  };
}

/** Decides which statuses to write. Pure; nothing for objects whose status already matches. */
export function planGatewayStatus(input: GatewayStatusPlanInput): GatewayStatusAction[] {
  const actions: GatewayStatusAction[] = [];
  const classes = byKey(input.gatewayClasses, false);
  for (const desired of input.statuses.gatewayClasses) {
    const object = classes.get(desired.name);
    if (object === undefined) continue;
    const current = object.status ?? {};
    const status: Record<string, unknown> = {
      ...current,
      conditions: mergeConditions(desired.conditions, current.conditions, input.now),
      supportedFeatures: desired.supportedFeatures,
    };
    const a = action(GATEWAY_CLASSES, object, status);
    if (a !== undefined) actions.push(a);
  }
  const gateways = byKey(input.gateways, true);
  for (const desired of input.statuses.gateways) {
    const object = gateways.get(desired.gateway);
    if (object === undefined) continue;
    const current = object.status ?? {};
    const currentListeners = new Map<string, Record<string, unknown>>();
    if (Array.isArray(current.listeners)) {
      for (const l of current.listeners) {
        if (typeof l?.name === "string") currentListeners.set(l.name, l);
      }
    }
    const status: Record<string, unknown> = {
      // Its own address (`--gateway-addresses`), else the published ones.
      addresses: desired.address !== undefined
        ? [{ type: "IPAddress", value: desired.address }]
        : gatewayAddresses(input.addresses),
      conditions: mergeConditions(desired.conditions, current.conditions, input.now),
      listeners: desired.listeners.map((l) => ({
        name: l.name,
        supportedKinds: l.supportedKinds,
        attachedRoutes: l.attachedRoutes,
        conditions: mergeConditions(
          l.conditions,
          currentListeners.get(l.name)?.conditions,
          input.now,
        ),
      })),
    };
    const a = action(GATEWAYS, object, status);
    if (a !== undefined) actions.push(a);
  }
  const routes = byKey(input.httpRoutes, true);
  for (const desired of input.statuses.httpRoutes) {
    const object = routes.get(desired.route);
    if (object === undefined) continue;
    const current = object.status ?? {};
    const currentParents = Array.isArray(current.parents) ? current.parents : [];
    const others = currentParents.filter((p) => p?.controllerName !== input.controllerName);
    const ours = currentParents.filter((p) => p?.controllerName === input.controllerName);
    const status: Record<string, unknown> = {
      ...current,
      parents: [
        ...others,
        ...desired.parents.map((p) => {
          const before = ours.find((o) => jsonEqual(o?.parentRef, p.parentRef));
          return { ...p, conditions: mergeConditions(p.conditions, before?.conditions, input.now) };
        }),
      ],
    };
    const a = action(HTTP_ROUTES, object, status);
    if (a !== undefined) actions.push(a);
  }
  return actions;
}

/** The requests the writer makes; a {@linkcode KubeClient} fits. */
export type GatewayStatusClient = Pick<KubeClient, "patch">;

/** Options of {@linkcode GatewayStatusWriter}. */
export interface GatewayStatusWriterOptions {
  readonly client: GatewayStatusClient;
  /** Asked right before every write. */
  readonly isLeader: () => boolean;
  readonly logger: Logger;
  /** `fieldManager` of the writes. Default `sluice`. */
  readonly fieldManager?: string;
  /** Wait before trying failed writes again. Default 1,000 ms. */
  readonly retryMs?: number;
  /** Wall clock, for `lastTransitionTime`. Default `Date.now`. */
  readonly now?: () => number;
}

/** What one pass did. */
export interface GatewayStatusResult {
  readonly written: number;
  readonly failed: number;
  readonly notLeader: number;
}

/**
 * Writes Gateway API statuses. Call {@linkcode GatewayStatusWriter.sync} after
 * every published translation and on each resync; passes never overlap (a
 * sync during a pass runs once it ends, with the latest input).
 */
export class GatewayStatusWriter {
  readonly #options: GatewayStatusWriterOptions;
  readonly #abort = new AbortController();
  /** The version each object was last written from, so a pass does not repeat a write the store has not seen yet. */
  readonly #writtenFrom = new Map<string, string>();
  #latest: Omit<GatewayStatusPlanInput, "now"> | undefined;
  #running: Promise<GatewayStatusResult> | undefined;
  #again = false;
  #closed = false;
  #retry: ReturnType<typeof setTimeout> | undefined;

  constructor(options: GatewayStatusWriterOptions) {
    this.#options = options;
  }

  /** Takes the current state and runs a pass (or queues one after the running pass). */
  sync(input: Omit<GatewayStatusPlanInput, "now">): Promise<GatewayStatusResult> {
    this.#latest = input;
    if (this.#closed) return Promise.resolve({ written: 0, failed: 0, notLeader: 0 });
    if (this.#running !== undefined) {
      this.#again = true;
      return this.#running;
    }
    this.#running = this.#pass().then((result) => {
      // Failed writes are tried again soon: a conflict's fresh object is a
      // status-only change, which triggers no rebuild and so no sync.
      if (result.failed > 0 && !this.#closed && this.#retry === undefined) {
        this.#retry = setTimeout(() => {
          this.#retry = undefined;
          if (this.#latest !== undefined) void this.sync(this.#latest);
        }, this.#options.retryMs ?? 1_000);
      }
      return result;
    }).finally(() => {
      this.#running = undefined;
      if (this.#again && !this.#closed && this.#latest !== undefined) {
        this.#again = false;
        void this.sync(this.#latest);
      }
    });
    return this.#running;
  }

  /** Ends the writes in flight. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#retry);
    this.#abort.abort();
    await this.#running?.catch(() => {});
  }

  async #pass(): Promise<GatewayStatusResult> {
    const input = this.#latest!;
    const now = new Date((this.#options.now ?? Date.now)()).toISOString().replace(/\.\d+Z$/, "Z");
    const actions = planGatewayStatus({ ...input, now }).filter((a) => {
      const key = `${a.resource.kind} ${a.namespace}/${a.name}`;
      return this.#writtenFrom.get(key) !== a.resourceVersion;
    });
    const result = { written: 0, failed: 0, notLeader: 0 };
    for (const a of actions) {
      if (this.#closed) break;
      if (!this.#options.isLeader()) {
        result.notLeader++;
        continue;
      }
      const key = `${a.resource.kind} ${a.namespace}/${a.name}`;
      try {
        const client = this.#options.client;
        const at = {
          ...(a.namespace !== "" ? { namespace: a.namespace } : {}),
          name: a.name,
          subresource: "status",
        };
        const body = { metadata: { resourceVersion: a.resourceVersion }, status: a.status };
        const options = {
          type: "merge" as const,
          fieldManager: this.#options.fieldManager ?? "sluice",
          signal: this.#abort.signal,
        };
        // One call per kind, each naming its resource: the RBAC test reads them.
        if (a.resource === GATEWAY_CLASSES) await client.patch(GATEWAY_CLASSES, at, body, options);
        else if (a.resource === GATEWAYS) await client.patch(GATEWAYS, at, body, options);
        else await client.patch(HTTP_ROUTES, at, body, options);
        this.#writtenFrom.set(key, a.resourceVersion);
        result.written++;
      } catch (error) {
        if (error instanceof KubeApiError && error.isNotFound) continue;
        result.failed++;
        // A conflict: our copy was stale; the store's next version brings a new pass.
        const conflict = error instanceof KubeApiError && error.isConflict;
        this.#options.logger[conflict ? "debug" : "warn"](
          "Cannot write the status of {kind} {namespace}/{name}: {error}",
          { kind: a.resource.kind, namespace: a.namespace, name: a.name, error: errorText(error) },
        );
      }
    }
    return result;
  }
}
