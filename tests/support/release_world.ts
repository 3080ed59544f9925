/**
 * Test support: what `lib/upstream/chunk_release_test.ts` checks the release of
 * streamed response chunks (`releaseTakenChunk`) with.
 *
 * - {@linkcode startPatternBackend}: a raw backend serving the echo backend's
 *   pattern bytes (`patternBytes`) with the framing (Content-Length, chunked,
 *   close-delimited), write sizes, chunk sizes and extra bytes a request's
 *   query asks for, counting the bytes it wrote.
 * - {@linkcode startReleaseWorld}: the real proxy handler behind the real
 *   plain HTTP listener and the HTTPS listener (TLS relay, h1 and h2).
 * - {@linkcode H1Reader}: reads HTTP/1.1 responses incrementally, hashing the
 *   de-framed body (no whole-body copies), pausing when told to.
 * - {@linkcode StarvedH2}: a raw HTTP/2 client (TLS or h2c) that opens with
 *   stream windows of the test's choosing (0: the server may send nothing)
 *   and grants DATA credit only when asked.
 *
 * Not part of Sluice.
 *
 * @module
 */

import { createHash, type Hash } from "node:crypto";
import type { ProxyHandlerOptions } from "../../lib/proxy/proxy_handler.ts";
import {
  connectTo,
  encodeHeaderBlock,
  frame as h2Frame,
  type H2World,
  readFrames,
  startH2World,
} from "./raw_h2.ts";
import { patternBytes } from "./echo_backend.ts";
import { concatBytes, latin1, latin1Bytes } from "./raw_http.ts";
import { type ScriptedConn, startScriptedBackend } from "./scripted_backend.ts";
import { waitFor } from "./wait.ts";

// ---------------------------------------------------------------------------
// Backend
// ---------------------------------------------------------------------------

/** What {@linkcode startPatternBackend} returns; `close()` it at the end of the test. */
export interface PatternBackend {
  readonly port: number;
  /** Bytes written on every connection so far (heads included). */
  readonly written: number;
  readonly connections: readonly ScriptedConn[];
  close(): Promise<void>;
}

/**
 * Serves `GET /?n=N` with N pattern bytes, keeping connections alive. Query:
 * `framing` (`length`, default; `chunked`; `close`: no length, the close ends
 * it), `piece` (bytes per write, default 64 KiB), `chunks` (chunked: data
 * sizes cycled through, comma-separated, default 64 KiB), `extra` (bytes
 * written past a Content-Length body), `type` (Content-Type). HEAD gets the
 * head alone.
 */
export function startPatternBackend(options: { noDelay?: boolean } = {}): PatternBackend {
  const backend = startScriptedBackend(async (conn) => {
    for (;;) {
      const head = await conn.readHead();
      if (head === null) return;
      const [method = "GET", target = "/"] = head.split("\r\n")[0]!.split(" ");
      const q = new URL(target, "http://x").searchParams;
      const n = Number(q.get("n") ?? "0");
      const framing = q.get("framing") ?? "length";
      const piece = Number(q.get("piece") ?? 65536);
      const sizes = (q.get("chunks") ?? "65536").split(",").map(Number);
      const extra = Number(q.get("extra") ?? "0");
      const fields = [
        "HTTP/1.1 200 OK",
        `Content-Type: ${q.get("type") ?? "application/octet-stream"}`,
        ...(framing === "length" ? [`Content-Length: ${n}`] : []),
        ...(framing === "chunked" ? ["Transfer-Encoding: chunked"] : []),
        ...(framing === "close" ? ["Connection: close"] : []),
      ];
      await conn.write(fields.join("\r\n") + "\r\n\r\n");
      if (method === "HEAD") continue;
      if (framing === "chunked") {
        await writeChunked(conn, n, sizes, piece);
      } else {
        for (let at = 0; at < n; at += piece) {
          const part = patternBytes(at, Math.min(piece, n - at));
          // Extra bytes go out in the same write as the body's last ones.
          const last = at + piece >= n && extra > 0;
          await conn.write(last ? concatBytes([part, new Uint8Array(extra).fill(0x58)]) : part);
        }
      }
      if (framing === "close") return;
    }
  }, options);
  return {
    port: backend.port,
    get written() {
      return backend.connections.reduce((sum, conn) => sum + conn.written, 0);
    },
    connections: backend.connections,
    close: () => backend.close(),
  };
}

