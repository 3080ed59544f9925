/**
 * WebSocket proxying after the backend accepted the upgrade (answered 101).
 *
 * Deno 2.9.6's `Deno.serve` cannot hand over the client's raw socket (its
 * `upgradeHttpRaw` is gone; see `deno_internal.ts`), so the client side is
 * `Deno.upgradeWebSocket` and the backend side is the raw TCP connection the
 * upgrade request went out on, spoken with our own framing. Messages are
 * relayed both ways (fragmented backend messages are reassembled), pings are
 * answered on each side, close codes and reasons are passed on, and the
 * backend's 101 headers (cookies, custom fields) reach the client's 101.
 *
 * Not relayed: extensions (`Sec-WebSocket-Extensions` is removed from the
 * upgrade request, so no permessage-deflate is negotiated on either side).
 * A backend that vanishes without a close frame is reported to the client as
 * 1011. No total-duration cap: only an idle timeout (no message either way).
 * The proxy can close a relay itself ({@linkcode WebSocketRelay.close}, 1001
 * at shutdown): both sides get a close frame, and it ends within
 * `CLOSE_GRACE_MS` whether or not they answer.
 *
 * @module
 */

import { createHash } from "node:crypto";
import { hasToken, trimOws } from "../upstream/http1.ts";
import type { UpstreamResponse } from "../upstream/upstream_client.ts";
import {
  decodeClosePayload,
  encodeClosePayload,
  encodeFrame,
  FrameDecoder,
  isSendableCloseCode,
  MessageAssembler,
  OP_BINARY,
  OP_CLOSE,
  OP_PING,
  OP_PONG,
  OP_TEXT,
  WsProtocolError,
} from "./ws_frame.ts";

/** Request header fields never sent to the backend on an upgrade. */
export const WEBSOCKET_DROP_REQUEST = new Set(["sec-websocket-extensions"]);

/** 101 header fields that Deno writes itself, or that describe the backend hop only. */
const SKIP_101 = new Set([
  "upgrade",
  "connection",
  "sec-websocket-accept",
  "sec-websocket-protocol",
  "sec-websocket-extensions",
  "content-length",
  "transfer-encoding",
  "keep-alive",
  "date",
]);

const BACKPRESSURE_BYTES = 4 * 1024 * 1024;
const MAX_QUEUED_TO_BACKEND = 64 * 1024 * 1024;
const CLOSE_GRACE_MS = 5_000;
/** How long an upgraded client socket may take to open (its 101 sent) before the relay gives up. */
const OPEN_TIMEOUT_MS = 5_000;
/** How long the relay's last frames (a close reply) may take to reach the backend. */
const FINAL_FLUSH_MS = 1_000;

export interface WebSocketRelayOptions {
  /** Close both sides after this long without a message either way, in ms. */
  readonly idleTimeoutMs: number;
  /** Largest message accepted from the backend, in bytes. */
  readonly maxMessageBytes: number;
}

/** A running relay, as returned by {@linkcode relayWebSocket}. */
export interface WebSocketRelay {
  /** Resolves once, when the relay has ended (any way it ends); never rejects. */
  readonly ended: Promise<RelaySummary>;
  /**
   * Closes both sides: the client with `code` and `reason`, the backend with
   * a close frame carrying them. Resolves when the relay has ended: both
   * sides answered, or after a grace of 5 s. Calling it again, or on an ended
   * relay, returns `ended`.
   */
  close(code: number, reason: string): Promise<RelaySummary>;
}

/** What happened on a relayed WebSocket, for logs. */
export interface RelaySummary {
  readonly messagesToBackend: number;
  readonly messagesToClient: number;
  /** Close code as seen by the client side (1005: none, 1006: abnormal). */
  readonly clientCode: number;
  /** Close code the backend sent, 1005 when none, 1006 when it vanished. */
  readonly backendCode: number;
  readonly reason: "client" | "backend" | "idle" | "closed" | "error";
}

/** Base64 characters only: Deno, nginx and most backends accept keys of any length. */
const WEBSOCKET_KEY = /^[A-Za-z0-9+/]+=*$/;

