/**
 * Test support: Deno's internal serve functions, which serve HTTP/1.1 and
 * HTTP/2 (chosen by ALPN on TLS) on a listener or on one accepted connection
 * the caller made, such as a listener from `listenTlsWithSni()`
 * (`lib/tls/deno_sni.ts`). Sluice does not use them (`lib/tls/deno_sni.ts`
 * says why); `lib/tls/deno_sni_test.ts` pins what they do on this Deno, so a
 * Deno upgrade that changes it is noticed.
 *
 * @module
 */

/** The Deno version these internals were written and tested against. */
export const TESTED_DENO_VERSION = "2.9.6";

/** Options of {@linkcode serveHttpOnListener} and {@linkcode serveHttpOnConnection}. */
export interface ServeOptions {
  /**
   * Aborting it shuts the server down at once (not gracefully). Never abort it
   * after `shutdown()` began or after the server finished on its own: Deno
   * 2.9.6 then throws `BadResource` from inside (uncaught). Prefer `shutdown()`.
   */
  readonly signal?: AbortSignal;
  /** Called when the handler throws; its response is sent instead. */
  readonly onError?: (error: unknown) => Response | Promise<Response>;
}

type InternalServe<T> = (
  target: T,
  signal: AbortSignal | undefined,
  handler: Deno.ServeHandler<Deno.NetAddr>,
  onError: (error: unknown) => Response | Promise<Response>,
  onListen: (scheme: unknown) => void,
) => Deno.HttpServer<Deno.NetAddr>;

/**
 * Checks that the running Deno still offers both internal serve functions,
 * and throws an error naming the Deno version and the missing piece if not.
 */
export function checkServeInternals(): void {
  internalFunction("serveHttpOnListener");
  internalFunction("serveHttpOnConnection");
}

/**
 * Serves `handler` on `listener`, like `Deno.serve`. The returned server's
 * `shutdown()` stops accepting at once (the listening socket is closed) and
 * resolves when the in-flight requests have finished; `finished` resolves
 * after that.
 */
export function serveHttpOnListener(
  listener: Deno.Listener,
  handler: Deno.ServeHandler<Deno.NetAddr>,
  options: ServeOptions = {},
): Deno.HttpServer<Deno.NetAddr> {
  const serve = internalFunction("serveHttpOnListener") as InternalServe<Deno.Listener>;
  return serve(listener, options.signal, handler, options.onError ?? defaultOnError, () => {});
}

/**
 * Serves `handler` on one accepted connection (for a TLS connection the
 * protocol is chosen by ALPN during the handshake, which runs here). The
 * returned server's `shutdown()` lets an in-flight request finish and closes
 * the connection (at once when it is idle, including before its first
 * request). `finished` resolves when the connection is closed.
 */
export function serveHttpOnConnection(
  conn: Deno.Conn,
  handler: Deno.ServeHandler<Deno.NetAddr>,
  options: ServeOptions = {},
): Deno.HttpServer<Deno.NetAddr> {
  const serve = internalFunction("serveHttpOnConnection") as InternalServe<Deno.Conn>;
  return serve(conn, options.signal, handler, options.onError ?? defaultOnError, () => {});
}

function defaultOnError(): Response {
  return new Response("Internal Server Error\n", { status: 500 });
}

function internalFunction(name: "serveHttpOnListener" | "serveHttpOnConnection"): unknown {
  const deno = Deno as unknown as { internal?: symbol } & Record<symbol, unknown>;
  const key = deno.internal;
  const internals = typeof key === "symbol"
    ? deno[key] as Record<string, unknown> | undefined
    : undefined;
  const unsupported = (what: string) =>
    new Error(
      `Deno "${Deno.version.deno}" no longer offers ${what} ` +
        `(tested on Deno "${TESTED_DENO_VERSION}"; see tests/support/deno_serve.ts)`,
    );
  if (internals === undefined) throw unsupported("Deno[Deno.internal]");
  const fn = internals[name];
  if (typeof fn !== "function") throw unsupported(`Deno[Deno.internal].${name}`);
  if (fn.length < 5) {
    throw unsupported(
      `Deno[Deno.internal].${name} as (listener or connection, signal, handler, onError, ` +
        `onListen): it takes ${fn.length} arguments`,
    );
  }
  return fn;
}
