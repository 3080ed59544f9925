/**
 * Timers as an injectable effect: components that wait take a
 * {@linkcode Timers} so tests can hand in fake ones, and default to the
 * system's; and bounded waits ({@linkcode deadline}, {@linkcode settlesWithin}).
 * Knows nothing of what is being waited for.
 *
 * @module
 */

/** `setTimeout`/`clearTimeout`, injectable for tests. Ids are opaque. */
export interface Timers {
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(id: unknown): void;
}

/** The global timers. */
export const SYSTEM_TIMERS: Timers = Object.freeze({
  setTimeout: (callback: () => void, ms: number): unknown => setTimeout(callback, ms),
  clearTimeout: (id: unknown): void => clearTimeout(id as number),
});

/** A signal that aborts when `parent` does, or with a timeout after `ms`. */
export interface Deadline {
  readonly signal: AbortSignal;
  /** Clears the timer; call when the work ends. */
  clear(): void;
}

/**
 * A deadline for one request: its signal aborts after `ms` (reason: an Error
 * saying "no answer within … ms") or when `parent` aborts, whichever is first.
 */
export function deadline(
  ms: number,
  options: { readonly parent?: AbortSignal; readonly timers?: Timers } = {},
): Deadline {
  const timers = options.timers ?? SYSTEM_TIMERS;
  const controller = new AbortController();
  const parent = options.parent;
  const onParent = () => controller.abort(parent?.reason);
  if (parent?.aborted) onParent();
  else parent?.addEventListener("abort", onParent, { once: true });
  const timer = timers.setTimeout(
    () => controller.abort(new Error(`no answer within ${ms} ms`)),
    ms,
  );
  return {
    signal: controller.signal,
    clear() {
      timers.clearTimeout(timer);
      parent?.removeEventListener("abort", onParent);
    },
  };
}

/**
 * Whether `work` settles (either way) within `timeoutMs`; the timer is
 * cleared as soon as it does.
 */
export async function settlesWithin(work: Promise<unknown>, timeoutMs: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
  });
  try {
    return await Promise.race([work.then(() => true, () => true), deadline]);
  } finally {
    clearTimeout(timer);
  }
}
