/**
 * A reflector keeps one kind of Kubernetes object (in one namespace, or in
 * all) in step with the API server, the way client-go's
 * `tools/cache/reflector.go` does, over raw watch streams:
 *
 * 1. a paginated LIST (`limit`, `continue`; an expired continue token starts
 *    the list over) replaces every object of its scope downstream;
 * 2. a WATCH from the list's `resourceVersion`, with `allowWatchBookmarks`
 *    and a randomised server-side `timeoutSeconds`, delivers each change;
 *    BOOKMARK events move the resourceVersion on;
 * 3. `410 Gone`/`Expired` (as an HTTP status or an ERROR event) → relist;
 *    so does "Too large resource version" (the server's data is older than
 *    ours: etcd was restored); any other failure → reconnect after an
 *    exponential, jittered backoff (about 0.8 s to 30 s, reset after a
 *    healthy watch). Before resuming from the last resourceVersion seen after
 *    a failure, a one-item LIST asks the server whether it has that version
 *    at all (a restored apiserver would otherwise hold the watch open
 *    silently until it reaches the old number, and the copy stays stale);
 *    every LIST request has a deadline, so a connection that went dead
 *    mid-request does not stall the loop for good;
 * 4. a malformed line or object is logged and counted, never silently
 *    dropped, and never ends the loop.
 *
 * Owns the loop, its pacing and its counters. Knows nothing about what the
 * objects mean: it hands {@linkcode ReflectorEvent}s to a callback (the
 * store decides what matters).
 *
 * @module
 */
import type { Logger } from "../log/logging.ts";
import { abortableSleep, Backoff, type BackoffOptions } from "./backoff.ts";
import {
  isTooLargeResourceVersion,
  KubeApiError,
  type KubeClient,
  type KubeObject,
  type Status,
} from "./kube_client.ts";
import type { Resource } from "./resources.ts";
import { errorText } from "../log/error_text.ts";

/** What a reflector needs of a {@linkcode KubeClient}. */
export type ReflectorClient = Pick<KubeClient, "list" | "watch">;

/** What a reflector delivers, in order. */
export type ReflectorEvent<T extends KubeObject = KubeObject> =
  /** A complete LIST: every object of the scope (one namespace, or all when `namespace` is undefined). */
  | { readonly type: "replace"; readonly namespace: string | undefined; readonly items: T[] }
  | { readonly type: "upsert"; readonly object: T }
  | { readonly type: "delete"; readonly object: T };

/** The time and timer effects of a reflector; real ones by default, fakes in tests. */
export interface ReflectorTimers {
  /** Wall-clock time in milliseconds (for `lastSyncTime` and watch durations). */
  now(): number;
  /** Resolves after `ms`, or at once when `signal` aborts; never rejects. */
  sleep(ms: number, signal: AbortSignal): Promise<void>;
}

/** Options of {@linkcode Reflector}. */
export interface ReflectorOptions<T extends KubeObject = KubeObject> {
  readonly client: ReflectorClient;
  readonly resource: Resource;
  /** Watch one namespace; all namespaces when absent (and always for cluster-scoped kinds). */
  readonly namespace?: string | undefined;
  readonly fieldSelector?: string | undefined;
  readonly labelSelector?: string | undefined;
  /** Receives every list and change. Throwing here is logged and answered by a relist. */
  readonly onEvent: (event: ReflectorEvent<T>) => void;
  readonly logger: Logger;
  /** Objects per LIST page. Default 500. */
  readonly pageSize?: number;
  /** Server-side watch timeout, drawn uniformly from `[min, max]` seconds per watch. Default `[300, 600]`. */
  readonly watchTimeoutSeconds?: readonly [number, number];
  /** A watch that lasted this long counts as healthy and resets the backoff. Default 30,000 ms. */
  readonly healthyAfterMs?: number;
  /** A watch the server ends cleanly sooner than this is paced like a failure. Default 1,000 ms. */
  readonly minWatchMs?: number;
  /** Extra time after `timeoutSeconds` before the client gives up on a silent stream. Default 60,000 ms. */
  readonly watchGraceMs?: number;
  /** How long one LIST request may take before it is abandoned and retried after a backoff. Default 60,000 ms. */
  readonly listTimeoutMs?: number;
  readonly backoff?: Omit<BackoffOptions, "random">;
  /** A uniform random number in `[0, 1)` (timeouts, jitter). `Math.random` by default. */
  readonly random?: () => number;
  readonly timers?: ReflectorTimers;
  /**
   * Keep the text of malformed lines out of logs. Default: true for Secrets
   * (a torn line may hold key material), false otherwise.
   */
  readonly redact?: boolean;
  /**
   * The resource may be absent from the API server (a CRD not installed, such
   * as Gateway API's): a LIST answered 404 is then logged once, delivered as
   * an empty list (so the reflector counts as synced and a removed CRD
   * empties the store) and tried again every `absentRetryMs`. Absent: a 404 is
   * a failure like any other.
   */
  readonly optional?: { readonly absentRetryMs: number };
}

