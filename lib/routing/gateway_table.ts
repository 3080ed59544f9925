/**
 * The compiled Gateway API routes: per Gateway address (a Gateway's own, from
 * `--gateway-addresses`, or the main listeners') and listener port, hostname groups
 * (exact, wildcard, any) whose entries are already in the spec's precedence
 * order (`lib/translate/gateway/precedence.ts`), each with its backends
 * resolved to endpoints.
 *
 * A lookup picks, on the address and port that took the request (never
 * another's), the most specific hostname group (exact name,
 * then the longest wildcard covering it — a Gateway API wildcard covers one
 * label or more — then the group for any host) and returns its first entry
 * whose match (path, method, headers, query parameters) holds.
 *
 * Pure and immutable; randomness for weighted backends is passed in.
 *
 * @module
 */
import type { Backend } from "../translate/backend.ts";
import type { HostRoutes, RouteEntry, RouteMatch } from "../translate/gateway/types.ts";
import { normaliseRequestHost } from "./host.ts";

/** What a lookup reads of a request. */
export interface GatewayRequest {
  /**
   * The Gateway address whose listener took the request (`--gateway-addresses`);
   * undefined on the main listeners, which serve the Gateways without one.
   */
  readonly address?: string | undefined;
  /** The Gateway listener port the request arrived on (80 for `--http-port`, 443 for `--https-port`). */
  readonly port: number;
  /** The authority as received; normalised here (case, port, trailing dot). */
  readonly host: string;
  /** The normalised path, without the query. */
  readonly path: string;
  readonly method: string;
  /** The values of a request header, by lowercase name (empty when absent). */
  readonly header: (name: string) => readonly string[];
  /** The query string as received, without `?` (empty when none). */
  readonly query: string;
}

/** A backend of the matched entry, resolved. */
export interface GatewayBackend {
  readonly weight: number;
  /** Absent when the reference is invalid (the share answers 500). */
  readonly backend?: Backend;
  readonly invalid?: string;
}

/** The entry that answers a request. */
export interface GatewayMatch {
  readonly entry: RouteEntry;
  /** The hostname group's name (`""`: any host). */
  readonly hostname: string;
  readonly protocol: "HTTP" | "HTTPS";
  /** Backends with weight above zero. */
  readonly backends: readonly GatewayBackend[];
  /** Sum of their weights; 0 means every request answers 500. */
  readonly totalWeight: number;
  /** Resolved `RequestMirror` backends, by key. */
  readonly mirrors: ReadonlyMap<string, Backend>;
  /**
   * Milliseconds before the request answers 504: the shorter of the rule's
   * `timeouts.request` and `timeouts.backendRequest` (a zero one disables
   * itself); absent when neither is set.
   */
  readonly timeoutMs?: number;
}

/** A compiled, immutable Gateway route table. */
export interface GatewayTable {
  /** Number of entries compiled, over every port and hostname. */
  readonly size: number;
  lookup(request: GatewayRequest): GatewayMatch | undefined;
}

/** Picks the backend for one request: by weight, `random` in `[0, 1)`; undefined: answer 500. */
export function pickGatewayBackend(
  match: GatewayMatch,
  random: number,
): GatewayBackend | undefined {
  if (match.totalWeight <= 0) return undefined;
  let point = random * match.totalWeight;
  for (const candidate of match.backends) {
    point -= candidate.weight;
    if (point < 0) return candidate;
  }
  return match.backends[match.backends.length - 1];
}

interface Group {
  readonly hostname: string;
  readonly protocol: "HTTP" | "HTTPS";
  readonly matches: readonly GatewayMatch[];
}

interface PortTable {
  readonly exact: Map<string, Group>;
  /** By the suffix after `*.` (`example.com` for `*.example.com`). */
  readonly wildcard: Map<string, Group>;
  any: Group | undefined;
}

