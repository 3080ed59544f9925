/**
 * How the process reads its stop signals (SIGTERM, SIGINT): the first starts
 * a graceful shutdown, a later one ends the process at once. A signal within
 * {@linkcode SAME_STOP_WINDOW_MS} of the first is the same request delivered
 * again, not a second one: a terminal's Ctrl-C sends SIGINT to the whole
 * process group, and `deno task` then forwards it to the program once more
 * (two SIGINTs, about 3 ms apart, measured on Deno 2.9.6), while
 * `deno run --watch` passes it on as SIGINT and SIGTERM (within about 10 ms).
 *
 * Pure: the clock is passed in. Knows nothing of what stopping does.
 *
 * @module
 */

/** What a stop signal means. */
export type StopVerdict =
  /** The first: shut down gracefully. */
  | "stop"
  /** The same stop request delivered again: nothing more to do. */
  | "repeat"
  /** A deliberate second request: exit now. */
  | "force";

/**
 * How long after the first stop signal another one counts as the same
 * request. Repeats measured arrived within 10 ms; a person pressing Ctrl-C
 * again after reading the shutdown line takes longer than this.
 */
export const SAME_STOP_WINDOW_MS = 1_000;

/** Options of {@linkcode stopSignals}. */
export interface StopSignalsOptions {
  /** Monotonic clock, ms. Default `performance.now`. */
  readonly now?: () => number;
  /** Default {@linkcode SAME_STOP_WINDOW_MS}. */
  readonly windowMs?: number;
}

/** Returns the function that judges each stop signal as it arrives. */
export function stopSignals(options: StopSignalsOptions = {}): () => StopVerdict {
  const now = options.now ?? (() => performance.now());
  const windowMs = options.windowMs ?? SAME_STOP_WINDOW_MS;
  let first: number | undefined;
  return () => {
    const at = now();
    if (first === undefined) {
      first = at;
      return "stop";
    }
    return at - first < windowMs ? "repeat" : "force";
  };
}