/** Counters and state of one reflector, for `/metrics` and `/readyz`. */
export interface ReflectorStatus {
  readonly kind: string;
  /** The namespace watched; undefined for all namespaces. */
  readonly namespace: string | undefined;
  /** True once the first LIST completed. */
  readonly synced: boolean;
  /** Wall-clock milliseconds of the last completed LIST. */
  readonly lastSyncTime: number | undefined;
  /** Wall-clock milliseconds of the last change or bookmark received. */
  readonly lastEventTime: number | undefined;
  /** The resourceVersion the next watch resumes from. */
  readonly resourceVersion: string;
  /** True while a watch request is open. */
  readonly watching: boolean;
  /** Completed LISTs (the first one included). */
  readonly lists: number;
  /** LISTs done again because the resourceVersion or a continue token expired (410). */
  readonly relists: number;
  /** Attempts to resume watching after a failure (not after a clean server timeout). */
  readonly restarts: number;
  /** Watch requests opened. */
  readonly watches: number;
  /** ADDED, MODIFIED and DELETED events delivered. */
  readonly events: number;
  readonly bookmarks: number;
  /** Lines or objects that could not be understood (logged and skipped). */
  readonly malformed: number;
  /** Failed LISTs and watches. */
  readonly errors: number;
  /** The last failure, for humans. */
  readonly lastError: string | undefined;
  /** True while an optional resource is not served by the API server (see `optional`). */
  readonly absent?: boolean;
}

type WatchOutcome =
  | { readonly kind: "ended" | "stopped"; readonly healthy: boolean }
  | { readonly kind: "gone"; readonly healthy: boolean; readonly reason: string }
  | { readonly kind: "failed"; readonly healthy: boolean; readonly error: string };

const REAL_TIMERS: ReflectorTimers = {
  now: () => Date.now(),
  sleep: abortableSleep,
};

/** How many times in a row an expired continue token may restart one LIST before it counts as a failure. */
const MAX_LIST_RESTARTS = 3;

function isGoneStatus(status: Status): boolean {
  return status.code === 410 || status.reason === "Expired" || status.reason === "Gone";
}

/** Whether a failed request means our resourceVersion is no good: too old (410) or too new for the server. */
function needsRelist(error: unknown): boolean {
  return error instanceof KubeApiError && (error.isGone || error.isTooLargeResourceVersion);
}

/**
 * Keeps one kind of object in step with the API server. Call
 * {@linkcode Reflector.start} once and {@linkcode Reflector.stop} to end it;
 * {@linkcode Reflector.synced} resolves after the first complete LIST.
 */
export class Reflector<T extends KubeObject = KubeObject> {
  readonly #client: ReflectorClient;
  readonly #resource: Resource;
  readonly #namespace: string | undefined;
  readonly #fieldSelector: string | undefined;
  readonly #labelSelector: string | undefined;
  readonly #onEvent: (event: ReflectorEvent<T>) => void;
  readonly #logger: Logger;
  readonly #pageSize: number;
  readonly #timeoutRange: readonly [number, number];
  readonly #healthyAfterMs: number;
  readonly #minWatchMs: number;
  readonly #graceMs: number;
  readonly #listTimeoutMs: number;
  readonly #random: () => number;
  readonly #timers: ReflectorTimers;
  readonly #redact: boolean;
  readonly #backoff: Backoff;
  readonly #optional: { readonly absentRetryMs: number } | undefined;
  #absent = false;
  readonly #abort = new AbortController();
  readonly #synced: Promise<void>;
  #resolveSynced!: () => void;
  #loop: Promise<void> | undefined;

