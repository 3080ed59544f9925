/**
 * Kubernetes Events for the issues the routing model reports: one Warning
 * Event (core v1, reason {@linkcode ISSUE_REASON}) on the object an issue
 * names, once per issue — the same object, field and message — however many
 * rebuilds report it. An issue that disappears and comes back is reported
 * again. Issues that name no Kubernetes object (`kind: "Option"`, a command
 * line option) are left to the logs.
 *
 * Only the leader records; a replica that becomes leader reports the issues
 * still present that it has not reported itself (the previous leader may
 * have, so an issue can be reported twice around a failover). Memory is
 * bounded by the issues currently present, capped at `maxTracked`.
 * Failures are logged and retried on a later call, never thrown.
 *
 * One reason for all issues keeps it simple: the message says what is wrong
 * and the field where. Knows nothing of how issues are found.
 *
 * @module
 */
import type { KubeClient } from "../k8s/kube_client.ts";
import { EVENTS } from "../k8s/resources.ts";
import { componentLogger, type Logger } from "../log/logging.ts";
import type { Issue } from "../translate/issues.ts";
import { errorText } from "../log/error_text.ts";
import { deadline } from "../timers/timers.ts";

/** The `reason` of every Event Sluice records for an issue. */
export const ISSUE_REASON = "RoutingIssue";
/** `source.component` of our Events. */
export const EVENT_SOURCE_COMPONENT = "sluice";
/** `reportingComponent` (the `reportingController` of events.k8s.io) of our Events. */
export const EVENT_REPORTING_CONTROLLER = "sluice.dev/ingress-controller";

/** `apiVersion` of the kinds issues name; other kinds get no Event. */
const API_VERSIONS: Readonly<Record<string, string>> = {
  Ingress: "networking.k8s.io/v1",
  IngressClass: "networking.k8s.io/v1",
  Service: "v1",
  Secret: "v1",
  EndpointSlice: "discovery.k8s.io/v1",
  GatewayClass: "gateway.networking.k8s.io/v1",
  Gateway: "gateway.networking.k8s.io/v1",
  HTTPRoute: "gateway.networking.k8s.io/v1",
  ReferenceGrant: "gateway.networking.k8s.io/v1",
};

/** What is known of the object an issue names, to fill `involvedObject`. */
export interface ObjectIdentity {
  readonly uid?: string | undefined;
  readonly resourceVersion?: string | undefined;
}

/** Finds the current uid and resourceVersion of an object, if it exists (e.g. in the store). */
export type LookupObject = (
  ref: { readonly kind: string; readonly namespace: string; readonly name: string },
) => ObjectIdentity | undefined;

/** A core v1 Event, as sent. */
export interface CoreEvent {
  readonly apiVersion: "v1";
  readonly kind: "Event";
  readonly metadata: { readonly name: string; readonly namespace: string };
  readonly involvedObject: {
    readonly apiVersion: string;
    readonly kind: string;
    readonly namespace?: string;
    readonly name: string;
    readonly uid?: string;
    readonly resourceVersion?: string;
  };
  readonly reason: string;
  readonly message: string;
  readonly type: "Warning";
  readonly source: { readonly component: string };
  readonly reportingComponent: string;
  readonly reportingInstance?: string;
  readonly firstTimestamp: string;
  readonly lastTimestamp: string;
  readonly count: 1;
}

/** Identifies an issue: object, field and message. */
export function issueKey(issue: Issue): string {
  return JSON.stringify([issue.kind, issue.namespace, issue.name, issue.field, issue.message]);
}

/** Whether an Event can be recorded for `issue`: it names an object of a known kind. */
export function isRecordable(issue: Issue): boolean {
  return API_VERSIONS[issue.kind] !== undefined && issue.name !== "";
}

/** Events one issue may get in a burst, and how often it earns one more (client-go: 25, 5 min). */
const EVENT_BURST = 25;
const EVENT_REFILL_MS = 5 * 60_000;
/** Backoff while the Events API refuses creates. */
const REFUSED_MIN_MS = 1_000;
const REFUSED_MAX_MS = 60_000;