/** Compiles the Gateway routes of a translation, with `backends` to resolve their keys. */
export function compileGatewayTable(
  routes: readonly HostRoutes[],
  backends: readonly Backend[],
): GatewayTable {
  const byKey = new Map(backends.map((b) => [b.key, b]));
  // Per Gateway address ("" for the main listeners), per port.
  const addresses = new Map<string, Map<number, PortTable>>();
  let size = 0;
  for (const group of routes) {
    let ports = addresses.get(group.address ?? "");
    if (ports === undefined) addresses.set(group.address ?? "", ports = new Map());
    let table = ports.get(group.port);
    if (table === undefined) {
      table = { exact: new Map(), wildcard: new Map(), any: undefined };
      ports.set(group.port, table);
    }
    const compiled: Group = Object.freeze({
      hostname: group.hostname,
      protocol: group.protocol,
      matches: Object.freeze(group.entries.map((entry) => compileEntry(entry, group, byKey))),
    });
    size += group.entries.length;
    if (group.hostname === "") table.any = compiled;
    else if (group.hostname.startsWith("*.")) table.wildcard.set(group.hostname.slice(2), compiled);
    else table.exact.set(group.hostname, compiled);
  }

  const lookup = (request: GatewayRequest): GatewayMatch | undefined => {
    const table = addresses.get(request.address ?? "")?.get(request.port);
    if (table === undefined) return undefined;
    const group = findGroup(table, normaliseRequestHost(request.host));
    if (group === undefined) return undefined;
    let query: URLSearchParams | undefined;
    for (const match of group.matches) {
      const m = match.entry.matches;
      if (!pathMatches(m, request.path)) continue;
      if (m.method !== undefined && m.method !== request.method) continue;
      if (!m.headers.every((h) => request.header(h.name).some((v) => v === h.value))) continue;
      if (m.queryParams.length > 0) {
        query ??= new URLSearchParams(request.query);
        // Gateway API (HTTPQueryParamMatch): with repeated names, the first value counts.
        if (!m.queryParams.every((q) => query!.get(q.name) === q.value)) continue;
      }
      return match;
    }
    return undefined;
  };
  return Object.freeze({ size, lookup });
}

function compileEntry(
  entry: RouteEntry,
  group: HostRoutes,
  byKey: ReadonlyMap<string, Backend>,
): GatewayMatch {
  const resolve = (key: string, service: string): Backend =>
    byKey.get(key) ?? Object.freeze({
      key,
      service,
      endpoints: Object.freeze([]),
      unavailable: `Cannot route to backend "${key}": it is not in the translation`,
    });
  const weighted: GatewayBackend[] = [];
  let totalWeight = 0;
  for (const b of entry.backends) {
    if (!(b.weight > 0)) continue;
    totalWeight += b.weight;
    weighted.push(
      b.invalid !== undefined
        ? Object.freeze({ weight: b.weight, invalid: b.invalid })
        : Object.freeze({ weight: b.weight, backend: resolve(b.key, b.service) }),
    );
  }
  const mirrors = new Map<string, Backend>();
  for (const filter of entry.filters) {
    if (filter.type === "RequestMirror" && filter.backend.invalid === undefined) {
      mirrors.set(filter.backend.key, resolve(filter.backend.key, filter.backend.service));
    }
  }
  const timeouts = [entry.timeouts?.request, entry.timeouts?.backendRequest]
    .map((text) => text === undefined ? undefined : parseGatewayDuration(text))
    .filter((ms): ms is number => ms !== undefined && ms > 0);
  return Object.freeze({
    entry,
    hostname: group.hostname,
    protocol: group.protocol,
    backends: Object.freeze(weighted),
    totalWeight,
    mirrors,
    ...(timeouts.length > 0 ? { timeoutMs: Math.min(...timeouts) } : {}),
  });
}

const DURATION = /^(?:[0-9]{1,5}(?:h|m|s|ms)){1,4}$/;
const UNIT_MS: Readonly<Record<string, number>> = { h: 3_600_000, m: 60_000, s: 1_000, ms: 1 };

/**
 * Milliseconds of a Gateway API Duration (GEP-2257: one to four
 * `<number><unit>` parts, units `h`, `m`, `s`, `ms`: `1h`, `500ms`,
 * `1m30s`), or undefined when it is not one.
 */
export function parseGatewayDuration(text: string): number | undefined {
  if (!DURATION.test(text)) return undefined;
  let ms = 0;
  for (const [, value, unit] of text.matchAll(/([0-9]+)(ms|h|m|s)/g)) {
    ms += Number(value) * UNIT_MS[unit!]!;
  }
  return ms;
}

function findGroup(table: PortTable, name: string): Group | undefined {
  const exact = table.exact.get(name);
  if (exact !== undefined) return exact;
  if (table.wildcard.size > 0) {
    // Longest covering wildcard first: `*.b.example.com` before `*.example.com`.
    let dot = name.indexOf(".");
    while (dot >= 0) {
      const group = table.wildcard.get(name.slice(dot + 1));
      if (group !== undefined) return group;
      dot = name.indexOf(".", dot + 1);
    }
  }
  return table.any;
}

/** Gateway API (HTTPPathMatch): Exact compares whole paths; PathPrefix element by element. */
function pathMatches(match: RouteMatch, path: string): boolean {
  const value = match.path.value;
  if (match.path.type === "Exact") return path === value;
  if (value === "/") return true;
  const prefix = value.endsWith("/") ? value.slice(0, -1) : value;
  return path === prefix || (path.startsWith(prefix) && path.charCodeAt(prefix.length) === 47);
}
