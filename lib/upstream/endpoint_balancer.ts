/**
 * Endpoint choice for one backend: round-robin over its ready endpoints, with
 * passive health. An endpoint whose connect failed is skipped for a while
 * (nginx's `max_fails=1 fail_timeout=10s`); when every endpoint is marked
 * down they are tried anyway (failing open beats answering 503 for a blip).
 *
 * State (a cursor per backend key, a down-until time per endpoint) lives for
 * the worker's lifetime and survives snapshot swaps; it is bounded by the
 * number of backends and endpoints seen recently (cursors in two
 * generations: a full one becomes the older, so backends in use keep their
 * place and deleted ones age out). The clock is passed in.
 *
 * @module
 */

import type { Backend, Endpoint } from "../routing/snapshot.ts";
import { endpointKey } from "./upstream_pool.ts";

export interface EndpointBalancerOptions {
  /** How long an endpoint is skipped after a connect failure, in ms. Default 10,000. */
  downForMs?: number;
  /** Milliseconds clock. Default `performance.now`. */
  now?: () => number;
}

const MAX_TRACKED = 4096;
/** Cursors per generation (two are kept). */
const MAX_CURSORS = 65_536;

/** Round-robin with passive health; one per worker. */
export class EndpointBalancer {
  readonly downForMs: number;
  #now: () => number;
  #cursor = new Map<string, number>();
  #olderCursor = new Map<string, number>();
  #downUntil = new Map<string, number>();

  constructor(options: EndpointBalancerOptions = {}) {
    this.downForMs = options.downForMs ?? 10_000;
    this.#now = options.now ?? (() => performance.now());
  }

  /**
   * The next endpoint to try for `backend`, skipping those in `tried` (by
   * {@linkcode endpointKey}) and, while others remain, those marked down.
   *
   * @returns undefined when every endpoint has been tried.
   */
  choose(backend: Backend, tried?: ReadonlySet<string>): Endpoint | undefined {
    const endpoints = backend.endpoints;
    const n = endpoints.length;
    if (n === 0) return undefined;
    // The cursor moves past the endpoint chosen, not one place: an endpoint skipped (down or
    // tried) then hands its turn to the next in line once, not to its successor every round.
    const start = (this.#cursor.get(backend.key) ?? this.#olderCursor.get(backend.key) ?? 0) % n;
    let fallback = -1;
    const now = this.#downUntil.size === 0 ? 0 : this.#now();
    for (let i = 0; i < n; i++) {
      const index = start + i < n ? start + i : start + i - n;
      const endpoint = endpoints[index] as Endpoint;
      if (tried === undefined && this.#downUntil.size === 0) return this.#take(backend, index);
      const key = endpointKey(endpoint);
      if (tried !== undefined && tried.has(key)) continue;
      const until = this.#downUntil.get(key);
      if (until !== undefined) {
        if (until > now) {
          if (fallback === -1) fallback = index;
          continue;
        }
        this.#downUntil.delete(key);
      }
      return this.#take(backend, index);
    }
    return fallback === -1 ? undefined : this.#take(backend, fallback);
  }

  /** Skips `endpoint` for `downForMs` (after a failed connect). */
  markDown(endpoint: Endpoint): void {
    if (this.#downUntil.size >= MAX_TRACKED) this.#prune();
    this.#downUntil.set(endpointKey(endpoint), this.#now() + this.downForMs);
  }

  /** Clears a mark after a successful exchange. */
  markUp(endpoint: Endpoint): void {
    if (this.#downUntil.size === 0) return;
    this.#downUntil.delete(endpointKey(endpoint));
  }

  /** True while `endpoint` is being skipped. */
  isDown(endpoint: Endpoint): boolean {
    const until = this.#downUntil.get(endpointKey(endpoint));
    return until !== undefined && until > this.#now();
  }

  #take(backend: Backend, index: number): Endpoint {
    // Was a bug: all cursors were cleared past 4,096 backends, so each backend's next request
    // went to its first endpoint (sorted: the same pod of every Service got the traffic).
    if (this.#cursor.size >= MAX_CURSORS && !this.#cursor.has(backend.key)) {
      this.#olderCursor = this.#cursor;
      this.#cursor = new Map();
    }
    this.#cursor.set(backend.key, index + 1);
    return backend.endpoints[index] as Endpoint;
  }

  #prune(): void {
    const now = this.#now();
    for (const [key, until] of this.#downUntil) if (until <= now) this.#downUntil.delete(key);
    if (this.#downUntil.size >= MAX_TRACKED) this.#downUntil.clear();
  }
}
