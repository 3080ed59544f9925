/**
 * Building `metav1.Condition`s for Gateway API status (folder-private).
 *
 * @module
 */

import type { Condition } from "./types.ts";

/** Epoch when no `now` is passed: the status writer keeps earlier transition times anyway. */
export const DEFAULT_NOW = "1970-01-01T00:00:00Z";

/** Makes conditions for one object generation at one time. */
export function conditionMaker(generation: unknown, now: string) {
  const observedGeneration = typeof generation === "number" ? generation : 0;
  return (type: string, ok: boolean, reason: string, message: string): Condition => ({
    type,
    status: ok ? "True" : "False",
    reason,
    message,
    observedGeneration,
    lastTransitionTime: now,
  });
}
