/**
 * One generation of the HTTPS listener: a TLS listening socket (sharing its
 * port with the other generations through `reusePort`), the accept loop, the
 * connections it accepted, and how it stops: accepting first, then asking
 * its connections to close.
 *
 * Each connection is served on its own (`serveHttpOnConnection`) rather than
 * by Deno's built-in accept loop, because Deno's graceful shutdown of a
 * listener closes at once every connection that has not sent a request yet,
 * including ones still in their TLS handshake: a client that had just
 * connected would see its request fail. Here a draining connection closes
 * when idle after at least one request, or right after its first request.
 *
 * Closing is always graceful (`HttpServer.shutdown()`): an in-flight request
 * is never cut, because Deno 2.9.6 offers no safe way to do it (aborting the
 * serve signal after a graceful shutdown began, or after the connection
 * ended on its own, throws `BadResource` from inside Deno and kills the
 * process). Bounding a request's duration is the request handler's job.
 *
 * Knows nothing of certificates or snapshots: the HTTPS listener owns those.
 *
 * @module
 */
import { serveHttpOnConnection } from "../tls/deno_sni.ts";
import type { ConnectionInfo, RequestHandler } from "./listener.ts";

/** Options of {@linkcode Generation}. */
export interface GenerationOptions {
  readonly id: number;
  readonly listener: Deno.TlsListener;
  /** The certificate table's fingerprint this generation's resolver caches answers for. */
  readonly fingerprint: string;
  readonly handler: RequestHandler;
  readonly onError: (error: unknown) => Response | Promise<Response>;
  /** Stop accepting once no connection arrived for this long… */
  readonly acceptQuietMs: number;
  /** …or after this long, whichever comes first. */
  readonly acceptDrainMaxMs: number;
  /** Called when `accept()` fails for a reason other than the listener closing. */
  readonly onAcceptError: (error: unknown) => void;
  /** Called with `+1` when a connection is accepted and `-1` when it has closed (a gauge). */
  readonly onConnection?: (delta: 1 | -1) => void;
}

interface ConnectionState {
  server: Deno.HttpServer<Deno.NetAddr> | undefined;
  requests: number;
  closing: boolean;
}

const ACCEPT_ERROR_BACKOFF_MS = 50;
/** What {@linkcode queueEmpty} resolves with. */
export const QUEUE_EMPTY: unique symbol = Symbol("queue empty");

/**
 * Microtask turns after which a Deno `accept()` that found a queued connection
 * has settled (2 on Deno 2.9.6; pinned by `https_listener_test.ts`).
 */
export const ACCEPT_SETTLE_TICKS = 8;

