/**
 * The only place in Sluice that touches Deno's internal per-SNI certificate
 * API. Everything else calls {@linkcode listenTlsWithSni}.
 *
 * Deno 2.9.6 has no public hook to choose a certificate per TLS server name.
 * Internal pieces make it possible:
 *
 * - `Deno.listenTls({ …, [Symbol.for("unstableSniResolver")]: (serverName) => ({ cert, key }) })`:
 *   the resolver is called with the ClientHello's server name (`""` when the
 *   client sent none, e.g. when it connected to an IP address).
 * - `Deno[Deno.internal].serveHttpOnListener(listener, signal, handler, onError, onListen)`:
 *   serves HTTP/1.1 and HTTP/2 (by ALPN) on that listener, as `Deno.serve`
 *   does (`Deno.serve({ cert, key, [symbol]: … })` ignores the resolver).
 * - `Deno[Deno.internal].serveHttpOnConnection(conn, signal, handler, onError, onListen)`:
 *   the same for one accepted connection, so the caller owns the accept loop
 *   and can stop accepting without closing connections that have not sent
 *   their first request yet (Deno's graceful shutdown of a listener does).
 *   But on Deno 2.9.6 its server ends when a connection is upgraded, and
 *   closes the WebSocket right after the 101.
 *
 * Sluice uses only the resolver: it accepts TLS connections itself and
 * relays them into a plain HTTP server (`lib/server/https_listener.ts`).
 * Serving a TLS socket with either serve function, Deno 2.9.6 writes a
 * response's head and body separately on a socket without `TCP_NODELAY`
 * (which cannot be set on a TLS connection), and the client's delayed ACK
 * held each keep-alive response about 40 ms. The serve functions are in
 * `tests/support/deno_serve.ts`, for the tests that pin these behaviours.
 *
 * Caveats, measured on Deno 2.9.6 (see docs/deno-workarounds.md, 1 to 3):
 * - Deno caches the resolver's answer per server name for the listener's
 *   whole life, failures included: a renewed certificate is never picked up
 *   by that listener, and every distinct name a client sends adds an entry
 *   (a copy of the certificate chain and key) that is never evicted. Callers
 *   must bound this by replacing the listener (see `lib/server/https_listener.ts`).
 * - A new rustls `ServerConfig` is built per handshake, so TLS session
 *   resumption does not work and handshakes cost more CPU than with a static
 *   certificate.
 * - A WebSocket made with `Deno.upgradeWebSocket` lives only as long as the
 *   server that served its upgrade: `shutdown()` closes it (code 1001).
 * - Aborting the `signal` given to either serve function after the server
 *   began a graceful `shutdown()`, or after the connection ended on its own,
 *   throws `BadResource` from inside Deno (an uncaught error: the process
 *   dies). Callers here never pass a signal; they only use `shutdown()`.
 * - These APIs are internal and may change in any Deno release:
 *   {@linkcode listenTlsWithSni} fails loudly, naming the Deno version and the
 *   missing piece, and `deno_sni_test.ts` proves the behaviour with real
 *   handshakes. Re-run it after every Deno upgrade.
 *
 * It knows nothing of snapshots, routes or certificate tables.
 *
 * @module
 */

/** PEM certificate chain and private key handed to one TLS handshake. */
export interface TlsKeyPair {
  readonly cert: string;
  readonly key: string;
}

/**
 * Chooses the certificate for a server name (`""` when the client sent no
 * SNI). Called at most once per distinct name per listener: Deno caches the
 * answer, and a thrown error, for the listener's lifetime.
 */
export type SniResolver = (serverName: string) => TlsKeyPair | Promise<TlsKeyPair>;

/** Options of {@linkcode listenTlsWithSni}. */
export interface ListenTlsWithSniOptions {
  /** Default `"0.0.0.0"`. */
  readonly hostname?: string;
  readonly port: number;
  /** Share the port with other listeners (needs `--unstable-net` on Deno 2.9.6). */
  readonly reusePort?: boolean;
  /** Default `["h2", "http/1.1"]`. */
  readonly alpnProtocols?: readonly string[];
  /** The kernel's accept backlog. Default 511 (Deno's default). */
  readonly tcpBacklog?: number;
  readonly resolve: SniResolver;
}

/** The Deno version this module was written and tested against. */
const TESTED_DENO_VERSION = "2.9.6";

const RESOLVER_SYMBOL_KEY = "unstableSniResolver";

interface DenoInternals {
  readonly resolverSymbol?: unknown;
}

/**
 * Opens a TLS listener whose certificate is chosen per server name by
 * `options.resolve`. The listener is not served yet: accept connections
 * from it directly (as `lib/server/https_listener.ts` does). Throws, naming
 * the Deno version and the missing piece, when this Deno lacks the internal
 * resolver.
 */
export function listenTlsWithSni(options: ListenTlsWithSniOptions): Deno.TlsListener {
  const symbol = resolverSymbol();
  const resolve = options.resolve;
  const listenOptions = {
    hostname: options.hostname ?? "0.0.0.0",
    port: options.port,
    transport: "tcp",
    reusePort: options.reusePort ?? false,
    alpnProtocols: [...(options.alpnProtocols ?? ["h2", "http/1.1"])],
    ...(options.tcpBacklog === undefined ? {} : { tcpBacklog: options.tcpBacklog }),
    // Deno reads the resolver under this symbol; it requires neither `cert` nor `key` then.
    [symbol]: (serverName: string) => resolve(serverName),
  };
  return Deno.listenTls(
    listenOptions as unknown as Deno.ListenTlsOptions & Deno.TlsCertifiedKeyPem,
  );
}

function internals(): DenoInternals | undefined {
  const deno = Deno as unknown as { internal?: symbol } & Record<symbol, unknown>;
  const key = deno.internal;
  if (typeof key !== "symbol") return undefined;
  return deno[key] as DenoInternals | undefined;
}

function unsupported(what: string): Error {
  return new Error(
    `Cannot serve per-SNI certificates on Deno "${Deno.version.deno}": ${what} ` +
      `(Sluice uses Deno's internal SNI API, tested on Deno "${TESTED_DENO_VERSION}"; ` +
      `see lib/tls/deno_sni.ts)`,
  );
}

function resolverSymbol(): symbol {
  const symbol = Symbol.for(RESOLVER_SYMBOL_KEY);
  const found = internals();
  if (found === undefined) throw unsupported("Deno[Deno.internal] is missing");
  if (found.resolverSymbol !== symbol) {
    throw unsupported(
      `Deno[Deno.internal].resolverSymbol is not Symbol.for("${RESOLVER_SYMBOL_KEY}")`,
    );
  }
  return symbol;
}
