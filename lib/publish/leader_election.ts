/**
 * Leader election on a `coordination.k8s.io/v1` Lease, the way client-go's
 * `leaderelection` package does it: acquire the Lease when it is free or its
 * holder stopped renewing it, renew it every retry period with optimistic
 * concurrency, give it up when renewing fails for longer than the renew
 * deadline, and release it on a clean stop.
 *
 * Expiry is judged by *our* monotonic clock: a Lease held by someone else is
 * expired once its record has not changed for `leaseDurationSeconds` since we
 * first observed it, whatever the timestamps written in it say (clocks of
 * other machines are not trusted). Leadership ends at once, with
 * `onStoppedLeading` called synchronously, when another holder is seen or the
 * renew deadline passes; {@linkcode LeaderElector.isLeader} also checks the
 * deadline on every call, so a caller that asks right before each write never
 * writes as a stale leader. A replica that loses leadership keeps competing.
 *
 * Owns the Lease and nothing else; knows nothing of what the leader does.
 *
 * @module
 */
import { KubeApiError, type KubeClient, type KubeObject } from "../k8s/kube_client.ts";
import { LEASES } from "../k8s/resources.ts";
import { componentLogger, type Logger } from "../log/logging.ts";
import { SYSTEM_TIMERS, type Timers } from "../timers/timers.ts";
import { errorText } from "../log/error_text.ts";

export type { Timers };

/** Immediate re-reads after a write lost to a concurrent one, per attempt. */
const MAX_CONFLICT_RETRIES = 3;

/** The default Lease name (`--election-id`). */
export const DEFAULT_ELECTION_ID = "sluice-leader";

/** `spec` of a `coordination.k8s.io/v1` Lease, as far as leader election uses it. */
export interface LeaseSpec {
  readonly holderIdentity?: string | null;
  readonly leaseDurationSeconds?: number | null;
  /** RFC 3339 with microseconds. */
  readonly acquireTime?: string | null;
  /** RFC 3339 with microseconds. */
  readonly renewTime?: string | null;
  readonly leaseTransitions?: number | null;
  readonly [key: string]: unknown;
}

/** A `coordination.k8s.io/v1` Lease. */
export interface Lease extends KubeObject {
  readonly spec?: LeaseSpec;
}

/** The requests leader election makes; a {@linkcode KubeClient} fits. */
export type LeaseClient = Pick<KubeClient, "get" | "create" | "update">;

/** Options of {@linkcode LeaderElector}. */
export interface LeaderElectorOptions {
  readonly client: LeaseClient;
  /** Namespace of the Lease (the controller's own). */
  readonly namespace: string;
  /** Name of the Lease (`--election-id`). Default {@linkcode DEFAULT_ELECTION_ID}. */
  readonly name?: string;
  /** Who we are; unique per process. Default: {@linkcode leaderIdentity} of `"sluice"`. */
  readonly identity?: string;
  /** How long others wait after the last observed change before taking over. Default 15,000 ms. */
  readonly leaseDurationMs?: number;
  /** How long the leader keeps trying to renew before it gives up leadership. Default 10,000 ms. */
  readonly renewDeadlineMs?: number;
  /** Time between attempts. Default 2,000 ms (jittered up to +20 % while not leading). */
  readonly retryPeriodMs?: number;
  /** Called synchronously when we become the leader. */
  readonly onStartedLeading?: () => void;
  /** Called synchronously when we stop being the leader, before anything else happens. */
  readonly onStoppedLeading?: (reason: string) => void;
  /** Called when a different holder (or none, `""`) is observed. */
  readonly onNewLeader?: (identity: string) => void;
  /** Monotonic clock in ms. Default `performance.now`. */
  readonly now?: () => number;
  /** Wall clock in ms since the epoch, for the times written into the Lease. Default `Date.now`. */
  readonly wallClock?: () => number;
  /** Uniform random number in [0, 1) for jitter. Default `Math.random`. */
  readonly random?: () => number;
  readonly timers?: Timers;
  /** Default: the `leader-election` component logger. */
  readonly logger?: Logger;
}

