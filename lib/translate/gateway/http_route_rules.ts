/**
 * One HTTPRoute rule compiled on its own: matches, filters, backends,
 * timeouts. Independent of parents and hostnames.
 *
 * @module
 */

import type { Service } from "../../k8s/objects.ts";
import { findServicePort } from "../endpoints.ts";
import { validateHostname } from "./hostnames.ts";
import type { ReferenceTo } from "./reference_grants.ts";
import type {
  BackendObjectRef,
  HeaderModifier,
  HeaderModifierInput,
  HTTPRoute,
  HTTPRouteFilterInput,
  HTTPRouteMatchInput,
  NameValue,
  PathModifier,
  PathModifierInput,
  RouteFilter,
  RouteMatch,
  WeightedBackend,
} from "./types.ts";

type Rule = NonNullable<NonNullable<HTTPRoute["spec"]>["rules"]>[number];

/** What a rule compiles to, or why it is dropped. */
export type CompiledRule =
  | {
    readonly ok: true;
    readonly matches: RouteMatch[];
    readonly filters: RouteFilter[];
    readonly backends: WeightedBackend[];
    readonly timeouts?: { request?: string; backendRequest?: string };
    readonly respond?: 500;
    /** The first unresolved reference (route ResolvedRefs False). */
    readonly unresolved?: { reason: string; message: string };
    /** Problems that did not drop the rule, `[field, message]`. */
    readonly notes: [string, string][];
  }
  | { readonly ok: false; readonly field: string; readonly message: string };

/**
 * How a rule's references resolve. Passed as functions so a caller can
 * record what a compiled rule read (see `http_route_memo.ts`).
 */
export interface RuleContext {
  /** The route's namespace. */
  readonly namespace: string;
  /** The Service `namespace/name`, undefined when there is none. */
  readonly service: (key: string) => Service | undefined;
  /** Whether a ReferenceGrant lets an HTTPRoute of `namespace` refer to `to` in another namespace. */
  readonly granted: (to: ReferenceTo) => boolean;
}

const METHODS = new Set([
  "GET",
  "HEAD",
  "POST",
  "PUT",
  "DELETE",
  "CONNECT",
  "OPTIONS",
  "TRACE",
  "PATCH",
]);
const HEADER_NAME = /^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$/;
// Gateway API (Duration, GEP-2257): `^([0-9]{1,5}(h|m|s|ms)){1,4}$`.
const DURATION = /^([0-9]{1,5}(h|m|s|ms)){1,4}$/;
const REDIRECT_CODES = new Set([301, 302, 303, 307, 308]);
/**
 * The empty list every rule without filters, and every match without header or
 * query parameter matches, shares: one object for the translation's structured
 * clone to the workers to write (and read back) instead of thousands.
 */
const NONE: never[] = Object.freeze([]) as never[];
/** The match of every request (a `PathPrefix` of `/` and nothing else), shared the same way. */
const EVERY_REQUEST: RouteMatch = Object.freeze({
  path: Object.freeze({ type: "PathPrefix", value: "/" } as const),
  headers: NONE,
  queryParams: NONE,
});

class RuleError extends Error {
  constructor(readonly field: string, message: string) {
    super(message);
  }
}

function durationMs(value: string): number {
  let ms = 0;
  for (const [, n, unit] of value.matchAll(/([0-9]+)(ms|h|m|s)/g)) {
    ms += Number(n) *
      ({ h: 3_600_000, m: 60_000, s: 1000, ms: 1 } as Record<string, number>)[unit!]!;
  }
  return ms;
}

/** Compiles rule `index` of a route. Never throws. */
export function compileRule(rule: Rule, index: number, ctx: RuleContext): CompiledRule {
  try {
    return compile(rule ?? {}, index, ctx);
  } catch (error) {
    if (error instanceof RuleError) {
      return { ok: false, field: error.field, message: error.message };
    }
    throw error;
  }
}

