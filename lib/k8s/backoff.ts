/**
 * Reconnection pacing for watch loops: exponential backoff with jitter, and
 * an abortable sleep. Pure arithmetic plus one timer; knows nothing about
 * Kubernetes or HTTP.
 *
 * @module
 */

/** Options of {@linkcode Backoff}. */
export interface BackoffOptions {
  /** Delay after the first failure, before jitter. Default 800 ms. */
  readonly initialMs?: number;
  /** Largest delay before jitter. Default 30,000 ms. */
  readonly maxMs?: number;
  /** Growth per consecutive failure. Default 2. */
  readonly factor?: number;
  /** Relative spread: each delay is drawn from `[base × (1 − jitter), base × (1 + jitter)]`. Default 0.2. */
  readonly jitter?: number;
  /** A uniform random number in `[0, 1)`; `Math.random` by default. */
  readonly random?: () => number;
}

/**
 * Delays for consecutive failures: 0.8 s, 1.6 s, 3.2 s, … up to 30 s, each
 * spread by ±20 % so that many clients cut off at once do not come back in
 * step. {@linkcode Backoff.reset} after a healthy period starts over.
 */
export class Backoff {
  readonly #initialMs: number;
  readonly #maxMs: number;
  readonly #factor: number;
  readonly #jitter: number;
  readonly #random: () => number;
  #failures = 0;

  constructor(options: BackoffOptions = {}) {
    this.#initialMs = options.initialMs ?? 800;
    this.#maxMs = options.maxMs ?? 30_000;
    this.#factor = options.factor ?? 2;
    this.#jitter = options.jitter ?? 0.2;
    this.#random = options.random ?? Math.random;
  }

  /** Consecutive failures since the last reset. */
  get failures(): number {
    return this.#failures;
  }

  /** Records a failure and returns how long to wait before the next attempt, in milliseconds. */
  next(): number {
    const base = Math.min(this.#maxMs, this.#initialMs * this.#factor ** this.#failures);
    this.#failures++;
    const spread = 1 - this.#jitter + 2 * this.#jitter * this.#random();
    return Math.max(0, Math.round(base * spread));
  }

  /** Starts over from the initial delay. */
  reset(): void {
    this.#failures = 0;
  }
}

/**
 * Resolves after `ms` milliseconds, or as soon as `signal` aborts (it then
 * resolves too, never rejects): callers check `signal.aborted` afterwards.
 */
export function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, Math.min(ms, 2 ** 31 - 1)));
    signal.addEventListener("abort", done, { once: true });
  });
}