/** Options of {@linkcode LeaderElector.stop}. */
export interface StopOptions {
  /**
   * Give the Lease up (holder `""`, duration 1 s) so another replica takes over at
   * once, like client-go's `ReleaseOnCancel`. Default `true`; `false` simulates a crash.
   */
  readonly release?: boolean;
}

/**
 * A unique identity for this process: `base` (the pod name or hostname)
 * followed by `_` and 8 random hex digits, as client-go suggests.
 */
export function leaderIdentity(
  base: string,
  options: { randomBytes?: (bytes: Uint8Array) => Uint8Array } = {},
): string {
  const fill = options.randomBytes ?? ((b: Uint8Array) => crypto.getRandomValues(b));
  const suffix = Array.from(fill(new Uint8Array(4)), (b) => b.toString(16).padStart(2, "0"))
    .join("");
  return `${base || "sluice"}_${suffix}`;
}

/** RFC 3339 with exactly six fractional digits, as the API's `MicroTime` requires. */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

/** The fields of a Lease spec that make up the election record, in a stable order for comparison. */
function recordOf(spec: LeaseSpec | undefined): string {
  return JSON.stringify([
    spec?.holderIdentity ?? "",
    spec?.leaseDurationSeconds ?? 0,
    spec?.acquireTime ?? "",
    spec?.renewTime ?? "",
    spec?.leaseTransitions ?? 0,
  ]);
}

type Attempt =
  | { readonly outcome: "held" }
  | { readonly outcome: "other"; readonly holder: string }
  | { readonly outcome: "failed"; readonly error: unknown };

/**
 * Competes for one Lease until stopped. Create it, call
 * {@linkcode LeaderElector.start}, ask {@linkcode LeaderElector.isLeader}
 * right before each write, and {@linkcode LeaderElector.stop} on shutdown.
 */
export class LeaderElector {
  readonly #client: LeaseClient;
  readonly #namespace: string;
  readonly #name: string;
  readonly #identity: string;
  readonly #leaseDurationMs: number;
  readonly #renewDeadlineMs: number;
  readonly #retryPeriodMs: number;
  readonly #callbacks: Pick<
    LeaderElectorOptions,
    "onStartedLeading" | "onStoppedLeading" | "onNewLeader"
  >;
  readonly #now: () => number;
  readonly #wallClock: () => number;
  readonly #random: () => number;
  readonly #timers: Timers;
  readonly #logger: Logger;

  /** The last Lease read or written, for its resourceVersion. */
  #lease: Lease | undefined;
  /** The last election record seen and when (monotonic) it was first seen. */
  #observed: { record: string; holder: string; durationMs: number; at: number } | undefined;
  #leading = false;
  /** Monotonic start time of the last successful acquire or renew. */
  #renewedAt = 0;
  #deadlineTimer: unknown;
  #sleepTimer: unknown;
  #wake: (() => void) | undefined;
  #attempt: AbortController | undefined;
  #running: Promise<void> | undefined;
  #stopping: Promise<void> | undefined;
  #stopped = false;
  #lastFailure = "";