/** The longest message the API accepts for an Event note. */
const MESSAGE_LIMIT = 1024;

/**
 * The Event for one issue; `undefined` when the issue names no object.
 * The name is `<object name>.<suffix>` like client-go's; cluster-scoped objects'
 * Events go to namespace `default`, as the API requires.
 */
export function eventForIssue(
  issue: Issue,
  options: {
    readonly suffix: string;
    /** Wall-clock time, ms since the epoch. */
    readonly now: number;
    readonly identity?: ObjectIdentity | undefined;
    readonly reportingInstance?: string | undefined;
  },
): CoreEvent | undefined {
  const apiVersion = API_VERSIONS[issue.kind];
  if (apiVersion === undefined || issue.name === "") return undefined;
  const text = issue.field !== "" ? `${issue.field}: ${issue.message}` : issue.message;
  let cut = MESSAGE_LIMIT - 1;
  // Never between the two halves of a surrogate pair (a lone one would be stored as U+FFFD).
  if (text.length > MESSAGE_LIMIT && /[\uD800-\uDBFF]/.test(text[cut - 1]!)) cut--;
  const message = text.length > MESSAGE_LIMIT ? `${text.slice(0, cut)}…` : text;
  const timestamp = new Date(Math.floor(options.now / 1000) * 1000).toISOString().replace(
    ".000Z",
    "Z",
  );
  const name = `${issue.name.slice(0, 253 - options.suffix.length - 1)}.${options.suffix}`;
  return {
    apiVersion: "v1",
    kind: "Event",
    metadata: { name, namespace: issue.namespace !== "" ? issue.namespace : "default" },
    involvedObject: {
      apiVersion,
      kind: issue.kind,
      ...(issue.namespace !== "" && { namespace: issue.namespace }),
      name: issue.name,
      ...(options.identity?.uid && { uid: options.identity.uid }),
      ...(options.identity?.resourceVersion &&
        { resourceVersion: options.identity.resourceVersion }),
    },
    reason: ISSUE_REASON,
    message,
    type: "Warning",
    source: { component: EVENT_SOURCE_COMPONENT },
    reportingComponent: EVENT_REPORTING_CONTROLLER,
    ...(options.reportingInstance && {
      reportingInstance: options.reportingInstance.slice(0, 128),
    }),
    firstTimestamp: timestamp,
    lastTimestamp: timestamp,
    count: 1,
  };
}

/** The requests the recorder makes; a {@linkcode KubeClient} fits. */
export type EventClient = Pick<KubeClient, "create">;

/** Options of {@linkcode EventRecorder}. */
export interface EventRecorderOptions {
  readonly client: EventClient;
  /** Asked right before every Event is created. */
  readonly isLeader: () => boolean;
  /** uid and resourceVersion of the object an issue names, if known. */
  readonly lookup?: LookupObject;
  /** `reportingInstance` of our Events, e.g. the leader-election identity. */
  readonly reportingInstance?: string;
  /** Most issues remembered at once; issues beyond it (in sorted order) get no Event. Default 10,000. */
  readonly maxTracked?: number;
  /** Events being created at once. Default 4. */
  readonly concurrency?: number;
  /** Wall clock, ms since the epoch. Default `Date.now`. */
  readonly wallClock?: () => number;
  /** 16 random hex digits for Event names. Default from `crypto.getRandomValues`. */
  readonly randomSuffix?: () => string;
  /** How long one create may wait for the API's answer before it counts as failed. Default 10,000 ms. */
  readonly writeTimeoutMs?: number;
  /** Default: the `events` component logger. */
  readonly logger?: Logger;
}

/** What one {@linkcode EventRecorder.record} call did. */
export interface RecordResult {
  readonly created: number;
  readonly failed: number;
}

function randomHex(): string {
  return Array.from(
    crypto.getRandomValues(new Uint8Array(8)),
    (b) => b.toString(16).padStart(2, "0"),
  ).join("");
}

