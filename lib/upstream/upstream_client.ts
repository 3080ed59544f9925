/**
 * An HTTP/1.1 client for backends over `Deno.connect`, chosen over `fetch`
 * because `fetch` decodes gzip/br bodies it cannot be told to leave alone,
 * adds headers the client never sent, follows HTTP_PROXY and has no connect
 * timeout (docs/deno-workarounds.md). Against a `fetch` handler with the same
 * header rules it is faster on small bodies and costs more CPU on large ones
 * (a JS stream per chunk, where fetch's body goes from socket to socket inside
 * Deno); the figures are in docs/benchmarks.md.
 *
 * Owns one request/response exchange on a pooled connection: the request head
 * and body (Content-Length kept, chunked when the length is unknown, streamed
 * with backpressure, counted against a limit), the response head (1xx
 * skipped; HEAD/204/304 bodiless), and the response body as a stream that
 * reads the socket only as fast as the client takes it. Content-Length bodies
 * up to 64 KiB are read whole and returned as bytes (cheaper for the server to
 * send). A connection goes back to the pool only after a complete,
 * well-framed exchange; anything else closes it.
 *
 * Knows nothing of routes, endpoints choice, retries across endpoints, or
 * which headers to forward: callers pass the exact head to send.
 *
 * @module
 */

import type { Endpoint } from "../routing/snapshot.ts";
import {
  encodeRequestHead,
  parseChunkSize,
  parseContentLength,
  type ResponseHead,
} from "./http1.ts";
import { releaseTakenChunk, releaseWrittenChunk } from "./deno_internal.ts";
import type { UpstreamConnection } from "./upstream_connection.ts";
import { UpstreamError } from "./upstream_error.ts";
import type { UpstreamPool } from "./upstream_pool.ts";

/** What to send to the backend. */
export interface UpstreamRequest {
  readonly method: string;
  /** Request target as received (path and query), never re-encoded. */
  readonly target: string;
  /**
   * Header fields in order. No Transfer-Encoding (added here for a stream without a length);
   * a Content-Length, if present, must equal the body's length (added here when absent).
   */
  readonly headers: readonly (readonly [string, string])[];
  /** None, buffered bytes (replayable), or a stream. */
  readonly body: Uint8Array<ArrayBuffer> | ReadableStream<Uint8Array> | null;
  /** For a stream body: the declared length, sent as Content-Length and enforced. Omitted: chunked. */
  readonly contentLength?: number | undefined;
  /** Stream bodies longer than this fail with `body-too-large`. */
  readonly maxBodyBytes?: number | undefined;
  /** The client went away: fails the exchange with `aborted`, or ends the body stream, and closes the socket. */
  readonly signal?: AbortSignal | undefined;
  /**
   * Instead of `signal`, for a request whose body (if any) is buffered: the
   * client's signal, asked for only when needed: before a new connection is
   * opened, and when the backend has not answered within 50 to 100 ms
   * (`UpstreamPool.watchClient`). Until then the client's leaving goes
   * unnoticed. Deno.serve pays a cancellation watch (an async op) for each
   * request whose signal is read, which a fast exchange never needs.
   */
  readonly clientSignal?: (() => AbortSignal) | undefined;
  /** Upgrade request: a 101 answer hands over the socket instead of a body. */
  readonly upgrade?: boolean | undefined;
  /**
   * For a stream body of unknown length whose end may be a reset in disguise
   * (an HTTP/2 client's: Deno 2.9.6 ends the body cleanly when the client
   * resets the stream, and aborts `signal` only a few ms later): how long to
   * wait for `signal` before sending the last chunk, so a cut upload never
   * reaches the backend as a complete request.
   */
  readonly confirmBodyEndMs?: number | undefined;
  /**
   * The bodies' chunks belong to this exchange alone, so their memory is released
   * as soon as it is done with them instead of at V8's next collection (see
   * `deno_internal.ts`): a streamed request body's chunks once written to the
   * backend (they must come from `Deno.serve`, a fresh buffer each), and the
   * response body's once the next is asked for (it must go straight into a
   * `Deno.serve` response). Must stay unset when JavaScript reads the response
   * body or keeps the request body's chunks.
   */
  readonly releaseBodyChunks?: boolean | undefined;
}

/** How a response body ended, for access logs. */
export interface BodyOutcome {
  /** Body bytes relayed (after de-chunking). */
  readonly bytes: number;
  /** False when the backend, the client or a timeout cut it short. */
  readonly complete: boolean;
  readonly error?: UpstreamError | undefined;
}

