/**
 * Assertions for tests, with the names of Deno's standard library (which
 * cannot be installed here: JSR is unreachable), built on `node:assert`.
 * Import from here in every test so the vocabulary stays one.
 *
 * @module
 */
import nodeAssert from "node:assert/strict";

/** Fails unless `value` is truthy. */
export function assert(value: unknown, message?: string): asserts value {
  nodeAssert.ok(value, message as string);
}

/** Fails unless `actual` and `expected` are deeply, strictly equal. */
export function assertEquals<T>(actual: T, expected: T, message?: string): void {
  nodeAssert.deepStrictEqual(actual, expected, message as string);
}

/** Fails if `actual` and `expected` are deeply, strictly equal. */
export function assertNotEquals<T>(actual: T, expected: T, message?: string): void {
  nodeAssert.notDeepStrictEqual(actual, expected, message as string);
}

/** Fails unless `actual` is the very same value as `expected` (`Object.is`). */
export function assertStrictEquals<T>(actual: T, expected: T, message?: string): void {
  nodeAssert.strictEqual(actual, expected, message as string);
}

/** Fails unless `text` contains `part`. */
export function assertStringIncludes(text: string, part: string, message?: string): void {
  nodeAssert.ok(
    text.includes(part),
    message ?? `Expected ${JSON.stringify(text)} to contain ${JSON.stringify(part)}`,
  );
}

/** Fails unless `text` matches `pattern`. */
export function assertMatch(text: string, pattern: RegExp, message?: string): void {
  nodeAssert.match(text, pattern, message as string);
}

/** Fails unless `value` is at least `min` and at most `max`. */
export function assertBetween(value: number, min: number, max: number, what = "value"): void {
  nodeAssert.ok(
    value >= min && value <= max,
    `Expected ${what} ${value} to be within [${min}, ${max}]`,
  );
}

type ErrorClass<E extends Error> = abstract new (...args: never[]) => E;

/**
 * Fails unless `fn` throws an instance of `ErrorClass` (whose message includes `includes`);
 * returns the error. `message` labels a failure.
 */
export function assertThrows<E extends Error = Error>(
  fn: () => unknown,
  ErrorClass?: ErrorClass<E>,
  includes?: string,
  message?: string,
): E {
  let thrown: unknown;
  try {
    fn();
  } catch (e) {
    thrown = e;
  }
  return checkError(thrown, ErrorClass, includes, message);
}

/**
 * Fails unless `fn` rejects with an instance of `ErrorClass` (whose message includes `includes`);
 * returns the error. `message` labels a failure.
 */
export async function assertRejects<E extends Error = Error>(
  fn: () => Promise<unknown>,
  ErrorClass?: ErrorClass<E>,
  includes?: string,
  message?: string,
): Promise<E> {
  let thrown: unknown;
  try {
    await fn();
  } catch (e) {
    thrown = e;
  }
  return checkError(thrown, ErrorClass, includes, message);
}

function checkError<E extends Error>(
  thrown: unknown,
  ErrorClass: ErrorClass<E> | undefined,
  includes: string | undefined,
  message: string | undefined,
): E {
  const label = message === undefined ? "" : `${message}: `;
  if (thrown === undefined) nodeAssert.fail(`${label}Expected the function to throw`);
  if (ErrorClass !== undefined && !(thrown instanceof ErrorClass)) {
    nodeAssert.fail(`${label}Expected a ${ErrorClass.name}, got ${String(thrown)}`);
  }
  if (includes !== undefined) {
    const text = thrown instanceof Error ? thrown.message : String(thrown);
    nodeAssert.ok(
      text.includes(includes),
      `${label}Expected the error ${JSON.stringify(text)} to include ${JSON.stringify(includes)}`,
    );
  }
  return thrown as E;
}
