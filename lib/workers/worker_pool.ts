/**
 * The control plane's side of multi-core serving (`--workers N`): starts N
 * Web Workers that each serve the same ports (`reusePort`; the kernel spreads
 * connections between them), posts snapshot inputs to all of them (the
 * newest only, when a worker is still busy with an earlier one), and stops
 * them.
 *
 * All N servers are workers: the main thread stays the control plane
 * (Kubernetes watches, translation, status), so a large relist never stalls
 * request serving. The first worker starts alone, so that a port of 0 (tests)
 * becomes a real port that the others then share.
 *
 * Knows the protocol (`protocol.ts`); nothing of routing or proxying.
 *
 * @module
 */
import { componentLogger, type Logger } from "../log/logging.ts";
import { errorText } from "../log/error_text.ts";
import {
  type FromWorker,
  isFromWorker,
  type ToWorker,
  type WorkerConfig,
  type WorkerHeap,
} from "./protocol.ts";

/** Options of {@linkcode startWorkerPool}. */
export interface WorkerPoolOptions<D> {
  /** How many workers serve: a whole number, at least 1. */
  readonly count: number;
  /** The worker entry module, which calls `runWorker()`. */
  readonly module: URL;
  readonly config: WorkerConfig;
  /** The first snapshot input; workers serve only once they have one. */
  readonly snapshot: { readonly version: number; readonly data: D };
  /** How long a worker may take to start listening. Default 30,000 ms. */
  readonly startTimeoutMs?: number;
  /** Default: the `workers` component logger. */
  readonly logger?: Logger;
  /**
   * Every this many ms each worker is pinged; one that has answered nothing
   * to three pings in a row (hung, or gone without an error event) is
   * terminated and counted lost. Counting pings, not time, keeps a stalled
   * main thread from losing healthy workers. Default 5,000; 0 turns it off.
   */
  readonly heartbeatMs?: number;
  /**
   * A worker that has not answered a posted snapshot for this long (counted
   * in heartbeats, like pings) while still answering pings (stuck waiting
   * on something) is lost: it would serve stale routes for good. Default
   * 60,000 ms.
   */
  readonly applyTimeoutMs?: number;
}

/** What {@linkcode WorkerPool.publish} observed. */
export interface PublishResult {
  /** Workers that kept their previous snapshot, with the reason. */
  readonly rejected: readonly { readonly worker: number; readonly message: string }[];
}

/** What {@linkcode WorkerPool.shutdown} observed. */
export interface PoolShutdownResult {
  /** Every worker closed all its connections before the deadline. */
  readonly graceful: boolean;
  /** Connections still finishing a request at the deadline, all workers. */
  readonly openConnections: number;
}

interface Pending {
  readonly version: number;
  readonly waiting: Set<number>;
  readonly rejected: { worker: number; message: string }[];
  readonly resolve: (result: PublishResult) => void;
}

interface Member {
  readonly id: number;
  readonly worker: Worker;
  alive: boolean;
  stopped: PromiseWithResolvers<PoolShutdownResult>;
  /** Pings sent since its last message. */
  unanswered: number;
  /** The snapshot version posted to it and not answered yet. */
  posted: number | undefined;
  /** Heartbeats since `posted` was posted. */
  postedBeats: number;
}

/** Starts `count` serving workers and resolves once all of them listen. */
export async function startWorkerPool<D>(options: WorkerPoolOptions<D>): Promise<WorkerPool<D>> {
  if (!Number.isInteger(options.count) || options.count < 1) {
    throw new RangeError(
      `Cannot start workers: count "${options.count}" is not a whole number from 1`,
    );
  }
  const pool = new WorkerPool<D>(options);
  try {
    await pool.start();
  } catch (error) {
    pool.terminate();
    throw error;
  }
  return pool;
}