/** The backend's answer, hop-by-hop headers still included (the caller strips them). */
export interface UpstreamResponse {
  readonly status: number;
  readonly statusText: string;
  readonly headers: [string, string][];
  /** Lowercased tokens of the Connection header(s). */
  readonly connectionTokens: readonly string[];
  readonly body: Uint8Array<ArrayBuffer> | ReadableStream<Uint8Array> | null;
  /** Settles when the body has been relayed, abandoned or failed. Never rejects. */
  readonly done: Promise<BodyOutcome>;
  /** Present only for a 101 to an upgrade request: the raw socket and any bytes read past the head. */
  readonly tunnel?: { readonly conn: Deno.Conn; readonly initial: Uint8Array };
}

const IDEMPOTENT = new Set(["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"]);
const CRLF = new Uint8Array([13, 10]);
const LAST_CHUNK = new TextEncoder().encode("0\r\n\r\n");
const COALESCE_BYTES = 64 * 1024;
/** Content-Length bodies up to this size are read whole before the response is returned. */
const FULL_BODY_BYTES = 64 * 1024;
const MAX_TRAILER_LINES = 128;
const MAX_INTERIM_ANSWERS = 1_000;
/** Statuses whose Response must have a null body in Deno (Fetch's "null body status"). */
const NULL_BODY_STATUS = new Set([101, 103, 204, 205, 304]);
/** One chunk read ahead of the client: reading and writing overlap, memory stays bounded. */
const BODY_QUEUE = new CountQueuingStrategy({ highWaterMark: 1 });

/**
 * Sends one request to `endpoint` over a pooled connection and returns the
 * response once its head has arrived. A request that failed on a reused
 * connection before any response byte (the backend closed it while idle) is
 * replayed once on a fresh connection when it is idempotent and its body is
 * buffered.
 *
 * @throws {UpstreamError}
 */
export async function sendUpstream(
  pool: UpstreamPool,
  endpoint: Endpoint,
  request: UpstreamRequest,
): Promise<UpstreamResponse> {
  // Not even a connect for a client already gone (an HTTP/2 client resetting streams).
  if (isAborted(request.signal)) {
    throw new UpstreamError("aborted", "Cannot proxy: client went away");
  }
  let signal = request.signal;
  const framing = requestFraming(request);
  let conn = pool.takeIdle(endpoint);
  if (conn === undefined) {
    // Connecting takes a while: watch the client from the start.
    signal ??= request.clientSignal?.();
    conn = await pool.connect(endpoint, { signal });
  }
  try {
    return await exchange(pool, conn, request, framing, signal);
  } catch (error) {
    if (error instanceof UpstreamError && error.staleConnection && isReplayable(request)) {
      // An aborted signal makes connect() fail with `aborted` before opening anything.
      signal ??= request.clientSignal?.();
      const fresh = await pool.connect(endpoint, { signal });
      return await exchange(pool, fresh, request, framing, signal);
    }
    throw error;
  }
}

/** How a request body is framed on the wire: the field to add, if any, and chunking. */
interface RequestFraming {
  readonly extra: [string, string] | undefined;
  readonly chunked: boolean;
}

/**
 * Decides the body's framing, and refuses a request whose own framing fields
 * say otherwise: a Content-Length that is not the length sent (also one of
 * two that disagree: an HTTP/2 client's second `content-length` reaches the
 * handler unchecked, and a backend reading that one would take bytes of the
 * next request on the connection as this body), or any Transfer-Encoding.
 *
 * @throws {UpstreamError} `client-body` (400): nothing has been sent.
 */
function requestFraming(request: UpstreamRequest): RequestFraming {
  const { body } = request;
  // The length the body will have on the wire; undefined when chunked.
  const length = body === null
    ? 0
    : body instanceof Uint8Array
    ? body.length
    : request.contentLength;
  let declared = false;
  for (const [name, value] of request.headers) {
    const n = name.length;
    if (n !== 14 && n !== 17) continue;
    const lower = name.toLowerCase();
    if (lower === "content-length") {
      if (length === undefined || parseContentLength(value) !== length) {
        throw new UpstreamError(
          "client-body",
          `Cannot forward request: Content-Length "${value}" disagrees with the body's ${
            length === undefined ? "unknown length" : `${length} bytes`
          }`,
        );
      }
      declared = true;
    } else if (lower === "transfer-encoding") {
      throw new UpstreamError(
        "client-body",
        `Cannot forward request: Transfer-Encoding "${value}" is the upstream client's to set`,
      );
    }
  }
  if (body === null || declared) return { extra: undefined, chunked: false };
  if (length === undefined) return { extra: ["Transfer-Encoding", "chunked"], chunked: true };
  return { extra: ["Content-Length", String(length)], chunked: false };
}

