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
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
// Field values: visible chars, SP, HTAB and obs-text; no CR, LF or NUL.
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
  let i = Math.max(from, 3);
  while (i < end) {
    const lf = buf.indexOf(10, i);
    if (lf === -1 || lf >= end) return -1;
    if (buf[lf - 1] === 13 && buf[lf - 2] === 10 && buf[lf - 3] === 13) return lf + 1;
    i = lf + 1;
  }
  return -1;
}

/** Decodes bytes one char per byte (how HTTP header fields are carried in JS). */
export function decodeLatin1(buf: Uint8Array, start: number, end: number): string {
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
const NON_ASCII = /[\u0080-\uffff]/;

function encodeLatin1(text: string, into: Uint8Array, at: number): number {
  for (let i = 0; i < text.length; i++) into[at + i] = text.charCodeAt(i);
  return at + text.length;
}

/**
 * Serialises a request head. `target` is written as UTF-8 (Deno decodes the
 * request target as UTF-8); header names and values one byte per char.
 * Callers must have validated names and values (Deno's parser did for
 * client headers).
 */
export function encodeRequestHead(
  method: string,
  target: string,
  headers: readonly (readonly [string, string])[],
): Uint8Array {
  let fields = "";
  for (const [name, value] of headers) fields += name + ": " + value + "\r\n";
  fields += "\r\n";
  const line = method + " " + target + " HTTP/1.1\r\n";
  if (!NON_ASCII.test(fields)) {
    return utf8.encode(line + fields);
  }
  const lineBytes = utf8.encode(line);
  const out = new Uint8Array(lineBytes.length + fields.length);
  out.set(lineBytes);
  encodeLatin1(fields, out, lineBytes.length);
  return out;
}

/**
 * Parses a response head (status line through the blank line, as a byte
 * string). Rejects what a proxy must not pass on (RFC 9112): obs-fold,
 * whitespace before the colon, bad names or values, conflicting or invalid
 * Content-Length, Transfer-Encoding other than exactly `chunked`, and
 * Content-Length together with Transfer-Encoding.
 *
 * @throws {UpstreamProtocolError}
 */
export function parseResponseHead(text: string): ResponseHead {
  const lines = text.split("\r\n");
  // The head ends with CRLF CRLF: drop the two empty strings after the last field.
  lines.length = Math.max(0, lines.length - 2);
  const statusMatch = STATUS_LINE.exec(lines[0] ?? "");
  if (statusMatch === null) {
    throw new UpstreamProtocolError(`Cannot parse status line "${clip(lines[0] ?? "")}"`);
  }
  const minorVersion = Number(statusMatch[1]);
  const status = Number(statusMatch[2]);
  if (status < 100) throw new UpstreamProtocolError(`Cannot accept status "${status}"`);
  const headers: [string, string][] = [];
  let contentLength = -1;
  let transferEncoding: string | undefined;
  const connectionTokens: string[] = [];
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i] as string;
    const colon = line.indexOf(":");
    if (colon <= 0) {
      throw new UpstreamProtocolError(`Cannot parse header line "${clip(line)}"`);
    }
    const name = line.slice(0, colon);
    if (!TOKEN.test(name)) {
      // Also catches obs-fold (leading whitespace) and "Name : value".
      throw new UpstreamProtocolError(`Cannot accept header name "${clip(name)}"`);
    }
    const value = trimOws(line.slice(colon + 1));
    if (BAD_VALUE.test(value)) {
      throw new UpstreamProtocolError(`Cannot accept value of header "${name}"`);
    }
    headers.push([name, value]);
    const lower = name.length === 14 || name.length === 17 || name.length === 10
      ? name.toLowerCase()
      : "";
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
  const keepAlive = minorVersion === 1
    ? !connectionTokens.includes("close")
    : connectionTokens.includes("keep-alive");
  return {
    status,
    statusText: statusMatch[3] ?? "",
    minorVersion,
    headers,
    framing,
    contentLength: contentLength === -1 ? 0 : contentLength,
    connectionTokens,
    keepAlive,
  };
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

function trimOws(text: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && (text.charCodeAt(start) === 32 || text.charCodeAt(start) === 9)) start++;
  while (end > start && (text.charCodeAt(end - 1) === 32 || text.charCodeAt(end - 1) === 9)) end--;
  return start === 0 && end === text.length ? text : text.slice(start, end);
}

function clip(text: string): string {
  return text.length > 60 ? text.slice(0, 60) + "..." : text;
}
