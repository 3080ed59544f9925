/**
 * Test support for the HTTP/2 tests (`lib/server/h2_streams_test.ts`,
 * `h2_downgrade_test.ts` and others): what they send with and send to.
 *
 * - {@linkcode RawH2}: a raw HTTP/2 client over TLS (ALPN `h2`) or plain TCP
 *   (h2c with prior knowledge) that writes frames byte for byte, so a test can
 *   send what well-behaved clients refuse to (connection-specific fields,
 *   cookies split in several fields, a Content-Length the DATA contradicts, no
 *   `:authority`, CONNECT). Header blocks are HPACK literals without indexing
 *   and without Huffman coding. Responses are decoded far enough for tests:
 *   `:status` (also Huffman-coded digits) and DATA; other values coded with
 *   Huffman read as `"(huffman)"`.
 * - {@linkcode startH2World}: the real proxy handler behind the real HTTPS
 *   listener (TLS relayed to the inner `Deno.serve`) and the real HTTP
 *   listener, routing hosts to backends the test supplies (scripted ones come
 *   from `tests/support/scripted_backend.ts`); {@linkcode withH2World} closes
 *   it after a test, {@linkcode openH2} opens a raw h2 or h2c connection to it.
 *
 * Not part of Sluice.
 *
 * @module
 */

import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";
import { stubCertificateTable } from "./stub_snapshot.ts";
import { type LoggedWarning, recordingLogger } from "./proxy_harness.ts";
import { concatBytes } from "./raw_http.ts";
import { type StaticRoute, staticSnapshot } from "./static_snapshot.ts";
import {
  type AccessLogEntry,
  createProxyHandler,
  type ProxyHandler,
} from "../../lib/proxy/proxy_handler.ts";
import type { ProxyHandlerOptions } from "../../lib/proxy/proxy_handler.ts";
import { type HttpsListener, listenHttps } from "../../lib/server/https_listener.ts";
import { listenHttp } from "../../lib/server/http_listener.ts";
import type { Listener } from "../../lib/server/listener.ts";
import { type EchoBackend, startEchoBackend } from "./echo_backend.ts";
import { routeTo } from "./stream_backends.ts";

// ---------------------------------------------------------------------------
// Raw HTTP/2 client
// ---------------------------------------------------------------------------

const PREFACE = new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/** Frame types used here. */
export const FRAME = {
  DATA: 0,
  HEADERS: 1,
  RST_STREAM: 3,
  SETTINGS: 4,
  PING: 6,
  GOAWAY: 7,
  WINDOW_UPDATE: 8,
  CONTINUATION: 9,
} as const;

const END_STREAM = 0x1;
const END_HEADERS = 0x4;
const PADDED = 0x8;
const PRIORITY = 0x20;
const ACK = 0x1;

/** HTTP/2 error codes used by tests. */
export const H2_ERROR = { NO_ERROR: 0, PROTOCOL_ERROR: 1, CANCEL: 8 } as const;

/** What one stream has received so far. */
export interface H2Stream {
  readonly id: number;
  /** Decoded header blocks: the response head first, then any trailers. */
  readonly heads: [string, string][][];
  /** DATA bytes received. */
  readonly data: Uint8Array[];
  /** Received END_STREAM. */
  ended: boolean;
  /** RST_STREAM error code received. */
  reset?: number;
}

/** The `:status` of a stream's first header block. */
export function statusOf(stream: H2Stream): number | undefined {
  const value = stream.heads[0]?.find(([name]) => name === ":status")?.[1];
  return value === undefined ? undefined : Number(value);
}

/** A stream's DATA as one string (UTF-8). */
export function textOf(stream: H2Stream): string {
  return new TextDecoder().decode(concatBytes(stream.data));
}

/** Options of {@linkcode RawH2.open}. */
export interface RawH2Options {
  readonly port: number;
  /** TLS with ALPN `h2`; omitted: h2c with prior knowledge. */
  readonly tls?: { readonly serverName: string; readonly caCerts: readonly string[] };
}

