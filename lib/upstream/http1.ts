/**
 * HTTP/1.1 wire format for the upstream client: request heads out, response
 * heads and chunk-size lines in (RFC 9112), strictly.
 *
 * Owns byte/string conversion (header fields are byte strings: one char per
 * byte, "isomorphic"; the request target is UTF-8, as Deno decoded it) and the
 * framing rules a response must satisfy before a byte of it reaches a client.
 * Knows nothing of sockets, pools or routing.
 *
 * @module
 */

/** Why an upstream response was refused; the proxy answers 502. */
export class UpstreamProtocolError extends Error {
  override name = "UpstreamProtocolError";
}

/** A parsed response status line and header section. */
export interface ResponseHead {
  readonly status: number;
  readonly statusText: string;
  /** Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1. */
  readonly minorVersion: number;
  /** Header fields as received: order, case and duplicates kept. */
  readonly headers: [string, string][];
  /** Body framing decided from the head alone (the request method may still override it). */
  readonly framing: "chunked" | "length" | "close";
  /** Content-Length when `framing` is "length". */
  readonly contentLength: number;
  /** Lowercased tokens of every Connection header. */
  readonly connectionTokens: readonly string[];
  /** The backend allows another request on this connection (HTTP/1.1 without `close`, or 1.0 with `keep-alive`). A close-delimited body still ends the connection. */
  readonly keepAlive: boolean;
  /** `Keep-Alive: timeout=N` in ms: how long the backend keeps the connection idle; undefined when not said. */
  readonly keepAliveTimeoutMs: number | undefined;
}

// Chunk extensions, like field values: no CR, LF or NUL.
const BAD_VALUE = /[\0\r\n]/;
const STATUS_LINE = /^HTTP\/1\.([01]) ([0-9]{3})(?: ([^\r\n]*))?$/;
const MAX_DIGITS = 15;

/**
 * Finds the end of a header section (the byte after CRLF CRLF) in
 * `buf[from, end)`; `from` may point back into bytes already scanned.
 *
 * @returns the index after the blank line, or -1 when not yet complete.
 */
export function findHeadEnd(buf: Uint8Array, from: number, end: number): number {
  // A plain loop: heads are a few hundred bytes, and one `indexOf` call per line cost more.
  for (let i = Math.max(from, 3); i < end; i++) {
    if (buf[i] === 10 && buf[i - 1] === 13 && buf[i - 2] === 10 && buf[i - 3] === 13) return i + 1;
  }
  return -1;
}

const ascii = new TextDecoder();

/** Decodes bytes one char per byte (how HTTP header fields are carried in JS). */
export function decodeLatin1(buf: Uint8Array, start: number, end: number): string {
  // Fast path for the usual all-ASCII head: the native UTF-8 decoder gives the same
  // string, and it was ASCII exactly when no byte became U+FFFD or merged into a
  // multi-byte char (a real U+FFFD takes three bytes, so the length would differ).
  const fast = ascii.decode(buf.subarray(start, end));
  if (fast.length === end - start && !fast.includes("\uFFFD")) return fast;
  let out = "";
  for (let i = start; i < end; i += 8192) {
    out += String.fromCharCode.apply(
      null,
      buf.subarray(i, Math.min(end, i + 8192)) as unknown as number[],
    );
  }
  return out;
}

const utf8 = new TextEncoder();
const HTTP11_CRLF = " HTTP/1.1\r\n";

/** Writes `text` one byte per char (ASCII and obs-text); returns the next offset. */
function writeLatin1(text: string, into: Uint8Array, at: number): number {
  for (let i = 0; i < text.length; i++) into[at + i] = text.charCodeAt(i);
  return at + text.length;
}

/**
 * Writes `text` one byte per char when every char is allowed by `allowed`
 * (a table of the 256 byte values); returns the next offset, or -1 at the
 * first char that is not (a char over U+00FF would lose its high bits, and
 * U+010A would become LF).
 */