/**
 * One exchange on `conn`: the request written (its body pumped alongside when
 * streamed), interim answers skipped, then the response as its framing says:
 * a tunnel after a 101, no body, bytes read whole, or a stream.
 */
async function exchange(
  pool: UpstreamPool,
  conn: UpstreamConnection,
  request: UpstreamRequest,
  framing: RequestFraming,
  clientSignal: AbortSignal | undefined,
): Promise<UpstreamResponse> {
  const x = new Exchange(pool, conn, request);
  const head = encodeHead(x, framing.extra);
  x.watchClient(clientSignal);
  const { body } = request;
  let responseHead: ResponseHead;
  try {
    await conn.write(firstWrite(head, body));
    if (body instanceof Uint8Array && body.length > COALESCE_BYTES) await conn.write(body);
    if (body instanceof ReadableStream) x.pump(body, framing.chunked);
    responseHead = await conn.readHead();
    let interim = 0;
    while (responseHead.status < 200 && !(responseHead.status === 101 && request.upgrade)) {
      checkInterim(responseHead.status, ++interim);
      responseHead = await conn.readHead();
    }
  } catch (error) {
    throw x.failed(error);
  }

  // From here on the response is committed; failures end its body stream.
  x.commit(responseHead);
  if (responseHead.status === 101) return x.answer(null, x.tunnel());
  if (x.bodyless || (responseHead.framing === "length" && responseHead.contentLength === 0)) {
    return bodylessAnswer(x, responseHead);
  }
  if (responseHead.status === 205) return resetContentAnswer(x, responseHead);
  if (responseHead.framing === "length" && responseHead.contentLength <= FULL_BODY_BYTES) {
    // Small bodies are read whole: Deno.serve sends bytes far cheaper than a stream, and a
    // backend failing mid-body still gets a clean 502 instead of a truncated response.
    let bytes: Uint8Array<ArrayBuffer>;
    try {
      bytes = responseHead.contentLength <= conn.buffered
        ? conn.takeBuffered(responseHead.contentLength)
        : await conn.readExactly(responseHead.contentLength);
    } catch (error) {
      throw x.bodyFailed(error);
    }
    x.finish(true, bytes.length);
    return x.answer(bytes);
  }
  return x.answer(responseBodyStream(x, responseHead));
}

/** Listener options of the client's abort signal, shared by every exchange. */
const ONCE: AddEventListenerOptions = Object.freeze({ once: true });

/**
 * The state of one exchange, from the request head to the end of the
 * response body: whether the client left, how the request body pump fares,
 * and when the connection goes back to the pool (once; reusable only after a
 * complete, well-framed exchange). One object per exchange, in place of a
 * closure per concern; it is also the listener of the client's abort signal.
 */
class Exchange implements EventListenerObject {
  readonly conn: UpstreamConnection;
  readonly request: UpstreamRequest;
  readonly #pool: UpstreamPool;
  /** The client's signal, once asked for. */
  #signal: AbortSignal | undefined;
  #aborted = false;
  #released = false;
  #pumpState: "none" | "running" | "done" | "failed" = "none";
  #pumpError: UpstreamError | undefined;
  /** The response head, once committed. */
  #head: ResponseHead | undefined;
  #bodyless = false;
  #mustClose = false;
  /**
   * Set once the response body is over; the connection is released by
   * whichever of the response and the request body pump finishes last.
   */
  #finished = false;
  /**
   * Settled by `finish`: already settled for the common bodiless and buffered
   * cases (no resolver per request), else by the body stream.
   */
  #done: Promise<BodyOutcome> | undefined;
  #resolveDone: ((outcome: BodyOutcome) => void) | undefined;

  constructor(pool: UpstreamPool, conn: UpstreamConnection, request: UpstreamRequest) {
    this.#pool = pool;
    this.conn = conn;
    this.request = request;
  }

  /** The client went away before the response was over: the socket was closed under it. */
  get aborted(): boolean {
    return this.#aborted;
  }

