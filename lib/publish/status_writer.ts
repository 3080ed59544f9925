/**
 * Ingress status: computes the addresses Sluice is reachable at and writes
 * them into `status.loadBalancer.ingress` of the Ingresses of our class.
 *
 * The addresses come from `--publish-status-address a,b` (IPs become `ip`,
 * names `hostname`; it wins when both are given, as in ingress-nginx) or from
 * the `--publish-service` Service (its own `status.loadBalancer.ingress`,
 * else its cluster IPs, else an ExternalName's name). A status is written
 * only when it differs from the current one (compared sorted), only for
 * Ingresses of our class, and cleared for an Ingress that left our class but
 * still carries our addresses (equal to what we publish now or to what we
 * last wrote into it; the clear is conditional on the resourceVersion it was
 * planned from, so another controller's fresh status is never wiped).
 *
 * Takes plain data (the current Ingresses with their status, which of them
 * are ours, the publish Service) and writes with merge patches on the
 * `status` subresource. Knows nothing of the store, class selection or
 * routing; asks the injected `isLeader()` right before every write.
 *
 * @module
 */
import { KubeApiError, type KubeClient } from "../k8s/kube_client.ts";
import type { Ingress, IngressLoadBalancerIngress, Service } from "../k8s/objects.ts";
import { INGRESSES } from "../k8s/resources.ts";
import { componentLogger, type Logger } from "../log/logging.ts";
import { deadline, SYSTEM_TIMERS, type Timers } from "../timers/timers.ts";
import { errorText } from "../log/error_text.ts";

/** Timers may fire up to about a millisecond before `now` says they are due. */
const TIMER_SLACK_MS = 1;

/** One published address: exactly one of `ip` or `hostname`. */
export interface LoadBalancerAddress {
  readonly ip?: string;
  readonly hostname?: string;
}

/** A Service as read from the API, with the status the declared `Service` type leaves out. */
export interface PublishedService extends Service {
  status?: { loadBalancer?: { ingress?: readonly IngressLoadBalancerIngress[] } };
}

/** Where the published addresses come from. `addresses` wins over `service`. */
export interface AddressSource {
  /** `--publish-status-address`, already split on commas. */
  readonly addresses?: readonly string[] | undefined;
  /** `--publish-service` is configured: the Service object, `undefined` while it does not exist. */
  readonly service?: PublishedService | undefined;
}

/** What to do to one Ingress's status. */
export interface StatusAction {
  readonly kind: "write" | "clear";
  /** `namespace/name`. */
  readonly key: string;
  readonly namespace: string;
  readonly name: string;
  /** The resourceVersion the action was planned from. */
  readonly resourceVersion: string;
  /** Sorted; empty for `clear`. */
  readonly addresses: readonly LoadBalancerAddress[];
}

/** Input of {@linkcode planStatus}. */
export interface StatusPlanInput {
  /** The current Ingresses, including their status. */
  readonly ingresses: Iterable<Ingress>;
  /** `namespace/name` of the Ingresses of our class. */
  readonly owned: ReadonlySet<string>;
  /** From {@linkcode desiredAddresses}; `undefined` plans nothing. */
  readonly desired: readonly LoadBalancerAddress[] | undefined;
  /** What we last wrote per `namespace/name` ({@linkcode addressesKey}), to recognise ours when clearing. */
  readonly written?: ReadonlyMap<string, string>;
}

const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;

/** Whether `value` is an IPv4 or IPv6 address (anything with a colon counts as IPv6 here). */
export function isIpAddress(value: string): boolean {
  return IPV4.test(value) || (value.includes(":") && /^[0-9a-fA-F:.]+$/.test(value));
}

function compareAddresses(a: LoadBalancerAddress, b: LoadBalancerAddress): number {
  // IPs first, then host names.
  const ka = a.ip !== undefined ? `0${a.ip}` : `1${a.hostname ?? ""}`;
  const kb = b.ip !== undefined ? `0${b.ip}` : `1${b.hostname ?? ""}`;
  return ka < kb ? -1 : ka > kb ? 1 : 0;
}