function writeChecked(text: string, allowed: Uint8Array, into: Uint8Array, at: number): number {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c > 255 || allowed[c] === 0) return -1;
    into[at + i] = c;
  }
  return at + text.length;
}

/** Options of {@linkcode encodeRequestHead}. */
export interface EncodeHeadOptions {
  /** One more field appended after `headers` (the framing field the client added). */
  readonly extra?: readonly [string, string] | undefined;
  /**
   * Supplies a reusable buffer of at least `size` bytes to encode into (the
   * result is then a view of it), or undefined to allocate.
   */
  readonly buffer?: ((size: number) => Uint8Array | undefined) | undefined;
}

/** Why a request head was not encoded: a method, target, name or value that would break its framing. */
export class RequestHeadError extends Error {
  override name = "RequestHeadError";
}

/**
 * Serialises a request head. `target` is written as UTF-8 (Deno decodes the
 * request target as UTF-8); header names and values one byte per char.
 * Whatever the source, nothing that could end a line or a field reaches the
 * wire: the method and names must be tokens, the target visible ASCII or
 * non-ASCII, values field-vchar, SP, HTAB or obs-text (RFC 9110 section 5.5).
 * Deno's parsers refuse such client fields already; this holds for fields
 * Sluice builds, and if a Deno upgrade lets one through.
 *
 * Runs once per proxied request, so it writes char codes straight into the
 * buffer: no head string is built, which would be garbage on every request
 * (docs/benchmarks.md).
 */
export function encodeRequestHead(
  method: string,
  target: string,
  headers: readonly (readonly [string, string])[],
  options: EncodeHeadOptions = {},
): Uint8Array {
  const extra = options.extra;
  // Room for the target as UTF-8 (at most 3 bytes per UTF-16 unit), everything else one byte per char.
  let size = method.length + 1 + target.length * 3 + HTTP11_CRLF.length + 2;
  for (const [name, value] of headers) size += name.length + value.length + 4;
  if (extra !== undefined) size += extra[0].length + extra[1].length + 4;
  const into = options.buffer?.(size) ?? new Uint8Array(size);
  let at = method === "" ? -1 : writeChecked(method, TOKEN_BYTE, into, 0);
  if (at === -1) throw new RequestHeadError(`Cannot encode method "${clip(method)}"`);
  into[at++] = 32;
  if (target === "") throw new RequestHeadError("Cannot encode an empty request target");
  // Visible ASCII, or non-ASCII written as UTF-8 (whose bytes are all over 127): a space, CR,
  // LF or other control would end the request target.
  let ascii = true;
  for (let i = 0; i < target.length; i++) {
    const c = target.charCodeAt(i);
    if (c <= 32 || c === 127) {
      throw new RequestHeadError(`Cannot encode request target "${clip(target)}"`);
    }
    if (c > 127) ascii = false;
    else if (ascii) into[at + i] = c;
  }
  at += ascii ? target.length : utf8.encodeInto(target, into.subarray(at)).written;
  at = writeLatin1(HTTP11_CRLF, into, at);
  for (const [name, value] of headers) at = writeField(name, value, into, at);
  if (extra !== undefined) at = writeField(extra[0], extra[1], into, at);
  into[at++] = 13;
  into[at++] = 10;
  return into.subarray(0, at);
}

function writeField(name: string, value: string, into: Uint8Array, at: number): number {
  at = name === "" ? -1 : writeChecked(name, TOKEN_BYTE, into, at);
  if (at === -1) throw new RequestHeadError(`Cannot encode header name "${clip(name)}"`);
  into[at++] = 58;
  into[at++] = 32;
  at = writeChecked(value, FIELD_VALUE_BYTE, into, at);
  if (at === -1) {
    throw new RequestHeadError(`Cannot encode value of header "${clip(name)}"`);
  }
  into[at++] = 13;
  into[at++] = 10;
  return at;
}

