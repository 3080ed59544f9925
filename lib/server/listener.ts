/**
 * The shape shared by Sluice's HTTP and HTTPS listeners: the request handler
 * they call, what they tell it about the connection, and how they stop.
 *
 * Knows nothing of routing, proxying or Kubernetes.
 *
 * @module
 */
import type { ConnectionActivity } from "./connection_activity.ts";

/**
 * What a listener tells the handler about the connection, read once when the
 * request arrives: unlike Deno's own `info.remoteAddr`, these stay readable
 * after the response has been sent.
 */
export interface ConnectionInfo {
  readonly remoteAddr: Deno.NetAddr;
  /** The request came over TLS (the HTTPS listener). */
  readonly secure: boolean;
  /** The port the listener serves, e.g. for `X-Forwarded-Port`. */
  readonly localPort: number;
  /**
   * The authority `Deno.serve` writes into `req.url` when a request names
   * none (no or an empty `Host`): `localhost:<port of the Deno server>`. A
   * request without `Host` whose URL carries it named no host at all.
   */
  readonly fallbackAuthority: string;
  /**
   * Set on a listener of a Gateway's own address (`--gateway-addresses`):
   * that address, whose Gateway alone routes the request.
   */
  readonly gatewayAddress?: string;
  /**
   * Where a session that outlives its request (a WebSocket after its 101)
   * is counted, so idle-connection timeouts leave it alone: call
   * `begin(remoteAddr)` when it starts and `end()` with what it returned
   * when it ends. Absent where nothing needs telling (a listener that owns its
   * connections).
   */
  readonly activity?: ConnectionActivity;
}

/**
 * Why a listener closed a client connection itself: it sent nothing in time
 * (`first-bytes`), sat idle, trickled a request head, took nothing of what
 * was sent (`send`), or stalled in its TLS handshake (`tls-handshake`, also
 * a `first-bytes`: counted once, as this).
 */
export type ClientTimeout = "first-bytes" | "idle" | "head" | "send" | "tls-handshake";

/** Serves one request. Route on `new URL(req.url).host`: HTTP/2 requests have no `host` header. */
export type RequestHandler = (
  req: Request,
  info: ConnectionInfo,
) => Response | Promise<Response>;

/** Options of {@linkcode Listener.shutdown}. */
export interface ShutdownOptions {
  /** How long to wait for in-flight requests. Default 30,000 ms. */
  readonly timeoutMs?: number;
}

/** What {@linkcode Listener.shutdown} observed. */
export interface ShutdownResult {
  /** Every connection closed before the deadline. */
  readonly graceful: boolean;
  /**
   * Requests still in flight at the deadline, each holding its connection
   * open (Deno 2.9.6 cannot cut them safely: the process exiting does).
   * Absent where the listener cannot count them (`Deno.serve` does not say).
   */
  readonly openConnections?: number;
}

/** A listening socket (or a family of them) serving a {@linkcode RequestHandler}. */
export interface Listener {
  /** The bound address; `port` is the real port when 0 was asked for. */
  readonly addr: Deno.NetAddr;
  /**
   * Stops accepting at once (the listening socket is closed), closes idle
   * connections, and resolves when the in-flight requests have finished or
   * after `timeoutMs`, whichever comes first. Calling it again returns the
   * same promise. To stop, a process calls it and then exits.
   */
  shutdown(options?: ShutdownOptions): Promise<ShutdownResult>;
  /** Resolves once the listener is shut down and every connection is closed (possibly after `shutdown()` resolved). */
  readonly finished: Promise<void>;
  /**
   * Resolves when the HTTP server behind the listener has stopped serving, for
   * any reason: after `shutdown()`, or when Deno closed it on its own (Deno
   * 2.9.6 does so when a handler that upgraded a request answers anything but
   * its 101). Outside a shutdown it means the listener no longer serves.
   */
  readonly closed: Promise<void>;
}

/** `host:port`, with an IPv6 address in brackets (`[::]:8080`), for messages. */
export function hostPort(hostname: string, port: number): string {
  return hostname.includes(":") ? `[${hostname}]:${port}` : `${hostname}:${port}`;
}

/** The default of {@linkcode ShutdownOptions.timeoutMs}. */
export const DEFAULT_SHUTDOWN_TIMEOUT_MS = 30_000;

/** The error handler used when none is given: a bare 500, no internal details. */
export function internalServerError(): Response {
  return new Response("Internal Server Error\n", {
    status: 500,
    headers: { "content-type": "text/plain; charset=utf-8" },
  });
}