/**
 * A TCP connection to `port` on 127.0.0.1, or a TLS one (SNI `serverName`,
 * default `a.test`; ALPN `alpn`, which the server must choose) trusting `caCerts`.
 */
export async function connectTo(
  port: number,
  tls?: { caCerts: readonly string[]; alpn: string; serverName?: string },
): Promise<Deno.Conn> {
  const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
  if (tls === undefined) return tcp;
  try {
    const conn = await Deno.startTls(tcp, {
      hostname: tls.serverName ?? "a.test",
      caCerts: [...tls.caCerts],
      alpnProtocols: [tls.alpn],
    });
    const info = await conn.handshake();
    if (info.alpnProtocol !== tls.alpn) {
      conn.close();
      throw new Error(`Cannot speak "${tls.alpn}": ALPN chose "${info.alpnProtocol}"`);
    }
    return conn;
  } catch (error) {
    try {
      tcp.close();
    } catch {
      // Taken over by startTls.
    }
    throw error;
  }
}

/** A raw HTTP/2 connection; `close()` it at the end of the test. */
export class RawH2 {
  #conn: Deno.Conn;
  #streams = new Map<number, H2Stream>();
  #nextId = 1;
  #hpack = new HpackDecoder();
  #headerBlock: { id: number; flags: number; parts: Uint8Array[] } | undefined;
  #changed: (() => void)[] = [];
  #writing: Promise<void> = Promise.resolve();
  #peerInitialWindow = 65_535;
  #connWindow = 65_535;
  #sendWindows = new Map<number, number>();
  #reading: Promise<void>;
  /** GOAWAY received: [last stream id, error code]. */
  goaway: [number, number] | undefined;
  /** The connection ended (read EOF or error). */
  closed = false;

  private constructor(conn: Deno.Conn) {
    this.#conn = conn;
    this.#reading = this.#readLoop();
  }

  /** Connects, sends the preface and SETTINGS (large windows: the server may send freely). */
  static async open(options: RawH2Options): Promise<RawH2> {
    const conn = await connectTo(
      options.port,
      options.tls === undefined ? undefined : {
        serverName: options.tls.serverName,
        caCerts: options.tls.caCerts,
        alpn: "h2",
      },
    );
    const h2 = new RawH2(conn);
    // SETTINGS_INITIAL_WINDOW_SIZE = 2^31-1, ENABLE_PUSH = 0; and a connection window as large.
    const settings = new Uint8Array(12);
    const view = new DataView(settings.buffer);
    view.setUint16(0, 0x4);
    view.setUint32(2, 0x7fffffff);
    view.setUint16(6, 0x2);
    view.setUint32(8, 0);
    const update = new Uint8Array(4);
    new DataView(update.buffer).setUint32(0, 0x7fffffff - 65535);
    await h2.#write(concatBytes([PREFACE, frame(FRAME.SETTINGS, 0, 0, settings)]));
    await h2.#write(frame(FRAME.WINDOW_UPDATE, 0, 0, update));
    return h2;
  }

  /**
   * Opens a stream with `headers` (pseudo-fields first, as given, nothing
   * added) and returns its id. `endStream` defaults to true.
   */
  async request(
    headers: readonly (readonly [string, string])[],
    endStream = true,
  ): Promise<number> {
    const id = this.#nextId;
    this.#nextId += 2;
    this.#streams.set(id, { id, heads: [], data: [], ended: false });
    await this.headers(id, headers, endStream);
    return id;
  }

  /** Sends a HEADERS frame (a request head, or trailers with `endStream`). */
  async headers(
    id: number,
    headers: readonly (readonly [string, string])[],
    endStream: boolean,
  ): Promise<void> {
    const block = encodeHeaderBlock(headers);
    await this.#write(frame(FRAME.HEADERS, END_HEADERS | (endStream ? END_STREAM : 0), id, block));
  }