/**
 * Turns the issues of each rebuild into Events, once per issue. Call
 * {@linkcode EventRecorder.record} with the complete list of current issues
 * after every rebuild (and when leadership is gained).
 */
export class EventRecorder {
  readonly #client: EventClient;
  readonly #isLeader: () => boolean;
  readonly #lookup: LookupObject | undefined;
  readonly #reportingInstance: string | undefined;
  readonly #maxTracked: number;
  readonly #concurrency: number;
  readonly #wallClock: () => number;
  readonly #randomSuffix: () => string;
  readonly #writeTimeoutMs: number;
  /** Aborted by close(): creates in flight end at once. */
  readonly #abort = new AbortController();
  readonly #logger: Logger;

  /** Current issues, by {@linkcode issueKey}: whether an Event was created (or is being created). */
  #current = new Map<string, boolean>();
  readonly #inFlight = new Set<Promise<unknown>>();
  #lastIssues: readonly Issue[] = [];
  #overflowReported = false;
  #closed = false;
  /**
   * Events left per issue key, as a token bucket (client-go's recorder does alike per
   * object): an issue that flaps every rebuild gets `EVENT_BURST` Events, then one per
   * `EVENT_REFILL_MS`.
   */
  readonly #budget = new Map<string, { tokens: number; at: number }>();
  /** After the Events API refused, no creation before this (wall clock); doubling delay. */
  #refusedUntil = 0;
  #refusedDelay = 0;

  constructor(options: EventRecorderOptions) {
    this.#client = options.client;
    this.#isLeader = options.isLeader;
    this.#lookup = options.lookup;
    this.#reportingInstance = options.reportingInstance;
    this.#maxTracked = options.maxTracked ?? 10_000;
    this.#concurrency = Math.max(1, options.concurrency ?? 4);
    this.#wallClock = options.wallClock ?? Date.now;
    this.#randomSuffix = options.randomSuffix ?? randomHex;
    this.#writeTimeoutMs = options.writeTimeoutMs ?? 10_000;
    this.#logger = options.logger ?? componentLogger("events");
  }

  /** Issues currently remembered (for tests and metrics). */
  get tracked(): number {
    return this.#current.size;
  }

