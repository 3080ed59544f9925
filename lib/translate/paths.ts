/**
 * Ingress paths: validation, path types and the canonical form used to detect
 * conflicts.
 *
 * Owns what a valid `spec.rules[].http.paths[]` path and pathType are, and what
 * `ImplementationSpecific` means in Sluice. Knows nothing about hosts, backends
 * or how lookups are compiled.
 *
 * @module
 */

/** A usable path with the matching Sluice applies to it. */
export type PathResult =
  | { readonly ok: true; readonly path: string; readonly pathType: "Exact" | "Prefix" }
  | { readonly ok: false; readonly field: "path" | "pathType"; readonly message: string };

// Kubernetes validation (ValidateIngressSpec, HTTPIngressPath): Exact and Prefix
// paths must be absolute and may not contain these sequences or end in these
// suffixes.
const INVALID_SEQUENCES = ["//", "/./", "/../", "%2f", "%2F"];
const INVALID_SUFFIXES = ["/..", "/."];

/**
 * Validates a path and its pathType.
 *
 * Kubernetes rules (HTTPIngressPath, networking.k8s.io/v1):
 * - `pathType` is required: `Exact`, `Prefix` or `ImplementationSpecific`.
 * - `Exact` and `Prefix` need a path beginning with `/`.
 * - `ImplementationSpecific` is "up to the IngressClass": Sluice treats it as
 *   `Prefix` (documented in the README); an absent path then means `/`.
 */
export function validatePath(path: unknown, pathType: unknown): PathResult {
  if (pathType !== "Exact" && pathType !== "Prefix" && pathType !== "ImplementationSpecific") {
    const shown = pathType === undefined ? "is missing" : `${JSON.stringify(pathType)} is unknown`;
    const which = typeof path === "string" ? ` "${path}"` : "";
    return {
      ok: false,
      field: "pathType",
      message:
        `Cannot route path${which}: pathType ${shown}; use Exact, Prefix or ImplementationSpecific`,
    };
  }
  if (pathType === "ImplementationSpecific" && (path === undefined || path === "")) {
    return { ok: true, path: "/", pathType: "Prefix" };
  }
  if (typeof path !== "string" || !path.startsWith("/")) {
    const shown = typeof path === "string" ? `"${path}"` : "(missing)";
    return {
      ok: false,
      field: "path",
      message: `Cannot route path ${shown}: a path must begin with "/"`,
    };
  }
  if (pathType !== "ImplementationSpecific") {
    const sequence = INVALID_SEQUENCES.find((s) => path.includes(s));
    const suffix = INVALID_SUFFIXES.find((s) => path.endsWith(s));
    if (sequence !== undefined || suffix !== undefined) {
      return {
        ok: false,
        field: "path",
        message: `Cannot route path "${path}": it must not contain "${sequence ?? suffix}"`,
      };
    }
  }
  return { ok: true, path, pathType: pathType === "Exact" ? "Exact" : "Prefix" };
}

/**
 * The canonical form of a Prefix path: trailing slashes removed, so `/` is `""`.
 *
 * Kubernetes rule (Ingress concept docs, "Path types"): Prefix matching is done
 * element by element on the path split by `/`; a trailing slash is ignored, so
 * `/foo` and `/foo/` match the same requests.
 */
export function canonicalPrefix(path: string): string {
  let end = path.length;
  while (end > 0 && path.charCodeAt(end - 1) === 47 /* "/" */) end--;
  return end === path.length ? path : path.slice(0, end);
}

/** Whether a UTF-16 code unit is in the WHATWG URL "path percent-encode set" (or beyond ASCII). */
function encodedInUrlPaths(c: number): boolean {
  // C0 controls and space, DEL and non-ASCII, then `"`, `#`, `<`, `>`, `?`, backtick, `{`, `}`.
  return c <= 0x20 || c >= 0x7f || c === 0x22 || c === 0x23 || c === 0x3c || c === 0x3e ||
    c === 0x3f || c === 0x60 || c === 0x7b || c === 0x7d;
}

const UTF8 = new TextEncoder();

