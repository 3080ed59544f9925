/**
 * Test support: a slow, obvious matcher that answers the same question as the
 * compiled {@linkcode RouteTable}, by scanning every route and ranking all
 * candidates. Tests run the same cases against both; the data plane never uses
 * this.
 *
 * Written from the Kubernetes rules directly, sharing no matching code with
 * `route_table.ts`: paths are compared as lists of `/`-separated elements,
 * hosts label by label.
 *
 * @module
 */

import type { Translation } from "../../lib/translate/translation.ts";
import type { Backend, Match, RouteTable } from "../../lib/routing/snapshot.ts";

/** Lowercase, port removed (IPv6 literals kept whole), trailing dot removed. */
function cleanHost(raw: string): string {
  let host = raw.toLowerCase();
  if (host.startsWith("[")) {
    host = host.includes("]") ? host.slice(0, host.indexOf("]") + 1) : host;
  } else if (host.split(":").length === 2) {
    host = host.split(":")[0]!;
  }
  return host.endsWith(".") ? host.slice(0, -1) : host;
}

/** 0 = same host, 1 = one-label wildcard, 2 = rule for any host, -1 = no match. */
function hostRank(ruleHost: string, requestHost: string): number {
  if (ruleHost === "") return 2;
  if (ruleHost === requestHost) return 0;
  if (ruleHost.startsWith("*.")) {
    const ruleLabels = ruleHost.split(".");
    const requestLabels = requestHost.split(".");
    if (requestLabels.length !== ruleLabels.length) return -1;
    if (requestLabels[0] === "") return -1;
    for (let i = 1; i < ruleLabels.length; i++) {
      if (ruleLabels[i] !== requestLabels[i]) return -1;
    }
    return 1;
  }
  return -1;
}

/** The path elements, without trailing empty elements (a trailing slash). */
function elements(path: string): string[] {
  const parts = path.split("/");
  while (parts.length > 1 && parts[parts.length - 1] === "") parts.pop();
  return parts;
}

/**
 * The rule path as a client's URL carries it: each character outside printable
 * ASCII, and each of space, `"`, `#`, `<`, `>`, `?`, backtick, `{`, `}`,
 * percent-encoded as UTF-8 (what `new URL()` does to a path); then, as request
 * paths are normalised (RFC 3986 section 6.2.2), escapes of unreserved
 * characters decoded and the other escapes' hex in uppercase, and dot
 * segments and empty segments removed.
 */
function asInUrl(path: string): string {
  const encoded = Array.from(path, (char) => {
    const code = char.codePointAt(0)!;
    const raw = code > 0x20 && code < 0x7f && !' "#<>?`{}'.includes(char);
    return raw ? char : encodeURIComponent(char.toWellFormed());
  }).join("");
  const decoded = encoded.replace(/%[0-9a-fA-F]{2}/g, (escape) => {
    const char = String.fromCharCode(parseInt(escape.slice(1), 16));
    return /^[A-Za-z0-9\-._~]$/.test(char) ? char : escape.toUpperCase();
  });
  return withoutDotSegments(decoded);
}

/**
 * As request paths are routed: `\` is `/`, empty segments dropped (slashes
 * merged), `.` segments removed and `..` segments remove their parent (RFC
 * 3986 section 5.2.4); a path ending in a dot segment keeps its trailing slash.
 */
function withoutDotSegments(path: string): string {
  const input = path.replaceAll("\\", "/").split("/").slice(1);
  const output: string[] = [];
  input.forEach((segment, i) => {
    const last = i === input.length - 1;
    if (segment === "." || segment === "..") {
      if (segment === "..") output.pop();
      if (last) output.push("");
    } else if (segment !== "" || last) {
      output.push(segment);
    }
  });
  return `/${output.join("/")}`;
}

/** Length of the match, or -1: Exact compares whole strings; Prefix compares elements. */
function pathMatchLength(pathType: string, writtenPath: string, requestPath: string): number {
  if (pathType === "Default") return 0;
  const rulePath = asInUrl(writtenPath);
  if (pathType === "Exact") return rulePath === requestPath ? rulePath.length : -1;
  const rule = elements(rulePath);
  const request = requestPath.split("/");
  if (rule.length > request.length) return -1;
  for (let i = 0; i < rule.length; i++) {
    if (rule[i] !== request[i]) return -1;
  }
  return rule.join("/").length;
}

/** What the reference matcher reads from a translation. */
export type ReferenceInput = Pick<
  Translation,
  "routes" | "backends" | "tlsHosts" | "defaultBackend"
>;

/**
 * Returns a matcher with the same contract as {@linkcode RouteTable}, that
 * scans every route on every lookup. Test-only.
 */
export function createReferenceMatcher(translation: ReferenceInput): RouteTable {
  return { lookup: (host, path) => referenceLookup(translation, host, path) };
}

function referenceLookup(
  translation: ReferenceInput,
  rawHost: string,
  rawPath: string,
): Match | undefined {
  const host = cleanHost(rawHost);
  let path = rawPath.split("?")[0]!;
  if (path === "") path = "/";

  let best: { rank: number[]; match: Omit<Match, "tls" | "backend">; backend: string } | undefined;
  for (const route of translation.routes) {
    const byHost = hostRank(route.host, host);
    if (byHost < 0) continue;
    const length = pathMatchLength(route.pathType, route.path, path);
    if (length < 0) continue;
    // Smaller is better: host tier, then rules before default, then longer, then Exact.
    const rank = [
      byHost,
      route.pathType === "Default" ? 1 : 0,
      -length,
      route.pathType === "Exact" ? 0 : 1,
    ];
    if (best === undefined || lessThan(rank, best.rank)) {
      best = {
        rank,
        match: {
          ingress: route.ingress,
          host: route.host,
          path: route.path,
          pathType: route.pathType,
        },
        backend: route.backend,
      };
    }
  }
  if (best === undefined && translation.defaultBackend !== undefined) {
    best = {
      rank: [],
      match: { ingress: "", host: "", path: "/", pathType: "Default" },
      backend: translation.defaultBackend,
    };
  }
  if (best === undefined) return undefined;
  const tls = translation.tlsHosts.some((tlsHost) =>
    hostRank(tlsHost, host) === 0 || hostRank(tlsHost, host) === 1
  );
  const backend: Backend = translation.backends.find((b) => b.key === best.backend) ?? {
    key: best.backend,
    service: "",
    endpoints: [],
    unavailable: `Cannot route to backend "${best.backend}": it is not in the translation`,
  };
  return { ...best.match, backend, tls };
}

function lessThan(a: number[], b: number[]): boolean {
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) return a[i]! < b[i]!;
  }
  return false;
}
