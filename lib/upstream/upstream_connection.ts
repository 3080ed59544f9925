/**
 * One keep-alive TCP connection to a backend endpoint, with a read buffer and
 * the I/O bookkeeping the pool's timeout sweeper needs.
 *
 * Owns: buffered reads (head, lines, body bytes), writes, the "idle probe"
 * (while pooled, a read is kept pending so a backend closing the idle
 * connection is noticed at once instead of on the next request), and turning
 * socket failures into {@linkcode UpstreamError}s. Knows nothing of routing,
 * retries or which request it carries.
 *
 * @module
 */

import {
  decodeLatin1,
  findHeadEnd,
  parseResponseHead,
  type ResponseHead,
  UpstreamProtocolError,
} from "./http1.ts";
import { UpstreamError } from "./upstream_error.ts";

/** Read buffer size; also the largest response head accepted. */
export const READ_BUFFER_BYTES = 64 * 1024;
const MAX_LINE = 8 * 1024;
const DIRECT_READ_MIN = 16 * 1024;
/** Size of the buffers large body reads go straight into (see `readSome`). */
const BODY_CHUNK_BYTES = 256 * 1024;
/** Request heads (and small bodies) are encoded into a reused per-connection buffer this big. */
const WRITE_BUFFER_BYTES = 16 * 1024;

/**
 * A clock read on every I/O call to stamp when it started: the pool's sweeper
 * advances it on each tick, so the hot path reads a field instead of calling
 * `performance.now()` (an op) several times per request. Deadlines checked
 * against it are late by at most one tick, never early (the sweeper allows
 * for that).
 */
export interface CoarseClock {
  readonly now: number;
}

/** How long before a backend's advertised keep-alive timeout a pooled connection stops being reused. */
const KEEP_ALIVE_MARGIN_MS = 1_000;

/** A pooled connection to one endpoint. */
export class UpstreamConnection {
  /** `address:port` of the endpoint, the pool's key. */
  readonly endpointKey: string;
  /** How many requests this connection has carried, including the current one. */
  requests = 0;
  /** When it was last returned to the pool (on the coarse clock). */
  idleSince = 0;
  /**
   * How long the backend said it keeps this connection idle (`Keep-Alive:
   * timeout=N` of the last response), or undefined; set before it is parked.
   */
  keepAliveMs: number | undefined;
  /**
   * Reuse only before this `performance.now()` time: the backend closes it
   * then, or {@linkcode expiresAt} comes first. Set when it is parked.
   */
  reuseUntil = Infinity;
  /**
   * Not reused after this `performance.now()` time, whatever the backend
   * says: set by the pool for an endpoint named by DNS, so that its name is
   * resolved again. Infinity for endpoints given by address.
   */
  expiresAt = Infinity;
  #conn: Deno.Conn;
  #clock: CoarseClock;
  #buf = new Uint8Array(READ_BUFFER_BYTES);
  #writeBuf: Uint8Array<ArrayBuffer> | undefined;
  /** A large-read buffer left over when a read returned little (reused by the next one). */
  #spare: Uint8Array<ArrayBuffer> | undefined;
  #start = 0;
  #end = 0;
  #state: "active" | "idle" | "closed" = "active";
  #probe: Promise<number | null> | undefined;
  #onDead: ((conn: UpstreamConnection) => void) | undefined;
  #readSince = 0;
  #writeSince = 0;
  #consumerSince = 0;
  #onStall: (() => void) | undefined;
  #timedOut = false;
  #bytesReadThisExchange = 0;
  /** See {@linkcode watchClient}: run once the exchange has waited a whole check interval. */
  #onWaited: (() => void) | undefined;
  #waitedSinceTick = 0;

  /** `clock` is the pool's coarse sweeper clock (`performance.now()` time, advanced per tick). */
  constructor(conn: Deno.Conn, endpointKey: string, clock: CoarseClock) {
    this.#conn = conn;
    this.endpointKey = endpointKey;
    this.#clock = clock;
  }

  /**
   * A reusable buffer of at least `size` bytes for the next `write()` (request
   * heads), or undefined when `size` is too large. Valid until that write
   * settles; the caller writes a subarray of it.
   */
  writeBuffer(size: number): Uint8Array<ArrayBuffer> | undefined {
    if (size > WRITE_BUFFER_BYTES) return undefined;
    return this.#writeBuf ??= new Uint8Array(WRITE_BUFFER_BYTES);
  }

  /** When a read that is still pending started (on the coarse clock), or 0. */
  get readSince(): number {
    return this.#readSince;
  }

  /** When a write that is still pending started, or 0. */
  get writeSince(): number {
    return this.#writeSince;
  }

  /** Since when a body chunk handed on has waited for the consumer to take it, or 0. */
  get consumerSince(): number {
    return this.#consumerSince;
  }