  /**
   * Sends DATA in frames of at most 16 KiB, waiting for the server's
   * flow-control windows (rejects when the connection ends first).
   */
  async data(id: number, bytes: Uint8Array, endStream = false): Promise<void> {
    if (bytes.length === 0) {
      await this.#write(frame(FRAME.DATA, endStream ? END_STREAM : 0, id, bytes));
      return;
    }
    let at = 0;
    while (at < bytes.length) {
      const window = () => Math.min(this.#connWindow, this.#streamWindow(id));
      while (window() <= 0) {
        if (this.closed) throw new Error("Cannot send DATA: the connection ended");
        if (this.stream(id).reset !== undefined) throw new Error("Cannot send DATA: stream reset");
        await new Promise<void>((resolve) => this.#changed.push(resolve));
      }
      const size = Math.min(16_384, bytes.length - at, window());
      const part = bytes.subarray(at, at + size);
      at += size;
      this.#connWindow -= size;
      this.#sendWindows.set(id, this.#streamWindow(id) - size);
      const last = at === bytes.length;
      await this.#write(frame(FRAME.DATA, last && endStream ? END_STREAM : 0, id, part));
    }
  }

  /** Bytes of DATA the server's window allows on stream `id` now. */
  #streamWindow(id: number): number {
    return this.#sendWindows.get(id) ?? this.#peerInitialWindow;
  }

  /** Resets a stream. */
  async reset(id: number, code: number = H2_ERROR.CANCEL): Promise<void> {
    const payload = new Uint8Array(4);
    new DataView(payload.buffer).setUint32(0, code);
    await this.#write(frame(FRAME.RST_STREAM, 0, id, payload));
  }

  /** The stream's state so far. */
  stream(id: number): H2Stream {
    const stream = this.#streams.get(id);
    if (stream === undefined) throw new Error(`Cannot find stream "${id}"`);
    return stream;
  }

  /**
   * Resolves when `check` holds for the stream (checked on every frame),
   * rejects after `timeoutMs` naming `what`.
   */
  async until(
    id: number,
    what: string,
    check: (stream: H2Stream) => boolean,
    timeoutMs = 10_000,
  ): Promise<H2Stream> {
    const stream = this.stream(id);
    const deadline = performance.now() + timeoutMs;
    while (!check(stream)) {
      if (this.closed) throw new Error(`Cannot see ${what}: the connection ended`);
      const left = deadline - performance.now();
      if (left <= 0) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        this.#changed.push(resolve);
        timer = setTimeout(resolve, left);
      });
      clearTimeout(timer);
    }
    return stream;
  }

  /** Waits until the stream ended or was reset. */
  finished(id: number, timeoutMs = 10_000): Promise<H2Stream> {
    return this.until(
      id,
      `stream ${id} to end`,
      (s) => s.ended || s.reset !== undefined || this.goaway !== undefined,
      timeoutMs,
    );
  }

  /** Closes the connection and waits for the read loop to end. */
  async close(): Promise<void> {
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
    await this.#reading;
  }

  #write(bytes: Uint8Array): Promise<void> {
    const next = this.#writing.then(async () => {
      let at = 0;
      while (at < bytes.length) at += await this.#conn.write(bytes.subarray(at));
    });
    this.#writing = next.catch(() => {});
    return next;
  }

  #notify(): void {
    const waiting = this.#changed;
    this.#changed = [];
    for (const resolve of waiting) resolve();
  }

  async #readLoop(): Promise<void> {
    try {
      await readFrames(
        this.#conn,
        (type, flags, id, payload) => this.#onFrame(type, flags, id, payload),
        () => this.#notify(),
      );
    } catch {
      // Closed by close() or reset by the peer.
    } finally {
      this.closed = true;
      this.#notify();
    }
  }

  async #onFrame(type: number, flags: number, id: number, payload: Uint8Array): Promise<void> {
    const stream = this.#streams.get(id);
    switch (type) {
      case FRAME.DATA: {
        let body = payload;
        if (flags & PADDED) body = body.subarray(1, body.length - body[0]!);
        if (stream !== undefined) {
          if (body.length > 0) stream.data.push(body);
          if (flags & END_STREAM) stream.ended = true;
        }
        break;
      }
      case FRAME.HEADERS: {
        let block = payload;
        if (flags & PADDED) block = block.subarray(1, block.length - block[0]!);
        if (flags & PRIORITY) block = block.subarray(5);
        this.#headerBlock = { id, flags, parts: [block] };
        if (flags & END_HEADERS) this.#endHeaders();
        break;
      }
      case FRAME.CONTINUATION:
        this.#headerBlock?.parts.push(payload);
        if (flags & END_HEADERS) this.#endHeaders();
        break;
      case FRAME.RST_STREAM:
        if (stream !== undefined) stream.reset = new DataView(payload.buffer).getUint32(0);
        break;
      case FRAME.SETTINGS:
        if (flags & ACK) break;
        for (let at = 0; at + 6 <= payload.length; at += 6) {
          const view = new DataView(payload.buffer, payload.byteOffset + at, 6);
          if (view.getUint16(0) !== 0x4) continue;
          const delta = view.getUint32(2) - this.#peerInitialWindow;
          this.#peerInitialWindow += delta;
          for (const [stream, window] of this.#sendWindows) {
            this.#sendWindows.set(stream, window + delta);
          }
        }
        await this.#write(frame(FRAME.SETTINGS, ACK, 0, new Uint8Array(0)));
        break;
      case FRAME.WINDOW_UPDATE: {
        const increment = new DataView(payload.buffer).getUint32(0) & 0x7fffffff;
        if (id === 0) this.#connWindow += increment;
        else this.#sendWindows.set(id, this.#streamWindow(id) + increment);
        break;
      }
      case FRAME.PING:
        if (!(flags & ACK)) await this.#write(frame(FRAME.PING, ACK, 0, payload));
        break;
      case FRAME.GOAWAY: {
        const view = new DataView(payload.buffer);
        this.goaway = [view.getUint32(0) & 0x7fffffff, view.getUint32(4)];
        break;
      }
    }
  }

  #endHeaders(): void {
    const block = this.#headerBlock;
    this.#headerBlock = undefined;
    if (block === undefined) return;
    const fields = this.#hpack.decode(concatBytes(block.parts));
    const stream = this.#streams.get(block.id);
    if (stream === undefined) return;
    stream.heads.push(fields);
    if (block.flags & END_STREAM) stream.ended = true;
  }
}