function compile(rule: Rule, index: number, ctx: RuleContext): CompiledRule {
  const base = `spec.rules[${index}]`;
  // Gateway API (HTTPRouteRule.matches): "If no matches are specified, the
  // default is a prefix path match on '/', which has the effect of matching
  // every HTTP request."
  const rawMatches = Array.isArray(rule.matches) && rule.matches.length > 0 ? rule.matches : [{}];
  const matches = rawMatches.map((m, i) => compileMatch(m ?? {}, `${base}.matches[${i}]`));
  const notes: [string, string][] = [];
  let unresolved: { reason: string; message: string } | undefined;
  const unresolve = (field: string, reason: string, message: string) => {
    notes.push([field, message]);
    unresolved ??= { reason, message };
  };

  const filters: RouteFilter[] = [];
  let respond: 500 | undefined;
  const seen = new Set<string>();
  for (const [i, f] of (Array.isArray(rule.filters) ? rule.filters : []).entries()) {
    const field = `${base}.filters[${i}]`;
    const filter = (f ?? {}) as HTTPRouteFilterInput;
    // Gateway API (HTTPRouteRule.filters, CEL): RequestHeaderModifier,
    // ResponseHeaderModifier, RequestRedirect and URLRewrite at most once each,
    // and not both RequestRedirect and URLRewrite.
    if (filter.type !== "RequestMirror" && filter.type !== "ExtensionRef") {
      if (seen.has(filter.type ?? "")) {
        throw new RuleError(field, `Cannot apply filter "${filter.type}" twice in one rule`);
      }
      seen.add(filter.type ?? "");
    }
    if (seen.has("RequestRedirect") && seen.has("URLRewrite")) {
      throw new RuleError(field, "Cannot use both RequestRedirect and URLRewrite in one rule");
    }
    switch (filter.type) {
      case "RequestHeaderModifier":
      case "ResponseHeaderModifier": {
        const key = filter.type === "RequestHeaderModifier"
          ? "requestHeaderModifier"
          : "responseHeaderModifier";
        filters.push({
          type: filter.type,
          modifier: compileHeaderModifier(filter[key], `${field}.${key}`),
        });
        break;
      }
      case "RequestRedirect":
        filters.push(compileRedirect(filter.requestRedirect, `${field}.requestRedirect`, matches));
        break;
      case "URLRewrite": {
        const rewrite = filter.urlRewrite ?? {};
        const out: { type: "URLRewrite"; hostname?: string; path?: PathModifier } = {
          type: "URLRewrite",
        };
        if (rewrite.hostname !== undefined) {
          out.hostname = preciseHostname(rewrite.hostname, `${field}.urlRewrite.hostname`);
        }
        if (rewrite.path !== undefined) {
          out.path = compilePathModifier(rewrite.path, `${field}.urlRewrite.path`, matches);
        }
        filters.push(out);
        break;
      }
      case "RequestMirror": {
        const mirror = filter.requestMirror ?? {};
        const resolved = resolveBackend(
          mirror.backendRef,
          `${field}.requestMirror.backendRef`,
          ctx,
        );
        if (resolved.invalid !== undefined) {
          // Gateway API (HTTPRequestMirrorFilter.backendRef): an unresolvable
          // mirror backend sets ResolvedRefs False; the mirror is dropped.
          unresolve(`${field}.requestMirror.backendRef`, resolved.reason!, resolved.invalid);
          break;
        }
        let fraction = 1;
        if (typeof mirror.percent === "number") fraction = mirror.percent / 100;
        else if (mirror.fraction !== undefined) {
          const n = mirror.fraction.numerator;
          const d = mirror.fraction.denominator ?? 100;
          if (typeof n !== "number" || typeof d !== "number" || d <= 0 || n < 0 || n > d) {
            throw new RuleError(
              `${field}.requestMirror.fraction`,
              "Cannot mirror: invalid fraction",
            );
          }
          fraction = n / d;
        }
        if (!(fraction >= 0 && fraction <= 1)) {
          throw new RuleError(`${field}.requestMirror.percent`, "Cannot mirror: invalid percent");
        }
        filters.push({ type: "RequestMirror", backend: resolved, fraction });
        break;
      }
      case "ExtensionRef":
        // Gateway API (HTTPRouteFilter): "If a reference to a custom filter type
        // cannot be resolved, the filter MUST NOT be skipped. Instead, requests
        // that would have been processed by that filter MUST receive a HTTP error
        // response." Sluice knows no extension filters: 500.
        notes.push([field, "Cannot apply ExtensionRef filters: none are supported"]);
        respond = 500;
        break;
      default:
        throw new RuleError(
          `${field}.type`,
          `Cannot apply filter type ${JSON.stringify(filter.type)}`,
        );
    }
  }

  const backends: WeightedBackend[] = [];
  for (const [i, ref] of (Array.isArray(rule.backendRefs) ? rule.backendRefs : []).entries()) {
    const field = `${base}.backendRefs[${i}]`;
    const weight = ref?.weight ?? 1;
    if (
      typeof weight !== "number" || !Number.isInteger(weight) || weight < 0 || weight > 1_000_000
    ) {
      throw new RuleError(`${field}.weight`, `Cannot weigh backend: ${JSON.stringify(weight)}`);
    }
    // Without `reason` from the start: a `delete` would leave a slow (dictionary) object to
    // every reader, the structured clone to the workers included.
    const { reason, ...resolved } = resolveBackend(ref, field, ctx);
    let backend: WeightedBackend = { ...resolved, weight };
    const backendFilters = (ref as { filters?: unknown[] } | null)?.filters;
    if (
      resolved.invalid === undefined && Array.isArray(backendFilters) && backendFilters.length > 0
    ) {
      backend = { ...backend, invalid: "backendRefs[].filters are not supported" };
      notes.push([
        `${field}.filters`,
        "Cannot apply backendRef filters: not supported (answers 500)",
      ]);
    }
    if (resolved.invalid !== undefined) unresolve(field, reason!, resolved.invalid);
    backends.push(backend);
  }

  // Gateway API (HTTPRouteRule.backendRefs): "If all entries in BackendRefs are
  // invalid, and there are also no filters specified in this route rule, all
  // traffic which matches this rule MUST receive a 500 status code"; an invalid
  // backend's share of requests answers 500. A rule with no backend of positive
  // weight forwards nothing: 500, unless a redirect answers.
  const redirects = filters.some((f) => f.type === "RequestRedirect");
  if (!redirects && !backends.some((b) => b.weight > 0 && b.invalid === undefined)) {
    respond = 500;
  }

  let timeouts: { request?: string; backendRequest?: string } | undefined;
  if (rule.timeouts !== undefined && rule.timeouts !== null) {
    timeouts = {};
    for (const key of ["request", "backendRequest"] as const) {
      const value = rule.timeouts[key];
      if (value === undefined) continue;
      if (typeof value !== "string" || !DURATION.test(value)) {
        throw new RuleError(
          `${base}.timeouts.${key}`,
          `Cannot use timeout ${JSON.stringify(value)}`,
        );
      }
      timeouts[key] = value;
    }
    // Gateway API (HTTPRouteTimeouts.backendRequest): "must be <= the value of
    // the Request timeout" (a zero request timeout means none).
    if (
      timeouts.request !== undefined && timeouts.backendRequest !== undefined &&
      durationMs(timeouts.request) > 0 &&
      durationMs(timeouts.backendRequest) > durationMs(timeouts.request)
    ) {
      throw new RuleError(`${base}.timeouts`, "Cannot use backendRequest longer than request");
    }
  }

  return {
    ok: true,
    matches,
    filters: filters.length === 0 ? NONE : filters,
    backends,
    ...(timeouts === undefined ? {} : { timeouts }),
    ...(respond === undefined ? {} : { respond }),
    ...(unresolved === undefined ? {} : { unresolved }),
    notes,
  };
}

