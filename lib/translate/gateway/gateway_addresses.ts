/**
 * An address of its own for each Gateway (`--gateway-addresses`): the pool
 * of local addresses Sluice listens on besides its main one, handed out one
 * per Gateway of its classes, so that two Gateways on the same port route
 * independently (Gateway API: a route attached to one Gateway is not served
 * through another).
 *
 * Assignment is pure and stable: a Gateway keeps the pool address its
 * status already shows (the leader wrote it), the oldest Gateway first when
 * two show the same one; the others take the first free address in pool
 * order, oldest Gateway first. Every replica computes the same assignment
 * from the same objects. Without a pool, no Gateway gets an address of its
 * own and all share the published one.
 *
 * @module
 */

import { compareStrings } from "../_order.ts";

/** What assignment reads of one Gateway. */
export interface AddressClaimant {
  /** `namespace/name`. */
  readonly key: string;
  /** `metadata.creationTimestamp` (RFC 3339; `""` when unknown). */
  readonly created: string;
  /** The addresses its `status.addresses` shows now. */
  readonly held: readonly string[];
}

/**
 * Assigns `pool` addresses to `gateways`: a map from Gateway key to its
 * address. A Gateway missing from the map found no free address.
 */
export function assignGatewayAddresses(
  gateways: readonly AddressClaimant[],
  pool: readonly string[],
): Map<string, string> {
  const order = [...gateways].sort((a, b) =>
    compareStrings(a.created, b.created) || compareStrings(a.key, b.key)
  );
  const inPool = new Set(pool);
  const taken = new Set<string>();
  const assigned = new Map<string, string>();
  for (const gateway of order) {
    const kept = gateway.held.find((address) => inPool.has(address) && !taken.has(address));
    if (kept === undefined) continue;
    taken.add(kept);
    assigned.set(gateway.key, kept);
  }
  let next = 0;
  for (const gateway of order) {
    if (assigned.has(gateway.key)) continue;
    while (next < pool.length && taken.has(pool[next]!)) next++;
    if (next === pool.length) break;
    taken.add(pool[next]!);
    assigned.set(gateway.key, pool[next]!);
  }
  return assigned;
}

/** The addresses a Gateway object's `status.addresses` shows. */
export function heldAddresses(status: unknown): string[] {
  const addresses = (status as { addresses?: unknown } | undefined)?.addresses;
  if (!Array.isArray(addresses)) return [];
  return addresses
    .map((a) => (a as { value?: unknown } | null)?.value)
    .filter((value): value is string => typeof value === "string");
}
