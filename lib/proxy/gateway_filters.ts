/**
 * HTTPRoute filters as the handler applies them (Gateway API v1.6,
 * `HTTPRouteFilter`): header modifiers on the request and the response,
 * `RequestRedirect` (the Location to answer), and `URLRewrite` (the path and
 * Host sent to the backend).
 *
 * Pure functions over header lists and paths; the handler calls each at its
 * step (`proxy_handler.ts`). Knows nothing about sockets or snapshots.
 *
 * @module
 */
import type { HeaderModifier, PathModifier, RouteEntry } from "../translate/gateway/types.ts";

type Field = readonly [string, string];

/**
 * Applies a header modifier to a field list, returning a new list (the input
 * and its pairs are left alone). Gateway API (HTTPHeaderFilter): `set`
 * replaces every field of the name, `add` appends a value, `remove` drops the
 * name; names compare case-insensitively (the modifier's are lowercase).
 */
export function modifyHeaders(
  fields: readonly Field[],
  modifier: HeaderModifier,
): [string, string][] {
  const dropped = new Set(modifier.remove);
  for (const { name } of modifier.set) dropped.add(name);
  const out: [string, string][] = [];
  for (const field of fields) {
    if (!dropped.has(field[0].toLowerCase())) out.push([field[0], field[1]]);
  }
  for (const { name, value } of modifier.set) out.push([name, value]);
  for (const { name, value } of modifier.add) {
    // Gateway API: `add` appends to an existing field's value ("my-header: foo" +
    // add "bar" → "my-header: foo,bar"); absent, it adds the field.
    const existing = out.findIndex(([n]) => n.toLowerCase() === name);
    if (existing >= 0) out[existing] = [out[existing]![0], `${out[existing]![1]},${value}`];
    else out.push([name, value]);
  }
  return out;
}

/**
 * The path after a `ReplaceFullPath` or `ReplacePrefixMatch` modifier, for
 * the entry whose PathPrefix matched `path`.
 */
export function modifyPath(path: string, modifier: PathModifier, entry: RouteEntry): string {
  if (modifier.type === "ReplaceFullPath") return modifier.value;
  const matched = entry.matches.path.value;
  const prefix = matched !== "/" && matched.endsWith("/") ? matched.slice(0, -1) : matched;
  const rest = prefix === "/" ? path : path.slice(prefix.length);
  const replacement = modifier.value.endsWith("/") ? modifier.value.slice(0, -1) : modifier.value;
  const out = replacement + (prefix === "/" && rest === "/" ? "" : rest);
  return out === "" ? "/" : out.startsWith("/") ? out : `/${out}`;
}

/** What the redirect needs of the request. */
export interface RedirectRequest {
  readonly scheme: "http" | "https";
  /** The request's host name, without port. */
  readonly hostname: string;
  /** The Gateway listener port the request arrived on. */
  readonly port: number;
  /** The routed path. */
  readonly path: string;
  /** The query as received, with its `?`, or empty. */
  readonly query: string;
}

const WELL_KNOWN_PORT = { http: 80, https: 443 } as const;

/**
 * The Location of a `RequestRedirect`. Gateway API (HTTPRequestRedirectFilter):
 * scheme and hostname default to the request's; without a port, a changed
 * scheme's well-known port, else the listener's; a scheme's well-known port
 * is left out of the Location.
 */
export function redirectLocation(
  filter: {
    readonly scheme?: "http" | "https";
    readonly hostname?: string;
    readonly port?: number;
    readonly path?: PathModifier;
  },
  request: RedirectRequest,
  entry: RouteEntry,
): string {
  const scheme = filter.scheme ?? request.scheme;
  const port = filter.port ??
    (filter.scheme !== undefined ? WELL_KNOWN_PORT[scheme] : request.port);
  const host = filter.hostname ?? request.hostname;
  const authority = port === WELL_KNOWN_PORT[scheme] ? host : `${host}:${port}`;
  const path = filter.path === undefined
    ? request.path
    : modifyPath(request.path, filter.path, entry);
  return `${scheme}://${authority}${path}${request.query}`;
}