/**
 * Checks a client's WebSocket opening handshake (RFC 6455 section 4.2.1)
 * before the upgrade goes to a backend: Deno.upgradeWebSocket refuses a
 * missing key only once the backend has already accepted.
 *
 * @returns undefined when acceptable; else the status to answer: 400 (no
 *   `Sec-WebSocket-Key`, two of them, or one that is not base64; its length is
 *   not checked, as Deno and nginx do not), 426 (a `Sec-WebSocket-Version`
 *   other than 13).
 */
export function webSocketHandshakeProblem(
  headers: readonly (readonly [string, string])[],
): 400 | 426 | undefined {
  let key: string | undefined;
  let keys = 0;
  let version: string | undefined;
  for (const [name, value] of headers) {
    if (name.length !== 17 && name.length !== 21) continue;
    const lower = name.toLowerCase();
    if (lower === "sec-websocket-key") {
      key = value.trim();
      keys++;
    } else if (lower === "sec-websocket-version") {
      version = version === undefined ? value.trim() : `${version},${value.trim()}`;
    }
  }
  if (keys !== 1 || !WEBSOCKET_KEY.test(key ?? "")) return 400;
  return version === "13" ? undefined : 426;
}

/**
 * Upgrades the client's request and relays it to the backend's tunnel.
 * Must be called while `req` is live (inside the handler, before returning).
 *
 * @returns the 101 response to return from the handler, and the relay.
 * @throws {TypeError} when the backend's 101 is not a valid answer to the
 *   client's handshake (no `Upgrade: websocket`, a wrong `Sec-WebSocket-Accept`,
 *   an extension nobody offered, two subprotocols or one the client did not
 *   offer, a field Deno refuses); the caller answers 502. It never throws
 *   after the upgrade.
 */
export function relayWebSocket(
  req: Request,
  upstream: UpstreamResponse & { readonly tunnel: NonNullable<UpstreamResponse["tunnel"]> },
  options: WebSocketRelayOptions,
): { readonly response: Response; readonly relay: WebSocketRelay } {
  let protocol: string | undefined;
  let accept: string | undefined;
  let upgradeToWebSocket = false;
  const extra: [string, string][] = [];
  for (const [name, value] of upstream.headers) {
    const lower = name.toLowerCase();
    if (lower === "sec-websocket-protocol") {
      // RFC 6455 section 4.2.2: one subprotocol at most; a second field is not a choice.
      if (protocol !== undefined) throw new TypeError("Cannot accept 101: two subprotocols chosen");
      protocol = value.trim();
    } else if (lower === "sec-websocket-accept") accept = accept === undefined ? value.trim() : "";
    else if (lower === "upgrade") {
      upgradeToWebSocket ||= hasToken(value, "websocket");
    } else if (lower === "sec-websocket-extensions" && value.trim() !== "") {
      // The proxy offered none (see WEBSOCKET_DROP_REQUEST): frames would arrive transformed.
      throw new TypeError(`Cannot accept 101: extension "${value.trim()}" was never offered`);
    } else if (!SKIP_101.has(lower) && !upstream.connectionTokens.includes(lower)) {
      extra.push([name, value]);
    }
  }
  // RFC 6455 section 4.1: the client side fails a handshake whose 101 does not prove the
  // backend read this key, or does not upgrade to "websocket". Deno would answer the client
  // with an accept of its own, so the check has to be here.
  if (!upgradeToWebSocket) throw new TypeError('Cannot accept 101: no Upgrade "websocket"');
  if (accept !== expectedAccept(req.headers.get("sec-websocket-key") ?? "")) {
    throw new TypeError("Cannot accept 101: Sec-WebSocket-Accept does not match the key sent");
  }
  // The subprotocol is checked here, not by Deno: `upgradeWebSocket({ protocol })` splits
  // the client's offer on ", " exactly, so an offer of "chat,superchat" (RFC 6455 allows
  // it; Node's `ws` sends it) would refuse "chat".
  if (protocol !== undefined && protocol !== "") {
    if (!offeredProtocols(req.headers.get("sec-websocket-protocol")).includes(protocol)) {
      throw new TypeError(`Cannot accept 101: subprotocol "${protocol}" was never offered`);
    }
    extra.unshift(["Sec-WebSocket-Protocol", protocol]);
  }
  // Every check that can fail comes before the upgrade: once `Deno.upgradeWebSocket` has
  // run, a handler that answers anything but its 101 makes Deno 2.9.6 close the whole
  // server ("Upgrade response was not returned from callback"), not just this request.
  // Deno refuses a field here exactly as it would in `append` below.
  new Headers(extra);
  const { socket, response } = Deno.upgradeWebSocket(req);
  for (const [name, value] of extra) response.headers.append(name, value);
  const relay = new Relay(socket, upstream.tunnel.conn, options);
  relay.start(upstream.tunnel.initial);
  return { response, relay };
}

const WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/** The subprotocols a client offered (`Sec-WebSocket-Protocol`, comma-separated, OWS trimmed). */
function offeredProtocols(field: string | null): string[] {
  if (field === null) return [];
  return field.split(",").map(trimOws);
}

/** The `Sec-WebSocket-Accept` a backend must answer to `key` (RFC 6455 section 4.2.2). */
function expectedAccept(key: string): string {
  return createHash("sha1").update(key.trim() + WEBSOCKET_GUID).digest("base64");
}

class Relay implements WebSocketRelay {
  readonly ended: Promise<RelaySummary>;
  #resolveEnded: (summary: RelaySummary) => void;
  #socket: WebSocket;
  #conn: Deno.Conn;
  #options: WebSocketRelayOptions;
  #decoder: FrameDecoder;
  #assembler: MessageAssembler;
  #pending: Uint8Array[] = [];
  #flushing: Promise<void> = Promise.resolve();
  #flushRunning = false;
  #queued = 0;
  #closeSentToBackend = false;
  #closeFromBackend = false;
  #connClosed = false;
  #finished = false;
  #lastActivity = performance.now();
  #idleTimer: ReturnType<typeof setInterval> | undefined;
  #graceTimer: ReturnType<typeof setTimeout> | undefined;
  #openTimer: ReturnType<typeof setTimeout> | undefined;
  #toBackend = 0;
  #toClient = 0;
  #clientCode = 1006;
  #backendCode = 1006;
  #reason: RelaySummary["reason"] = "error";
  /** A close asked for while the client side was still connecting. */
  #closeOnOpen: { code: number; reason: string } | undefined;
  #utf8 = new TextDecoder("utf-8", { fatal: true });
  #encoder = new TextEncoder();

  constructor(socket: WebSocket, conn: Deno.Conn, options: WebSocketRelayOptions) {
    this.#socket = socket;
    this.#conn = conn;
    this.#options = options;
    this.#decoder = new FrameDecoder({ maxPayload: options.maxMessageBytes, expectMasked: false });
    this.#assembler = new MessageAssembler(options.maxMessageBytes);
    const { promise, resolve } = Promise.withResolvers<RelaySummary>();
    this.ended = promise;
    this.#resolveEnded = resolve;
  }