/** Writes `n` pattern bytes chunked, chunk data sizes cycling through `sizes`, in writes of about `piece`. */
async function writeChunked(
  conn: ScriptedConn,
  n: number,
  sizes: readonly number[],
  piece: number,
): Promise<void> {
  let pending: Uint8Array[] = [];
  let pendingBytes = 0;
  const flush = async () => {
    if (pendingBytes === 0) return;
    const out = concatBytes(pending);
    pending = [];
    pendingBytes = 0;
    for (let at = 0; at < out.length; at += piece) await conn.write(out.subarray(at, at + piece));
  };
  for (let at = 0, i = 0; at < n; i++) {
    const size = Math.min(sizes[i % sizes.length]!, n - at);
    const prefix = latin1Bytes(size.toString(16) + "\r\n");
    pending.push(prefix, patternBytes(at, size), latin1Bytes("\r\n"));
    pendingBytes += prefix.length + size + 2;
    at += size;
    if (pendingBytes >= piece) await flush();
  }
  pending.push(latin1Bytes("0\r\n\r\n"));
  pendingBytes += 5;
  await flush();
}

/**
 * Resolves once `progress()` is at least `minBytes` and has not moved
 * between two checks `intervalMs` apart: every buffer between the backend
 * and a client that reads nothing is full.
 */
export async function untilStalled(
  progress: () => number,
  options: { minBytes?: number; intervalMs?: number; timeoutMs?: number } = {},
): Promise<number> {
  let last = -1;
  return await waitFor("the data path to stall", () => {
    const now = progress();
    const stalled = now >= (options.minBytes ?? 1) && now === last;
    last = now;
    return stalled ? now : false;
  }, { intervalMs: options.intervalMs ?? 150, timeoutMs: options.timeoutMs ?? 15_000 });
}

// ---------------------------------------------------------------------------
// The world
// ---------------------------------------------------------------------------

/** What {@linkcode startReleaseWorld} returns; `close()` it at the end of the test. */
export type ReleaseWorld = H2World;

/** The real handler (chunks released: its default) routing every host to `backendPort`. */
export function startReleaseWorld(
  backendPort: number,
  options: Partial<Omit<ProxyHandlerOptions, "snapshot">> = {},
): Promise<ReleaseWorld> {
  return startH2World([{ endpoints: [{ address: "127.0.0.1", port: backendPort }] }], options);
}

// ---------------------------------------------------------------------------
// HTTP/1.1 reader
// ---------------------------------------------------------------------------

/** A response read by {@linkcode H1Reader}: the body as its length and digest. */
export interface ReadBody {
  readonly status: number;
  readonly headers: [string, string][];
  /** How the body was framed on the wire. */
  readonly framing: "length" | "chunked" | "close" | "none";
  readonly length: number;
  readonly sha256: string;
  /** The body ended as its framing says (false: the connection closed first). */
  readonly complete: boolean;
}

/** Reads responses off one connection, incrementally. */
export class H1Reader {
  #conn: Deno.Conn;
  #buf = new Uint8Array(0);
  #eof = false;
  #scratch: Uint8Array;

  constructor(conn: Deno.Conn, options: { readBytes?: number } = {}) {
    this.#conn = conn;
    this.#scratch = new Uint8Array(options.readBytes ?? 64 * 1024);
  }

  async send(text: string): Promise<void> {
    const bytes = latin1Bytes(text);
    for (let at = 0; at < bytes.length;) at += await this.#conn.write(bytes.subarray(at));
  }