function compileMatch(m: HTTPRouteMatchInput, field: string): RouteMatch {
  const type = m.path?.type ?? "PathPrefix";
  const value = m.path?.value ?? "/";
  // Gateway API (HTTPPathMatch): Exact and PathPrefix are core; the value
  // "must be an absolute path" with no `//`, `/./`, `/../`, `%2f`, `#`.
  if (type !== "Exact" && type !== "PathPrefix") {
    throw new RuleError(`${field}.path.type`, `Cannot match path type ${JSON.stringify(type)}`);
  }
  if (
    typeof value !== "string" || !value.startsWith("/") || value.includes("//") ||
    /\/\.\.?(\/|$)/.test(value) || /%2f|%2F|#/.test(value)
  ) {
    throw new RuleError(`${field}.path.value`, `Cannot match path ${JSON.stringify(value)}`);
  }
  // Gateway API (PathPrefix): "matching is done on a path element by element
  // basis": a trailing `/` is ignored, so `/foo/` matches `/foo` and `/foo/bar`
  // but not `/foobar`. Stored without the trailing slash (except `/`).
  const path = type === "PathPrefix" && value.length > 1 && value.endsWith("/")
    ? value.replace(/\/+$/, "")
    : value;
  const out: {
    path: RouteMatch["path"];
    method?: string;
    headers: NameValue[];
    queryParams: NameValue[];
  } = {
    path: { type, value: path },
    headers: pairs(m.headers, `${field}.headers`, true),
    queryParams: pairs(m.queryParams, `${field}.queryParams`, false),
  };
  if (m.method !== undefined) {
    if (typeof m.method !== "string" || !METHODS.has(m.method)) {
      throw new RuleError(`${field}.method`, `Cannot match method ${JSON.stringify(m.method)}`);
    }
    out.method = m.method;
  } else if (
    type === "PathPrefix" && path === "/" && out.headers.length === 0 &&
    out.queryParams.length === 0
  ) {
    return EVERY_REQUEST;
  }
  return out;
}

