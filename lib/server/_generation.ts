/**
 * One generation of the HTTPS listener: a TLS listening socket (sharing its
 * port with the other generations through `reusePort`) served by Deno's own
 * accept loop (`serveHttpOnListener`), the requests in flight on it, and how
 * it stops.
 *
 * Why Deno's accept loop and not one `serveHttpOnConnection` per accepted
 * connection (which would let a retired generation keep the connections that
 * have not sent a request yet): on Deno 2.9.6 a WebSocket made with
 * `Deno.upgradeWebSocket` lives only as long as the `HttpServer` that served
 * the upgrade request. A per-connection server ends when the connection hands
 * its socket to the upgrade, and takes the WebSocket with it (the client sees
 * the 101 and then a close frame); a listener's server lives until it is shut
 * down. `deno_sni_test.ts` pins both behaviours.
 *
 * Stopping is Deno's graceful `shutdown()`, the only way to close the socket
 * of a served listener: the socket closes at once, requests in flight finish,
 * idle keep-alive connections close, and, measured on Deno 2.9.6, so do the
 * connections that have not sent a complete request yet (including ones in
 * their TLS handshake) and every WebSocket the generation upgraded (a close
 * frame, reason "Server shutting down"). In-flight requests are never cut:
 * aborting the serve signal after a graceful shutdown began throws
 * `BadResource` inside Deno and kills the process.
 *
 * Knows nothing of certificates or snapshots: the HTTPS listener owns those.
 *
 * @module
 */
import { serveHttpOnListener } from "../tls/deno_sni.ts";
import type { ConnectionInfo, RequestHandler } from "./listener.ts";

/** Options of {@linkcode Generation}. */
export interface GenerationOptions {
  readonly id: number;
  readonly listener: Deno.TlsListener;
  /** The certificate table's fingerprint this generation's resolver caches answers for. */
  readonly fingerprint: string;
  readonly handler: RequestHandler;
  readonly onError: (error: unknown) => Response | Promise<Response>;
}

/** Resolves after one turn of the event loop (a timer), so Deno has run the I/O work queued before it. */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/** A TLS listening socket served by Deno, and the requests in flight on it. */
export class Generation {
  readonly id: number;
  readonly fingerprint: string;
  readonly addr: Deno.NetAddr;
  /** Distinct server names the resolver was asked for (Deno calls it once per name). */
  serverNames = 0;
  #server: Deno.HttpServer<Deno.NetAddr>;
  #inFlight = 0;
  #stopping: Promise<void> | undefined;
  #socketClosed = Promise.withResolvers<void>();
  #finished: Promise<void>;

  constructor(options: GenerationOptions) {
    this.id = options.id;
    this.fingerprint = options.fingerprint;
    this.addr = options.listener.addr;
    const { handler } = options;
    const localPort = this.addr.port;
    const serve = (req: Request, info: Deno.ServeHandlerInfo<Deno.NetAddr>) => {
      this.#inFlight++;
      let counted = true;
      const done = () => {
        if (!counted) return;
        counted = false;
        this.#inFlight--;
      };
      // Settles when the response was sent (or the upgrade done), or failed to be.
      info.completed.then(done, done);
      const connection: ConnectionInfo = {
        remoteAddr: info.remoteAddr,
        secure: true,
        localPort,
        completed: info.completed,
      };
      return handler(req, connection);
    };
    this.#server = serveHttpOnListener(options.listener, serve, { onError: options.onError });
    this.#finished = this.#server.finished.catch(() => {});
  }

  /** Requests in flight (a request counts until its response has been sent). */
  get requests(): number {
    return this.#inFlight;
  }

  /** The listening socket is still open. */
  get accepting(): boolean {
    return this.#stopping === undefined;
  }

  /**
   * Shuts the generation down gracefully (idempotent): the listening socket
   * closes at once, in-flight requests finish, and every other connection
   * and WebSocket of the generation is closed. Resolves once the socket is
   * closed; {@linkcode closed} tells when everything is.
   */
  stopAccepting(): Promise<void> {
    if (this.#stopping === undefined) {
      this.#stopping = this.#server.shutdown().catch(() => {});
      // shutdown() cancels Deno's accept task, which drops (closes) the socket when it next runs.
      void nextTurn().then(() => this.#socketClosed.resolve());
    }
    return this.#socketClosed.promise;
  }

  /** Resolves once the listening socket is closed, without closing it (see {@linkcode stopAccepting}). */
  stoppedAccepting(): Promise<void> {
    return this.#socketClosed.promise;
  }

  /** Resolves when the listener and every connection are closed. */
  async closed(): Promise<void> {
    await this.#stopping;
    await this.#finished;
  }
}