  /** A HEAD, 204 or 304 answer (once committed). */
  get bodyless(): boolean {
    return this.#bodyless;
  }

  /** Returns the connection to the pool, once. */
  #release(reusable: boolean): void {
    if (this.#released) return;
    this.#released = true;
    // No unwatchClient() needed: the pool checks only the connections it holds active.
    this.#pool.release(this.conn, reusable);
  }

  /** The client's signal aborted: close the socket so pending I/O fails. */
  handleEvent(): void {
    this.#aborted = true;
    this.conn.close();
  }

  #stopWatching(): void {
    this.#signal?.removeEventListener("abort", this);
  }

  /**
   * Listens for the client going away: on `clientSignal` at once, or (a lazy
   * `request.clientSignal`) only once the exchange has waited a while.
   *
   * @throws {UpstreamError} `aborted` when the client is gone already.
   */
  watchClient(clientSignal: AbortSignal | undefined): void {
    if (clientSignal !== undefined) {
      this.#signal = clientSignal;
      if (clientSignal.aborted) {
        this.#release(false);
        throw new UpstreamError("aborted", "Cannot proxy: client went away");
      }
      clientSignal.addEventListener("abort", this, ONCE);
    } else if (this.request.clientSignal !== undefined) {
      // Only an exchange still waiting (for its answer, or to send a buffered body) asks
      // for the client's signal; the watch is dropped before the response is returned, while
      // the request is still open (a failed exchange's connection leaves the active set).
      this.#pool.watchClient(this.conn, () => this.#watchLate());
    }
  }

  #watchLate(): void {
    let signal: AbortSignal;
    try {
      signal = this.request.clientSignal!();
    } catch {
      // The request is closed already: its client is gone.
      this.handleEvent();
      return;
    }
    this.#signal = signal;
    if (signal.aborted) this.handleEvent();
    else signal.addEventListener("abort", this, ONCE);
  }

  /** Streams the request body alongside the exchange. */
  pump(body: ReadableStream<Uint8Array>, chunked: boolean): void {
    const { conn, request } = this;
    this.#pumpState = "running";
    pumpBody(conn, body, {
      chunked,
      declared: request.contentLength,
      max: request.maxBodyBytes,
      signal: this.#signal,
      confirmEndMs: request.confirmBodyEndMs,
      release: request.releaseBodyChunks === true,
    }).then(
      () => {
        this.#pumpState = "done";
      },
      (error: UpstreamError) => {
        this.#pumpState = "failed";
        this.#pumpError = error;
        // A client-side failure means the backend must never see a complete request.
        if (error.kind === "body-too-large" || error.kind === "client-body") conn.close();
      },
    );
  }

  /** Ends an exchange that failed before its response head; returns the error to throw. */
  failed(error: unknown): UpstreamError {
    this.#stopWatching();
    this.#release(false);
    if (this.#aborted) {
      return new UpstreamError("aborted", "Cannot proxy: client went away", { cause: error });
    }
    const pumpError = this.#pumpError;
    if (pumpError !== undefined && pumpError.kind !== "reset" && pumpError.kind !== "timeout") {
      return pumpError;
    }
    return error instanceof UpstreamError
      ? error
      : new UpstreamError("reset", "Cannot exchange with backend", { cause: error });
  }

  /** The response head has arrived: the response is committed. */
  commit(head: ResponseHead): void {
    this.#head = head;
    // Kept with the connection when it goes back to the pool (reuse stops before it).
    this.conn.keepAliveMs = head.keepAliveTimeoutMs;
    this.#bodyless = this.request.method === "HEAD" || head.status === 204 ||
      head.status === 304;
    this.#mustClose = !head.keepAlive || (!this.#bodyless && head.framing === "close");
  }

  /** Ends a response whose body the client never gets: the connection is closed. */
  abandon(): void {
    this.#finished = true;
    this.#stopWatching();
    this.#release(false);
    this.#done = Promise.resolve({ bytes: 0, complete: true });
  }

  /** Ends a response whose small body could not be read; returns the error to throw. */
  bodyFailed(error: unknown): unknown {
    this.#finished = true;
    this.#stopWatching();
    this.#release(false);
    if (this.#aborted) {
      return new UpstreamError("aborted", "Cannot proxy: client went away", { cause: error });
    }
    return error;
  }

  /** After a 101: the socket leaves the pool for the caller's tunnel. */
  tunnel(): NonNullable<UpstreamResponse["tunnel"]> {
    this.#stopWatching();
    this.#pool.detach(this.conn);
    this.#released = true;
    this.#finished = true;
    this.#done = Promise.resolve({ bytes: 0, complete: true });
    const initial = this.conn.takeAllBuffered();
    return { conn: this.conn.detach(), initial };
  }

  /**
   * The response body is over (or cut short): the connection goes back to the
   * pool, reusable only after a complete exchange, and `done` settles. The
   * client leaving mid-body also closed the socket (a pending read then fails).
   */
  finish(complete: boolean, bytes: number, error?: UpstreamError): void {
    if (this.#finished) return;
    this.#finished = true;
    this.#stopWatching();
    // Reuse only after a complete exchange: the whole request body sent (a backend that
    // answered before reading it leaves the connection in an unknown state) and the
    // whole response read.
    const pumpState = this.#pumpState;
    this.#release(
      complete && pumpState !== "running" && pumpState !== "failed" && !this.#mustClose,
    );
    const outcome: BodyOutcome = { bytes, complete, error };
    if (this.#resolveDone !== undefined) this.#resolveDone(outcome);
    else this.#done = Promise.resolve(outcome);
  }

  /** The response to return, with `body`. */
  answer(body: UpstreamResponse["body"], tunnel?: UpstreamResponse["tunnel"]): UpstreamResponse {
    this.conn.unwatchClient();
    let done = this.#done;
    if (done === undefined) {
      const { promise, resolve } = Promise.withResolvers<BodyOutcome>();
      this.#done = done = promise;
      this.#resolveDone = resolve;
    }
    const head = this.#head!;
    const response = {
      status: head.status,
      statusText: head.statusText,
      headers: head.headers,
      connectionTokens: head.connectionTokens,
      body,
      done,
    };
    return tunnel === undefined ? response : { ...response, tunnel };
  }
}

