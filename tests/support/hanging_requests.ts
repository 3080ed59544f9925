/**
 * Test support: a stand-in for API requests that never answer, to test what
 * aborting them does. Nothing in production imports it.
 *
 * @module
 */

/** Requests that fail only once their signal aborts; `started` resolves when the first is sent. */
export function hangingRequests(): {
  readonly started: Promise<void>;
  hang<T>(options?: { readonly signal?: AbortSignal | undefined }): Promise<T>;
} {
  const started = Promise.withResolvers<void>();
  return {
    started: started.promise,
    hang<T>(options?: { readonly signal?: AbortSignal | undefined }) {
      started.resolve();
      return new Promise<T>((_, reject) => {
        const signal = options?.signal;
        signal?.addEventListener("abort", () => reject(signal.reason), { once: true });
      });
    },
  };
}