  close(code: number, reason: string): Promise<RelaySummary> {
    if (this.#finished || this.#reason === "closed") return this.ended;
    this.#reason = "closed";
    this.#sendCloseToBackend(code, reason);
    if (this.#socket.readyState === WebSocket.CONNECTING) this.#closeOnOpen = { code, reason };
    else this.#closeClient(code, reason);
    // Wait (bounded) for both sides' replies: the client's ends in onclose, the backend's in #readBackend.
    this.#graceTimer ??= setTimeout(() => this.#finish(), CLOSE_GRACE_MS);
    return this.ended;
  }

  start(initial: Uint8Array): void {
    const socket = this.#socket;
    socket.binaryType = "arraybuffer";
    // Deno 2.9.6 fires no event at all on an upgraded socket whose client left before the
    // 101 went out: give up on one that does not open in time, rather than hold the backend
    // (and the session count) until the idle timeout.
    this.#openTimer = setTimeout(() => {
      this.#openTimer = undefined;
      if (this.#finished) return;
      this.#reason = "client";
      this.#sendCloseToBackend(1001, "");
      this.#finish();
    }, OPEN_TIMEOUT_MS);
    socket.onopen = () => {
      clearTimeout(this.#openTimer);
      this.#openTimer = undefined;
      this.#readBackend(initial);
      if (this.#closeOnOpen !== undefined) {
        this.#closeClient(this.#closeOnOpen.code, this.#closeOnOpen.reason);
      }
    };
    socket.onmessage = (event: MessageEvent) => {
      this.#lastActivity = performance.now();
      this.#toBackend++;
      const data = event.data;
      if (typeof data === "string") {
        this.#writeBackend(encodeFrame(OP_TEXT, this.#encoder.encode(data), { mask: true }));
      } else {
        this.#writeBackend(
          encodeFrame(OP_BINARY, new Uint8Array(data as ArrayBuffer), { mask: true }),
        );
      }
    };
    socket.onclose = (event: CloseEvent) => {
      this.#clientCode = event.code;
      if (this.#closeFromBackend || this.#finished) {
        this.#finish();
        this.#detach();
        return;
      }
      this.#reason = this.#reason === "error" ? "client" : this.#reason;
      if (isSendableCloseCode(event.code) || event.code === 1005) {
        this.#sendCloseToBackend(event.code === 1005 ? undefined : event.code, event.reason);
        // Wait (bounded) for the backend's close reply, read by #readBackend.
        this.#graceTimer ??= setTimeout(() => this.#finish(), CLOSE_GRACE_MS);
      } else {
        this.#finish();
      }
    };
    socket.onerror = () => {
      // Followed by a close event; nothing else to do.
    };
    const tick = Math.max(5, Math.min(1_000, this.#options.idleTimeoutMs / 4));
    this.#idleTimer = setInterval(() => {
      if (performance.now() - this.#lastActivity > this.#options.idleTimeoutMs) {
        this.#reason = "idle";
        this.#sendCloseToBackend(1001, "Idle timeout");
        this.#closeClient(1001, "Idle timeout");
        this.#finish();
      }
    }, tick);
  }

  async #readBackend(initial: Uint8Array): Promise<void> {
    const buf = new Uint8Array(64 * 1024);
    let chunk: Uint8Array | null = initial;
    try {
      while (chunk !== null && !this.#finished) {
        if (chunk.length > 0) {
          this.#lastActivity = performance.now();
          this.#decoder.push(chunk);
          if (!this.#drainFrames()) return;
          while (this.#socket.bufferedAmount > BACKPRESSURE_BYTES && !this.#finished) {
            await new Promise((resolve) => setTimeout(resolve, 5));
          }
        }
        const n: number | null = await this.#conn.read(buf).catch(() => null);
        chunk = n === null ? null : buf.subarray(0, n);
      }
    } catch (error) {
      const code = error instanceof WsProtocolError ? error.code : 1011;
      this.#sendCloseToBackend(code, "");
      this.#closeClient(1011, "");
      this.#finish();
      return;
    }
    if (!this.#closeFromBackend && !this.#finished) {
      // The backend vanished without a close frame.
      this.#backendCode = 1006;
      if (this.#reason !== "closed") this.#reason = "backend";
      this.#closeClient(1011, "");
    }
    this.#finish();
  }

  /** Handles complete frames; false once the backend's close frame was handled. */
  #drainFrames(): boolean {
    for (;;) {
      const frame = this.#decoder.next();
      if (frame === undefined) return true;
      switch (frame.opcode) {
        case OP_PING:
          this.#writeBackend(encodeFrame(OP_PONG, frame.payload, { mask: true }));
          break;
        case OP_PONG:
          break;
        case OP_CLOSE: {
          const { code, reason } = decodeClosePayload(frame.payload);
          this.#closeFromBackend = true;
          this.#backendCode = code;
          if (this.#reason === "error") this.#reason = "backend";
          if (frame.payload.length === 0) {
            // No status: answered with none, and the client sees 1005 too.
            this.#sendCloseToBackend(undefined, "");
            this.#closeClient(undefined, "");
          } else if (isSendableCloseCode(code)) {
            this.#sendCloseToBackend(code, "");
            this.#closeClient(code, reason);
          } else {
            // A code no endpoint may send (1005, 1006, 1015, 999, 5000...): a protocol error.
            this.#sendCloseToBackend(1002, "");
            this.#closeClient(1002, "");
          }
          this.#finishWhenWritten();
          return false;
        }
        default: {
          const message = this.#assembler.add(frame);
          if (message === undefined) break;
          if (this.#socket.readyState !== WebSocket.OPEN) break;
          this.#toClient++;
          if (message.opcode === OP_TEXT) {
            let text: string;
            try {
              text = this.#utf8.decode(message.data);
            } catch {
              throw new WsProtocolError("Cannot relay text message: invalid UTF-8", 1007);
            }
            this.#socket.send(text);
          } else {
            this.#socket.send(message.data);
          }
        }
      }
    }
  }

  #writeBackend(frame: Uint8Array): void {
    if (this.#connClosed || this.#closeSentToBackend) return;
    this.#queued += frame.length;
    if (this.#queued > MAX_QUEUED_TO_BACKEND) {
      this.#reason = "error";
      this.#closeClient(1008, "Backend too slow");
      // At once: the pending write would otherwise hold the socket until the backend reads.
      this.#closeConn();
      this.#finish();
      return;
    }
    this.#pending.push(frame);
    if (!this.#flushRunning) {
      this.#flushRunning = true;
      this.#flushing = this.#flush();
    }
  }

  /** Writes queued frames, several per write when they pile up (one op per burst, not per message). */
  async #flush(): Promise<void> {
    try {
      while (this.#pending.length > 0 && !this.#connClosed) {
        const frames = this.#pending;
        this.#pending = [];
        const data = frames.length === 1 ? frames[0] as Uint8Array : concat(frames);
        let offset = 0;
        while (offset < data.length) offset += await this.#conn.write(data.subarray(offset));
        this.#queued -= data.length;
      }
    } catch {
      this.#closeConn();
    } finally {
      this.#flushRunning = false;
    }
  }

  #sendCloseToBackend(code: number | undefined, reason: string): void {
    if (this.#closeSentToBackend) return;
    this.#writeBackend(encodeFrame(OP_CLOSE, encodeClosePayload(code, reason), { mask: true }));
    this.#closeSentToBackend = true;
  }

  #closeClient(code: number | undefined, reason: string): void {
    const state = this.#socket.readyState;
    if (state === WebSocket.CLOSING || state === WebSocket.CLOSED) return;
    try {
      if (code === undefined) this.#socket.close();
      else this.#socket.close(code, reason);
    } catch {
      // Already closing.
    }
  }

  #finishWhenWritten(): void {
    this.#flushing.then(() => this.#finish());
  }