  /**
   * A body chunk was handed on (to the client's response): until
   * {@linkcode consumerReady}, the consumer is stalled, and if that lasts
   * past the I/O timeout the pool closes the connection and `onStall` runs
   * (nothing is pending on the socket to fail). Without it, a client that
   * stops reading a download would hold the backend connection forever.
   */
  waitForConsumer(onStall: () => void): void {
    this.#consumerSince = this.#clock.now || 1;
    this.#onStall = onStall;
  }

  /** The consumer asked for more: it is not stalled. */
  consumerReady(): void {
    this.#consumerSince = 0;
    this.#onStall = undefined;
  }

  /**
   * Runs `onWaited` if this exchange is still waiting when the pool's client
   * check ({@linkcode UpstreamPool.watchClient}) sees it a second time, at
   * least one check interval later; cleared by {@linkcode unwatchClient}.
   * `tick` is the check's count now.
   */
  watchClient(onWaited: () => void, tick: number): void {
    this.#onWaited = onWaited;
    this.#waitedSinceTick = tick;
  }

  /** The exchange no longer waits (its answer is on its way): the watch is dropped. */
  unwatchClient(): void {
    this.#onWaited = undefined;
  }

  /**
   * Called by the pool's client check on its tick `tick`: runs the watch
   * (once) if it was set before the previous tick. Returns whether a watch is
   * still pending.
   */
  checkWatch(tick: number): boolean {
    const onWaited = this.#onWaited;
    if (onWaited === undefined) return false;
    if (this.#waitedSinceTick >= tick - 1) return true;
    this.#onWaited = undefined;
    onWaited();
    return false;
  }

  get closed(): boolean {
    return this.#state === "closed";
  }

  /** Bytes already read past the current parse position. */
  get buffered(): number {
    return this.#end - this.#start;
  }

  /** Marks the start of a new exchange on this connection (taken from the pool or new). */
  activate(): void {
    this.consumerReady();
    this.#state = "active";
    this.keepAliveMs = undefined;
    this.requests++;
    this.#bytesReadThisExchange = 0;
    this.#onWaited = undefined;
  }

  /**
   * Parks the connection in the pool. Returns false (and closes it) when it
   * cannot be reused because unread bytes remain. `onDead` runs if the
   * backend closes or talks while the connection is idle.
   */
  park(onDead: (conn: UpstreamConnection) => void): boolean {
    if (this.#state !== "active" || this.#start !== this.#end) {
      this.close();
      return false;
    }
    this.#state = "idle";
    this.#start = this.#end = 0;
    this.idleSince = this.#clock.now;
    // A second before the backend's own keep-alive timeout: a request sent as it closes the
    // connection fails, and a POST cannot be replayed (Node backends say timeout=5).
    this.reuseUntil = this.keepAliveMs === undefined ? this.expiresAt : Math.min(
      this.expiresAt,
      performance.now() + Math.max(0, this.keepAliveMs - KEEP_ALIVE_MARGIN_MS),
    );
    this.#onDead = onDead;
    // Was a bug: a connection taken and released unused still had its idle read pending, and a
    // second one on the same buffer left the answer to the orphaned read.
    if (this.#probe === undefined) {
      const probe = this.#conn.read(this.#buf);
      this.#probe = probe;
      // One handler per connection, not two closures per park (this runs once per request).
      probe.then(this.#probeSettled, this.#probeSettled);
    }
    return true;
  }

  /** The idle probe read ended: harmless once the connection is active again, else it died. */
  #probeSettled = (): void => {
    if (this.#state !== "idle") return;
    this.close();
    this.#onDead?.(this);
  };

  /**
   * Aborts pending I/O because a deadline passed; the pending call rejects
   * with a `timeout`, or, when the consumer was the one stalled, its
   * `onStall` runs.
   */
  timeout(): void {
    const onStall = this.#consumerSince === 0 ? undefined : this.#onStall;
    this.consumerReady();
    this.#timedOut = true;
    this.close();
    onStall?.();
  }

  close(): void {
    if (this.#state === "closed") return;
    this.#state = "closed";
    try {
      this.#conn.close();
    } catch {
      // Already closed by the peer or by a failed op.
    }
  }

  /** Writes all bytes. */
  async write(bytes: Uint8Array): Promise<void> {
    this.#writeSince = this.#clock.now || 1;
    try {
      let offset = 0;
      while (offset < bytes.length) {
        offset += await this.#conn.write(offset === 0 ? bytes : bytes.subarray(offset));
      }
      // A read pending meanwhile (the response head, while a request body is still being
      // sent) waits from the last byte sent: the backend is not idle while it takes the
      // body (nginx too arms its read timeout once the request is sent).
      if (this.#readSince !== 0) this.#readSince = this.#clock.now || 1;
    } catch (error) {
      throw this.#ioError(error, "write");
    } finally {
      this.#writeSince = 0;
    }
  }

  /**
   * Reads one response head (status line and header fields).
   *
   * @throws {UpstreamError} `protocol` when malformed; `reset`/`timeout` on I/O
   *   failure (`staleConnection` when a reused connection closed before any byte).
   */
  async readHead(): Promise<ResponseHead> {
    let scanFrom = this.#start;
    for (;;) {
      const end = findHeadEnd(this.#buf, scanFrom, this.#end);
      if (end !== -1) {
        const text = decodeLatin1(this.#buf, this.#start, end);
        this.#start = end;
        try {
          return parseResponseHead(text);
        } catch (error) {
          throw toUpstream(error);
        }
      }
      const before = this.#start;
      scanFrom = Math.max(this.#start, this.#end - 3);
      if (!(await this.#fill())) {
        if (this.#bytesReadThisExchange === 0) {
          throw new UpstreamError(
            "reset",
            "Cannot read response: connection closed before any byte",
            { staleConnection: this.requests > 1, beforeResponse: true },
          );
        }
        throw new UpstreamError(
          "protocol",
          "Cannot read response: connection closed within the head",
        );
      }
      scanFrom -= before - this.#start;
    }
  }

  /** Reads a CRLF-terminated line (without the CRLF), for chunk sizes and trailers. */
  async readLine(): Promise<string> {
    let scanFrom = this.#start;
    for (;;) {
      const lf = this.#buf.indexOf(10, scanFrom);
      if (lf !== -1 && lf < this.#end) {
        if (lf === this.#start || this.#buf[lf - 1] !== 13) {
          throw new UpstreamError("protocol", "Cannot parse chunked body: line without CRLF");
        }
        const line = decodeLatin1(this.#buf, this.#start, lf - 1);
        this.#start = lf + 1;
        return line;
      }
      if (this.#end - this.#start > MAX_LINE) {
        throw new UpstreamError("protocol", "Cannot parse chunked body: line too long");
      }
      const before = this.#start;
      scanFrom = this.#end;
      if (!(await this.#fill())) {
        throw new UpstreamError("reset", "Cannot read body: connection closed within a chunk");
      }
      scanFrom -= before - this.#start;
    }
  }

  /** Consumes exactly `n` bytes that must equal `expected` (the CRLF after chunk data). */
  async expect(expected: Uint8Array): Promise<void> {
    while (this.#end - this.#start < expected.length) {
      if (!(await this.#fill())) {
        throw new UpstreamError("reset", "Cannot read body: connection closed within a chunk");
      }
    }
    for (let i = 0; i < expected.length; i++) {
      if (this.#buf[this.#start + i] !== expected[i]) {
        throw new UpstreamError("protocol", "Cannot parse chunked body: missing CRLF after data");
      }
    }
    this.#start += expected.length;
  }

  /** Takes up to `max` already-buffered bytes (a copy), without reading. */
  takeBuffered(max: number): Uint8Array<ArrayBuffer> {
    const n = Math.min(max, this.#end - this.#start);
    const out = this.#buf.slice(this.#start, this.#start + n);
    this.#start += n;
    return out;
  }

  /**
   * Returns up to `max` body bytes: buffered ones first, else one socket read.
   * The bytes are the chunk's own (never a view of the read buffer), so whoever
   * takes them may keep or detach them.
   *
   * @returns the bytes, or null at end of stream.
   */
  async readSome(max: number): Promise<Uint8Array<ArrayBuffer> | null> {
    if (this.#end > this.#start) return this.takeBuffered(max);
    if (max > DIRECT_READ_MIN && this.#probe === undefined) {
      // Large bodies: one big read straight into a new buffer that becomes the chunk
      // (it is handed to the client response, so it cannot be reused). Reads on loopback
      // often return hundreds of KiB at once, and every chunk costs a trip through the
      // response stream, so fewer, bigger chunks are much cheaper. A read that filled
      // less than half of it is copied out and the buffer kept for the next read, so a
      // trickling backend does not pin 256 KiB per small chunk.
      // A read that may reach the body's end asks for one byte more: bytes a backend
      // sent past that end then land in the read buffer, where `park()` sees them and
      // refuses to pool the connection (they would answer the next request).
      const size = max <= BODY_CHUNK_BYTES ? max + 1 : BODY_CHUNK_BYTES;
      let buffer = this.#spare;
      this.#spare = undefined;
      if (buffer === undefined || buffer.length < size) buffer = new Uint8Array(size);
      this.#readSince = this.#clock.now || 1;
      let n: number | null;
      try {
        n = await this.#conn.read(buffer.subarray(0, size));
      } catch (error) {
        throw this.#ioError(error, "read");
      } finally {
        this.#readSince = 0;
      }
      if (n === null) return null;
      this.#bytesReadThisExchange += n;
      if (n > max) {
        // The buffer is empty here (buffered bytes are taken first, above).
        this.#buf[0] = buffer[max]!;
        this.#start = 0;
        this.#end = 1;
        n = max;
      }
      if (n * 2 >= buffer.length) return buffer.subarray(0, n);
      this.#spare = buffer;
      return buffer.slice(0, n);
    }
    if (!(await this.#fill())) return null;
    return this.takeBuffered(max);
  }

  /**
   * Reads exactly `n` body bytes into one new buffer (buffered bytes first, then
   * socket reads straight into it).
   *
   * @throws {UpstreamError} `reset` when the connection closes first.
   */
  async readExactly(n: number): Promise<Uint8Array<ArrayBuffer>> {
    // One byte of room past the body: a byte the backend sent after it is seen (see `readSome`).
    const out = new Uint8Array(n + 1);
    const first = Math.min(n, this.#end - this.#start);
    out.set(this.#buf.subarray(this.#start, this.#start + first));
    this.#start += first;
    let filled = first;
    while (filled < n && this.#probe === undefined) {
      this.#readSince = this.#clock.now || 1;
      let read: number | null;
      try {
        read = await this.#conn.read(out.subarray(filled));
      } catch (error) {
        throw this.#ioError(error, "read");
      } finally {
        this.#readSince = 0;
      }
      if (read === null) {
        throw new UpstreamError(
          "reset",
          "Cannot read body: connection closed before Content-Length",
        );
      }
      this.#bytesReadThisExchange += read;
      filled += read;
    }
    if (filled > n) {
      // The buffer is empty here: its bytes were taken first, above.
      this.#buf[0] = out[n]!;
      this.#start = 0;
      this.#end = 1;
    }
    while (filled < n) {
      // Only with the idle probe still pending (a fresh exchange on a pooled connection).
      if (this.#end === this.#start && !(await this.#fill())) {
        throw new UpstreamError(
          "reset",
          "Cannot read body: connection closed before Content-Length",
        );
      }
      const take = Math.min(n - filled, this.#end - this.#start);
      out.set(this.#buf.subarray(this.#start, this.#start + take), filled);
      this.#start += take;
      filled += take;
    }
    return out.subarray(0, n);
  }

  /** Bytes read after the response head of an upgrade (the first tunnel bytes). */
  takeAllBuffered(): Uint8Array<ArrayBuffer> {
    return this.takeBuffered(this.#end - this.#start);
  }

  /** The socket, for a tunnel after a 101; the connection is no longer managed. */
  detach(): Deno.Conn {
    this.#state = "closed";
    return this.#conn;
  }

  async #fill(): Promise<boolean> {
    if (this.#start === this.#end) {
      this.#start = this.#end = 0;
    } else if (this.#end === this.#buf.length) {
      if (this.#start === 0) {
        throw new UpstreamError("protocol", "Cannot read response: head larger than 64 KiB");
      }
      this.#buf.copyWithin(0, this.#start, this.#end);
      this.#end -= this.#start;
      this.#start = 0;
    }
    this.#readSince = this.#clock.now || 1;
    let n: number | null;
    try {
      const probe = this.#probe;
      if (probe !== undefined) {
        // The pooled read was issued into the start of the buffer, which is where we are.
        this.#probe = undefined;
        n = await probe;
      } else {
        n = await this.#conn.read(this.#buf.subarray(this.#end));
      }
    } catch (error) {
      throw this.#ioError(error, "read");
    } finally {
      this.#readSince = 0;
    }
    if (n === null) return false;
    this.#end += n;
    this.#bytesReadThisExchange += n;
    return true;
  }

  #ioError(error: unknown, op: "read" | "write"): UpstreamError {
    if (error instanceof UpstreamError) return error;
    if (this.#timedOut) {
      return new UpstreamError("timeout", `Cannot ${op}: backend idle past the timeout`, {
        cause: error,
        beforeResponse: this.#bytesReadThisExchange === 0,
      });
    }
    return new UpstreamError("reset", `Cannot ${op}: connection failed`, {
      cause: error,
      staleConnection: this.requests > 1 && this.#bytesReadThisExchange === 0,
      beforeResponse: this.#bytesReadThisExchange === 0,
    });
  }
}

function toUpstream(error: unknown): UpstreamError {
  if (error instanceof UpstreamProtocolError) {
    return new UpstreamError("protocol", error.message, { cause: error });
  }
  if (error instanceof UpstreamError) return error;
  return new UpstreamError("protocol", "Cannot parse response", { cause: error });
}