/**
 * Reads HTTP/2 frames from `conn` until it ends, calling `onFrame` with a copy of
 * each payload (awaited, in order) and `afterRead` after each read's frames.
 * Rejects when the read fails (a reset).
 */
export async function readFrames(
  conn: Deno.Conn,
  onFrame: (type: number, flags: number, id: number, payload: Uint8Array) => Promise<void>,
  afterRead?: () => void,
): Promise<void> {
  const chunk = new Uint8Array(64 * 1024);
  let buf = new Uint8Array(0);
  while (true) {
    const n = await conn.read(chunk);
    if (n === null) return;
    buf = buf.length === 0 ? chunk.slice(0, n) : concatBytes([buf, chunk.subarray(0, n)]);
    while (buf.length >= 9) {
      const length = (buf[0]! << 16) | (buf[1]! << 8) | buf[2]!;
      if (buf.length < 9 + length) break;
      const id = new DataView(buf.buffer, buf.byteOffset + 5, 4).getUint32(0) & 0x7fffffff;
      const payload = buf.slice(9, 9 + length);
      const [type, flags] = [buf[3]!, buf[4]!];
      buf = buf.subarray(9 + length);
      await onFrame(type, flags, id, payload);
    }
    afterRead?.();
  }
}

/** One HTTP/2 frame: the 9-byte header, then `payload`. */
export function frame(type: number, flags: number, id: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(9 + payload.length);
  out[0] = (payload.length >> 16) & 0xff;
  out[1] = (payload.length >> 8) & 0xff;
  out[2] = payload.length & 0xff;
  out[3] = type;
  out[4] = flags;
  new DataView(out.buffer).setUint32(5, id & 0x7fffffff);
  out.set(payload, 9);
  return out;
}