  /**
   * Takes the complete list of current issues: forgets those gone, and, when
   * leading, creates an Event for each not reported yet. Resolves when those
   * Events are written; never rejects.
   */
  record(issues: readonly Issue[]): Promise<RecordResult> {
    if (this.#closed) return Promise.resolve({ created: 0, failed: 0 });
    this.#lastIssues = issues;
    const byKey = new Map<string, Issue>();
    for (const issue of issues) {
      if (isRecordable(issue)) byKey.set(issueKey(issue), issue);
    }
    let keys = [...byKey.keys()];
    if (keys.length > this.#maxTracked) {
      keys = keys.sort().slice(0, this.#maxTracked);
      if (!this.#overflowReported) {
        this.#logger.warn("Cannot record Events for {count} issues: at most {max} are tracked", {
          count: byKey.size - this.#maxTracked,
          max: this.#maxTracked,
        });
      }
      this.#overflowReported = true;
    } else this.#overflowReported = false;
    const next = new Map<string, boolean>();
    for (const key of keys) next.set(key, this.#current.get(key) ?? false);
    this.#current = next;

    const now = this.#wallClock();
    for (const [key, bucket] of this.#budget) {
      if (!next.has(key) && this.#refill(bucket, now).tokens >= EVENT_BURST) {
        this.#budget.delete(key);
      }
    }
    if (!this.#isLeader()) return Promise.resolve({ created: 0, failed: 0 });
    // The API refused lately: leave the issues unreported until the backoff has passed.
    if (now < this.#refusedUntil) return Promise.resolve({ created: 0, failed: 0 });
    const todo: [string, Issue][] = [];
    for (const [key, reported] of next) {
      if (!reported) {
        next.set(key, true); // claimed now, so an overlapping call does not report it too
        let bucket = this.#budget.get(key);
        if (bucket === undefined) {
          bucket = { tokens: EVENT_BURST, at: now };
          this.#budget.set(key, bucket);
        }
        if (this.#refill(bucket, now).tokens < 1) continue; // flapping: skipped this time
        bucket.tokens--;
        todo.push([key, byKey.get(key)!]);
      }
    }
    if (todo.length === 0) return Promise.resolve({ created: 0, failed: 0 });
    const work = this.#create(todo);
    this.#inFlight.add(work);
    return work.finally(() => this.#inFlight.delete(work));
  }

  #refill(bucket: { tokens: number; at: number }, now: number): { tokens: number; at: number } {
    const gained = Math.floor((now - bucket.at) / EVENT_REFILL_MS);
    if (gained > 0) {
      bucket.tokens = Math.min(EVENT_BURST, bucket.tokens + gained);
      bucket.at += gained * EVENT_REFILL_MS;
    }
    return bucket;
  }

  /** Runs {@linkcode EventRecorder.record} again with the last issues (for example when leadership is gained). */
  resync(): Promise<RecordResult> {
    return this.record(this.#lastIssues);
  }

  /** Stops recording and ends the creates in flight. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#abort.abort();
    await Promise.all(this.#inFlight);
  }

  async #create(todo: [string, Issue][]): Promise<RecordResult> {
    const result = { created: 0, failed: 0 };
    const worker = async () => {
      for (let item = todo.shift(); item !== undefined; item = todo.shift()) {
        const [key, issue] = item;
        if (this.#closed || !this.#isLeader()) {
          // Not reported after all: the next leader-time call picks it up.
          for (const [k] of [item, ...todo]) {
            if (this.#current.has(k)) this.#current.set(k, false);
          }
          todo.length = 0;
          return;
        }
        if (this.#wallClock() < this.#refusedUntil) {
          // Refused meanwhile by another create: the rest waits for the backoff too.
          for (const [k] of [item, ...todo]) {
            if (this.#current.has(k)) this.#current.set(k, false);
          }
          todo.length = 0;
          return;
        }
        const ok = await this.#createOne(issue);
        if (ok) result.created++;
        else {
          result.failed++;
          if (this.#current.has(key)) this.#current.set(key, false);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.#concurrency, todo.length) }, worker));
    return result;
  }

  async #createOne(issue: Issue): Promise<boolean> {
    let identity: ObjectIdentity | undefined;
    try {
      identity = this.#lookup?.({ kind: issue.kind, namespace: issue.namespace, name: issue.name });
    } catch {
      identity = undefined;
    }
    const event = eventForIssue(issue, {
      suffix: this.#randomSuffix(),
      now: this.#wallClock(),
      identity,
      reportingInstance: this.#reportingInstance,
    });
    if (event === undefined) return true;
    const creating = deadline(this.#writeTimeoutMs, { parent: this.#abort.signal });
    try {
      await this.#client.create(EVENTS, { namespace: event.metadata.namespace }, event, {
        signal: creating.signal,
      });
      if (this.#refusedDelay > 0) {
        this.#logger.info("Recording Events again", {});
        this.#refusedDelay = 0;
      }
      return true;
    } catch (error) {
      // Ended by close(): shutting down, not refused.
      if (this.#closed) return false;
      const properties = {
        kind: issue.kind,
        namespace: issue.namespace,
        name: issue.name,
        error: errorText(error),
      };
      const text = "Cannot record an Event for {kind} {namespace}/{name}: {error}";
      // One warning per outage (a 403 is usually missing RBAC); then back off, doubling.
      if (this.#refusedDelay === 0) {
        this.#logger.warn(`${text}; holding Events back while the API refuses them`, properties);
      } else {
        this.#logger.debug(text, properties);
      }
      this.#refusedDelay = Math.min(
        REFUSED_MAX_MS,
        Math.max(REFUSED_MIN_MS, this.#refusedDelay * 2),
      );
      this.#refusedUntil = this.#wallClock() + this.#refusedDelay;
      return false;
    } finally {
      creating.clear();
    }
  }
}
