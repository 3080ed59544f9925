/**
 * Per-client request limits shared by every worker of a replica, as nginx's
 * `limit_req … nodelay` and `limit_conn` (what ingress-nginx's `limit-rps`,
 * `limit-rpm`, `limit-burst-multiplier` and `limit-connections` generate):
 *
 * - **rate** ({@linkcode ClientLimits.admit}): a leaky bucket per zone and
 *   client address, in thousandths of a request, drained at the zone's rate;
 *   each request adds one; a request that would take the bucket past the
 *   burst is refused and leaves it as it was (nginx's algorithm, with
 *   `nodelay`: requests within the burst are served at once, not delayed);
 * - **concurrency** ({@linkcode ClientLimits.enter}/{@linkcode ClientLimits.leave}):
 *   requests in flight per zone and client address (nginx counts a
 *   connection only while it has a request being processed).
 *
 * The table lives in a `SharedArrayBuffer` of fixed size (memory bounded
 * whatever the number of clients): slots chosen by a 32-bit hash of zone and
 * address, probed over a small window; when every slot of the window is
 * taken, the one idle longest is reused (nginx too evicts its least recently
 * used entries when its zone is full). Two clients whose hashes collide share
 * a bucket, which only makes their limit stricter. Each slot is guarded by a
 * spin lock taken with `Atomics.compareExchange` for a few instructions.
 *
 * Knows nothing of HTTP; the clock is passed in.
 *
 * @module
 */

/** Int32 words per slot: lock, key, excess (thousandths of a request), last update (ms), in flight. */
const WORDS = 5;
const LOCK = 0;
const KEY = 1;
const EXCESS = 2;
const LAST = 3;
const IN_FLIGHT = 4;
/** The excess of a slot no request has used yet. */
const FRESH = -1;
/** Slots probed from a key's home slot. */
const WINDOW = 8;
/** Default size: 2^16 slots, 1.25 MiB. */
const DEFAULT_SLOT_BITS = 16;

/** A rate zone: `limit-rps` or `limit-rpm` with its burst. */
export interface RateZone {
  /** Names the zone (e.g. `shop/web rps`): clients are counted per zone. */
  readonly id: number;
  /** Requests per second (a `limit-rpm` divided by 60). */
  readonly perSecond: number;
  /** Requests admitted at once beyond the rate (`limit-rps` × `limit-burst-multiplier`). */
  readonly burst: number;
}

/** The 32-bit FNV-1a hash of a zone's name, for {@linkcode RateZone.id}. */
export function zoneId(name: string): number {
  return fnv(name, 0x811c9dc5);
}

/** Rate and concurrency limits per zone and client, shared between threads. */
export class ClientLimits {
  /** The shared memory: post it to a worker and wrap it there with `new ClientLimits(buffer)`. */
  readonly buffer: SharedArrayBuffer;
  #words: Int32Array;
  #mask: number;
  /** Milliseconds since `epoch`, the shared time base (ms values fit an int32 for 24 days, then wrap). */
  #now: () => number;

  /**
   * Wraps `buffer` (from another thread), or allocates `2^slotBits` slots.
   * `now` returns milliseconds (default `Date.now`).
   */
  constructor(
    options: { buffer?: SharedArrayBuffer; slotBits?: number; now?: () => number } = {},
  ) {
    const bits = options.slotBits ?? DEFAULT_SLOT_BITS;
    this.buffer = options.buffer ??
      new SharedArrayBuffer((1 << bits) * WORDS * Int32Array.BYTES_PER_ELEMENT);
    this.#words = new Int32Array(this.buffer);
    this.#mask = this.#words.length / WORDS - 1;
    const now = options.now ?? Date.now;
    this.#now = () => now() | 0;
  }

  /**
   * A request from `address` in `zone`: true when admitted (the bucket then
   * holds it), false when it would take the bucket past the burst.
   */
  admit(zone: RateZone, address: string): boolean {
    const now = this.#now();
    const slot = this.#lock(zone.id, address, now);
    const w = this.#words;
    try {
      if (w[slot + EXCESS] === FRESH) {
        // nginx: a client's first request is admitted and leaves its bucket empty.
        w[slot + EXCESS] = 0;
        w[slot + LAST] = now;
        return true;
      }
      const rate = zone.perSecond * 1000;
      let elapsed = (now - w[slot + LAST]!) | 0;
      // nginx: a clock that went back counts as no time passed.
      if (elapsed < 0) elapsed = 0;
      let excess = w[slot + EXCESS]! - rate * elapsed / 1000 + 1000;
      if (excess < 0) excess = 0;
      if (excess > zone.burst * 1000) return false;
      w[slot + EXCESS] = Math.min(Math.round(excess), 0x7fffffff);
      w[slot + LAST] = now;
      return true;
    } finally {
      this.#unlock(slot);
    }
  }