/** 1 for the bytes allowed in a field name (RFC 9110 `tchar`), else 0. */
const TCHAR = new Uint8Array(128);
for (const c of "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") {
  TCHAR[c.charCodeAt(0)] = 1;
}
/** `tchar` over all 256 byte values (a method or a field name). */
const TOKEN_BYTE = new Uint8Array(256);
TOKEN_BYTE.set(TCHAR);
/** Bytes allowed in a field value: HTAB, SP, VCHAR and obs-text; no CR, LF, NUL or DEL. */
const FIELD_VALUE_BYTE = new Uint8Array(256).fill(1, 32, 256);
FIELD_VALUE_BYTE[9] = 1;
FIELD_VALUE_BYTE[127] = 0;

/**
 * Parses a response head (status line through the blank line, as a byte
 * string). Rejects what a proxy must not pass on (RFC 9112): obs-fold,
 * whitespace before the colon, bad names or values, conflicting or invalid
 * Content-Length, Transfer-Encoding other than exactly `chunked`, and
 * Content-Length together with Transfer-Encoding.
 *
 * Runs once per proxied response, so it scans char codes in one pass
 * (no split, no regex per line), much cheaper than the obvious version
 * (docs/benchmarks.md).
 *
 * @throws {UpstreamProtocolError}
 */
export function parseResponseHead(text: string): ResponseHead {
  // The head ends with CRLF CRLF; fields are parsed up to the last field's CRLF.
  const end = text.length - 2;
  let eol = text.indexOf("\r\n");
  if (eol === -1 || eol > end) eol = end;
  const statusLine = text.slice(0, eol);
  const statusMatch = STATUS_LINE.exec(statusLine);
  if (statusMatch === null) {
    throw new UpstreamProtocolError(`Cannot parse status line "${clip(statusLine)}"`);
  }
  const minorVersion = statusLine.charCodeAt(7) - 48;
  const status = Number(statusMatch[2]);
  if (status < 100) throw new UpstreamProtocolError(`Cannot accept status "${status}"`);
  const headers: [string, string][] = [];
  let contentLength = -1;
  let transferEncoding: string | undefined;
  const connectionTokens: string[] = [];
  let keepAliveTimeoutMs: number | undefined;
  let at = eol + 2;
  while (at < end) {
    let lineEnd = text.indexOf("\r\n", at);
    if (lineEnd === -1 || lineEnd > end) lineEnd = end;
    // Name: tchar up to the colon (also refuses obs-fold and "Name : value").
    let colon = at;
    for (; colon < lineEnd; colon++) {
      const c = text.charCodeAt(colon);
      if (c === 58 /* : */) break;
      if (c > 127 || TCHAR[c] === 0) {
        if (colon === at || c !== 32) {
          throw new UpstreamProtocolError(
            `Cannot parse header line "${clip(text.slice(at, lineEnd))}"`,
          );
        }
        throw new UpstreamProtocolError(
          `Cannot accept header name "${clip(text.slice(at, colon + 1))}"`,
        );
      }
    }
    if (colon === lineEnd || colon === at) {
      throw new UpstreamProtocolError(
        `Cannot parse header line "${clip(text.slice(at, lineEnd))}"`,
      );
    }
    const name = text.slice(at, colon);
    // Value: trimmed of SP/HTAB; control characters other than HTAB refused (RFC 9110
    // field-vchar). Deno's HTTP/1 writer panics, ending the process, on a value with one.
    let vStart = colon + 1;
    let vEnd = lineEnd;
    while (vStart < vEnd && isOws(text.charCodeAt(vStart))) vStart++;
    while (vEnd > vStart && isOws(text.charCodeAt(vEnd - 1))) vEnd--;
    for (let i = vStart; i < vEnd; i++) {
      const c = text.charCodeAt(i);
      if ((c < 32 && c !== 9) || c === 127) {
        throw new UpstreamProtocolError(`Cannot accept value of header "${name}"`);
      }
    }
    const value = text.slice(vStart, vEnd);
    headers.push([name, value]);
    at = lineEnd + 2;
    const n = name.length;
    if (n !== 14 && n !== 17 && n !== 10) continue;
    const lower = name.toLowerCase();
    if (lower === "content-length") {
      const parsed = parseContentLength(value);
      if (parsed === undefined || (contentLength !== -1 && parsed !== contentLength)) {
        throw new UpstreamProtocolError(`Cannot accept Content-Length "${clip(value)}"`);
      }
      contentLength = parsed;
    } else if (lower === "transfer-encoding") {
      transferEncoding = transferEncoding === undefined ? value : transferEncoding + "," + value;
    } else if (lower === "connection") {
      for (const token of value.split(",")) {
        const t = trimOws(token).toLowerCase();
        if (t !== "") connectionTokens.push(t);
      }
    } else if (lower === "keep-alive") {
      // RFC 7230 appendix A.1.2 (obsolete, still sent: Node's default is timeout=5).
      const timeout = /(?:^|[,;\s])timeout\s*=\s*(\d{1,6})(?![\d.])/i.exec(value);
      if (timeout !== null) keepAliveTimeoutMs = Number(timeout[1]) * 1000;
    }
  }
  let framing: ResponseHead["framing"] = "close";
  if (transferEncoding !== undefined) {
    if (contentLength !== -1) {
      throw new UpstreamProtocolError("Cannot accept both Content-Length and Transfer-Encoding");
    }
    if (trimOws(transferEncoding).toLowerCase() !== "chunked") {
      throw new UpstreamProtocolError(
        `Cannot accept Transfer-Encoding "${clip(transferEncoding)}"`,
      );
    }
    framing = "chunked";
  } else if (contentLength !== -1) {
    framing = "length";
  }
  // An HTTP/1.0 message with Transfer-Encoding has faulty framing: the connection must
  // close after it (RFC 9112 section 6.1).
  const keepAlive = minorVersion === 1
    ? !connectionTokens.includes("close")
    : connectionTokens.includes("keep-alive") && transferEncoding === undefined;
  return {
    status,
    statusText: statusMatch[3] ?? "",
    minorVersion,
    headers,
    framing,
    contentLength: contentLength === -1 ? 0 : contentLength,
    connectionTokens,
    keepAlive,
    keepAliveTimeoutMs,
  };
}

