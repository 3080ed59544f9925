/**
 * The messages between the control plane (main thread) and the serving
 * workers. Everything is structured-clonable plain data: the control plane
 * posts the snapshot's *input* (for Sluice, a translation and the default
 * certificate), and each worker compiles its own {@linkcode Snapshot}
 * (compiled tables hold functions and cannot cross a worker boundary).
 *
 * Sequence: main → `start` (with the first snapshot) → worker opens its
 * listeners → `listening` (the bound ports) → `applied`. Then, per update,
 * `snapshot` → `applied` (or `rejected`: the worker keeps serving the last
 * good one). Finally `shutdown` → `stopped`, and the worker closes itself.
 * A worker that fails posts `failed` before it dies.
 *
 * Knows nothing of Deno listeners or routing internals.
 *
 * @module
 */
import type { LogFormat, LogLevel } from "../log/logging.ts";

/** Where and how a worker serves; the same for every worker of a pool. */
export interface WorkerConfig {
  /** Default `"0.0.0.0"`. */
  readonly hostname?: string;
  /** Plain HTTP port; 0 lets the first worker pick one; `null` serves no HTTP. */
  readonly httpPort: number | null;
  /** HTTPS port; 0 lets the first worker pick one; `null` serves no HTTPS. */
  readonly httpsPort: number | null;
  /** See `HttpsListenerOptions.firstBytesTimeoutMs`. */
  readonly firstBytesTimeoutMs?: number;
  /**
   * Gateway addresses (`--gateway-addresses`): each also listened on, at the
   * HTTP and HTTPS ports, its requests carrying `gatewayAddress`.
   */
  readonly gatewayAddresses?: readonly string[];
  /** See `HttpsListenerOptions.idleTimeoutMs`. */
  readonly idleTimeoutMs?: number;
  /**
   * Shared memory of a `ConnectionActivity` (`lib/server/connection_activity.ts`):
   * the plain-HTTP listener counts its requests there for the main thread's
   * connection reaper. Without it plain HTTP has no client timeouts.
   */
  readonly connectionActivity?: SharedArrayBuffer;
  /** See `HttpsListenerOptions.maxServerNames`. */
  readonly maxServerNames?: number;
  /** Options for the worker's request handler factory (plain data; e.g. the proxy's timeouts and HSTS). */
  readonly handlerOptions?: unknown;
  /** Log configuration to install in the worker (each isolate has its own sinks). */
  readonly logging?: { readonly level: LogLevel; readonly format: LogFormat };
}

/**
 * A worker isolate's V8 heap, read right after a full collection when the
 * process runs with `--v8-flags=--expose-gc` (`collected`), else as it is.
 * For soak measurements (`tests/bench/soak_bench.ts`).
 */
export interface WorkerHeap {
  readonly heapUsed: number;
  readonly heapTotal: number;
  readonly external: number;
  /** A full collection ran first. */
  readonly collected: boolean;
}

/** A snapshot's input, as posted. */
export interface SnapshotMessage<D> {
  readonly type: "snapshot";
  readonly version: number;
  readonly data: D;
}

/** Messages the control plane sends. */
export type ToWorker<D> =
  | {
    readonly type: "start";
    readonly worker: number;
    readonly config: WorkerConfig;
    readonly snapshot: SnapshotMessage<D>;
  }
  | SnapshotMessage<D>
  /** Asks for the worker's statistics (its metrics); answered by `collected` with the same id. */
  | { readonly type: "collect"; readonly id: number }
  /** The pool's heartbeat; answered by `pong` at once. */
  | { readonly type: "ping" }
  /** Asks for the worker's heap usage; answered by `heap` with the same id. */
  | { readonly type: "heap"; readonly id: number }
  | { readonly type: "shutdown"; readonly timeoutMs: number };

/** Messages a worker sends. */
export type FromWorker =
  | {
    readonly type: "listening";
    readonly worker: number;
    readonly httpPort: number | null;
    readonly httpsPort: number | null;
  }
  | { readonly type: "applied"; readonly worker: number; readonly version: number }
  | {
    readonly type: "rejected";
    readonly worker: number;
    readonly version: number;
    readonly message: string;
  }
  | {
    readonly type: "stopped";
    readonly worker: number;
    readonly graceful: boolean;
    readonly openConnections: number;
  }
  | { readonly type: "failed"; readonly worker: number; readonly message: string }
  | { readonly type: "pong"; readonly worker: number }
  | {
    readonly type: "heap";
    readonly worker: number;
    readonly id: number;
    readonly heap: WorkerHeap;
  }
  | {
    readonly type: "collected";
    readonly worker: number;
    readonly id: number;
    /** What the worker entry's `collect()` returned (plain data). */
    readonly data: unknown;
  };

const FROM_WORKER_TYPES = new Set([
  "listening",
  "applied",
  "rejected",
  "stopped",
  "failed",
  "pong",
  "collected",
  "heap",
]);
const TO_WORKER_TYPES = new Set(["start", "snapshot", "collect", "ping", "heap", "shutdown"]);

/** Whether `value` looks like a {@linkcode FromWorker} message (checked on the type tag). */
export function isFromWorker(value: unknown): value is FromWorker {
  return typeof value === "object" && value !== null &&
    FROM_WORKER_TYPES.has((value as { type?: unknown }).type as string);
}

/** Whether `value` looks like a {@linkcode ToWorker} message (checked on the type tag). */
export function isToWorker<D>(value: unknown): value is ToWorker<D> {
  return typeof value === "object" && value !== null &&
    TO_WORKER_TYPES.has((value as { type?: unknown }).type as string);
}