/**
 * The request head, in the connection's write buffer when it fits.
 *
 * @throws {UpstreamError} `client-body` (a field that cannot be sent): nothing was written.
 */
function encodeHead(x: Exchange, extra: [string, string] | undefined): Uint8Array {
  const { conn, request } = x;
  try {
    return encodeRequestHead(request.method, request.target, request.headers, {
      extra,
      buffer: (size) => conn.writeBuffer(size),
    });
  } catch (error) {
    // Nothing was written, but the pool's bookkeeping for a taken connection assumes an
    // exchange: close it rather than park it (a rare path).
    x.abandon();
    throw new UpstreamError("client-body", (error as Error).message, { cause: error });
  }
}

/** The first write: the head, with a small buffered body in the same packet. */
function firstWrite(head: Uint8Array, body: UpstreamRequest["body"]): Uint8Array {
  if (!(body instanceof Uint8Array) || body.length === 0 || body.length > COALESCE_BYTES) {
    return head;
  }
  // One write (one packet) for head and body: into the head's buffer when it has room.
  const room = head.byteOffset === 0 && head.buffer.byteLength - head.length >= body.length;
  const both = room
    ? new Uint8Array(head.buffer, 0, head.length + body.length)
    : new Uint8Array(head.length + body.length);
  if (!room) both.set(head);
  both.set(body, head.length);
  return both;
}

/** @throws {UpstreamError} `protocol` for an interim answer that must not be skipped. */
function checkInterim(status: number, count: number): void {
  if (status === 101) {
    throw new UpstreamError("protocol", "Cannot accept 101 to a request without Upgrade");
  }
  // Each interim answer restarts the idle timeout: bound them, or a backend sending
  // "100 Continue" forever would hold the client (and a worker's CPU) forever.
  if (count > MAX_INTERIM_ANSWERS) {
    throw new UpstreamError(
      "protocol",
      `Cannot accept more than ${MAX_INTERIM_ANSWERS} interim (1xx) answers`,
    );
  }
}