function isOws(c: number): boolean {
  return c === 32 || c === 9;
}

/**
 * Parses a chunk-size line without its CRLF (`1a;ext=1`).
 *
 * @throws {UpstreamProtocolError}
 */
export function parseChunkSize(line: string): number {
  const semi = line.indexOf(";");
  const hex = trimOws(semi === -1 ? line : line.slice(0, semi));
  if (!/^[0-9a-fA-F]{1,12}$/.test(hex)) {
    throw new UpstreamProtocolError(`Cannot parse chunk size "${clip(line)}"`);
  }
  if (semi !== -1 && BAD_VALUE.test(line)) {
    throw new UpstreamProtocolError(`Cannot parse chunk extension "${clip(line)}"`);
  }
  return parseInt(hex, 16);
}

/** A Content-Length value (possibly a list of equal values), or undefined when invalid. */
export function parseContentLength(value: string): number | undefined {
  let result: number | undefined;
  for (const part of value.split(",")) {
    const digits = trimOws(part);
    if (!/^[0-9]+$/.test(digits) || digits.length > MAX_DIGITS) return undefined;
    const n = Number(digits);
    if (result !== undefined && n !== result) return undefined;
    result = n;
  }
  return result;
}

/** `text` without leading and trailing optional whitespace (SP, HTAB; RFC 9110 section 5.6.3). */
export function trimOws(text: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && isOws(text.charCodeAt(start))) start++;
  while (end > start && isOws(text.charCodeAt(end - 1))) end--;
  return start === 0 && end === text.length ? text : text.slice(start, end);
}

function clip(text: string): string {
  return text.length > 60 ? text.slice(0, 60) + "..." : text;
}

/** Whether a comma-separated field value (`Connection`, `Upgrade`) holds `token` (lowercase), in any case. */
export function hasToken(value: string, token: string): boolean {
  return value.split(",").some((t) => t.trim().toLowerCase() === token);
}
