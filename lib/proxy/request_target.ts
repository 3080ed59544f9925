/**
 * Where a request is going: its authority (the `Host` to route on and to send
 * on), the request target to forward byte for byte, and the normalised path
 * to route on.
 *
 * Deno builds `req.url` by concatenating scheme, the raw `Host` value and the
 * raw target, so `Host: a.com/x` or `Host: evil@a.com` would change what
 * `new URL(req.url)` reports. The authority is therefore taken from the `Host`
 * field (or, for an absolute-form target or HTTP/2's `:authority`, from the
 * URL) and validated strictly; anything else is a 400.
 *
 * Routing path (what the route table sees): like nginx's `$uri`, slashes
 * merged, dot segments resolved (also `%2e`), percent-encoded unreserved
 * characters decoded and other escapes in uppercase hex, so `/%61dmin` and
 * `/public/../admin` route as `/admin`, and `/%c3%bc` as `/%C3%BC`.
 * The backend still receives the target exactly as sent (nginx `proxy_pass`
 * without a URI does the same).
 *
 * Pure; no Deno APIs.
 *
 * @module
 */

import { normalizeEscapes } from "../translate/paths.ts";

/** A validated request destination. */
export interface RequestTarget {
  /** Host and optional port exactly as received (`Shop.Example.com:8080`). */
  readonly authority: string;
  /** The host part of `authority` (IPv6 with brackets). */
  readonly hostname: string;
  /** Path and query to forward, as received (`/a/../b?x=%20`); "/" when empty. */
  readonly target: string;
  /** Normalised path for route lookup, without the query. */
  readonly routePath: string;
}

const AUTHORITY = /^(?:[A-Za-z0-9_](?:[A-Za-z0-9_.-]*)|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$/;

/**
 * Splits `req.url` into authority and target using the received `Host`.
 *
 * @returns undefined when the authority or target is invalid (answer 400).
 */
export function parseRequestTarget(
  url: string,
  hostHeader: string | undefined,
): RequestTarget | undefined {
  const schemeEnd = url.indexOf("://");
  if (schemeEnd === -1) return undefined;
  const from = schemeEnd + 3;
  let authority: string;
  let rest: string;
  if (
    hostHeader !== undefined && hostHeader !== "" && url.startsWith(hostHeader, from) &&
    isPathStart(url, from + hostHeader.length)
  ) {
    authority = hostHeader;
    rest = url.slice(from + hostHeader.length);
  } else {
    // Absolute-form target (RFC 9112 section 3.2.2: its authority wins over Host) or HTTP/2.
    let i = from;
    while (i < url.length && !isPathStart(url, i)) i++;
    authority = url.slice(from, i);
    rest = url.slice(i);
  }
  if (!AUTHORITY.test(authority)) return undefined;
  if (rest.includes("#")) return undefined;
  if (rest === "") rest = "/";
  else if (rest.startsWith("?")) rest = "/" + rest;
  const query = rest.indexOf("?");
  const path = query === -1 ? rest : rest.slice(0, query);
  const routePath = normalizeRoutePath(path);
  if (routePath === undefined) return undefined;
  return { authority, hostname: hostOf(authority), target: rest, routePath };
}

/**
 * Normalises a path for routing: merge slashes, resolve dot segments, decode
 * escaped unreserved characters.
 *
 * @returns undefined when the path cannot be parsed.
 */
export function normalizeRoutePath(path: string): string | undefined {
  if (isPlainPath(path)) return path;
  const merged = path.replace(/\/{2,}/g, "/");
  let resolved: string;
  try {
    resolved = new URL("http://h" + (merged.startsWith("/") ? merged : "/" + merged)).pathname;
  } catch {
    return undefined;
  }
  // As rule paths are keyed: "%c3" and "%C3" are the same, "%61" is "a".
  resolved = normalizeEscapes(resolved);
  // Decoding cannot create "/" but can create "." segments ("/%2E%2E" is already
  // resolved by URL; "/a%2E" is not a segment). Merge once more for "//" from "\\".
  return resolved.replace(/\/{2,}/g, "/");
}

/**
 * Chars the URL parser keeps as they are in a path (RFC 3986 `pchar` without
 * `%`): a path of only these, starting with "/", without "//" and without a
 * "." or ".." segment, is already normalised. Most requests take this exit and
 * skip a URL parse.
 */
const PLAIN = new Uint8Array(128);
for (
  const c of "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/"
) {
  PLAIN[c.charCodeAt(0)] = 1;
}

function isPlainPath(path: string): boolean {
  if (path.charCodeAt(0) !== 47) return false;
  // Length of the current segment, and how many of its chars are dots.
  let segment = 0;
  let dots = 0;
  for (let i = 1; i <= path.length; i++) {
    const c = i === path.length ? 47 : path.charCodeAt(i);
    if (c === 47) {
      if (segment === dots && (dots === 1 || dots === 2)) return false;
      if (segment === 0 && i < path.length) return false;
      segment = dots = 0;
      continue;
    }
    if (c > 127 || PLAIN[c] === 0) return false;
    segment++;
    if (c === 46) dots++;
  }
  return true;
}

function isPathStart(url: string, index: number): boolean {
  if (index >= url.length) return true;
  const c = url.charCodeAt(index);
  return c === 47 /* / */ || c === 63 /* ? */ || c === 35; /* # */
}

function hostOf(authority: string): string {
  if (authority.startsWith("[")) return authority.slice(0, authority.indexOf("]") + 1);
  const colon = authority.lastIndexOf(":");
  return colon === -1 ? authority : authority.slice(0, colon);
}
