/**
 * A task run a while after it is asked for, once for every request made
 * meanwhile: a fixed delay counted from the first request, not restarted by
 * later ones, so a steady stream of requests still runs it every `delayMs`.
 * For work that follows events but must not sit on their path (a status pass
 * after each published translation).
 *
 * Owns only the timing; the task reads the latest state when it runs.
 *
 * @module
 */
import { SYSTEM_TIMERS, type Timers } from "../timers/timers.ts";

/** A task that runs once per burst of requests. */
export interface CoalescedTask {
  /** Runs the task `delayMs` from now, unless a run is already waiting. */
  request(): void;
  /** Drops a waiting run; later requests are ignored. */
  cancel(): void;
}

/** Options of {@linkcode coalescedTask}. */
export interface CoalescedTaskOptions {
  readonly delayMs: number;
  readonly timers?: Timers;
}

/** Wraps `task` so requests made within `delayMs` of the first share one run. */
export function coalescedTask(task: () => void, options: CoalescedTaskOptions): CoalescedTask {
  const timers = options.timers ?? SYSTEM_TIMERS;
  let timer: unknown;
  let waiting = false;
  let cancelled = false;
  return {
    request() {
      if (waiting || cancelled) return;
      waiting = true;
      timer = timers.setTimeout(() => {
        waiting = false;
        task();
      }, options.delayMs);
    },
    cancel() {
      cancelled = true;
      if (waiting) timers.clearTimeout(timer);
      waiting = false;
    },
  };
}
