/**
 * Waiting in tests: on a condition or a promise, always with a deadline, never
 * a bare sleep.
 *
 * @module
 */

/** Resolves with `promise`, or rejects naming `what` once `ms` have passed. */
export async function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`Timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Polls `check` until it returns a value other than `undefined`/`false`, and
 * resolves with it; rejects naming `what` (and the last error `check` threw)
 * when `timeoutMs` pass first.
 */
export async function waitFor<T>(
  what: string,
  check: () => T | undefined | false | Promise<T | undefined | false>,
  options: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const intervalMs = options.intervalMs ?? 25;
  const end = performance.now() + timeoutMs;
  let lastError: unknown;
  while (true) {
    try {
      const value = await check();
      if (value !== undefined && value !== false) return value;
    } catch (e) {
      lastError = e;
    }
    if (performance.now() >= end) {
      const cause = lastError instanceof Error ? `: last error: ${lastError.message}` : "";
      throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}${cause}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
