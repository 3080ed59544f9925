/**
 * Structural equality of plain JSON data (what arrives from the API server or
 * a YAML file): `null`, booleans, numbers, strings, arrays and plain objects.
 * Key order does not matter. Knows nothing about Kubernetes.
 *
 * @module
 */

/** Whether two JSON values are equal, ignoring key order. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) {
    // NaN is not JSON; treat it as equal to itself so that equality stays reflexive.
    return typeof a === "number" && typeof b === "number" && Number.isNaN(a) && Number.isNaN(b);
  }
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) {
      if (!jsonEqual(a[i], b[i])) return false;
    }
    return true;
  }
  if (Array.isArray(b)) return false;
  return sameEntries(a as Record<string, unknown>, b as Record<string, unknown>, undefined);
}

/** Whether two objects have equal entries, skipping the keys in `ignore` (on both sides). */
export function sameEntries(
  a: Record<string, unknown>,
  b: Record<string, unknown>,
  ignore: ReadonlySet<string> | undefined,
): boolean {
  let count = 0;
  for (const key in a) {
    if (!Object.hasOwn(a, key) || ignore?.has(key) || a[key] === undefined) continue;
    count++;
    if (!Object.hasOwn(b, key) || !jsonEqual(a[key], b[key])) return false;
  }
  for (const key in b) {
    if (!Object.hasOwn(b, key) || ignore?.has(key) || b[key] === undefined) continue;
    count--;
  }
  return count === 0;
}