  /**
   * A request from `address` in zone `id` begins: a ticket for
   * {@linkcode leave} when fewer than `limit` were in flight (it is counted
   * until then), or undefined when refused. Also refused when every slot of
   * its window counts another client's requests in flight: it is never
   * counted in someone else's slot.
   */
  enter(id: number, address: string, limit: number): number | undefined {
    const now = this.#now();
    const slot = this.#lock(id, address, now, false);
    if (slot < 0) return undefined;
    const w = this.#words;
    try {
      if (w[slot + IN_FLIGHT]! >= limit) return undefined;
      w[slot + IN_FLIGHT] = w[slot + IN_FLIGHT]! + 1;
      w[slot + LAST] = now;
      return slot;
    } finally {
      this.#unlock(slot);
    }
  }

  /** The request {@linkcode enter} gave `ticket` ended: its slot counts one request fewer. */
  leave(ticket: number): void {
    const w = this.#words;
    spinLock(w, ticket);
    try {
      // The slot cannot have been given to another client: it had a request in flight.
      if (w[ticket + IN_FLIGHT]! > 0) w[ticket + IN_FLIGHT] = w[ticket + IN_FLIGHT]! - 1;
      w[ticket + LAST] = this.#now();
    } finally {
      this.#unlock(ticket);
    }
  }

  /** The number of slots (bounded memory: `slots × 20` bytes). */
  get slots(): number {
    return this.#mask + 1;
  }

  /**
   * Finds and locks the slot of (`id`, `address`): its own, else a free one
   * in the window, else the one idle longest without requests in flight
   * (reset for the newcomer). Returns the index of its first word.
   */
  #lock(id: number, address: string, now: number, share = true): number {
    const key = (fnv(address, id >>> 0) | 1) | 0;
    const home = key & this.#mask;
    const w = this.#words;
    let reuse = -1;
    let reuseIdle = -1;
    for (let i = 0; i < WINDOW; i++) {
      const slot = ((home + i) & this.#mask) * WORDS;
      const current = Atomics.load(w, slot + KEY);
      if (current === key || current === 0) {
        spinLock(w, slot);
        const held = w[slot + KEY]!;
        if (held === key) return slot;
        if (held === 0) {
          reset(w, slot, key, now);
          return slot;
        }
        // Taken by another key meanwhile: keep looking.
        Atomics.store(w, slot + LOCK, 0);
        continue;
      }
      if (Atomics.load(w, slot + IN_FLIGHT) > 0) continue;
      const idle = (now - Atomics.load(w, slot + LAST)) | 0;
      if (idle > reuseIdle) {
        reuseIdle = idle;
        reuse = slot;
      }
    }
    // Every slot in the window holds another client: evict the one idle longest
    // (or, when all have requests in flight, the home slot's neighbour is shared).
    if (reuse < 0 && !share) return -1;
    const slot = reuse >= 0 ? reuse : home * WORDS;
    spinLock(w, slot);
    if (w[slot + KEY] !== key && w[slot + IN_FLIGHT] === 0) reset(w, slot, key, now);
    return slot;
  }

  #unlock(slot: number): void {
    Atomics.store(this.#words, slot + LOCK, 0);
  }
}

/** Spins this long (about a second) before taking a lock whose holder must have died. */
const MAX_SPINS = 50_000_000;

function spinLock(w: Int32Array, slot: number): void {
  let spins = 0;
  while (Atomics.compareExchange(w, slot + LOCK, 0, 1) !== 0) {
    // Held for a few instructions by another worker: spin. A worker terminated inside those
    // instructions never lets go: take the lock over rather than hang this one.
    if (++spins > MAX_SPINS) {
      Atomics.store(w, slot + LOCK, 1);
      return;
    }
  }
}

function reset(w: Int32Array, slot: number, key: number, now: number): void {
  w[slot + KEY] = key;
  w[slot + EXCESS] = FRESH;
  w[slot + LAST] = now;
  w[slot + IN_FLIGHT] = 0;
}

/** 32-bit FNV-1a over UTF-16 code units, from `seed`. */
function fnv(text: string, seed: number): number {
  let h = seed >>> 0;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}