  constructor(options: LeaderElectorOptions) {
    this.#client = options.client;
    this.#namespace = options.namespace;
    this.#name = options.name ?? DEFAULT_ELECTION_ID;
    this.#identity = options.identity ?? leaderIdentity("sluice");
    this.#leaseDurationMs = options.leaseDurationMs ?? 15_000;
    this.#renewDeadlineMs = options.renewDeadlineMs ?? 10_000;
    this.#retryPeriodMs = options.retryPeriodMs ?? 2_000;
    if (!(this.#retryPeriodMs > 0 && this.#renewDeadlineMs > this.#retryPeriodMs)) {
      throw new RangeError(
        `Cannot elect a leader: the renew deadline (${this.#renewDeadlineMs} ms) must exceed the retry period (${this.#retryPeriodMs} ms)`,
      );
    }
    if (!(this.#leaseDurationMs > this.#renewDeadlineMs)) {
      throw new RangeError(
        `Cannot elect a leader: the lease duration (${this.#leaseDurationMs} ms) must exceed the renew deadline (${this.#renewDeadlineMs} ms)`,
      );
    }
    if (this.#identity === "") throw new RangeError("Cannot elect a leader: the identity is empty");
    this.#callbacks = {
      ...(options.onStartedLeading && { onStartedLeading: options.onStartedLeading }),
      ...(options.onStoppedLeading && { onStoppedLeading: options.onStoppedLeading }),
      ...(options.onNewLeader && { onNewLeader: options.onNewLeader }),
    };
    this.#now = options.now ?? (() => performance.now());
    this.#wallClock = options.wallClock ?? Date.now;
    this.#random = options.random ?? Math.random;
    this.#timers = options.timers ?? SYSTEM_TIMERS;
    this.#logger = options.logger ?? componentLogger("leader-election");
  }

  /** Our identity, as written into `spec.holderIdentity`. */
  get identity(): string {
    return this.#identity;
  }

  /** The Lease, `namespace/name`. */
  get lease(): string {
    return `${this.#namespace}/${this.#name}`;
  }

  /** The holder last observed (`""` for none, `undefined` before the first read). */
  get leader(): string | undefined {
    return this.#observed?.holder;
  }

  /**
   * Whether we lead right now. Checks the renew deadline on every call and, if
   * it has passed, ends leadership (calling `onStoppedLeading`) before returning
   * `false`. Ask right before each write.
   */
  isLeader(): boolean {
    if (!this.#leading) return false;
    if (this.#now() - this.#renewedAt >= this.#renewDeadlineMs) {
      this.#loseLeadership(`no renewal within ${this.#renewDeadlineMs} ms`);
      return false;
    }
    return true;
  }

  /** Starts competing for the Lease. Calling it again has no effect. */
  start(): void {
    if (this.#running !== undefined || this.#stopped) return;
    this.#running = this.#loop();
  }

  /**
   * Stops competing: ends leadership at once (calling `onStoppedLeading`),
   * waits for the request in flight, and releases the Lease unless
   * `release` is `false`. Leaves no timer or request behind.
   */
  stop(options: StopOptions = {}): Promise<void> {
    this.#stopping ??= this.#stop(options.release ?? true);
    return this.#stopping;
  }

  async #stop(release: boolean): Promise<void> {
    this.#stopped = true;
    this.#loseLeadership("stopping");
    this.#attempt?.abort();
    this.#wake?.();
    await this.#running;
    // Also when an acquisition landed just as we stopped: release whatever names us.
    if (release) await this.#release();
  }

  async #loop(): Promise<void> {
    while (!this.#stopped) {
      const started = this.#now();
      const attempt = await this.#tryAcquireOrRenew(started);
      if (this.#stopped) break;
      if (attempt.outcome === "held") {
        this.#lastFailure = "";
        this.#renewedAt = started;
        if (!this.#leading) this.#becomeLeader();
        else this.#armDeadline();
      } else if (attempt.outcome === "other") {
        this.#lastFailure = "";
        if (this.#leading) this.#loseLeadership(`the Lease is held by "${attempt.holder}"`);
      } else {
        this.#logFailure(attempt.error);
        if (this.#leading) this.isLeader(); // ends leadership once the deadline has passed
      }
      await this.#sleep(this.#delay(attempt));
    }
  }

  #delay(attempt: Attempt): number {
    if (this.#leading) return this.#retryPeriodMs;
    const jittered = this.#retryPeriodMs * (1 + 0.2 * this.#random());
    if (attempt.outcome === "other" && this.#observed !== undefined) {
      // Try again right when the holder's lease would expire, if that comes sooner.
      const expiresIn = this.#observed.at + this.#observed.durationMs - this.#now();
      return Math.max(0, Math.min(jittered, expiresIn + 1));
    }
    return jittered;
  }

  #sleep(ms: number): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    return new Promise((resolve) => {
      this.#wake = () => {
        if (this.#sleepTimer !== undefined) this.#timers.clearTimeout(this.#sleepTimer);
        this.#sleepTimer = undefined;
        this.#wake = undefined;
        resolve();
      };
      this.#sleepTimer = this.#timers.setTimeout(() => this.#wake?.(), ms);
    });
  }

  /** One round, as client-go's `tryAcquireOrRenew`. */
  async #tryAcquireOrRenew(started: number): Promise<Attempt> {
    const controller = new AbortController();
    this.#attempt = controller;
    // A request that hangs must not outlive the renew deadline.
    const timeout = this.#timers.setTimeout(() => controller.abort(), this.#renewDeadlineMs);
    try {
      return await this.#round(started, controller.signal);
    } catch (error) {
      return { outcome: "failed", error };
    } finally {
      this.#timers.clearTimeout(timeout);
      if (this.#attempt === controller) this.#attempt = undefined;
    }
  }

  async #round(started: number, signal: AbortSignal): Promise<Attempt> {
    const at = { namespace: this.#namespace, name: this.#name };
    // Fast path: the leader renews from the Lease it wrote last; 409 → read it again.
    if (this.#leading && this.#lease !== undefined) {
      try {
        return await this.#write(this.#lease, started, signal);
      } catch (error) {
        if (!(error instanceof KubeApiError && error.isConflict)) throw error;
      }
    }
    // Someone else may write the Lease between our read and our write (a
    // label, an annotation, a competing replica): read it again at once, a
    // few times, as client-go's RetryOnConflict does, rather than lose a
    // whole retry period to each collision.
    for (let conflicts = 0;; conflicts++) {
      let lease: Lease;
      try {
        lease = await this.#client.get<Lease>(LEASES, at, { signal });
      } catch (error) {
        if (!(error instanceof KubeApiError && error.isNotFound)) throw error;
        const created = await this.#client.create<Lease>(LEASES, { namespace: this.#namespace }, {
          apiVersion: "coordination.k8s.io/v1",
          kind: "Lease",
          metadata: { name: this.#name, namespace: this.#namespace },
          spec: this.#spec(undefined, started),
        }, { signal });
        this.#observe(created, this.#now());
        return { outcome: "held" };
      }
      this.#observe(lease, this.#now());
      const observed = this.#observed!;
      if (
        observed.holder !== "" && observed.holder !== this.#identity &&
        this.#now() < observed.at + observed.durationMs
      ) {
        return { outcome: "other", holder: observed.holder };
      }
      try {
        return await this.#write(lease, started, signal);
      } catch (error) {
        const conflict = error instanceof KubeApiError && error.isConflict;
        if (!conflict || conflicts >= MAX_CONFLICT_RETRIES) throw error;
      }
    }
  }

  /** Writes us as the holder into `lease`, with its resourceVersion as precondition. */
  async #write(lease: Lease, started: number, signal: AbortSignal): Promise<Attempt> {
    const written = await this.#client.update<Lease>(
      LEASES,
      { namespace: this.#namespace, name: this.#name },
      { ...lease, spec: this.#spec(lease.spec, started) },
      { signal },
    );
    this.#observe(written, this.#now());
    return { outcome: "held" };
  }

  #spec(old: LeaseSpec | undefined, started: number): LeaseSpec {
    const now = microTime(this.#wallClock() + (started - this.#now()));
    const ours = old?.holderIdentity === this.#identity;
    const transitions = old?.leaseTransitions ?? 0;
    return {
      ...old,
      holderIdentity: this.#identity,
      leaseDurationSeconds: Math.max(1, Math.ceil(this.#leaseDurationMs / 1000)),
      acquireTime: ours ? old?.acquireTime ?? now : now,
      renewTime: now,
      leaseTransitions: ours || old === undefined ? transitions : transitions + 1,
    };
  }

  /** Takes `lease` as the current one; `announce: false` for our own release (logged by it). */
  #observe(lease: Lease, at: number, announce = true): void {
    this.#lease = lease;
    const record = recordOf(lease.spec);
    if (this.#observed?.record === record) return;
    const holder = lease.spec?.holderIdentity ?? "";
    const seconds = lease.spec?.leaseDurationSeconds;
    const durationMs = typeof seconds === "number" && seconds > 0
      ? seconds * 1000
      : this.#leaseDurationMs;
    const previous = this.#observed?.holder;
    this.#observed = { record, holder, durationMs, at };
    if (holder !== previous) {
      // Our own holding is told by "Started leading", our release by "Released": saying here
      // that the Lease "is held by" us (or by nobody, as we release it) would come first.
      if (announce && holder !== this.#identity) {
        this.#logger.info("Lease {lease} is held by {holder}", {
          lease: this.lease,
          holder: holder === "" ? "nobody" : holder,
        });
      }
      this.#call("onNewLeader", () => this.#callbacks.onNewLeader?.(holder));
    }
  }

  #becomeLeader(): void {
    this.#leading = true;
    this.#armDeadline();
    this.#logger.info("Started leading Lease {lease} as {identity}", {
      lease: this.lease,
      identity: this.#identity,
    });
    this.#call("onStartedLeading", () => this.#callbacks.onStartedLeading?.());
  }

  #loseLeadership(reason: string): void {
    if (!this.#leading) return;
    this.#leading = false;
    if (this.#deadlineTimer !== undefined) this.#timers.clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = undefined;
    // A renewal in flight would no longer count; do not let it linger.
    if (reason !== "stopping") this.#attempt?.abort();
    this.#logger.info("Stopped leading Lease {lease}: {reason}", { lease: this.lease, reason });
    this.#call("onStoppedLeading", () => this.#callbacks.onStoppedLeading?.(reason));
  }

  /** Ends leadership when the renew deadline passes, even while a request hangs. */
  #armDeadline(): void {
    if (this.#deadlineTimer !== undefined) this.#timers.clearTimeout(this.#deadlineTimer);
    const remaining = this.#renewedAt + this.#renewDeadlineMs - this.#now();
    this.#deadlineTimer = this.#timers.setTimeout(() => {
      this.#deadlineTimer = undefined;
      this.isLeader();
    }, Math.max(0, remaining));
  }

  /** Gives the Lease up if it still names us; bounded by the renew deadline. */
  async #release(): Promise<void> {
    const controller = new AbortController();
    const timeout = this.#timers.setTimeout(() => controller.abort(), this.#renewDeadlineMs);
    const at = { namespace: this.#namespace, name: this.#name };
    try {
      for (let tries = 0; tries < 2; tries++) {
        const lease = this.#lease;
        if (lease === undefined || lease.spec?.holderIdentity !== this.#identity) return;
        const now = microTime(this.#wallClock());
        const spec = {
          holderIdentity: "",
          leaseDurationSeconds: 1,
          acquireTime: now,
          renewTime: now,
        };
        try {
          const written = await this.#client.update<Lease>(LEASES, at, {
            ...lease,
            spec: { ...lease.spec, ...spec },
          }, { signal: controller.signal });
          this.#observe(written, this.#now(), false);
          this.#logger.info("Released Lease {lease}", { lease: this.lease });
          return;
        } catch (error) {
          // Our last renewal may have landed after all: read it and try once more.
          if (!(error instanceof KubeApiError && error.isConflict) || tries > 0) throw error;
          this.#lease = await this.#client.get<Lease>(LEASES, at, { signal: controller.signal });
        }
      }
    } catch (error) {
      this.#logger.warn("Cannot release Lease {lease}: {error}", {
        lease: this.lease,
        error: errorText(error),
      });
    } finally {
      this.#timers.clearTimeout(timeout);
    }
  }

  #logFailure(error: unknown): void {
    const message = errorText(error);
    const properties = { lease: this.lease, error: message };
    // Losing a create or update race to another replica is how elections work, not a failure.
    if (error instanceof KubeApiError && error.isConflict) {
      this.#logger.debug("Lost a race for Lease {lease}: {error}", properties);
      return;
    }
    // Say it once per distinct failure, not every retry period.
    if (message !== this.#lastFailure) {
      this.#logger.warn("Cannot acquire or renew Lease {lease}: {error}", properties);
    } else this.#logger.debug("Cannot acquire or renew Lease {lease}: {error}", properties);
    this.#lastFailure = message;
  }

  #call(name: string, callback: () => void): void {
    try {
      callback();
    } catch (error) {
      this.#logger.error("Leader election callback {callback} threw: {error}", {
        callback: name,
        error: errorText(error),
      });
    }
  }
}
