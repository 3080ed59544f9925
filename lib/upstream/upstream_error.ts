/**
 * The one error type the upstream client throws, classified so the handler
 * can choose a status code, a retry, and whether to mark an endpoint down.
 *
 * @module
 */

/**
 * - `connect-failed`: no TCP connection (refused, unreachable, DNS); nothing was sent. 502.
 * - `connect-timeout`: the connect did not finish in time; nothing was sent. 504.
 * - `timeout`: the backend sent nothing (or read nothing) for the idle timeout. 504.
 * - `reset`: the connection broke or closed early. 502.
 * - `protocol`: the backend's response was malformed. 502.
 * - `body-too-large`: the client's body exceeded the configured limit. 413.
 * - `client-body`: reading the client's request body failed (client gone or bad framing). 400.
 * - `aborted`: the client went away; nobody is waiting for a status.
 */
export type UpstreamErrorKind =
  | "connect-failed"
  | "connect-timeout"
  | "timeout"
  | "reset"
  | "protocol"
  | "body-too-large"
  | "client-body"
  | "aborted";

/** A failed exchange with a backend. */
export class UpstreamError extends Error {
  override name = "UpstreamError";
  readonly kind: UpstreamErrorKind;
  /**
   * True when the failure happened on a reused keep-alive connection before
   * any byte of a response arrived: the backend probably closed it while idle,
   * and an idempotent request may be replayed on a fresh connection.
   */
  readonly staleConnection: boolean;
  /**
   * True for a `reset` or a `timeout` before any byte of a response arrived,
   * on a fresh or a reused connection: a request that `isReplayable()`
   * (upstream_client.ts) says may be sent again can go to another endpoint
   * (RFC 9110 section 9.2.2), as nginx's `proxy_next_upstream error timeout`
   * does.
   */
  readonly beforeResponse: boolean;

  constructor(
    kind: UpstreamErrorKind,
    message: string,
    options: { cause?: unknown; staleConnection?: boolean; beforeResponse?: boolean } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.kind = kind;
    this.staleConnection = options.staleConnection ?? false;
    this.beforeResponse = options.beforeResponse ?? this.staleConnection;
  }
}