/** N serving workers sharing the same ports. Create with {@linkcode startWorkerPool}. */
export class WorkerPool<D> {
  #options: WorkerPoolOptions<D>;
  #logger: Logger;
  #members: Member[] = [];
  #latest: { version: number; data: D };
  #pending = new Set<Pending>();
  #listening = new Map<number, PromiseWithResolvers<FromWorker & { type: "listening" }>>();
  #ports: { httpPort: number | null; httpsPort: number | null } = {
    httpPort: null,
    httpsPort: null,
  };
  #shutdown: Promise<PoolShutdownResult> | undefined;
  #collectId = 0;
  #heartbeat: ReturnType<typeof setInterval> | undefined;
  #collecting = new Map<number, { waiting: Set<number>; results: unknown[]; done: () => void }>();

  /** Use {@linkcode startWorkerPool}. */
  constructor(options: WorkerPoolOptions<D>) {
    this.#options = options;
    this.#logger = options.logger ?? componentLogger("workers");
    this.#latest = options.snapshot;
  }

  /** The HTTP port all workers serve, or `null`. */
  get httpPort(): number | null {
    return this.#ports.httpPort;
  }

  /** The HTTPS port all workers serve, or `null`. */
  get httpsPort(): number | null {
    return this.#ports.httpsPort;
  }

  /** Workers still running. */
  get size(): number {
    return this.#members.filter((m) => m.alive).length;
  }

  /** How many workers were started (`count`). */
  get count(): number {
    return this.#options.count;
  }

  /** @internal Starts the first worker, then the others on the ports it bound. */
  async start(): Promise<void> {
    const first = await this.#spawn(0, this.#options.config);
    this.#ports = { httpPort: first.httpPort, httpsPort: first.httpsPort };
    const shared: WorkerConfig = { ...this.#options.config, ...this.#ports };
    const rest = [];
    for (let id = 1; id < this.#options.count; id++) rest.push(this.#spawn(id, shared));
    await Promise.all(rest);
    const heartbeatMs = this.#options.heartbeatMs ?? 5_000;
    if (heartbeatMs > 0) {
      this.#heartbeat = setInterval(() => this.#beat(heartbeatMs), heartbeatMs);
      Deno.unrefTimer(this.#heartbeat);
    }
  }

  /**
   * Loses workers that answered none of the last three pings, or no posted
   * snapshot within the apply timeout, and pings the others.
   */
  #beat(heartbeatMs: number): void {
    const applyTimeoutMs = this.#options.applyTimeoutMs ?? 60_000;
    for (const member of this.#members) {
      if (!member.alive) continue;
      if (member.unanswered >= 3) {
        this.#lose(member, `no answer to 3 pings, ${heartbeatMs} ms apart`);
        continue;
      }
      if (member.posted !== undefined && ++member.postedBeats * heartbeatMs > applyTimeoutMs) {
        this.#lose(
          member,
          `snapshot ${member.posted} not applied within ${applyTimeoutMs} ms, though pings were answered`,
        );
        continue;
      }
      member.unanswered++;
      member.worker.postMessage({ type: "ping" } satisfies ToWorker<D>);
    }
  }

  /**
   * Posts a snapshot input to every worker; resolves once each has applied
   * it or a newer one (new requests and TLS handshakes see it), or rejected
   * it. Rejects at once when `version` is not above the last one published.
   *
   * Coalesced: a worker has at most one snapshot posted and unanswered; what
   * is published meanwhile waits, and only the newest is posted when it
   * answers (a burst neither queues copies in the workers nor compiles each
   * one). A worker that rejects the newest is counted as rejecting every
   * older one it was still waiting for, since it kept an even older one. A
   * snapshot that cannot be posted (structured clone) counts as rejected.
   */
  publish(version: number, data: D): Promise<PublishResult> {
    // A worker ignores a version it already has (or an older one) yet answers `applied`.
    if (!(version > this.#latest.version)) {
      return Promise.reject(
        new RangeError(
          `Cannot publish snapshot "${version}": not newer than snapshot "${this.#latest.version}"`,
        ),
      );
    }
    this.#latest = { version, data };
    const alive = this.#members.filter((m) => m.alive);
    const { promise, resolve } = Promise.withResolvers<PublishResult>();
    const pending: Pending = {
      version,
      waiting: new Set(alive.map((m) => m.id)),
      rejected: [],
      resolve,
    };
    this.#pending.add(pending);
    for (const member of alive) this.#post(member);
    this.#settle(pending);
    return promise;
  }

  /**
   * Asks every live worker for its statistics (see `WorkerRuntimeOptions.collect`);
   * resolves with the answers that arrived within `timeoutMs`.
   */
  collect(options: { readonly timeoutMs?: number } = {}): Promise<unknown[]> {
    return this.#ask("collect", options.timeoutMs);
  }

  /**
   * Asks every live worker for its heap usage, read after a full collection
   * when the process runs with `--v8-flags=--expose-gc`; resolves with the
   * answers that arrived within `timeoutMs` (default 2,000). For soak measurements.
   */
  heap(options: { readonly timeoutMs?: number } = {}): Promise<WorkerHeap[]> {
    return this.#ask("heap", options.timeoutMs) as Promise<WorkerHeap[]>;
  }

  async #ask(type: "collect" | "heap", timeoutMs = 2_000): Promise<unknown[]> {
    const alive = this.#members.filter((m) => m.alive);
    const id = ++this.#collectId;
    const { promise, resolve } = Promise.withResolvers<void>();
    const entry = {
      waiting: new Set(alive.map((m) => m.id)),
      results: [] as unknown[],
      done: resolve,
    };
    this.#collecting.set(id, entry);
    if (entry.waiting.size === 0) resolve();
    for (const member of alive) {
      member.worker.postMessage({ type, id } satisfies ToWorker<D>);
    }
    const timer = setTimeout(resolve, timeoutMs);
    try {
      await promise;
    } finally {
      clearTimeout(timer);
      this.#collecting.delete(id);
    }
    return entry.results;
  }

  /**
   * Asks every worker to stop accepting and finish its in-flight requests
   * within `timeoutMs`; resolves when all have stopped (each then exits).
   */
  shutdown(options: { readonly timeoutMs?: number } = {}): Promise<PoolShutdownResult> {
    this.#shutdown ??= this.#stop(options.timeoutMs ?? 30_000);
    return this.#shutdown;
  }

  /** Stops every worker at once, without draining. */
  terminate(): void {
    clearInterval(this.#heartbeat);
    for (const member of this.#members) this.#lose(member, "terminated");
  }

  async #stop(timeoutMs: number): Promise<PoolShutdownResult> {
    clearInterval(this.#heartbeat);
    const alive = this.#members.filter((m) => m.alive);
    for (const member of alive) member.worker.postMessage({ type: "shutdown", timeoutMs });
    // A worker that does not answer within the deadline (plus slack) is terminated.
    const timer = setTimeout(() => {
      for (const member of alive) this.#lose(member, "did not stop in time");
    }, timeoutMs + 5_000);
    const results = await Promise.all(alive.map((m) => m.stopped.promise));
    clearTimeout(timer);
    return {
      graceful: results.every((r) => r.graceful),
      openConnections: results.reduce((sum, r) => sum + r.openConnections, 0),
    };
  }

  #spawn(id: number, config: WorkerConfig): Promise<FromWorker & { type: "listening" }> {
    const worker = new Worker(this.#options.module, {
      type: "module",
      name: `sluice-worker-${id}`,
    });
    const member: Member = {
      id,
      worker,
      alive: true,
      stopped: Promise.withResolvers(),
      unanswered: 0,
      posted: this.#latest.version,
      postedBeats: 0,
    };
    this.#members.push(member);
    const listening = Promise.withResolvers<FromWorker & { type: "listening" }>();
    this.#listening.set(id, listening);
    worker.onmessage = (event) => this.#receive(member, event.data);
    worker.onerror = (event) => {
      // Without preventDefault an error in a worker also terminates the main thread.
      event.preventDefault();
      this.#lose(member, `uncaught error: ${event.message}`);
    };
    worker.onmessageerror = () =>
      this.#logger.error("Cannot read a message from worker {worker}", { worker: id });
    worker.postMessage({
      type: "start",
      worker: id,
      config,
      snapshot: { type: "snapshot", ...this.#latest },
    });
    const timeoutMs = this.#options.startTimeoutMs ?? 30_000;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        reject(new Error(`Cannot start worker ${id}: not listening after ${timeoutMs} ms`));
      }, timeoutMs);
    });
    return Promise.race([listening.promise, timeout]).finally(() => clearTimeout(timer));
  }

  #receive(member: Member, message: unknown): void {
    if (!isFromWorker(message)) return;
    member.unanswered = 0;
    switch (message.type) {
      case "listening":
        this.#listening.get(member.id)?.resolve(message);
        this.#listening.delete(member.id);
        return;
      case "applied":
      case "rejected":
        this.#answered(
          member,
          message.version,
          message.type === "rejected" ? message.message : undefined,
        );
        return;
      case "stopped":
        member.alive = false;
        member.stopped.resolve({
          graceful: message.graceful,
          openConnections: message.openConnections,
        });
        this.#forget(member);
        return;
      case "failed":
        this.#lose(member, message.message);
        return;
      case "collected":
      case "heap": {
        const entry = this.#collecting.get(message.id);
        if (entry === undefined || !entry.waiting.delete(member.id)) return;
        const data = message.type === "heap" ? message.heap : message.data;
        if (data !== null) entry.results.push(data);
        if (entry.waiting.size === 0) entry.done();
        return;
      }
    }
  }

  /** Posts the newest snapshot to `member` unless it has one unanswered, or already has it. */
  #post(member: Member): void {
    if (!member.alive || member.posted !== undefined || this.#shutdown !== undefined) return;
    const { version, data } = this.#latest;
    try {
      member.worker.postMessage({ type: "snapshot", version, data } satisfies ToWorker<D>);
    } catch (error) {
      // Cannot be cloned: the worker never sees it, and keeps what it has.
      this.#answered(member, version, `Cannot post snapshot "${version}": ${errorText(error)}`);
      return;
    }
    member.posted = version;
    member.postedBeats = 0;
  }

  /** `member` applied (or, with a reason, rejected) `version`. */
  #answered(member: Member, version: number, rejected: string | undefined): void {
    for (const pending of this.#pending) {
      if (version < pending.version || !pending.waiting.has(member.id)) continue;
      // Waiting for an older version than the rejected one: it never got it (coalesced), and
      // keeps serving an older one still.
      if (rejected !== undefined) pending.rejected.push({ worker: member.id, message: rejected });
      pending.waiting.delete(member.id);
      this.#settle(pending);
    }
    if (member.posted !== undefined && version >= member.posted) member.posted = undefined;
    if (version < this.#latest.version) this.#post(member);
  }

  /** A worker is gone (failed, errored, terminated): stop waiting for it. */
  #lose(member: Member, reason: string): void {
    if (!member.alive) return;
    member.alive = false;
    this.#logger.error("Worker {worker} stopped: {reason}", { worker: member.id, reason });
    member.worker.terminate();
    this.#listening.get(member.id)?.reject(
      new Error(`Cannot start worker ${member.id}: ${reason}`),
    );
    this.#listening.delete(member.id);
    member.stopped.resolve({ graceful: false, openConnections: 0 });
    this.#forget(member);
  }

  #forget(member: Member): void {
    for (const entry of this.#collecting.values()) {
      if (entry.waiting.delete(member.id) && entry.waiting.size === 0) entry.done();
    }
    for (const pending of this.#pending) {
      pending.waiting.delete(member.id);
      this.#settle(pending);
    }
  }

  #settle(pending: Pending): void {
    if (pending.waiting.size > 0) return;
    this.#pending.delete(pending);
    pending.resolve({ rejected: pending.rejected });
  }
}
