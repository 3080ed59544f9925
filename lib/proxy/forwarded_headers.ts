/**
 * Which header fields cross the proxy, both ways: hop-by-hop fields removed,
 * `Host` kept, and the forwarding fields set as ingress-nginx sets them.
 *
 * Hop-by-hop (RFC 9110 section 7.6.1, plus the legacy ones): `Connection` and
 * every field it names, `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`,
 * `Transfer-Encoding`, `Upgrade` (kept for an upgrade request, with
 * `Connection: Upgrade`), and `HTTP2-Settings`. Like nginx and Envoy,
 * `Proxy-Authorization` and `Proxy-Authenticate` are forwarded: Sluice is a
 * gateway, not the forward proxy those credentials are for. Also removed
 * towards the backend: `Expect` (the front server already answered
 * `100-continue`) and `Proxy` (httpoxy, as ingress-nginx does).
 * `Content-Length` stays where the client put it (the body is forwarded with
 * exactly that length), as one field: equal duplicates and lists are merged;
 * a chunked body is re-chunked by the upstream client.
 *
 * Forwarding fields (ingress-nginx with `use-forwarded-headers`, limited to
 * `--trusted-proxy-cidrs`): from an untrusted peer every client-sent
 * `X-Forwarded-*` and `X-Real-IP` is replaced; from a trusted peer
 * `X-Forwarded-For` is appended to and the client's `X-Forwarded-Proto`,
 * `-Host` and `-Port` are kept, and `X-Real-IP` is the right-most untrusted
 * address of the chain (nginx `real_ip_recursive on`). `X-Request-ID` is kept
 * when present and generated otherwise, whoever the peer. Client fields that
 * spell one of these names with underscores (`X_Forwarded_For`) are dropped:
 * CGI-style backends read them as the same variable.
 *
 * Pure: no I/O, no clock; the request id generator is passed in.
 *
 * @module
 */

import { hasToken, parseContentLength } from "../upstream/http1.ts";
import { type CidrMatcher, normalizeIp, parseIp } from "../net/cidr.ts";

type HeaderPair = readonly [string, string];
/** An input field: one passed through is the output's own pair too (not a copy). */
type Field = [string, string];

const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "http2-settings",
]);

/** Fields Sluice sets itself towards the backend; client copies are dropped. */
const REPLACED = new Set([
  "host",
  "expect",
  "proxy",
  "x-forwarded-for",
  "x-forwarded-proto",
  "x-forwarded-host",
  "x-forwarded-port",
  "x-real-ip",
  "x-request-id",
]);

/**
 * Name lengths worth lowercasing a field name for. Every request and response
 * passes each field through these rules, and most fields (`Accept`,
 * `Content-Type`, `ETag`…) match none of them: comparing the length first
 * skips a `toLowerCase()` and a set lookup for them.
 */
function lengthsOf(...sets: Iterable<string>[]): Uint8Array {
  const lengths = new Uint8Array(256);
  for (const set of sets) for (const name of set) lengths[name.length] = 1;
  return lengths;
}
const REQUEST_LENGTHS = lengthsOf(HOP_BY_HOP, REPLACED, ["content-length"]);
const RESPONSE_LENGTHS = lengthsOf(HOP_BY_HOP, ["strict-transport-security"]);

/** True when `name` may be in `names` or `set`, judged by length alone. */
function mayMatch(
  lengths: Uint8Array,
  name: string,
  set: ReadonlySet<string> | readonly string[] | undefined,
): boolean {
  if (lengths[name.length] === 1 || name.length > 255) return true;
  if (set === undefined) return false;
  for (const entry of set) if (entry.length === name.length) return true;
  return false;
}

const MAX_REQUEST_ID = 200;
const REQUEST_ID = /^[\x21-\x7e]+$/;

/** The request as the forwarding rules see it. */
export interface ForwardingContext {
  /** `Host` to send: the request's authority exactly as received. */
  readonly authority: string;
  /** Immediate TCP peer address. */
  readonly peer: string;
  readonly scheme: "http" | "https";
  /** Port reported in `X-Forwarded-Port` when not trusted from the client. */
  readonly port: number;
  /** Keep `Upgrade` and send `Connection: Upgrade`. */
  readonly upgrade?: boolean;
  /** Extra lowercase field names to drop (e.g. `sec-websocket-extensions` for the relay). */
  readonly drop?: ReadonlySet<string>;
}

