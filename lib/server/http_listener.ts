/**
 * The plain-HTTP listener: `Deno.serve` on `--http-port`, HTTP/1.1 and h2c
 * with prior knowledge (`Upgrade: h2c` is answered as HTTP/1.1), on a
 * `reusePort` socket so that every worker can serve the same port.
 *
 * `Deno.serve` never closes a connection on its own (measured on Deno 2.9.6:
 * one that sends nothing, half a request head, or nothing after a response
 * stays open for good), so a client could hold any number of them. With
 * `activity`, each request is counted by its client while in flight, for a
 * connection reaper (`http_connection_reaper.ts`) that reads the sockets'
 * kernel counters and shuts the silent, idle or stalled ones down through
 * FFI. Costs a few atomic operations per request. (Relaying each connection
 * into a loopback `Deno.serve`, as HTTPS does, would give the same timeouts
 * without FFI, at the price of one more loopback hop per connection: see
 * docs/deno-workarounds.md.)
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
  /**
   * Where each request is counted by its client while in flight, for
   * the connection reaper (`http_connection_reaper.ts`) that gives
   * `Deno.serve`'s connections their timeouts. Default: no timeouts.
   */
  readonly activity?: ConnectionActivity;
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
