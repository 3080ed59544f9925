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
