/**
 * What a translation may reuse from the previous one: results that depend on
 * one object alone, keyed by that object's identity. The store replaces an
 * object when an event for it arrives (a change, a status update, a relist)
 * and keeps the same one otherwise, so at 10,000 Ingresses a rebuild after
 * one change recomputes one Ingress's route candidates instead of ten
 * thousand (less time, and far less garbage for the collector). Entries go
 * with their objects (a `WeakMap`).
 *
 * The contract: an object translated with a memo is never changed in place
 * afterwards (the store never does), and what the memo holds is read, never
 * changed. Without a memo a translation computes everything (and is what
 * the tests compare against). Knows nothing of what the results mean.
 *
 * @module
 */
import type { HttpRouteMemo } from "./gateway/http_route_memo.ts";
import type { IngressCandidates } from "./route_candidates.ts";

/** Per-object results kept between translations. */
export interface TranslationMemo {
  /** Route candidates, by Ingress object. */
  readonly routeCandidates: WeakMap<object, IngressCandidates>;
  /**
   * Compiled HTTPRoutes, by HTTPRoute object, each with the Services and
   * ReferenceGrants it read (reused only while those are the same objects).
   */
  readonly httpRoutes: HttpRouteMemo;
}

/** An empty memo: give the same one to every translation of one store. */
export function createTranslationMemo(): TranslationMemo {
  return { routeCandidates: new WeakMap(), httpRoutes: new WeakMap() };
}