/** Keeps `ip` and `hostname` only (Service statuses carry `ipMode`, `ports`), sorted, without duplicates. */
export function normalizeAddresses(
  entries: Iterable<IngressLoadBalancerIngress | LoadBalancerAddress> | undefined,
): LoadBalancerAddress[] {
  const out: LoadBalancerAddress[] = [];
  for (const entry of entries ?? []) {
    if (typeof entry !== "object" || entry === null) continue;
    const ip = typeof entry.ip === "string" && entry.ip !== "" ? entry.ip : undefined;
    const hostname = typeof entry.hostname === "string" && entry.hostname !== ""
      ? entry.hostname
      : undefined;
    if (ip !== undefined) out.push({ ip });
    else if (hostname !== undefined) out.push({ hostname });
  }
  out.sort(compareAddresses);
  return out.filter((a, i) => i === 0 || compareAddresses(out[i - 1]!, a) !== 0);
}

/** A canonical string of a list of addresses, for comparison. */
export function addressesKey(addresses: readonly LoadBalancerAddress[]): string {
  return addresses.map((a) => a.ip !== undefined ? `ip:${a.ip}` : `host:${a.hostname}`).join(",");
}

/**
 * The addresses to publish, sorted: `addresses` when given (IPs as `ip`, the rest
 * as `hostname`), else those of `service`. `undefined` when there is nothing to
 * go by (no source configured, or the publish Service does not exist).
 */
export function desiredAddresses(source: AddressSource): LoadBalancerAddress[] | undefined {
  if (source.addresses !== undefined && source.addresses.length > 0) {
    return normalizeAddresses(
      source.addresses.map((a) => a.trim()).filter((a) => a !== "").map((a) =>
        isIpAddress(a) ? { ip: a } : { hostname: a }
      ),
    );
  }
  const service = source.service;
  if (service === undefined) return undefined;
  const balanced = normalizeAddresses(service.status?.loadBalancer?.ingress);
  if (balanced.length > 0) return balanced;
  const spec = service.spec ?? {};
  const ips = Array.isArray(spec.clusterIPs) && spec.clusterIPs.length > 0
    ? spec.clusterIPs
    : typeof spec.clusterIP === "string"
    ? [spec.clusterIP]
    : [];
  const cluster = normalizeAddresses(
    ips.filter((ip) => ip !== "" && ip !== "None").map((ip) => ({ ip })),
  );
  if (cluster.length > 0) return cluster;
  if (spec.type === "ExternalName" && typeof spec.externalName === "string") {
    return normalizeAddresses([{ hostname: spec.externalName }]);
  }
  return [];
}

/**
 * Decides which Ingresses need their status written or cleared. Pure: sorted by
 * `namespace/name`, nothing for Ingresses whose status already matches, being
 * deleted, or lacking a name.
 */