/** A response without body (HEAD, 204, 304, or a Content-Length of 0): complete at once. */
function bodylessAnswer(x: Exchange, head: ResponseHead): UpstreamResponse {
  x.finish(true, 0);
  // RFC 9110 section 8.6: never a Content-Length on a 204 (Deno drops it towards HTTP/1.1
  // clients, but passes it to HTTP/2 ones), as nginx does.
  if (head.status === 204 && head.framing === "length") {
    normalizeContentLength(head.headers, undefined);
  }
  if (x.request.method !== "HEAD") return x.answer(null);
  // A HEAD answer tells the length a GET would have: Deno writes `content-length: 0` for a
  // null body and drops a listed one ("5, 5"), so pass the single parsed value, or an
  // empty stream (no length at all) when the backend gave none.
  if (head.framing !== "length") {
    // Deno refuses any body, even an empty stream, on these statuses (and sends no length).
    return x.answer(NULL_BODY_STATUS.has(head.status) ? null : emptyBody());
  }
  normalizeContentLength(head.headers, head.contentLength);
  return x.answer(null);
}

/**
 * A 205 has no content (RFC 9110 section 15.3.6) and Deno refuses one, but RFC 9112 frames
 * whatever it carries like a 200's (an empty chunked body, or one delimited by the close):
 * the client gets none, and the connection is closed rather than read to its end.
 */
function resetContentAnswer(x: Exchange, head: ResponseHead): UpstreamResponse {
  x.abandon();
  normalizeContentLength(head.headers, undefined);
  return x.answer(null);
}

/** The response body as a stream that reads the socket only as fast as the client takes it. */
function responseBodyStream(x: Exchange, head: ResponseHead): ReadableStream<Uint8Array> {
  const conn = x.conn;
  const next = bodyReader(conn, head);
  let bytes = 0;
  let onStall: (() => void) | undefined;
  const releaseChunks = x.request.releaseBodyChunks === true;
  // The chunk enqueued last, released once the next pull has awaited (Deno.serve has it then).
  let taken: Uint8Array<ArrayBuffer> | undefined;
  return new ReadableStream<Uint8Array>({
    start(controller) {
      // The client took nothing for the I/O timeout: the pool closed the connection.
      onStall = () => {
        const error = new UpstreamError(
          "timeout",
          "Cannot relay body: the client took nothing within the timeout",
        );
        x.finish(false, bytes, error);
        controller.error(error);
      };
    },
    async pull(controller) {
      conn.consumerReady();
      try {
        const chunk = await next();
        if (taken !== undefined) {
          releaseTakenChunk(taken);
          taken = undefined;
        }
        if (chunk === null) {
          controller.close();
          x.finish(true, bytes);
        } else {
          bytes += chunk.length;
          controller.enqueue(chunk);
          if (releaseChunks) taken = chunk;
          conn.waitForConsumer(onStall!);
        }
      } catch (error) {
        const upstreamError = x.aborted
          ? new UpstreamError("aborted", "Cannot relay body: client went away", { cause: error })
          : error instanceof UpstreamError
          ? error
          : new UpstreamError("reset", "Cannot read body", { cause: error });
        x.finish(false, bytes, upstreamError);
        controller.error(upstreamError);
      }
    },
    cancel() {
      x.finish(false, bytes, new UpstreamError("aborted", "Cannot relay body: client went away"));
    },
  }, BODY_QUEUE);
}

/**
 * Whether `request` may be sent again after it failed on the wire before any
 * answer: its method is idempotent (RFC 9110 section 9.2.2), its body is
 * buffered (a stream cannot be read twice), and its client is still there.
 */
export function isReplayable(request: UpstreamRequest): boolean {
  return IDEMPOTENT.has(request.method) &&
    (request.body === null || request.body instanceof Uint8Array) &&
    request.signal?.aborted !== true;
}

function isAborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true;
}

/** Resolves true as soon as `signal` aborts, false after `ms` without. */
function abortedWithin(signal: AbortSignal, ms: number): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(true);
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(timer);
      resolve(true);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve(false);
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

function emptyBody(): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(controller) {
      controller.close();
    },
  });
}

/** Leaves one Content-Length field, holding `length`, where the first one was; none for undefined. */
function normalizeContentLength(headers: [string, string][], length: number | undefined): void {
  let kept = false;
  for (let i = 0; i < headers.length; i++) {
    const [name] = headers[i]!;
    if (name.length !== 14 || name.toLowerCase() !== "content-length") continue;
    if (kept || length === undefined) {
      headers.splice(i--, 1);
    } else {
      headers[i] = [name, String(length)];
      kept = true;
    }
  }
}

