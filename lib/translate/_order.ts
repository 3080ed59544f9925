/**
 * Deterministic ordering helpers for translation output (folder-private).
 *
 * Compares by UTF-16 code units, never by locale, so output is identical on
 * every machine.
 *
 * @module
 */

/** Compares two strings by code units. */
export function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * Compares two strings, reading runs of digits as numbers, so that
 * `paths[2]` sorts before `paths[10]`. Deterministic like {@linkcode compareStrings}.
 */
export function compareNatural(a: string, b: string): number {
  const left = a.match(/\d+|\D+/g) ?? [];
  const right = b.match(/\d+|\D+/g) ?? [];
  for (let i = 0; i < Math.min(left.length, right.length); i++) {
    const x = left[i]!;
    const y = right[i]!;
    if (x === y) continue;
    const xIsNumber = x.charCodeAt(0) >= 48 && x.charCodeAt(0) <= 57;
    const yIsNumber = y.charCodeAt(0) >= 48 && y.charCodeAt(0) <= 57;
    if (xIsNumber && yIsNumber) return Number(x) - Number(y) || compareStrings(x, y);
    return compareStrings(x, y);
  }
  return left.length - right.length;
}