  /**
   * Reads one response. `pauseAt`: once that many body bytes arrived, awaits
   * `pause()` before reading on; `stopAt`: returns (incomplete) once that many arrived.
   */
  async read(options: {
    head?: boolean;
    pauseAt?: number;
    pause?: () => Promise<unknown>;
    stopAt?: number;
  } = {}): Promise<ReadBody> {
    let headEnd: number;
    for (;;) {
      headEnd = indexOfBlankLine(this.#buf);
      if (headEnd !== -1) break;
      if (!(await this.#fill())) throw new Error("Connection closed before a response head");
    }
    const lines = latin1(this.#buf.subarray(0, headEnd)).split("\r\n");
    this.#buf = this.#buf.slice(headEnd + 4);
    const status = Number(lines.shift()!.split(" ")[1]);
    const headers = lines.map((line): [string, string] => {
      const colon = line.indexOf(":");
      return [line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim()];
    });
    const field = (name: string) => headers.find(([k]) => k === name)?.[1];
    const hash = createHash("sha256");
    let length = 0;
    let paused = options.pauseAt === undefined;
    const take = async (bytes: Uint8Array) => {
      hash.update(bytes);
      length += bytes.length;
      if (!paused && length >= options.pauseAt!) {
        paused = true;
        await options.pause?.();
      }
    };
    const result = (framing: ReadBody["framing"], complete: boolean): ReadBody => ({
      status,
      headers,
      framing,
      length,
      sha256: hash.digest("hex"),
      complete,
    });
    const stop = () => options.stopAt !== undefined && length >= options.stopAt;
    if (options.head || status === 204 || status === 304) return result("none", true);
    if (field("transfer-encoding")?.toLowerCase() === "chunked") {
      for (;;) {
        const line = await this.#line();
        if (line === null) return result("chunked", false);
        const size = parseInt(line, 16);
        if (size === 0) {
          while ((await this.#line()) !== "") {
            // Trailer fields: none expected, skipped.
          }
          return result("chunked", true);
        }
        if (!(await this.#body(size, take, stop))) return result("chunked", false);
        if ((await this.#line()) !== "") throw new Error("Cannot parse chunked body: no CRLF");
      }
    }
    const declared = field("content-length");
    if (declared !== undefined) {
      return result("length", await this.#body(Number(declared), take, stop));
    }
    await this.#body(Number.MAX_SAFE_INTEGER, take, stop);
    return result("close", this.#eof);
  }

  close(): void {
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }

  async #body(
    n: number,
    take: (bytes: Uint8Array) => Promise<void>,
    stop: () => boolean,
  ): Promise<boolean> {
    let left = n;
    while (left > 0) {
      if (stop()) return false;
      if (this.#buf.length === 0 && !(await this.#fill())) return false;
      const part = this.#buf.subarray(0, Math.min(left, this.#buf.length));
      this.#buf = this.#buf.subarray(part.length);
      left -= part.length;
      await take(part);
    }
    return true;
  }

  async #line(): Promise<string | null> {
    for (;;) {
      const lf = this.#buf.indexOf(10);
      if (lf !== -1) {
        const line = latin1(this.#buf.subarray(0, lf)).replace(/\r$/, "");
        this.#buf = this.#buf.subarray(lf + 1);
        return line;
      }
      if (!(await this.#fill())) return null;
    }
  }

  async #fill(): Promise<boolean> {
    if (this.#eof) return false;
    const n = await this.#conn.read(this.#scratch).catch(() => null);
    if (n === null) {
      this.#eof = true;
      return false;
    }
    const fresh = this.#scratch.slice(0, n);
    this.#buf = this.#buf.length === 0 ? fresh : concatBytes([this.#buf, fresh]);
    return true;
  }
}

function indexOfBlankLine(buf: Uint8Array): number {
  for (let i = 0; i + 3 < buf.length; i++) {
    if (buf[i] === 13 && buf[i + 1] === 10 && buf[i + 2] === 13 && buf[i + 3] === 10) return i;
  }
  return -1;
}

// ---------------------------------------------------------------------------
// HTTP/2 client with starved flow control
// ---------------------------------------------------------------------------

const PREFACE = latin1Bytes("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
const DATA = 0, HEADERS = 1, RST_STREAM = 3, SETTINGS = 4, PING = 6, GOAWAY = 7;
const WINDOW_UPDATE = 8;

/** What one stream of {@linkcode StarvedH2} received. */
export interface StarvedStream {
  /** The first byte of the first header block (0x88: an indexed `:status: 200`). */
  statusByte: number | undefined;
  /** DATA bytes received, and not yet granted back. */
  received: number;
  ungranted: number;
  ended: boolean;
  reset: number | undefined;
  readonly hash: Hash;
}

/** A raw h2 connection whose stream windows start at `initialWindow`; `close()` it. */
export class StarvedH2 {
  #conn: Deno.Conn;
  #nextId = 1;
  #streams = new Map<number, StarvedStream>();
  #writing: Promise<void> = Promise.resolve();
  #reading: Promise<void>;
  #autoGrant: boolean;
  #scheme: string;
  closed = false;
  goaway: number | undefined;

  private constructor(conn: Deno.Conn, autoGrant: boolean, scheme: string) {
    this.#conn = conn;
    this.#autoGrant = autoGrant;
    this.#scheme = scheme;
    this.#reading = this.#readLoop();
  }

  /**
   * Opens an h2 connection (`tls` given: ALPN h2, else h2c with prior
   * knowledge). The connection window stays at 65,535; `autoGrant` gives
   * back every DATA byte as it arrives (a fast reader).
   */
  static async open(
    port: number,
    options: { initialWindow: number; tls?: { caCert: string }; autoGrant?: boolean },
  ): Promise<StarvedH2> {
    const conn = await connectTo(
      port,
      options.tls === undefined ? undefined : { caCerts: [options.tls.caCert], alpn: "h2" },
    );
    const h2 = new StarvedH2(
      conn,
      options.autoGrant ?? false,
      options.tls === undefined ? "http" : "https",
    );
    const settings = new Uint8Array(12);
    const view = new DataView(settings.buffer);
    view.setUint16(0, 0x2); // ENABLE_PUSH
    view.setUint32(2, 0);
    view.setUint16(6, 0x4); // INITIAL_WINDOW_SIZE
    view.setUint32(8, options.initialWindow);
    await h2.#write(concatBytes([PREFACE, h2Frame(SETTINGS, 0, 0, settings)]));
    return h2;
  }

  /** Sends a GET (or `method`) for `path` and returns the stream id. */
  async get(path: string, method = "GET"): Promise<number> {
    const id = this.#nextId;
    this.#nextId += 2;
    this.#streams.set(id, {
      statusByte: undefined,
      received: 0,
      ungranted: 0,
      ended: false,
      reset: undefined,
      hash: createHash("sha256"),
    });
    const block = encodeHeaderBlock([
      [":method", method],
      [":scheme", this.#scheme],
      [":authority", "a.test"],
      [":path", path],
    ]);
    await this.#write(h2Frame(HEADERS, 0x4 | 0x1, id, block));
    return id;
  }

  stream(id: number): StarvedStream {
    const stream = this.#streams.get(id);
    if (stream === undefined) throw new Error(`Cannot find stream "${id}"`);
    return stream;
  }

  /** Gives `bytes` of credit to stream `id` and to the connection. */
  async grant(id: number, bytes: number): Promise<void> {
    const payload = (n: number) => {
      const out = new Uint8Array(4);
      new DataView(out.buffer).setUint32(0, n);
      return out;
    };
    await this.#write(concatBytes([
      h2Frame(WINDOW_UPDATE, 0, id, payload(bytes)),
      h2Frame(WINDOW_UPDATE, 0, 0, payload(bytes)),
    ]));
  }

  /** Gives back the connection credit of DATA received on `id` (the stream's own stays as it is). */
  async grantConnection(id: number): Promise<void> {
    const stream = this.stream(id);
    const n = stream.ungranted;
    if (n === 0) return;
    stream.ungranted = 0;
    const out = new Uint8Array(4);
    new DataView(out.buffer).setUint32(0, n);
    await this.#write(h2Frame(WINDOW_UPDATE, 0, 0, out));
  }

  async reset(id: number): Promise<void> {
    const out = new Uint8Array(4);
    new DataView(out.buffer).setUint32(0, 8); // CANCEL
    await this.#write(h2Frame(RST_STREAM, 0, id, out));
  }

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
      for (let at = 0; at < bytes.length;) at += await this.#conn.write(bytes.subarray(at));
    });
    this.#writing = next.catch(() => {});
    return next;
  }

  async #readLoop(): Promise<void> {
    try {
      await readFrames(
        this.#conn,
        (type, flags, id, payload) => this.#onFrame(type, flags, id, payload),
      );
    } catch {
      // Closed by close() or by the peer.
    } finally {
      this.closed = true;
    }
  }

  async #onFrame(type: number, flags: number, id: number, payload: Uint8Array): Promise<void> {
    const stream = this.#streams.get(id);
    if (type === DATA && stream !== undefined) {
      const body = flags & 0x8 ? payload.subarray(1, payload.length - payload[0]!) : payload;
      stream.hash.update(body);
      stream.received += body.length;
      stream.ungranted += payload.length;
      if (flags & 0x1) stream.ended = true;
      if (this.#autoGrant && payload.length > 0) {
        stream.ungranted = 0;
        await this.grant(id, payload.length);
      }
    } else if (type === HEADERS && stream !== undefined) {
      stream.statusByte ??= payload[flags & 0x8 ? 1 : 0];
      if (flags & 0x1) stream.ended = true;
    } else if (type === RST_STREAM && stream !== undefined) {
      stream.reset = new DataView(payload.buffer, payload.byteOffset, 4).getUint32(0);
    } else if (type === SETTINGS && !(flags & 0x1)) {
      await this.#write(h2Frame(SETTINGS, 0x1, 0, new Uint8Array(0)));
    } else if (type === PING && !(flags & 0x1)) {
      await this.#write(h2Frame(PING, 0x1, 0, payload.slice()));
    } else if (type === GOAWAY) {
      this.goaway = new DataView(payload.buffer, payload.byteOffset, 8).getUint32(4);
    }
  }
}