export interface ForwardingOptions {
  /** Peers whose forwarding headers are believed. */
  readonly trusted: CidrMatcher;
  /** Makes an id when the client sent none (32 hex chars, like nginx's `$request_id`). */
  readonly newRequestId: () => string;
}

/** What the backend will receive, plus values the access log wants. */
export interface ForwardedRequest {
  readonly headers: [string, string][];
  readonly requestId: string;
  /** The client address as the backend is told (`X-Real-IP`). */
  readonly clientIp: string;
}

/**
 * Builds the header list for the backend from the client's list (wire order
 * and case kept; `Host` stays where it was, or goes first for HTTP/2), then
 * appends `X-Request-ID`, `X-Real-IP`, `X-Forwarded-For`, `-Host`, `-Port`
 * and `-Proto`. Fields passed through are `clientHeaders`' own pairs, not
 * copies (this runs for every request): neither list may be changed after.
 */
export function forwardRequestHeaders(
  clientHeaders: readonly Field[],
  context: ForwardingContext,
  options: ForwardingOptions,
): ForwardedRequest {
  const peer = normalizeIp(context.peer);
  const trusted = options.trusted.contains(peer);

  // First pass: what Connection names, and the client's forwarding values.
  let named: Set<string> | undefined;
  let xff: string | undefined;
  let xfProto: string | undefined;
  let xfHost: string | undefined;
  let xfPort: string | undefined;
  let requestId: string | undefined;
  for (const [name, value] of clientHeaders) {
    // Only these lengths matter here: connection, x-forwarded-*, x-request-id.
    const n = name.length;
    if (n !== 10 && n !== 12 && n !== 15 && n !== 16 && n !== 17) continue;
    const lower = name.toLowerCase();
    switch (lower) {
      case "connection":
        for (const token of value.split(",")) {
          const t = token.trim().toLowerCase();
          if (t !== "") (named ??= new Set()).add(t);
        }
        break;
      case "x-forwarded-for":
        xff = xff === undefined ? value.trim() : `${xff}, ${value.trim()}`;
        break;
      case "x-forwarded-proto":
        xfProto ??= value.trim();
        break;
      case "x-forwarded-host":
        xfHost ??= value.trim();
        break;
      case "x-forwarded-port":
        xfPort ??= value.trim();
        break;
      case "x-request-id":
        requestId ??= value.trim();
        break;
    }
  }

  const out: [string, string][] = [];
  let hostWritten = false;
  let contentLength: number | undefined;
  const drop = context.drop;
  for (const pair of clientHeaders) {
    if (
      !mayMatch(REQUEST_LENGTHS, pair[0], named) &&
      (drop === undefined || !mayMatch(REQUEST_LENGTHS, pair[0], drop))
    ) {
      out.push(pair);
      continue;
    }
    const lower = pair[0].toLowerCase();
    if (lower === "host") {
      if (!hostWritten) out.push([pair[0], context.authority]);
      hostWritten = true;
      continue;
    }
    if (lower === "content-length") {
      // Content-Length = 1*DIGIT (RFC 9112 section 6.3): equal duplicates or a list of equal
      // values go as one field (RFC 9110 section 8.6; Node's parser refuses duplicates). Values
      // that disagree are passed on for the upstream client to refuse.
      const length = parseContentLength(pair[1]);
      if (length !== undefined && length === contentLength) continue;
      if (contentLength === undefined && length !== undefined) {
        contentLength = length;
        out.push(pair[1].includes(",") ? [pair[0], String(length)] : pair);
        continue;
      }
      out.push(pair);
      continue;
    }
    if (context.upgrade === true && lower === "upgrade") {
      out.push(pair);
      continue;
    }
    if (context.upgrade === true && lower === "connection") {
      out.push([pair[0], "Upgrade"]);
      continue;
    }
    if (HOP_BY_HOP.has(lower) || REPLACED.has(lower)) continue;
    // `X_Forwarded_For` and the like: CGI-style backends (PHP, WSGI, Rack) read them as
    // the same variable as the field Sluice sets, so a client could forge it that way.
    if (lower.includes("_") && REPLACED.has(lower.replaceAll("_", "-"))) continue;
    if (named !== undefined && named.has(lower)) continue;
    if (drop !== undefined && drop.has(lower)) continue;
    out.push(pair);
  }
  if (!hostWritten) out.unshift(["host", context.authority]);

  if (
    requestId === undefined || requestId === "" || requestId.length > MAX_REQUEST_ID ||
    !REQUEST_ID.test(requestId)
  ) {
    requestId = options.newRequestId();
  }
  const chain = trusted && xff !== undefined && xff !== "" ? `${xff}, ${peer}` : peer;
  const clientIp = trusted && xff !== undefined ? realClientIp(xff, peer, options.trusted) : peer;
  out.push(
    ["X-Request-ID", requestId],
    ["X-Real-IP", clientIp],
    ["X-Forwarded-For", chain],
    ["X-Forwarded-Host", trusted && xfHost ? xfHost : context.authority],
    ["X-Forwarded-Port", trusted && xfPort ? xfPort : String(context.port)],
    ["X-Forwarded-Proto", trusted && xfProto ? xfProto : context.scheme],
  );
  return { headers: out, requestId, clientIp };
}