/** Returns a function yielding de-framed body chunks, then null at the end. */
function bodyReader(
  conn: UpstreamConnection,
  head: ResponseHead,
): () => Promise<Uint8Array<ArrayBuffer> | null> {
  if (head.framing === "length") {
    let remaining = head.contentLength;
    return async () => {
      if (remaining === 0) return null;
      const chunk = await conn.readSome(remaining);
      if (chunk === null) {
        throw new UpstreamError(
          "reset",
          "Cannot read body: connection closed before Content-Length",
        );
      }
      remaining -= chunk.length;
      return chunk;
    };
  }
  if (head.framing === "close") {
    return () => conn.readSome(Number.MAX_SAFE_INTEGER);
  }
  let chunkRemaining = 0;
  let afterData = false;
  let finished = false;
  return async () => {
    if (finished) return null;
    if (chunkRemaining === 0) {
      if (afterData) {
        await conn.expect(CRLF);
        afterData = false;
      }
      const size = parseChunkSizeLine(await conn.readLine());
      if (size === 0) {
        // Trailer section: consumed and dropped (Deno.serve cannot send trailers).
        for (let i = 0;; i++) {
          if (i > MAX_TRAILER_LINES) {
            throw new UpstreamError("protocol", "Cannot parse chunked body: too many trailers");
          }
          if ((await conn.readLine()) === "") break;
        }
        finished = true;
        return null;
      }
      chunkRemaining = size;
    }
    const chunk = await conn.readSome(chunkRemaining);
    if (chunk === null) {
      throw new UpstreamError("reset", "Cannot read body: connection closed within a chunk");
    }
    chunkRemaining -= chunk.length;
    if (chunkRemaining === 0) afterData = true;
    return chunk;
  };
}

function parseChunkSizeLine(line: string): number {
  try {
    return parseChunkSize(line);
  } catch (error) {
    throw new UpstreamError("protocol", (error as Error).message, { cause: error });
  }
}

async function pumpBody(
  conn: UpstreamConnection,
  body: ReadableStream<Uint8Array>,
  options: {
    chunked: boolean;
    declared: number | undefined;
    max: number | undefined;
    signal: AbortSignal | undefined;
    confirmEndMs: number | undefined;
    /** Release each chunk once it is written (see `UpstreamRequest.releaseBodyChunks`). */
    release: boolean;
  },
): Promise<void> {
  const reader = body.getReader();
  let sent = 0;
  try {
    for (;;) {
      let result: ReadableStreamReadResult<Uint8Array>;
      try {
        result = await reader.read();
      } catch (error) {
        throw new UpstreamError("client-body", "Cannot read request body from client", {
          cause: error,
        });
      }
      if (result.done) break;
      const chunk = result.value;
      if (chunk.length === 0) continue;
      sent += chunk.length;
      if (options.max !== undefined && sent > options.max) {
        throw new UpstreamError("body-too-large", `Cannot forward body: over ${options.max} bytes`);
      }
      if (options.declared !== undefined && sent > options.declared) {
        throw new UpstreamError("client-body", "Cannot forward body: longer than Content-Length");
      }
      if (!options.chunked) {
        await conn.write(chunk);
      } else if (chunk.length <= COALESCE_BYTES) {
        const prefix = chunk.length.toString(16) + "\r\n";
        const framed = new Uint8Array(prefix.length + chunk.length + 2);
        for (let i = 0; i < prefix.length; i++) framed[i] = prefix.charCodeAt(i);
        framed.set(chunk, prefix.length);
        framed[framed.length - 2] = 13;
        framed[framed.length - 1] = 10;
        await conn.write(framed);
        releaseWrittenChunk(framed);
      } else {
        await conn.write(new TextEncoder().encode(chunk.length.toString(16) + "\r\n"));
        await conn.write(chunk);
        await conn.write(CRLF);
      }
      if (options.release) releaseWrittenChunk(chunk as Uint8Array<ArrayBuffer>);
    }
    if (options.declared !== undefined && sent !== options.declared) {
      throw new UpstreamError("client-body", "Cannot forward body: shorter than Content-Length");
    }
    if (options.chunked) {
      const { signal, confirmEndMs } = options;
      if (signal !== undefined && confirmEndMs !== undefined) {
        if (await abortedWithin(signal, confirmEndMs)) {
          throw new UpstreamError("aborted", "Cannot forward body: the client reset the stream");
        }
      }
      await conn.write(LAST_CHUNK);
    }
  } catch (error) {
    reader.cancel(error).catch(() => {});
    throw error instanceof UpstreamError
      ? error
      : new UpstreamError("reset", "Cannot forward body", { cause: error });
  } finally {
    reader.releaseLock();
  }
}
