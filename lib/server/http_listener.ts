/**
 * The plain-HTTP listener: `Deno.serve` on `--http-port`, HTTP/1.1 and h2c
 * with prior knowledge (`Upgrade: h2c` is answered as HTTP/1.1), on a
 * `reusePort` socket so that every worker can serve the same port.
 *
 * Knows nothing of routing or TLS; it calls a {@linkcode RequestHandler}.
 *
 * @module
 */
import {
  type ConnectionInfo,
  DEFAULT_SHUTDOWN_TIMEOUT_MS,
  internalServerError,
  type Listener,
  type RequestHandler,
  settlesWithin,
  type ShutdownOptions,
  type ShutdownResult,
} from "./listener.ts";

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
  return new HttpListener(handler, options);
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
    const done = () => onRequest?.(-1);
    this.#server = Deno.serve({
      hostname: options.hostname ?? "0.0.0.0",
      port: options.port,
      reusePort: options.reusePort ?? true,
      onError: options.onError ?? internalServerError,
      onListen: () => {},
    }, (req, info) => {
      if (onRequest !== undefined) {
        onRequest(1);
        info.completed.then(done, done);
      }
      const connection: ConnectionInfo = {
        remoteAddr: info.remoteAddr,
        secure: false,
        localPort,
        fallbackAuthority,
      };
      return handler(req, connection);
    });
    this.addr = this.#server.addr;
    localPort = this.addr.port;
    fallbackAuthority = `localhost:${localPort}`;
    this.finished = this.#server.finished.catch(() => {});
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
