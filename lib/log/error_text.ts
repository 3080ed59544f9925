/**
 * The one-line text of a thrown value, for log fields and error messages:
 * an `Error`'s message, anything else as a string. Knows nothing of loggers.
 *
 * @module
 */

/** `error.message` for an `Error`, else `String(error)`. */
export function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
