/**
 * The sockets of connections a listener gave up on that Deno 2.9.6 would not
 * close: TLS connections still in their handshake at the first-bytes timeout
 * (or at a stop), whose `close()` leaves the socket to the client. Each is
 * queued here and shut down through `native_socket.ts`, in batches: one
 * descriptor sweep for all the connections given up on within a second, so a
 * flood of stalled handshakes costs at most one sweep a second.
 *
 * Knows nothing of TLS or HTTP.
 *
 * @module
 */

import { type ConnectionEnds, shutdownConnections } from "./native_socket.ts";

/** Options of {@linkcode StalledSockets}. */
export interface StalledSocketsOptions {
  /** The shortest time between two sweeps. Default 1,000 ms. */
  readonly minIntervalMs?: number;
  /** Called after each sweep that shut sockets down, with how many. */
  readonly onShut?: (count: number) => void;
  /** Called once, the first time sockets cannot be shut down (no FFI, no glibc), with why. */
  readonly onUnavailable: (reason: string) => void;
}

/** What {@linkcode StalledSockets} did so far. */
export interface StalledSocketsStats {
  /** Connections queued. */
  readonly queued: number;
  /** Connections found and shut down. */
  readonly shut: number;
  /** Connections already gone when their sweep ran (their handshake had ended after all). */
  readonly missing: number;
  /** Descriptor sweeps run. */
  readonly sweeps: number;
}

/** Queues given-up connections and shuts their sockets down, a batch per sweep. */
export class StalledSockets {
  #minIntervalMs: number;
  #onUnavailable: (reason: string) => void;
  #onShut: ((count: number) => void) | undefined;
  #unavailable = false;
  #queue: ConnectionEnds[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;
  #sweeping: Promise<void> | undefined;
  #lastSweep = -Infinity;
  #stats = { queued: 0, shut: 0, missing: 0, sweeps: 0 };

  constructor(options: StalledSocketsOptions) {
    this.#minIntervalMs = options.minIntervalMs ?? 1_000;
    this.#onUnavailable = options.onUnavailable;
    this.#onShut = options.onShut;
  }

  get stats(): StalledSocketsStats {
    return { ...this.#stats };
  }

  /** Queues `conn`'s socket to be shut down by the next sweep (addresses copied now). */
  add(conn: ConnectionEnds): void {
    if (this.#unavailable) return;
    this.#queue.push({ localAddr: conn.localAddr, remoteAddr: conn.remoteAddr });
    this.#stats.queued++;
    this.#schedule();
  }

  /** Sweeps for everything queued now, at once, and resolves when no sweep is running. */
  async flush(): Promise<void> {
    while (this.#sweeping !== undefined || this.#queue.length > 0) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
      await (this.#sweeping ?? this.#sweep());
    }
  }

  #schedule(): void {
    if (this.#timer !== undefined || this.#sweeping !== undefined) return;
    const wait = Math.max(0, this.#lastSweep + this.#minIntervalMs - performance.now());
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#sweep();
    }, wait);
  }

  #sweep(): Promise<void> {
    const batch = this.#queue;
    this.#queue = [];
    this.#lastSweep = performance.now();
    this.#stats.sweeps++;
    this.#sweeping = shutdownConnections(batch).then((outcome) => {
      if (outcome.ok) {
        this.#stats.shut += outcome.shut;
        this.#stats.missing += outcome.missing;
        if (outcome.shut > 0) this.#onShut?.(outcome.shut);
      } else if (!this.#unavailable) {
        this.#unavailable = true;
        this.#queue = [];
        this.#onUnavailable(outcome.reason);
      }
    }).finally(() => {
      this.#sweeping = undefined;
      if (this.#queue.length > 0) this.#schedule();
    });
    return this.#sweeping;
  }
}
