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
 * `target` is the target as received (for logs); `forward` is what to send
 * the backend: the routed path with the query as received, so a backend
 * resolving dot segments, `%2e` or `//` its own way (WHATWG URL keeps empty
 * segments, Express routes on the undecoded path, `//x` reads as a host)
 * cannot land on a path the route table did not choose (Envoy's
 * `normalize_path` + `merge_slashes` and Traefik forward the normalised
 * path too). A path already in normal form is forwarded byte for byte.
 *
 * Refused (400) because backends resolve them to a path Sluice cannot see:
 * `%00` in the path (nginx refuses it too), and a `.` or `..` segment behind
 * `;` parameters (`/public/..;/admin`: Tomcat and Jetty drop `;…` from each
 * segment, then resolve it). `ambiguous` marks a `.` or `..` hidden behind an
 * escaped slash or backslash (`/public/..%2Fadmin`), which a backend that
 * decodes `%2F` (nginx does) resolves out of the routed path.
 *
 * Pure; no Deno APIs.
 *
 * @module
 */

import { normalizeRoutePath } from "../translate/paths.ts";

export { normalizeRoutePath };

/** A validated request destination. */
export interface RequestTarget {
  /** Host and optional port exactly as received (`Shop.Example.com:8080`). */
  readonly authority: string;
  /** The host part of `authority` (IPv6 with brackets). */
  readonly hostname: string;
  /** Path and query as received (`/a/../b?x=%20`); "/" when empty. For logs. */
  readonly target: string;
  /** Normalised path, without the query (escaped slashes kept): what is forwarded. */
  readonly routePath: string;
  /**
   * The path routes are matched on: `routePath` with escaped slashes (`%2F`)
   * read as slashes, as nginx matches locations on the decoded path, so
   * `/admin%2Fusers` meets the rules of `/admin` (its access control
   * included) while the backend still gets `/admin%2Fusers`.
   */
  readonly matchPath: string;
  /** Path and query to send the backend: `routePath` and the query as received (`/b?x=%20`). */
  readonly forward: string;
  /**
   * True when a `.` or `..` segment hides behind an escaped slash or
   * backslash (`/public/..%2Fadmin`): a backend decoding `%2F` or `%5C`
   * would resolve it out of the routed path. Answer 400.
   */
  readonly ambiguous: boolean;
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
  const forward = routePath === path
    ? rest
    : query === -1
    ? routePath
    : routePath + rest.slice(query);
  return {
    authority,
    hostname: hostOf(authority),
    target: rest,
    routePath,
    matchPath: routePath.includes("%2F") ? routePath.replace(/(?:%2F|\/)+/g, "/") : routePath,
    forward,
    ambiguous: hidesEscapedDotSegment(routePath),
  };
}

const ESCAPED_DOT_SEGMENT = /(?:^|\/|%2F|%5C)\.\.?(?:$|\/|%2F|%5C|;)/;

/**
 * Whether a normalised path holds a `.` or `..` segment once `%2F` and `%5C`
 * are read as separators (escapes are in uppercase hex there). Plain dot
 * segments are resolved already, so any match involves an escaped separator.
 */
function hidesEscapedDotSegment(routePath: string): boolean {
  return routePath.includes("%") && ESCAPED_DOT_SEGMENT.test(routePath);
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