/** HPACK: every field a literal without indexing, new name, no Huffman (RFC 7541 section 6.2.2). */
export function encodeHeaderBlock(headers: readonly (readonly [string, string])[]): Uint8Array {
  const out: number[] = [];
  const bytes = (text: string) => {
    const encoded = new TextEncoder().encode(text);
    integer(out, encoded.length, 7, 0);
    for (const b of encoded) out.push(b);
  };
  for (const [name, value] of headers) {
    out.push(0);
    bytes(name);
    bytes(value);
  }
  return new Uint8Array(out);
}

function integer(out: number[], value: number, prefix: number, high: number): void {
  const max = (1 << prefix) - 1;
  if (value < max) {
    out.push(high | value);
    return;
  }
  out.push(high | max);
  value -= max;
  while (value >= 128) {
    out.push((value & 0x7f) | 0x80);
    value = Math.floor(value / 128);
  }
  out.push(value);
}

/** RFC 7541 Appendix A. */
const STATIC_TABLE: readonly (readonly [string, string])[] = [
  [":authority", ""],
  [":method", "GET"],
  [":method", "POST"],
  [":path", "/"],
  [":path", "/index.html"],
  [":scheme", "http"],
  [":scheme", "https"],
  [":status", "200"],
  [":status", "204"],
  [":status", "206"],
  [":status", "304"],
  [":status", "400"],
  [":status", "404"],
  [":status", "500"],
  ["accept-charset", ""],
  ["accept-encoding", "gzip, deflate"],
  ["accept-language", ""],
  ["accept-ranges", ""],
  ["accept", ""],
  ["access-control-allow-origin", ""],
  ["age", ""],
  ["allow", ""],
  ["authorization", ""],
  ["cache-control", ""],
  ["content-disposition", ""],
  ["content-encoding", ""],
  ["content-language", ""],
  ["content-length", ""],
  ["content-location", ""],
  ["content-range", ""],
  ["content-type", ""],
  ["cookie", ""],
  ["date", ""],
  ["etag", ""],
  ["expect", ""],
  ["expires", ""],
  ["from", ""],
  ["host", ""],
  ["if-match", ""],
  ["if-modified-since", ""],
  ["if-none-match", ""],
  ["if-range", ""],
  ["if-unmodified-since", ""],
  ["last-modified", ""],
  ["link", ""],
  ["location", ""],
  ["max-forwards", ""],
  ["proxy-authenticate", ""],
  ["proxy-authorization", ""],
  ["range", ""],
  ["referer", ""],
  ["refresh", ""],
  ["retry-after", ""],
  ["server", ""],
  ["set-cookie", ""],
  ["strict-transport-security", ""],
  ["transfer-encoding", ""],
  ["user-agent", ""],
  ["vary", ""],
  ["via", ""],
  ["www-authenticate", ""],
];

/** Huffman codes of the digits (RFC 7541 Appendix B): enough for `:status` and lengths. */
const HUFFMAN_DIGITS = new Map<string, string>([
  ["00000", "0"],
  ["00001", "1"],
  ["00010", "2"],
  ["011001", "3"],
  ["011010", "4"],
  ["011011", "5"],
  ["011100", "6"],
  ["011101", "7"],
  ["011110", "8"],
  ["011111", "9"],
]);