/**
 * Header (case-insensitive names, lowercased) or query parameter (names as
 * written) exact matches. Gateway API (HTTPHeaderMatch.name): "If multiple
 * entries specify equivalent header names, only the first entry with an
 * equivalent name MUST be considered" (the same for query params).
 */
function pairs(raw: unknown, field: string, lower: boolean): NameValue[] {
  if (raw === undefined || raw === null) return NONE;
  if (!Array.isArray(raw)) throw new RuleError(field, "Cannot match: not a list");
  const out = new Map<string, string>();
  for (const [i, p] of raw.entries()) {
    const type = p?.type ?? "Exact";
    if (type !== "Exact") {
      throw new RuleError(`${field}[${i}].type`, `Cannot match type ${JSON.stringify(type)}`);
    }
    if (typeof p?.name !== "string" || !HEADER_NAME.test(p.name) || typeof p?.value !== "string") {
      throw new RuleError(`${field}[${i}]`, "Cannot match: name and value are required");
    }
    const name = lower ? p.name.toLowerCase() : p.name;
    if (!out.has(name)) out.set(name, p.value);
  }
  return [...out].map(([name, value]) => ({ name, value })).sort((a, b) =>
    a.name < b.name ? -1 : a.name > b.name ? 1 : 0
  );
}

function compileHeaderModifier(
  raw: HeaderModifierInput | undefined,
  field: string,
): HeaderModifier {
  if (raw === undefined || raw === null) {
    throw new RuleError(field, "Cannot modify headers: missing");
  }
  const list = (items: unknown, sub: string): NameValue[] => {
    if (items === undefined) return [];
    if (!Array.isArray(items)) {
      throw new RuleError(`${field}.${sub}`, "Cannot modify headers: not a list");
    }
    return items.map((h, i) => {
      if (
        typeof h?.name !== "string" || !HEADER_NAME.test(h.name) || typeof h?.value !== "string"
      ) {
        throw new RuleError(
          `${field}.${sub}[${i}]`,
          "Cannot modify headers: name and value required",
        );
      }
      return { name: h.name.toLowerCase(), value: h.value };
    });
  };
  const remove = raw.remove ?? [];
  if (!Array.isArray(remove) || remove.some((n) => typeof n !== "string" || !HEADER_NAME.test(n))) {
    throw new RuleError(`${field}.remove`, "Cannot remove headers: invalid names");
  }
  // Order kept as written: the data plane applies set, add, remove in turn.
  return {
    set: list(raw.set, "set"),
    add: list(raw.add, "add"),
    remove: remove.map((n) => n.toLowerCase()),
  };
}

function compilePathModifier(
  raw: PathModifierInput,
  field: string,
  matches: readonly RouteMatch[],
): PathModifier {
  if (raw?.type === "ReplaceFullPath" && typeof raw.replaceFullPath === "string") {
    return { type: "ReplaceFullPath", value: raw.replaceFullPath };
  }
  if (raw?.type === "ReplacePrefixMatch" && typeof raw.replacePrefixMatch === "string") {
    // Gateway API (HTTPPathModifier.replacePrefixMatch): "ReplacePrefixMatch is
    // only compatible with a `PathPrefix` HTTPRouteMatch."
    if (matches.some((m) => m.path.type !== "PathPrefix")) {
      throw new RuleError(field, "Cannot replace a prefix match: every match must be a PathPrefix");
    }
    return { type: "ReplacePrefixMatch", value: raw.replacePrefixMatch };
  }
  throw new RuleError(field, "Cannot modify path: type and its value are required");
}