/**
 * The right-most address of `X-Forwarded-For` + peer that is not a trusted
 * proxy; the left-most when all are trusted; stops at the first entry that is
 * not an address.
 */
export function realClientIp(xff: string, peer: string, trusted: CidrMatcher): string {
  const entries = xff.split(",").map((e) => e.trim()).filter((e) => e !== "");
  let candidate = peer;
  for (let i = entries.length - 1; i >= 0; i--) {
    if (!trusted.contains(candidate)) return candidate;
    const entry = entries[i] as string;
    if (parseIp(entry) === undefined) return candidate;
    candidate = normalizeIp(entry);
  }
  return candidate;
}

/** Options for {@linkcode forwardResponseHeaders}. */
export interface ResponseHeaderOptions {
  /** Lowercased tokens of the response's Connection header(s). */
  readonly connectionTokens: readonly string[];
  /** Replace any `Strict-Transport-Security` with this value; `null` drops it. */
  readonly hsts?: string | null | undefined;
  /** Extra lowercase field names to drop. */
  readonly drop?: ReadonlySet<string>;
}

/**
 * The backend's response fields minus hop-by-hop ones; order, case and
 * duplicates (Set-Cookie) kept. Fields passed through are `backendHeaders`'
 * own pairs, not copies.
 */
export function forwardResponseHeaders(
  backendHeaders: readonly Field[],
  options: ResponseHeaderOptions,
): [string, string][] {
  const named = options.connectionTokens;
  const drop = options.drop;
  const out: [string, string][] = [];
  for (const pair of backendHeaders) {
    if (
      !mayMatch(RESPONSE_LENGTHS, pair[0], named) &&
      (drop === undefined || !mayMatch(RESPONSE_LENGTHS, pair[0], drop))
    ) {
      out.push(pair);
      continue;
    }
    const lower = pair[0].toLowerCase();
    if (HOP_BY_HOP.has(lower)) continue;
    if (named.length > 0 && named.includes(lower)) continue;
    if (options.hsts !== undefined && lower === "strict-transport-security") continue;
    if (drop !== undefined && drop.has(lower)) continue;
    out.push(pair);
  }
  if (typeof options.hsts === "string") out.push(["Strict-Transport-Security", options.hsts]);
  return out;
}

/** True for a WebSocket upgrade request (`Upgrade: websocket` and `Connection: upgrade`). */
export function isWebSocketUpgrade(method: string, headers: readonly HeaderPair[]): boolean {
  if (method !== "GET") return false;
  let upgrade = false;
  let connection = false;
  for (const [name, value] of headers) {
    // Only `upgrade` (7) and `connection` (10) matter: skip lowercasing every other name.
    if (name.length !== 7 && name.length !== 10) continue;
    const lower = name.toLowerCase();
    if (lower === "upgrade") {
      upgrade ||= hasToken(value, "websocket");
    } else if (lower === "connection") {
      connection ||= hasToken(value, "upgrade");
    }
  }
  return upgrade && connection;
}