export function planStatus(input: StatusPlanInput): StatusAction[] {
  if (input.desired === undefined) return [];
  const desired = normalizeAddresses(input.desired);
  const desiredKey = addressesKey(desired);
  const actions: StatusAction[] = [];
  for (const ingress of input.ingresses) {
    const namespace = ingress.metadata?.namespace;
    const name = ingress.metadata?.name;
    if (!namespace || !name || ingress.metadata?.deletionTimestamp) continue;
    const key = `${namespace}/${name}`;
    const current = addressesKey(normalizeAddresses(ingress.status?.loadBalancer?.ingress));
    const resourceVersion = ingress.metadata?.resourceVersion ?? "";
    if (input.owned.has(key)) {
      if (current !== desiredKey) {
        actions.push({ kind: "write", key, namespace, name, resourceVersion, addresses: desired });
      }
    } else if (
      current !== "" && (current === desiredKey || current === input.written?.get(key))
    ) {
      // The Ingress left our class (or never was ours) but carries our addresses.
      actions.push({ kind: "clear", key, namespace, name, resourceVersion, addresses: [] });
    }
  }
  return actions.sort((a, b) => a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
}

/** The requests the status writer makes; a {@linkcode KubeClient} fits. */
export type StatusClient = Pick<KubeClient, "patch">;

/** Input of {@linkcode StatusWriter.sync}: plain data, typically straight from the store. */
export interface StatusSync {
  /** The current Ingresses, including their status. */
  readonly ingresses: Iterable<Ingress>;
  /** `namespace/name` of the Ingresses of our class. */
  readonly owned: ReadonlySet<string>;
  /** The `--publish-service` Service as currently known; `undefined` when it does not exist. */
  readonly publishService?: PublishedService | undefined;
}

/** What one pass did. */
export interface StatusSyncResult {
  /** Statuses set to our addresses. */
  readonly written: number;
  /** Statuses cleared. */
  readonly cleared: number;
  /** Writes that failed (logged; retried later). */
  readonly failed: number;
  /** Writes not made because we were not (or stopped being) the leader. */
  readonly notLeader: number;
}

/** Options of {@linkcode StatusWriter}. */
export interface StatusWriterOptions {
  readonly client: StatusClient;
  /** Asked right before every write. */
  readonly isLeader: () => boolean;
  /** `--publish-status-address`, split on commas; wins over `publishService`. */
  readonly publishStatusAddresses?: readonly string[];
  /** `--publish-service` as `namespace/name` (for logs; the object comes with each sync). */
  readonly publishService?: string;
  /** Syncs within this window are coalesced into one pass; also the least time between passes. Default 200 ms. */
  readonly holdOffMs?: number;
  /** Writes in flight at once. Default 4. */
  readonly concurrency?: number;
  /** First and longest wait before retrying failed writes. Default 1,000 and 30,000 ms. */
  readonly retryMs?: { readonly min: number; readonly max: number };
  /** `fieldManager` of the writes. Default `sluice`. */
  readonly fieldManager?: string;
  /**
   * How long one write may wait for the API's answer before it counts as
   * failed (a connection that died silently would hold it, and every later
   * pass, for good). Default 10,000 ms.
   */
  readonly writeTimeoutMs?: number;
  readonly timers?: Timers;
  /** Monotonic clock in ms. Default `performance.now`. */
  readonly now?: () => number;
  /** Default: the `status` component logger. */
  readonly logger?: Logger;
}

interface Pending {
  promise: Promise<StatusSyncResult>;
  resolve: (result: StatusSyncResult) => void;
  timer: unknown;
  /** Monotonic time before which the pass does not start. */
  dueAt: number;
}

const NOTHING: StatusSyncResult = Object.freeze({
  written: 0,
  cleared: 0,
  failed: 0,
  notLeader: 0,
});

/**
 * Keeps Ingress statuses in line with the published addresses. Feed it with
 * {@linkcode StatusWriter.sync} whenever an Ingress (status changes included),
 * the class selection or the publish Service changes, and call
 * {@linkcode StatusWriter.resync} when leadership is gained.
 */
export class StatusWriter {
  readonly #client: StatusClient;
  readonly #isLeader: () => boolean;
  readonly #addresses: readonly string[] | undefined;
  readonly #publishService: string | undefined;
  readonly #holdOffMs: number;
  readonly #concurrency: number;
  readonly #retryMs: { readonly min: number; readonly max: number };
  readonly #fieldManager: string;
  readonly #writeTimeoutMs: number;
  /** Aborted by close(): writes in flight end at once. */
  readonly #abort = new AbortController();
  readonly #timers: Timers;
  readonly #now: () => number;
  readonly #logger: Logger;

  #latest:
    | { ingresses: Ingress[]; owned: ReadonlySet<string>; service?: PublishedService }
    | undefined;
  /** Per `namespace/name`: what we wrote last and from which resourceVersion. */
  readonly #written = new Map<string, { from: string; addresses: string }>();
  /** Clears done, by the version they were planned from (until the store catches up). */
  readonly #cleared = new Map<string, string>();
  /**
   * Writes the API refused (not a conflict), by Ingress: not tried again for the same
   * version before `until`, however often a sync comes (each rebuild syncs).
   */
  readonly #refused = new Map<
    string,
    { from: string; kind: string; until: number; delay: number }
  >();
  #pending: Pending | undefined;
  #running: Promise<void> | undefined;
  #lastPassAt = -Infinity;
  #retryDelay = 0;
  #missingService = false;
  #closed = false;

  constructor(options: StatusWriterOptions) {
    this.#client = options.client;
    this.#isLeader = options.isLeader;
    this.#addresses = options.publishStatusAddresses;
    this.#publishService = options.publishService;
    this.#holdOffMs = options.holdOffMs ?? 200;
    this.#concurrency = Math.max(1, options.concurrency ?? 4);
    this.#retryMs = options.retryMs ?? { min: 1_000, max: 30_000 };
    this.#fieldManager = options.fieldManager ?? "sluice";
    this.#writeTimeoutMs = options.writeTimeoutMs ?? 10_000;
    this.#timers = options.timers ?? SYSTEM_TIMERS;
    this.#now = options.now ?? (() => performance.now());
    this.#logger = options.logger ?? componentLogger("status");
  }

  /**
   * Takes the current state and schedules a pass (coalesced with other syncs
   * within the hold-off). Resolves with what the pass did; never rejects.
   */
  sync(input: StatusSync): Promise<StatusSyncResult> {
    if (this.#closed) return Promise.resolve(NOTHING);
    this.#latest = {
      ingresses: [...input.ingresses],
      owned: input.owned,
      ...(input.publishService !== undefined && { service: input.publishService }),
    };
    return this.#schedule(this.#holdOffMs);
  }

  /** Runs a pass again over the last input (for example when leadership is gained). */
  resync(): Promise<StatusSyncResult> {
    if (this.#closed || this.#latest === undefined) return Promise.resolve(NOTHING);
    return this.#schedule(this.#holdOffMs);
  }

  /** Stops scheduling and ends the writes in flight. Pending syncs resolve with nothing done. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#abort.abort();
    const pending = this.#pending;
    if (pending !== undefined) {
      if (pending.timer !== undefined) this.#timers.clearTimeout(pending.timer);
      this.#pending = undefined;
      pending.resolve(NOTHING);
    }
    await this.#running;
  }

  #schedule(delayMs: number): Promise<StatusSyncResult> {
    const dueAt = this.#now() + delayMs;
    let pending = this.#pending;
    if (pending === undefined) {
      let resolve!: (result: StatusSyncResult) => void;
      const promise = new Promise<StatusSyncResult>((r) => resolve = r);
      pending = { promise, resolve, timer: undefined, dueAt };
      this.#pending = pending;
    } else if (dueAt < pending.dueAt) {
      // A fresh sync does not wait out a retry's backoff.
      pending.dueAt = dueAt;
      if (pending.timer !== undefined) this.#timers.clearTimeout(pending.timer);
      pending.timer = undefined;
    }
    if (this.#running === undefined && pending.timer === undefined) this.#arm(pending);
    return pending.promise;
  }

  #arm(pending: Pending): void {
    // At most one pass per hold-off: a burst of syncs costs one pass.
    const now = this.#now();
    const wait = Math.max(pending.dueAt - now, this.#holdOffMs - (now - this.#lastPassAt), 0);
    if (pending.timer !== undefined) this.#timers.clearTimeout(pending.timer);
    pending.timer = this.#timers.setTimeout(() => {
      pending.timer = undefined;
      if (this.#pending === pending) this.#pending = undefined;
      // The pass starts after `#running` is set, so a sync it makes itself only queues.
      this.#running = Promise.resolve().then(() => this.#pass()).then(pending.resolve, (error) => {
        this.#logger.error("Cannot update Ingress statuses: {error}", { error: String(error) });
        pending.resolve(NOTHING);
      }).finally(() => {
        this.#running = undefined;
        if (this.#pending !== undefined && !this.#closed) this.#arm(this.#pending);
      });
    }, wait);
  }

  async #pass(): Promise<StatusSyncResult> {
    this.#lastPassAt = this.#now();
    const input = this.#latest;
    if (input === undefined) return NOTHING;
    const present = new Set<string>();
    for (const ingress of input.ingresses) {
      present.add(`${ingress.metadata?.namespace}/${ingress.metadata?.name}`);
    }
    for (const key of this.#written.keys()) if (!present.has(key)) this.#written.delete(key);
    for (const key of this.#cleared.keys()) if (!present.has(key)) this.#cleared.delete(key);
    for (const key of this.#refused.keys()) if (!present.has(key)) this.#refused.delete(key);
    const now = this.#now();
    let waitUntil = Infinity;

    const desired = desiredAddresses({ addresses: this.#addresses, service: input.service });
    this.#reportMissingService(desired === undefined && this.#publishService !== undefined);
    const written = new Map<string, string>();
    for (const [key, entry] of this.#written) written.set(key, entry.addresses);
    const actions = planStatus({ ingresses: input.ingresses, owned: input.owned, desired, written })
      .filter((action) => {
        // The store may not have seen our last write or clear yet: do not repeat it.
        const last = this.#written.get(action.key);
        if (
          action.kind === "write" && last !== undefined &&
          last.from === action.resourceVersion &&
          last.addresses === addressesKey(action.addresses)
        ) return false;
        if (action.kind === "clear" && this.#cleared.get(action.key) === action.resourceVersion) {
          return false;
        }
        // Refused for this version: wait out its own backoff (a pass comes then).
        const refused = this.#refused.get(action.key);
        if (
          refused !== undefined && refused.from === action.resourceVersion &&
          refused.kind === action.kind && now < refused.until - TIMER_SLACK_MS
        ) {
          waitUntil = Math.min(waitUntil, refused.until);
          return false;
        }
        return true;
      });
    if (waitUntil !== Infinity && !this.#closed) void this.#schedule(waitUntil - now);
    if (actions.length === 0) return NOTHING;
    if (!this.#isLeader()) return { ...NOTHING, notLeader: actions.length };

    const result = { written: 0, cleared: 0, failed: 0, notLeader: 0 };
    const queue = [...actions];
    const worker = async () => {
      for (let action = queue.shift(); action !== undefined; action = queue.shift()) {
        if (this.#closed) return;
        // Leadership can end between two writes: ask right before each.
        if (!this.#isLeader()) {
          result.notLeader += 1 + queue.length;
          queue.length = 0;
          return;
        }
        const outcome = await this.#apply(action);
        if (outcome === "written") result.written++;
        else if (outcome === "cleared") result.cleared++;
        else if (outcome === "failed") result.failed++;
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.#concurrency, queue.length) }, worker));
    if (result.failed > 0) this.#retryLater();
    else this.#retryDelay = 0;
    return result;
  }

  async #apply(action: StatusAction): Promise<"written" | "cleared" | "gone" | "failed"> {
    const at = { namespace: action.namespace, name: action.name, subresource: "status" };
    const addresses = action.addresses.map((a) => ({ ...a }));
    // A clear is conditional on the version it was planned from: never wipe a
    // status another controller has just written.
    const body = action.kind === "clear"
      ? { metadata: { resourceVersion: action.resourceVersion }, status: { loadBalancer: null } }
      : { status: { loadBalancer: { ingress: addresses.length > 0 ? addresses : null } } };
    const writing = deadline(this.#writeTimeoutMs, {
      parent: this.#abort.signal,
      timers: this.#timers,
    });
    try {
      const updated = await this.#client.patch<Ingress>(INGRESSES, at, body, {
        type: "merge",
        fieldManager: this.#fieldManager,
        signal: writing.signal,
      });
      this.#refused.delete(action.key);
      if (action.kind === "clear") {
        this.#written.delete(action.key);
        this.#cleared.set(action.key, action.resourceVersion);
        this.#logger.info("Cleared the status of Ingress {namespace}/{name}", {
          namespace: action.namespace,
          name: action.name,
        });
        return "cleared";
      }
      this.#written.set(action.key, {
        from: action.resourceVersion,
        addresses: addressesKey(action.addresses),
      });
      this.#logger.debug("Wrote the status of Ingress {namespace}/{name}: {addresses}", {
        namespace: action.namespace,
        name: action.name,
        addresses: addressesKey(action.addresses),
        resourceVersion: updated.metadata?.resourceVersion,
      });
      return "written";
    } catch (error) {
      if (error instanceof KubeApiError && error.isNotFound) return "gone";
      // Ended by close(): shutting down, not refused.
      if (this.#closed) return "failed";
      const message = errorText(error);
      const conflict = error instanceof KubeApiError && error.isConflict;
      const properties = {
        action: action.kind,
        namespace: action.namespace,
        name: action.name,
        error: message,
      };
      const text = "Cannot {action} the status of Ingress {namespace}/{name}: {error}";
      // A conflict means our copy was stale; the next sync brings the fresh one.
      if (conflict) {
        this.#logger.debug(text, properties);
      } else {
        this.#logger.warn(text, properties);
        const previous = this.#refused.get(action.key);
        const delay = previous === undefined || previous.from !== action.resourceVersion
          ? this.#retryMs.min
          : Math.min(this.#retryMs.max, previous.delay * 2);
        this.#refused.set(action.key, {
          from: action.resourceVersion,
          kind: action.kind,
          until: this.#now() + delay,
          delay,
        });
      }
      return "failed";
    } finally {
      writing.clear();
    }
  }

  #retryLater(): void {
    this.#retryDelay = Math.min(
      this.#retryMs.max,
      this.#retryDelay === 0 ? this.#retryMs.min : this.#retryDelay * 2,
    );
    if (!this.#closed) void this.#schedule(this.#retryDelay);
  }

  #reportMissingService(missing: boolean): void {
    if (missing && !this.#missingService) {
      this.#logger.warn("Cannot publish Ingress status: Service {service} does not exist", {
        service: this.#publishService,
      });
    }
    this.#missingService = missing;
  }
}
