/**
 * Raw HTTP/1.1 client helpers for tests where framing matters: send exact
 * bytes over `Deno.connect`, read responses with their framing (Content-Length,
 * chunked, close-delimited), keep a connection for pipelining and keep-alive,
 * and a response parser that reports every response found in a byte stream.
 *
 * @module
 */

/** A response as seen on the wire. */
export interface RawResponse {
  readonly version: string;
  readonly status: number;
  readonly statusText: string;
  /** Fields in wire order and case. */
  readonly headers: [string, string][];
  /** The de-chunked body. */
  readonly body: Uint8Array;
  /** Was the body chunked on the wire. */
  readonly chunked: boolean;
  readonly trailers: [string, string][];
}

const encoder = new TextEncoder();

/** The first value of a field, case-insensitively. */
export function headerValue(
  headers: readonly [string, string][],
  name: string,
): string | undefined {
  const lower = name.toLowerCase();
  for (const [key, value] of headers) if (key.toLowerCase() === lower) return value;
  return undefined;
}

/** Every value of a field, in order. */
export function headerValues(headers: readonly [string, string][], name: string): string[] {
  const lower = name.toLowerCase();
  return headers.filter(([key]) => key.toLowerCase() === lower).map(([, value]) => value);
}

/** A kept-open connection for keep-alive and pipelining tests. */
export class RawConnection {
  #conn: Deno.Conn;
  #buf = new Uint8Array(0);
  #eof = false;

  private constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  static async open(port: number, hostname = "127.0.0.1"): Promise<RawConnection> {
    return new RawConnection(await Deno.connect({ hostname, port }));
  }

  /** Over a connection already open (a TLS one, say); closing this closes `conn`. */
  static wrap(conn: Deno.Conn): RawConnection {
    return new RawConnection(conn);
  }

  /** Sends text (one byte per char) or bytes. */
  async send(data: string | Uint8Array): Promise<void> {
    const bytes = typeof data === "string" ? latin1Bytes(data) : data;
    let offset = 0;
    while (offset < bytes.length) offset += await this.#conn.write(bytes.subarray(offset));
  }