function huffmanDigits(bytes: Uint8Array): string {
  let bits = "";
  for (const b of bytes) bits += b.toString(2).padStart(8, "0");
  let out = "";
  let code = "";
  for (const bit of bits) {
    code += bit;
    const digit = HUFFMAN_DIGITS.get(code);
    if (digit !== undefined) {
      out += digit;
      code = "";
    } else if (code.length > 6) {
      return "(huffman)";
    }
  }
  // Padding is up to 7 one-bits (the EOS prefix).
  return /^1{0,7}$/.test(code) ? out : "(huffman)";
}

/** A HPACK decoder with a dynamic table; Huffman strings other than digits read as "(huffman)". */
class HpackDecoder {
  #dynamic: [string, string][] = [];

  decode(block: Uint8Array): [string, string][] {
    const fields: [string, string][] = [];
    let at = 0;
    const int = (prefix: number): number => {
      const max = (1 << prefix) - 1;
      let value = block[at++]! & max;
      if (value < max) return value;
      let shift = 0;
      while (true) {
        const b = block[at++]!;
        value += (b & 0x7f) * 2 ** shift;
        shift += 7;
        if ((b & 0x80) === 0) return value;
      }
    };
    const str = (): string => {
      const huffman = (block[at]! & 0x80) !== 0;
      const length = int(7);
      const bytes = block.subarray(at, at + length);
      at += length;
      if (huffman) return huffmanDigits(bytes);
      return new TextDecoder().decode(bytes);
    };
    const entry = (index: number): readonly [string, string] => {
      const found = index <= STATIC_TABLE.length
        ? STATIC_TABLE[index - 1]
        : this.#dynamic[index - STATIC_TABLE.length - 1];
      return found ?? ["(unknown)", ""];
    };
    while (at < block.length) {
      const b = block[at]!;
      if (b & 0x80) {
        const [name, value] = entry(int(7));
        fields.push([name, value]);
      } else if (b & 0x40) {
        const index = int(6);
        const name = index === 0 ? str() : entry(index)[0];
        const value = str();
        fields.push([name, value]);
        this.#dynamic.unshift([name, value]);
      } else if (b & 0x20) {
        int(5);
        this.#dynamic = [];
      } else {
        const index = int(4);
        const name = index === 0 ? str() : entry(index)[0];
        fields.push([name, str()]);
      }
    }
    return fields;
  }
}

// ---------------------------------------------------------------------------
// The world: proxy handler behind the real HTTPS and HTTP listeners
// ---------------------------------------------------------------------------

/** The hosts the world's certificate covers. */
export const WORLD_HOSTS = ["a.test", "b.test", "localhost"] as const;

/** What {@linkcode startH2World} returns; `close()` it at the end of the test. */
export interface H2World {
  readonly httpsPort: number;
  /** The plain listener (`Deno.serve` on the port). */
  readonly httpPort: number;
  /** PEM of the certificate served for every host (trust it). */
  readonly caCert: string;
  readonly proxy: ProxyHandler;
  readonly https: HttpsListener;
  readonly accessLog: AccessLogEntry[];
  readonly warnings: LoggedWarning[];
  close(): Promise<void>;
}

let certificate: Promise<{ certPem: string; keyPem: string }> | undefined;

/** Starts the proxy with `routes` behind the HTTPS and plain listeners. */
export async function startH2World(
  routes: readonly StaticRoute[],
  options: Partial<Omit<ProxyHandlerOptions, "snapshot">> = {},
): Promise<H2World> {
  certificate ??= generateSelfSignedCertificate({ hostnames: [...WORLD_HOSTS] });
  const cert = await certificate;
  const serving = { source: "test/h2", certPem: cert.certPem, keyPem: cert.keyPem };
  const certificates = stubCertificateTable([], serving);
  const snapshot = staticSnapshot(routes);
  const accessLog: AccessLogEntry[] = [];
  const warnings: H2World["warnings"] = [];
  const proxy = createProxyHandler({
    logger: recordingLogger(warnings),
    onAccess: (entry) => accessLog.push(entry),
    ...options,
    snapshot: () => snapshot,
  });
  const https = listenHttps((req, info) => proxy(req, info), {
    hostname: "127.0.0.1",
    port: 0,
    certificates: () => certificates,
  });
  const listeners: Listener[] = [https];
  try {
    listeners.push(listenHttp((req, info) => proxy(req, info), {
      hostname: "127.0.0.1",
      port: 0,
      reusePort: false,
    }));
  } catch (error) {
    await Promise.all(listeners.map((l) => l.shutdown({ timeoutMs: 1_000 })));
    proxy.close();
    throw error;
  }
  return {
    httpsPort: https.addr.port,
    httpPort: listeners[1]!.addr.port,
    caCert: cert.certPem,
    proxy,
    https,
    accessLog,
    warnings,
    async close() {
      await Promise.all(listeners.map((l) => l.shutdown({ timeoutMs: 5_000 })));
      await Promise.all(listeners.map((l) => l.finished));
      proxy.close();
    },
  };
}