/**
 * A rule path as it appears in the URL of a request for it: characters a URL
 * path never holds raw (non-ASCII, space, `"`, `#`, `<`, `>`, `?`, backtick,
 * `{`, `}`, controls) percent-encoded as UTF-8 with uppercase hex, existing
 * `%XX` escapes in their normal form ({@linkcode normalizeEscapes}), everything
 * else unchanged.
 *
 * Kubernetes rule (HTTPIngressPath.path): the path "can contain characters
 * disallowed from the conventional 'path' part of a URL as defined by RFC
 * 3986". Requests are matched on their URL path, where clients and the WHATWG
 * URL parser encode exactly these characters, so `/über` must be compared as
 * `/%C3%BCber` or it would never match.
 */
export function urlPathOf(path: string): string {
  let i = 0;
  while (i < path.length && !encodedInUrlPaths(path.charCodeAt(i))) i++;
  if (i === path.length) return normalizeEscapes(path);
  let out = path.slice(0, i);
  for (const char of path.slice(i)) {
    if (!encodedInUrlPaths(char.charCodeAt(0))) {
      out += char;
      continue;
    }
    // A lone surrogate encodes as U+FFFD, as the URL parser does.
    for (const byte of UTF8.encode(char)) {
      out += `%${byte < 16 ? "0" : ""}${byte.toString(16).toUpperCase()}`;
    }
  }
  return normalizeEscapes(out);
}

/**
 * A rule path in the normal form requests are matched in: its URL form
 * ({@linkcode urlPathOf}), then as {@linkcode normalizeRoutePath} normalises
 * request paths (runs of `/` merged, `\` read as `/`, `.` / `..` segments
 * resolved, also when spelled `%2e`). Route keys and conflicts use it.
 *
 * Kubernetes validation forbids `//`, `/./` and `/../` in Exact and Prefix
 * paths, but not in ImplementationSpecific ones, nor dot segments spelled with
 * escapes (`/a/%2e%2e/b`); kept as written, such a rule could never match a
 * request, since no normalised request path holds them. ingress-nginx, which
 * routes on nginx's normalised `$uri`, has the same normal form for requests.
 * A path requests can never have (`%00`, `/..;`) stays as written.
 */
export function normalRulePath(path: string): string {
  const url = urlPathOf(path);
  return normalizeRoutePath(url) ?? url;
}

/**
 * Normalises a path for routing: merge slashes, resolve dot segments, decode
 * escaped unreserved characters.
 *
 * @returns undefined when the path cannot be parsed, holds `%00`, or has a
 * `.` or `..` segment followed by `;` parameters.
 */
export function normalizeRoutePath(path: string): string | undefined {
  if (isPlainPath(path)) return path;
  // A NUL ends the path for C backends (checked before dot segments could drop it).
  if (path.includes("%00")) return undefined;
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
  resolved = resolved.replace(/\/{2,}/g, "/");
  // "..;x" is ".." to Tomcat and Jetty, which drop ";" parameters from each segment.
  return DOT_SEGMENT_WITH_PARAMS.test(resolved) ? undefined : resolved;
}

const DOT_SEGMENT_WITH_PARAMS = /\/\.\.?;/;
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
    if (c === 47 || c === 59 /* ; */) {
      if (segment === dots && (dots === 1 || dots === 2)) return false;
      if (c === 59) {
        segment++;
        continue;
      }
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

const ESCAPE = /%[0-9A-Fa-f]{2}/g;
const UNRESERVED_ESCAPE = /^%(?:[46][1-9A-Fa-f]|[57][0-9Aa]|3[0-9]|2[DEde]|5[Ff]|7[Ee])$/;

/**
 * Percent-escapes in a path in their normal form (RFC 3986 section 6.2.2):
 * escaped unreserved characters (`%61`, `%7E`) decoded, every other escape in
 * uppercase hex (`%c3` as `%C3`). Rule paths and request paths both go
 * through it, so they compare equal however a client spelled the escapes.
 */
export function normalizeEscapes(path: string): string {
  return path.includes("%") ? path.replace(ESCAPE, normalEscape) : path;
}

function normalEscape(escape: string): string {
  return UNRESERVED_ESCAPE.test(escape)
    ? String.fromCharCode(parseInt(escape.slice(1), 16))
    : escape.toUpperCase();
}
