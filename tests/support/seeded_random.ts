/**
 * A small, fast, reproducible pseudo-random source for property tests
 * (xorshift32): the same seed gives the same sequence on every machine.
 *
 * @module
 */

/** Returns a function yielding numbers in [0, 1) determined by `seed`. */
export function seededRandom(seed: number): () => number {
  let state = (seed * 2654435761) >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return state / 0x1_0000_0000;
  };
}