/** Resolves after {@linkcode ACCEPT_SETTLE_TICKS} microtask turns, still within the same event-loop turn. */
export async function queueEmpty(): Promise<typeof QUEUE_EMPTY> {
  for (let i = 0; i < ACCEPT_SETTLE_TICKS; i++) await null;
  return QUEUE_EMPTY;
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function isClosedError(error: unknown): boolean {
  return error instanceof Deno.errors.BadResource || error instanceof Deno.errors.Interrupted;
}

/** A TLS listening socket and the connections it accepted. */
export class Generation {
  readonly id: number;
  readonly fingerprint: string;
  readonly addr: Deno.NetAddr;
  /** Distinct server names the resolver was asked for (Deno calls it once per name). */
  serverNames = 0;
  #options: GenerationOptions;
  #listener: Deno.TlsListener;
  #localPort: number;
  #connections = new Set<ConnectionState>();
  #accepting: Promise<void>;
  #acceptClosed = false;
  #closeRequested = false;
  #acceptLoopDone = false;
  #lastAcceptAt = performance.now();
  #stopAccepting: Promise<void> | undefined;
  #draining = false;
  #emptied = Promise.withResolvers<void>();

  constructor(options: GenerationOptions) {
    this.id = options.id;
    this.fingerprint = options.fingerprint;
    this.#options = options;
    this.#listener = options.listener;
    this.addr = options.listener.addr;
    this.#localPort = this.addr.port;
    this.#accepting = this.#acceptLoop();
  }

  /** Connections currently open. */
  get connections(): number {
    return this.#connections.size;
  }

  /** The listening socket is still open. */
  get accepting(): boolean {
    return !this.#acceptClosed;
  }

  /** Closes the listening socket (idempotent); resolves once the accept loop has ended. */
  stopAccepting(): Promise<void> {
    this.#stopAccepting ??= this.#closeListener();
    return this.#stopAccepting;
  }

  /**
   * Asks every connection to close: at once if idle after at least one
   * request, after the in-flight requests otherwise, and after its first
   * request if it has not sent one yet. Call after {@linkcode stopAccepting}.
   */
  drain(): void {
    if (this.#draining) return;
    this.#draining = true;
    for (const state of this.#connections) {
      if (state.requests > 0) this.#close(state);
    }
  }

  /**
   * Also closes the connections that have not sent a request yet (so they
   * close now, unless a request arrived meanwhile). Returns how many
   * connections are still open, each finishing an in-flight request.
   */
  closeIdle(): number {
    this.drain();
    for (const state of this.#connections) this.#close(state);
    return this.#connections.size;
  }

  /** Resolves when the listener and every connection are closed. */
  async closed(): Promise<void> {
    await this.stopAccepting();
    await this.#emptied.promise;
  }

  async #closeListener(): Promise<void> {
    // With reusePort the kernel keeps handing this socket new connections until it is closed, and
    // closing it resets those it queued but nobody accepted yet. Deno's accept() tries the kernel's
    // queue at once, so the accept loop closes the socket right after an accept() that found the
    // queue empty (#acceptLoop). When no connection arrives, the loop is parked: close after a
    // quiet moment. Under a load that never empties the queue, close after acceptDrainMaxMs anyway.
    this.#closeRequested = true;
    const started = performance.now();
    const { acceptQuietMs, acceptDrainMaxMs } = this.#options;
    while (!this.#acceptClosed) {
      const now = performance.now();
      const quietFor = now - this.#lastAcceptAt;
      if (quietFor >= acceptQuietMs || now - started >= acceptDrainMaxMs) {
        this.#closeSocket();
        break;
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      const wait = Math.max(
        1,
        Math.min(acceptQuietMs - quietFor, acceptDrainMaxMs - (now - started)),
      );
      await Promise.race([
        this.#accepting,
        new Promise<void>((resolve) => timer = setTimeout(resolve, wait)),
      ]);
      clearTimeout(timer);
    }
    await this.#accepting;
    this.#acceptLoopDone = true;
    if (this.#connections.size === 0) this.#emptied.resolve();
  }

  #closeSocket(): void {
    if (this.#acceptClosed) return;
    this.#acceptClosed = true;
    try {
      this.#listener.close();
    } catch (error) {
      if (!isClosedError(error)) throw error;
    }
  }

  async #acceptLoop(): Promise<void> {
    while (!this.#acceptClosed) {
      let conn: Deno.TlsConn | typeof QUEUE_EMPTY;
      try {
        const next = this.#listener.accept();
        // Deno tries the kernel's queue inside accept(): not settled after a few microtasks (no
        // I/O polled in between) means the queue was empty, so closing now resets nothing.
        conn = this.#closeRequested ? await Promise.race([next, queueEmpty()]) : await next;
        if (conn === QUEUE_EMPTY) {
          this.#closeSocket();
          await next.then((late) => this.#serve(late), () => {});
          return;
        }
      } catch (error) {
        if (this.#acceptClosed || isClosedError(error)) return;
        // For example EMFILE: keep the listener, slow down.
        this.#options.onAcceptError(error);
        await delay(ACCEPT_ERROR_BACKOFF_MS);
        continue;
      }
      this.#lastAcceptAt = performance.now();
      this.#serve(conn);
    }
  }

  #serve(conn: Deno.TlsConn): void {
    const state: ConnectionState = { server: undefined, requests: 0, closing: false };
    const { handler, onError } = this.#options;
    const localPort = this.#localPort;
    const serve = (req: Request, info: Deno.ServeHandlerInfo<Deno.NetAddr>) => {
      state.requests++;
      // A connection accepted just before the drain serves the request it was opened for, then closes.
      if (this.#draining && state.requests === 1) this.#close(state);
      const connection: ConnectionInfo = { remoteAddr: info.remoteAddr, secure: true, localPort };
      return handler(req, connection);
    };
    let server: Deno.HttpServer<Deno.NetAddr>;
    try {
      server = serveHttpOnConnection(conn, serve, { onError });
    } catch (error) {
      this.#options.onAcceptError(error);
      try {
        conn.close();
      } catch {
        // Already closed.
      }
      return;
    }
    state.server = server;
    this.#connections.add(state);
    this.#options.onConnection?.(1);
    const forget = () => {
      this.#connections.delete(state);
      this.#options.onConnection?.(-1);
      if (this.#connections.size === 0 && this.#acceptLoopDone) this.#emptied.resolve();
    };
    server.finished.then(forget, forget);
  }

  #close(state: ConnectionState): void {
    if (state.closing || state.server === undefined) return;
    state.closing = true;
    // Graceful: closes now when idle, after the in-flight request otherwise.
    state.server.shutdown().catch(() => {});
  }
}