  #closeConn(): void {
    if (this.#connClosed) return;
    this.#connClosed = true;
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }

  /**
   * Unhooks the ended relay from the client socket. Deno 2.9.6 keeps a
   * server WebSocket whose client vanished without a close frame for some
   * seconds more; through its handlers it also kept the relay (the decoder's
   * 16 KiB buffer and more) for as long (docs/benchmarks.md, "Soak").
   */
  #detach(): void {
    const socket = this.#socket;
    socket.onopen = null;
    socket.onmessage = null;
    socket.onclose = null;
    socket.onerror = null;
  }

  #finish(): void {
    if (this.#idleTimer !== undefined) clearInterval(this.#idleTimer);
    this.#idleTimer = undefined;
    if (this.#graceTimer !== undefined) clearTimeout(this.#graceTimer);
    this.#graceTimer = undefined;
    if (this.#openTimer !== undefined) clearTimeout(this.#openTimer);
    this.#openTimer = undefined;
    // Let queued frames (a close reply) go out before closing the socket, but not for longer
    // than FINAL_FLUSH_MS: a backend that stopped reading would keep its socket (and the
    // queue) for ever.
    if (!this.#connClosed) {
      const timer = setTimeout(() => this.#closeConn(), FINAL_FLUSH_MS);
      this.#flushing.then(() => {
        clearTimeout(timer);
        this.#closeConn();
      });
    }
    if (this.#finished) return;
    this.#finished = true;
    const state = this.#socket.readyState;
    if (state === WebSocket.CONNECTING || state === WebSocket.OPEN) this.#closeClient(1011, "");
    else if (state === WebSocket.CLOSED) this.#detach();
    this.#resolveEnded({
      messagesToBackend: this.#toBackend,
      messagesToClient: this.#toClient,
      clientCode: this.#clientCode,
      backendCode: this.#backendCode,
      reason: this.#reason,
    });
  }
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  let size = 0;
  for (const part of parts) size += part.length;
  const out = new Uint8Array(size);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}