function preciseHostname(raw: unknown, field: string): string {
  const host = validateHostname(raw);
  if (!host.ok || host.host === "" || host.host.startsWith("*.")) {
    throw new RuleError(
      field,
      `Cannot use hostname ${JSON.stringify(raw)}: a precise name is required`,
    );
  }
  return host.host;
}

function compileRedirect(
  raw: HTTPRouteFilterInput["requestRedirect"],
  field: string,
  matches: readonly RouteMatch[],
): RouteFilter {
  const r = raw ?? {};
  const statusCode = r.statusCode ?? 302;
  // Gateway API (HTTPRequestRedirectFilter.statusCode): default 302; 301 and
  // 302 are core (303, 307, 308 extended).
  if (!REDIRECT_CODES.has(statusCode)) {
    throw new RuleError(`${field}.statusCode`, `Cannot redirect with status ${statusCode}`);
  }
  const out: {
    type: "RequestRedirect";
    scheme?: "http" | "https";
    hostname?: string;
    port?: number;
    path?: PathModifier;
    statusCode: 301 | 302 | 303 | 307 | 308;
  } = { type: "RequestRedirect", statusCode: statusCode as 301 };
  if (r.scheme !== undefined) {
    if (r.scheme !== "http" && r.scheme !== "https") {
      throw new RuleError(
        `${field}.scheme`,
        `Cannot redirect to scheme ${JSON.stringify(r.scheme)}`,
      );
    }
    out.scheme = r.scheme;
  }
  if (r.hostname !== undefined) out.hostname = preciseHostname(r.hostname, `${field}.hostname`);
  if (r.port !== undefined) {
    if (typeof r.port !== "number" || !Number.isInteger(r.port) || r.port < 1 || r.port > 65535) {
      throw new RuleError(`${field}.port`, `Cannot redirect to port ${JSON.stringify(r.port)}`);
    }
    out.port = r.port;
  }
  if (r.path !== undefined) out.path = compilePathModifier(r.path, `${field}.path`, matches);
  return out;
}

/** A resolved backend reference, or an invalid one with the route ResolvedRefs reason. */
function resolveBackend(
  ref: BackendObjectRef | undefined | null,
  field: string,
  ctx: RuleContext,
): WeightedBackend & { reason?: string } {
  const group = ref?.group ?? "";
  const kind = ref?.kind ?? "Service";
  const name = typeof ref?.name === "string" ? ref.name : "";
  const namespace = ref?.namespace ?? ctx.namespace;
  const port = typeof ref?.port === "number" ? ref.port : 0;
  const service = `${namespace}/${name}`;
  const invalid = (reason: string, message: string) => ({
    key: `${service}:${port}`,
    service,
    port,
    weight: 1,
    invalid: message,
    reason,
  });
  // Gateway API (BackendObjectReference, HTTPRoute ResolvedRefs reasons):
  // InvalidKind for an unknown group/kind; RefNotPermitted for a cross-namespace
  // reference without a ReferenceGrant; BackendNotFound when the Service or
  // its port does not exist. "port is required when the referent is a
  // Kubernetes Service".
  if (group !== "" || kind !== "Service") {
    return invalid(
      "InvalidKind",
      `Cannot route to ${kind}${group === "" ? "" : `.${group}`}: only Services`,
    );
  }
  if (name === "") return invalid("BackendNotFound", "Cannot route to Service: name is missing");
  if (
    namespace !== ctx.namespace && !ctx.granted({ group: "", kind: "Service", namespace, name })
  ) {
    return invalid(
      "RefNotPermitted",
      `Cannot route to Service "${service}": no ReferenceGrant allows it`,
    );
  }
  const svc = ctx.service(service);
  if (svc === undefined) {
    return invalid("BackendNotFound", `Cannot route to Service "${service}": no such Service`);
  }
  if (port === 0 || !Number.isInteger(port) || port > 65535) {
    return invalid("BackendNotFound", `Cannot route to Service "${service}": port is required`);
  }
  if (svc.spec?.type !== "ExternalName" && findServicePort(svc, port) === undefined) {
    return invalid(
      "BackendNotFound",
      `Cannot resolve port ${port} of Service "${service}": no such port`,
    );
  }
  void field;
  // Same key as the Ingress translation's backendKey() for a numbered port.
  return { key: `${service}:${port}`, service, port, weight: 1 };
}