/** Runs `fn` against a world started with `routes` (and `options`), closing the world after it. */
export async function withH2World(
  routes: readonly StaticRoute[],
  fn: (world: H2World) => Promise<void>,
  options: Partial<Omit<ProxyHandlerOptions, "snapshot">> = {},
): Promise<void> {
  const world = await startH2World(routes, options);
  try {
    await fn(world);
  } finally {
    await world.close();
  }
}

/**
 * A raw HTTP/2 connection to `world`: over TLS (ALPN h2, SNI `a.test`,
 * trusting the world's certificate) or h2c with prior knowledge.
 */
export function openH2(world: H2World, transport: "tls" | "h2c" = "tls"): Promise<RawH2> {
  return transport === "tls"
    ? RawH2.open({ port: world.httpsPort, tls: { serverName: "a.test", caCerts: [world.caCert] } })
    : RawH2.open({ port: world.httpPort });
}

export type H2Fields = [string, string][];

export function h2Get(authority: string | undefined, path = "/x", extra: H2Fields = []): H2Fields {
  return [
    [":method", "GET"],
    [":scheme", "https"],
    ...(authority === undefined ? [] : [[":authority", authority] as [string, string]]),
    [":path", path],
    ...extra,
  ];
}

export function h2Post(path: string, extra: H2Fields = []): H2Fields {
  return [
    [":method", "POST"],
    [":scheme", "https"],
    [":authority", "a.test"],
    [":path", path],
    ...extra,
  ];
}

/** Sends one request on a fresh connection and waits for its end. */
export async function h2Exchange(
  world: H2World,
  transport: "tls" | "h2c",
  headers: H2Fields,
  body?: Uint8Array,
): Promise<H2Stream> {
  const h2 = await openH2(world, transport);
  try {
    const id = await h2.request(headers, body === undefined);
    if (body !== undefined) await h2.data(id, body, true);
    return await h2.finished(id);
  } finally {
    await h2.close();
  }
}

/** Each backend request since `mark`, as `[service, headers]` without Sluice's forwarding fields but X-Forwarded-Host. */
export function backendRequestsSince(backends: readonly EchoBackend[], marks: readonly number[]) {
  return backends.flatMap((b, i) =>
    b.requests.slice(marks[i]).map((r) => ({
      service: b.name,
      method: r.method,
      target: r.target,
      headers: r.headers.filter(([name]) =>
        !/^(x-forwarded-(for|port|proto)|x-real-ip|x-request-id)$/i.test(name)
      ),
      bodyLength: r.bodyLength,
      error: r.error,
    }))
  );
}

export async function withH2Echo(
  fn: (world: H2World, backends: [EchoBackend, EchoBackend]) => Promise<void>,
): Promise<void> {
  const a = await startEchoBackend({ name: "a" });
  const b = await startEchoBackend({ name: "b" });
  try {
    await withH2World(
      [routeTo("a.test", a.port, "t/a"), routeTo("b.test", b.port, "t/b")],
      (world) => fn(world, [a, b]),
    );
  } finally {
    await Promise.all([a.close(), b.close()]);
  }
}