  #resourceVersion = "";
  #isSynced = false;
  #watching = false;
  #lastSyncTime: number | undefined;
  #lastEventTime: number | undefined;
  #lists = 0;
  #relists = 0;
  #restarts = 0;
  #watches = 0;
  #events = 0;
  #bookmarks = 0;
  #malformed = 0;
  #errors = 0;
  #lastError: string | undefined;

  constructor(options: ReflectorOptions<T>) {
    this.#client = options.client;
    this.#resource = options.resource;
    this.#namespace = options.resource.namespaced ? options.namespace : undefined;
    this.#fieldSelector = options.fieldSelector;
    this.#labelSelector = options.labelSelector;
    this.#onEvent = options.onEvent;
    this.#pageSize = options.pageSize ?? 500;
    this.#timeoutRange = options.watchTimeoutSeconds ?? [300, 600];
    this.#healthyAfterMs = options.healthyAfterMs ?? 30_000;
    this.#minWatchMs = options.minWatchMs ?? 1_000;
    this.#graceMs = options.watchGraceMs ?? 60_000;
    this.#listTimeoutMs = options.listTimeoutMs ?? 60_000;
    this.#random = options.random ?? Math.random;
    this.#timers = options.timers ?? REAL_TIMERS;
    this.#redact = options.redact ?? options.resource.kind === "Secret";
    this.#backoff = new Backoff({ ...options.backoff, random: this.#random });
    this.#optional = options.optional;
    this.#logger = options.logger.with({
      kind: options.resource.kind,
      scope: this.#namespace ?? "",
    });
    this.#synced = new Promise((resolve) => this.#resolveSynced = resolve);
  }

  /** `Kind` or `Kind in namespace "ns"`, for logs and errors. */
  get description(): string {
    return this.#namespace === undefined
      ? this.#resource.kind
      : `${this.#resource.kind} in namespace "${this.#namespace}"`;
  }

  /** Resolves once the first LIST has been delivered. Stays pending if stopped before. */
  get synced(): Promise<void> {
    return this.#synced;
  }

  /** Counters and state as of now. */
  get status(): ReflectorStatus {
    return {
      kind: this.#resource.kind,
      namespace: this.#namespace,
      synced: this.#isSynced,
      lastSyncTime: this.#lastSyncTime,
      lastEventTime: this.#lastEventTime,
      resourceVersion: this.#resourceVersion,
      watching: this.#watching,
      lists: this.#lists,
      relists: this.#relists,
      restarts: this.#restarts,
      watches: this.#watches,
      events: this.#events,
      bookmarks: this.#bookmarks,
      malformed: this.#malformed,
      errors: this.#errors,
      lastError: this.#lastError,
      ...(this.#optional !== undefined ? { absent: this.#absent } : {}),
    };
  }

  /** Starts the list-and-watch loop (once). */
  start(): void {
    if (this.#loop !== undefined || this.#abort.signal.aborted) return;
    this.#loop = this.#run().catch((error) => {
      // The loop handles every failure itself; reaching here is a bug.
      this.#logger.error("Cannot keep watching {kind}: the loop ended unexpectedly: {error}", {
        error: errorText(error),
      });
    });
  }

  /** Ends the loop: aborts any open request or wait and resolves when nothing is left running. */
  async stop(): Promise<void> {
    this.#abort.abort();
    await this.#loop;
  }

  async #run(): Promise<void> {
    const signal = this.#abort.signal;
    let listed = false;
    /** Set after a failure: ask whether the server still has our resourceVersion before resuming. */
    let verify = false;
    let goneInARow = 0;
    while (!signal.aborted) {
      if (!listed) {
        try {
          await this.#list(signal);
          listed = true;
          verify = false;
          if (this.#absent) {
            this.#absent = false;
            this.#logger.info("{kind} is served by the API server now: watching it", {});
          }
        } catch (error) {
          if (signal.aborted) return;
          let failure = error;
          if (this.#optional !== undefined && error instanceof KubeApiError && error.isNotFound) {
            try {
              this.#markAbsent();
              await this.#timers.sleep(this.#optional.absentRetryMs, signal);
              continue;
            } catch (consumer) {
              // The empty list was not taken: like any LIST whose consumer failed, try again.
              failure = consumer;
            }
          }
          this.#fail(`Cannot list ${this.description}`, failure);
          await this.#timers.sleep(this.#backoff.next(), signal);
          continue;
        }
      }
      if (verify) {
        try {
          await this.#verifyResourceVersion(signal);
          verify = false;
        } catch (error) {
          if (signal.aborted) return;
          if (this.#optional !== undefined && error instanceof KubeApiError && error.isNotFound) {
            listed = false;
            continue;
          }
          if (needsRelist(error)) {
            listed = false;
            this.#relists++;
            this.#logger.warn(
              "Listing {kind} again: the server does not have resourceVersion {resourceVersion} ({reason})",
              { resourceVersion: this.#resourceVersion, reason: errorText(error) },
            );
            continue;
          }
          this.#restarts++;
          this.#fail(`Cannot check the resourceVersion of ${this.description}`, error);
          await this.#timers.sleep(this.#backoff.next(), signal);
          continue;
        }
      }
      const outcome = await this.#watch(signal);
      if (outcome.kind === "stopped" || signal.aborted) return;
      if (outcome.healthy) this.#backoff.reset();
      switch (outcome.kind) {
        case "ended":
          goneInARow = 0;
          // A clean end is the server's timeout: resume at once, unless it
          // came so soon that something is cutting streams short.
          if (!outcome.healthy) await this.#timers.sleep(this.#backoff.next(), signal);
          break;
        case "gone":
          listed = false;
          this.#relists++;
          this.#logger.info(
            "Listing {kind} again: resourceVersion {resourceVersion} has expired ({reason})",
            { resourceVersion: this.#resourceVersion, reason: outcome.reason },
          );
          // Twice in a row without a healthy watch in between: pace it.
          if (++goneInARow > 1 && !outcome.healthy) {
            await this.#timers.sleep(this.#backoff.next(), signal);
          }
          break;
        case "failed":
          goneInARow = 0;
          verify = true;
          this.#restarts++;
          this.#fail(`Cannot watch ${this.description}`, outcome.error);
          await this.#timers.sleep(this.#backoff.next(), signal);
          break;
      }
    }
  }

  /** An optional resource the server does not serve: empty, synced, said once. */
  #markAbsent(): void {
    if (!this.#absent) {
      this.#resourceVersion = "";
      // Delivered first: a consumer that throws leaves it not absent, to be tried again.
      this.#deliver({ type: "replace", namespace: this.#namespace, items: [] });
      this.#absent = true;
      this.#logger.info(
        "{kind} is not served by the API server (its CRD is not installed): going on without it, checking again every {seconds} s",
        { seconds: Math.round(this.#optional!.absentRetryMs / 1000) },
      );
    }
    this.#lastSyncTime = this.#timers.now();
    if (!this.#isSynced) {
      this.#isSynced = true;
      this.#resolveSynced();
    }
  }

  #fail(action: string, error: unknown): void {
    this.#errors++;
    const detail = errorText(error);
    this.#lastError = `${action}: ${detail}`;
    this.#logger.warn("{action}: {error}; retrying after a backoff", { action, error: detail });
  }

  async #list(signal: AbortSignal): Promise<void> {
    const items: T[] = [];
    let token = "";
    let resourceVersion = "";
    let restarts = 0;
    while (true) {
      let page;
      try {
        page = await this.#withDeadline(signal, (request) =>
          this.#client.list<T>(this.#resource, {
            namespace: this.#namespace,
            fieldSelector: this.#fieldSelector,
            labelSelector: this.#labelSelector,
            limit: this.#pageSize,
            continue: token === "" ? undefined : token,
            signal: request,
          }));
      } catch (error) {
        // Kubernetes API concepts, "Retrieving large results sets in chunks":
        // a continue token expires (410) once its resourceVersion is
        // compacted; the client must list again from the start.
        if (
          token !== "" && error instanceof KubeApiError && error.isGone &&
          restarts < MAX_LIST_RESTARTS
        ) {
          restarts++;
          this.#relists++;
          this.#logger.info("Listing {kind} again from the start: the continue token expired", {});
          items.length = 0;
          token = "";
          continue;
        }
        throw error;
      }
      for (const item of page.items) {
        if (this.#validObject(item, "list")) items.push(item);
      }
      resourceVersion = page.resourceVersion;
      token = page.continue;
      if (token === "") break;
    }
    if (signal.aborted) return;
    this.#deliver({ type: "replace", namespace: this.#namespace, items });
    this.#resourceVersion = resourceVersion;
    this.#lists++;
    this.#lastSyncTime = this.#timers.now();
    this.#logger.debug("Listed {count} {kind} at resourceVersion {resourceVersion}", {
      count: items.length,
      resourceVersion,
    });
    if (!this.#isSynced) {
      this.#isSynced = true;
      this.#resolveSynced();
    }
  }

  /**
   * Asks for one object at our resourceVersion or newer: resolves when the
   * server has it; rejects with "Too large resource version" when its data
   * is older than our copy (etcd restored), after waiting a few seconds.
   */
  async #verifyResourceVersion(signal: AbortSignal): Promise<void> {
    if (this.#resourceVersion === "") return;
    await this.#withDeadline(signal, (request) =>
      this.#client.list<T>(this.#resource, {
        namespace: this.#namespace,
        fieldSelector: this.#fieldSelector,
        labelSelector: this.#labelSelector,
        limit: 1,
        resourceVersion: this.#resourceVersion,
        resourceVersionMatch: "NotOlderThan",
        signal: request,
      }));
  }

  /** Runs one request with the LIST deadline as well as `signal`. */
  async #withDeadline<R>(
    signal: AbortSignal,
    send: (request: AbortSignal) => Promise<R>,
  ): Promise<R> {
    const request = this.#request(signal, this.#listTimeoutMs);
    try {
      return await send(request.signal);
    } catch (error) {
      if (request.expired && !signal.aborted) {
        throw new Error(`no answer within ${this.#listTimeoutMs} ms`, { cause: error });
      }
      throw error;
    } finally {
      await request.end();
    }
  }

  /**
   * A request's signal: aborted by `signal`, or once `ms` have passed (then
   * `expired` is true). `end()` aborts it and clears the timer.
   */
  #request(signal: AbortSignal, ms: number) {
    const request = new AbortController();
    const timer = new AbortController();
    const cancel = () => request.abort();
    // Aborted already (stop() came while the request before this one was settling): an abort
    // listener added now would never fire, and a watch would run to the server's timeout.
    if (signal.aborted) request.abort();
    else signal.addEventListener("abort", cancel, { once: true });
    let expired = false;
    const elapsed = this.#timers.sleep(ms, timer.signal).then(() => {
      if (timer.signal.aborted) return;
      expired = true;
      request.abort();
    });
    return {
      signal: request.signal,
      get expired() {
        return expired;
      },
      async end() {
        signal.removeEventListener("abort", cancel);
        timer.abort();
        request.abort();
        await elapsed;
      },
    };
  }

  /** Hands an event downstream; a throwing consumer leaves the copy in doubt, so that is a relist. */
  #deliver(event: ReflectorEvent<T>): void {
    try {
      this.#onEvent(event);
    } catch (error) {
      throw new ConsumerError(error);
    }
  }

  async #watch(signal: AbortSignal): Promise<WatchOutcome> {
    const started = this.#timers.now();
    const [min, max] = this.#timeoutRange;
    const timeoutSeconds = Math.round(min + (max - min) * this.#random());
    // Our own deadline, past the server's: a half-open connection never ends by itself.
    const request = this.#request(signal, timeoutSeconds * 1000 + this.#graceMs);
    const healthy = () => this.#timers.now() - started >= this.#healthyAfterMs;
    let sawEvent = false;
    this.#watches++;
    this.#watching = true;
    try {
      const stream = this.#client.watch<T>(this.#resource, {
        namespace: this.#namespace,
        fieldSelector: this.#fieldSelector,
        labelSelector: this.#labelSelector,
        resourceVersion: this.#resourceVersion,
        allowWatchBookmarks: true,
        timeoutSeconds,
        signal: request.signal,
      });
      for await (const item of stream) {
        switch (item.type) {
          case "ADDED":
          case "MODIFIED":
          case "DELETED": {
            if (!this.#validObject(item.object, "watch")) break;
            this.#deliver(
              item.type === "DELETED"
                ? { type: "delete", object: item.object }
                : { type: "upsert", object: item.object },
            );
            this.#events++;
            sawEvent = true;
            this.#lastEventTime = this.#timers.now();
            const rv = item.object.metadata?.resourceVersion;
            if (typeof rv === "string" && rv !== "") this.#resourceVersion = rv;
            break;
          }
          case "BOOKMARK": {
            const rv = item.object.metadata?.resourceVersion;
            if (typeof rv === "string" && rv !== "") {
              this.#resourceVersion = rv;
              this.#bookmarks++;
              sawEvent = true;
              this.#lastEventTime = this.#timers.now();
            } else {
              this.#countMalformed("a BOOKMARK without a resourceVersion", undefined);
            }
            break;
          }
          case "ERROR":
            if (isGoneStatus(item.object) || isTooLargeResourceVersion(item.object)) {
              return {
                kind: "gone",
                healthy: healthy(),
                reason: item.object.message ?? "410",
              };
            }
            return {
              kind: "failed",
              healthy: healthy(),
              error: `the server sent an ERROR event: ${
                item.object.message ?? `code ${item.object.code ?? "unknown"}`
              }`,
            };
          case "MALFORMED":
            this.#countMalformed(item.error, item.line);
            break;
        }
      }
      if (request.expired) {
        return { kind: "failed", healthy: healthy(), error: "the stream outlived its deadline" };
      }
      // A clean end is healthy when it looks like the server's own timeout:
      // not instant, and after news or at least half the time asked for.
      const lasted = this.#timers.now() - started;
      const onSchedule = lasted >= Math.min(this.#healthyAfterMs, timeoutSeconds * 500);
      return {
        kind: "ended",
        healthy: lasted >= this.#minWatchMs && (sawEvent || onSchedule),
      };
    } catch (error) {
      if (signal.aborted) return { kind: "stopped", healthy: false };
      if (error instanceof ConsumerError) {
        this.#logger.error("Cannot apply a change of {kind}: {error}; listing again", {
          error: errorText(error.cause),
        });
        return { kind: "gone", healthy: false, reason: "the consumer failed" };
      }
      if (needsRelist(error)) {
        return { kind: "gone", healthy: false, reason: errorText(error) };
      }
      const detail = request.expired ? "the stream outlived its deadline" : errorText(error);
      return { kind: "failed", healthy: healthy(), error: detail };
    } finally {
      this.#watching = false;
      await request.end();
    }
  }

  /** Checks that an object can be keyed; logs and counts it otherwise. */
  #validObject(object: T, where: "list" | "watch"): boolean {
    const metadata = object?.metadata;
    const name = metadata?.name;
    const namespace = metadata?.namespace;
    let problem: string | undefined;
    if (typeof name !== "string" || name === "") problem = "metadata.name is missing";
    else if (this.#resource.namespaced && (typeof namespace !== "string" || namespace === "")) {
      problem = "metadata.namespace is missing";
    } else if (where === "watch" && typeof metadata?.resourceVersion !== "string") {
      problem = "metadata.resourceVersion is missing";
    }
    if (problem === undefined) return true;
    this.#malformed++;
    this.#logger.warn("Cannot use a {kind} from the {where}: {problem}; skipped", {
      where,
      problem,
      namespace: typeof namespace === "string" ? namespace : "",
      name: typeof name === "string" ? name : "",
    });
    return false;
  }

  #countMalformed(error: string, line: string | undefined): void {
    this.#malformed++;
    const properties: Record<string, unknown> = { error: this.#redact ? "(redacted)" : error };
    if (line !== undefined) {
      properties.line = this.#redact ? `(${line.length} characters, redacted)` : line;
    }
    this.#logger.warn("Cannot read a watch event of {kind}: {error}; skipped", properties);
  }
}

/** A consumer of reflector events threw; carried out of the stream loop to force a relist. */
class ConsumerError extends Error {
  constructor(cause: unknown) {
    super(`The consumer of reflector events failed: ${errorText(cause)}`, { cause });
    this.name = "ConsumerError";
  }
}
