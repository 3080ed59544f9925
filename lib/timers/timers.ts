/**
 * Timers as an injectable effect: components that wait take a
 * {@linkcode Timers} so tests can hand in fake ones, and default to the
 * system's. Knows nothing of what is being waited for.
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
