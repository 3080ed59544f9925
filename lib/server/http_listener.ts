/**
 * The plain-HTTP listener: `Deno.serve` on `--http-port`, HTTP/1.1 and h2c
 * with prior knowledge (`Upgrade: h2c` is answered as HTTP/1.1), on a
 * `reusePort` socket so that every worker can serve the same port.
 *
 * `Deno.serve` never closes a connection on its own (measured on Deno 2.9.6:
 * one that sends nothing, half a request head, or nothing after a response
 * stays open for good), so a client could hold any number of them. Two ways
 * to give them timeouts:
 *
 * - `activity`: each request is counted by its client while in
 *   flight, for a connection reaper (`http_connection_reaper.ts`) that reads
 *   the sockets' kernel counters and shuts the silent, idle or stalled ones
 *   down through FFI. Costs a few atomic operations per request.
 * - `relay`: the listener accepts connections itself and relays each into a
 *   loopback `Deno.serve` (`_relay_server.ts`, as HTTPS does), closing one
 *   that sends nothing for `firstBytesTimeoutMs`, or for `idleTimeoutMs` sits
 *   idle, trickles a request head that never completes, or takes nothing of
 *   what it is sent: one more loopback hop per connection, paid in
 *   throughput. For when FFI is not available.
 *
 * Knows nothing of routing or TLS; it calls a {@linkcode RequestHandler}.
 *
 * @module
 */
import { componentLogger } from "../log/logging.ts";
import { Generation } from "./_generation.ts";
import { RelayServer } from "./_relay_server.ts";
import {
  type ClientTimeout,
  type ConnectionInfo,
  DEFAULT_SHUTDOWN_TIMEOUT_MS,
  internalServerError,
  type Listener,
  type RequestHandler,
  type ShutdownOptions,
  type ShutdownResult,
} from "./listener.ts";
import { settlesWithin } from "../timers/timers.ts";
import type { ConnectionActivity } from "./connection_activity.ts";

/** Options of {@linkcode listenHttp}. */
export interface HttpListenerOptions {
  /** Default `"0.0.0.0"`. */
  readonly hostname?: string;
  /** 0 picks a free port (read it from `addr`). */
  readonly port: number;
  /** Share the port with other sockets (other workers). Needs `--unstable-net`. Default true. */
  readonly reusePort?: boolean;
  /** Answers when the handler throws. Default: a bare 500. */
  readonly onError?: (error: unknown) => Response | Promise<Response>;
  /** Called with `+1` when a request arrives and `-1` once its response has been sent (or failed). */
  readonly onRequest?: (delta: 1 | -1) => void;
  /** With `relay`: called for each client connection closed for a timeout, with why. */
  readonly onClientTimeout?: (reason: ClientTimeout, count: number) => void;
  /**
   * Where each request is counted by its client while in flight, for
   * the connection reaper (`http_connection_reaper.ts`) that gives
   * `Deno.serve`'s connections their timeouts. Not with `relay`.
   */
  readonly activity?: ConnectionActivity;
  /**
   * Own each connection and enforce these timeouts (see the module comment).
   * Default: `Deno.serve` on the port itself, no timeouts.
   */
  readonly relay?: {
    /** A new connection that sends nothing for this long is closed. */
    readonly firstBytesTimeoutMs: number;
    /**
     * A connection with no request in flight and no byte either way for this
     * long is closed (keep-alive timeout); so is one whose bytes sent with no
     * request in flight have not become a request for this long (nginx's
     * `client_header_timeout`), and one that took nothing sent to it for this
     * long (nginx's `send_timeout`, WebSockets included). Each is checked
     * once per period: a connection goes between one and two periods late.
     */
    readonly idleTimeoutMs: number;
  };
}

/**
 * Starts serving plain HTTP on `options.port` with `handler`.
 *
 * @example
 * ```ts
 * const listener = listenHttp(() => new Response("ok"), { hostname: "127.0.0.1", port: 0 });
 * await listener.shutdown({ timeoutMs: 1000 });
 * ```
 */
export function listenHttp(handler: RequestHandler, options: HttpListenerOptions): Listener {
  return options.relay === undefined
    ? new HttpListener(handler, options)
    : new RelayingHttpListener(handler, options, options.relay);
}