  /**
   * Reads one response. `head: true` for a response to HEAD (no body).
   *
   * @throws when the connection closes first or `timeoutMs` passes.
   */
  async readResponse(options: { head?: boolean; timeoutMs?: number } = {}): Promise<RawResponse> {
    const deadline = Date.now() + (options.timeoutMs ?? 10_000);
    for (;;) {
      const parsed = tryParseResponse(this.#buf, { head: options.head ?? false, eof: this.#eof });
      if (parsed !== undefined) {
        this.#buf = this.#buf.slice(parsed.consumed);
        return parsed.response;
      }
      if (this.#eof) throw new Error("Connection closed before a complete response");
      await this.#readMore(deadline);
    }
  }

  /** Reads until the peer closes (or `timeoutMs`), returning everything not yet parsed. */
  async readToEnd(timeoutMs = 10_000): Promise<Uint8Array> {
    const deadline = Date.now() + timeoutMs;
    while (!this.#eof) await this.#readMore(deadline);
    const out = this.#buf;
    this.#buf = new Uint8Array(0);
    return out;
  }

  /**
   * Reads until the peer closes or no byte arrives for `quietMs` (then closes),
   * returning everything not yet parsed. For probes where the server may keep
   * the connection open.
   */
  async readUntilQuiet(quietMs = 500, maxMs = 10_000): Promise<Uint8Array> {
    const deadline = Date.now() + maxMs;
    while (!this.#eof && Date.now() < deadline) {
      try {
        await this.#readMore(Math.min(deadline, Date.now() + quietMs));
      } catch {
        break;
      }
    }
    const out = this.#buf;
    this.#buf = new Uint8Array(0);
    return out;
  }

  /** True once the peer has closed its side (reads are attempted until `timeoutMs`). */
  async closedByPeer(timeoutMs = 5_000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    try {
      while (!this.#eof) await this.#readMore(deadline);
      return true;
    } catch {
      return false;
    }
  }

  close(): void {
    closeQuietly(this.#conn);
  }

  /** `using conn = await RawConnection.open(port)` closes it at the end of the block. */
  [Symbol.dispose](): void {
    this.close();
  }

  async #readMore(deadline: number): Promise<void> {
    const remaining = deadline - Date.now();
    if (remaining <= 0) throw new Error("Timed out waiting for bytes");
    const chunk = new Uint8Array(64 * 1024);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), remaining);
    });
    const read = this.#conn.read(chunk).catch(() => null);
    const result = await Promise.race([read, timeout]);
    clearTimeout(timer);
    if (result === "timeout") {
      // Close so the pending read settles, then report.
      this.close();
      await read;
      throw new Error("Timed out waiting for bytes");
    }
    if (result === null) {
      this.#eof = true;
      return;
    }
    const next = new Uint8Array(this.#buf.length + result);
    next.set(this.#buf);
    next.set(chunk.subarray(0, result), this.#buf.length);
    this.#buf = next;
  }
}

/** Closes `closable`, ignoring that it may be closed already. */
export function closeQuietly(closable: { close(): void }): void {
  try {
    closable.close();
  } catch {
    // Already closed.
  }
}

/**
 * Sends bytes on a new connection and reads one response (`head: true` for a
 * response to HEAD).
 */
export async function rawRequest(
  port: number,
  data: string | Uint8Array,
  options: { head?: boolean; timeoutMs?: number } = {},
): Promise<RawResponse> {
  const conn = await RawConnection.open(port);
  try {
    await conn.send(data);
    return await conn.readResponse(options);
  } finally {
    conn.close();
  }
}

/** Sends bytes on a new connection and returns every byte received until the server closes. */
export async function rawExchange(
  port: number,
  data: string | Uint8Array,
  options: { hostname?: string; timeoutMs?: number } = {},
): Promise<Uint8Array> {
  const conn = await RawConnection.open(port, options.hostname);
  try {
    await conn.send(data).catch(() => {});
    return await conn.readToEnd(options.timeoutMs ?? 10_000);
  } finally {
    conn.close();
  }
}

/** Parses every complete response in `bytes` (pipelined answers); stops at the first incomplete one. */
export function parseResponses(bytes: Uint8Array): RawResponse[] {
  const out: RawResponse[] = [];
  let rest = bytes;
  for (;;) {
    const parsed = tryParseResponse(rest, { head: false, eof: true });
    if (parsed === undefined) return out;
    out.push(parsed.response);
    rest = rest.slice(parsed.consumed);
    if (rest.length === 0) return out;
  }
}

/** Text of bytes, one char per byte. */
export function latin1(bytes: Uint8Array): string {
  let out = "";
  for (let i = 0; i < bytes.length; i += 8192) {
    out += String.fromCharCode(...bytes.subarray(i, i + 8192));
  }
  return out;
}

/** `text` as bytes, one per UTF-16 code unit (its low 8 bits). */
export function latin1Bytes(text: string): Uint8Array {
  if (!/[\u0080-\uffff]/.test(text)) return encoder.encode(text);
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i) & 0xff;
  return out;
}

function tryParseResponse(
  buf: Uint8Array,
  options: { head: boolean; eof: boolean },
): { response: RawResponse; consumed: number } | undefined {
  const text = latin1(buf.subarray(0, Math.min(buf.length, 128 * 1024)));
  const headEnd = text.indexOf("\r\n\r\n");
  if (headEnd === -1) return undefined;
  const lines = text.slice(0, headEnd).split("\r\n");
  const statusLine = lines.shift() ?? "";
  const match = /^(HTTP\/\d\.\d) (\d{3})(?: (.*))?$/.exec(statusLine);
  if (match === null) throw new Error(`Cannot parse status line ${JSON.stringify(statusLine)}`);
  const headers: [string, string][] = lines.map((line) => {
    const colon = line.indexOf(":");
    return [line.slice(0, colon), line.slice(colon + 1).trim()];
  });
  const status = Number(match[2]);
  const response = (body: Uint8Array, chunked: boolean, trailers: [string, string][] = []) => ({
    version: match[1] as string,
    status,
    statusText: match[3] ?? "",
    headers,
    body,
    chunked,
    trailers,
  });
  let offset = headEnd + 4;
  if (options.head || status === 204 || status === 304 || (status >= 100 && status < 200)) {
    return { response: response(new Uint8Array(0), false), consumed: offset };
  }
  const te = headerValue(headers, "transfer-encoding");
  if (te !== undefined && te.toLowerCase().includes("chunked")) {
    const parts: Uint8Array[] = [];
    for (;;) {
      const lineEnd = indexOfCrlf(buf, offset);
      if (lineEnd === -1) return undefined;
      const size = parseInt(latin1(buf.subarray(offset, lineEnd)).split(";")[0] ?? "", 16);
      offset = lineEnd + 2;
      if (size === 0) {
        const trailers: [string, string][] = [];
        for (;;) {
          const end = indexOfCrlf(buf, offset);
          if (end === -1) return undefined;
          const line = latin1(buf.subarray(offset, end));
          offset = end + 2;
          if (line === "") break;
          const colon = line.indexOf(":");
          trailers.push([line.slice(0, colon), line.slice(colon + 1).trim()]);
        }
        return { response: response(concatBytes(parts), true, trailers), consumed: offset };
      }
      if (buf.length < offset + size + 2) return undefined;
      parts.push(buf.slice(offset, offset + size));
      offset += size + 2;
    }
  }
  const cl = headerValue(headers, "content-length");
  if (cl !== undefined) {
    const length = Number(cl);
    if (buf.length < offset + length) return undefined;
    return {
      response: response(buf.slice(offset, offset + length), false),
      consumed: offset + length,
    };
  }
  if (!options.eof) return undefined;
  return { response: response(buf.slice(offset), false), consumed: buf.length };
}

function indexOfCrlf(buf: Uint8Array, from: number): number {
  for (let i = from; i + 1 < buf.length; i++) if (buf[i] === 13 && buf[i + 1] === 10) return i;
  return -1;
}

/** The bytes of `parts`, joined into a new array. */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}