class HttpListener implements Listener {
  readonly addr: Deno.NetAddr;
  readonly finished: Promise<void>;
  #server: Deno.HttpServer<Deno.NetAddr>;
  #shutdown: Promise<ShutdownResult> | undefined;

  constructor(handler: RequestHandler, options: HttpListenerOptions) {
    let localPort = 0;
    let fallbackAuthority = "";
    const onRequest = options.onRequest;
    const activity = options.activity;
    this.#server = Deno.serve({
      hostname: options.hostname ?? "0.0.0.0",
      port: options.port,
      reusePort: options.reusePort ?? true,
      onError: options.onError ?? internalServerError,
      onListen: () => {},
    }, (req, info) => {
      const remoteAddr = info.remoteAddr;
      if (onRequest !== undefined || activity !== undefined) {
        onRequest?.(1);
        const slot = activity?.begin(remoteAddr);
        const done = () => {
          onRequest?.(-1);
          if (slot !== undefined) activity!.end(slot);
        };
        info.completed.then(done, done);
      }
      const connection: ConnectionInfo = {
        remoteAddr,
        secure: false,
        localPort,
        fallbackAuthority,
        ...(activity === undefined ? {} : { activity }),
      };
      return handler(req, connection);
    });
    this.addr = this.#server.addr;
    localPort = this.addr.port;
    fallbackAuthority = `localhost:${localPort}`;
    this.finished = this.#server.finished.catch(() => {});
  }

  get closed(): Promise<void> {
    return this.finished;
  }

  shutdown(options: ShutdownOptions = {}): Promise<ShutdownResult> {
    this.#shutdown ??= this.#stop(options.timeoutMs ?? DEFAULT_SHUTDOWN_TIMEOUT_MS);
    return this.#shutdown;
  }

  async #stop(timeoutMs: number): Promise<ShutdownResult> {
    // Aborting Deno.serve's signal after shutdown() began throws inside Deno: do not force.
    return { graceful: await settlesWithin(this.#server.shutdown(), timeoutMs) };
  }
}

/** Plain HTTP through relays: the listener owns every client connection. */
class RelayingHttpListener implements Listener {
  readonly addr: Deno.NetAddr;
  readonly finished: Promise<void>;
  #server: RelayServer;
  #accepting: Generation<Deno.TcpConn>;
  #shutdown: Promise<ShutdownResult> | undefined;
  #resolveFinished: () => void = () => {};

  constructor(
    handler: RequestHandler,
    options: HttpListenerOptions,
    timeouts: NonNullable<HttpListenerOptions["relay"]>,
  ) {
    let localPort = 0;
    this.#server = new RelayServer(handler, {
      secure: false,
      ...timeouts,
      localPort: () => localPort,
      ...(options.onError === undefined ? {} : { onError: options.onError }),
      ...(options.onRequest === undefined ? {} : { onRequest: options.onRequest }),
      ...(options.onClientTimeout === undefined ? {} : {
        onTimeout: (reason: ClientTimeout) => options.onClientTimeout!(reason, 1),
      }),
    });
    let listener: Deno.TcpListener;
    try {
      listener = Deno.listen({
        hostname: options.hostname ?? "0.0.0.0",
        port: options.port,
        ...(options.reusePort ?? true ? { reusePort: true } : {}),
      });
    } catch (error) {
      this.#server.abandon();
      throw error;
    }
    this.#accepting = new Generation<Deno.TcpConn>({
      id: 1,
      listener,
      onConnection: (conn) => void this.#server.relay(conn),
      onAcceptError: (error) =>
        componentLogger("server").warn("Cannot accept an HTTP connection: {error}", {
          error: String(error),
        }),
    });
    this.addr = listener.addr;
    localPort = this.addr.port;
    this.finished = new Promise((resolve) => this.#resolveFinished = resolve);
  }

  get closed(): Promise<void> {
    return this.#server.closed;
  }

  shutdown(options: ShutdownOptions = {}): Promise<ShutdownResult> {
    this.#shutdown ??= this.#stop(options.timeoutMs ?? DEFAULT_SHUTDOWN_TIMEOUT_MS);
    return this.#shutdown;
  }

  async #stop(timeoutMs: number): Promise<ShutdownResult> {
    await this.#accepting.stopAccepting();
    const { result, finished } = await this.#server.shutdown(timeoutMs);
    void finished.then(() => this.#resolveFinished());
    return result;
  }
}
