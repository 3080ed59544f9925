/**
 * An Ingress's annotation behaviour (`IngressBehaviour`, plain data from the
 * translation) compiled once per snapshot for the data plane: CIDR lists
 * into matchers, CORS origins into a matcher. Frozen; shared by every route
 * of the Ingress. Basic authentication's users into a map with the
 * `WWW-Authenticate` challenge written once (its hashes are verified by
 * `lib/proxy/basic_auth.ts`).
 *
 * Pure: no I/O.
 *
 * @module
 */

import { type CidrMatcher, createCidrMatcher, normalizeIp } from "../net/cidr.ts";
import type {
  BasicAuth,
  CorsPolicy,
  IngressBehaviour,
  RequestLimits,
} from "../translate/nginx/ingress_behaviour.ts";

/** What the data plane applies for one Ingress. */
export interface RouteBehaviour {
  readonly source: IngressBehaviour;
  /** Clients allowed (others get 403); absent: everyone. */
  readonly allow?: AddressRule;
  /** Clients refused with 403, checked first. */
  readonly deny?: AddressRule;
  readonly cors?: CompiledCors;
  /** Request limits per client (`limit-rps`, `limit-rpm`, `limit-connections`). */
  readonly limits?: CompiledLimits;
  readonly basicAuth?: CompiledBasicAuth;
}

/** Basic authentication, ready for the data plane. */
export interface CompiledBasicAuth {
  /** The `WWW-Authenticate` value of a 401: `Basic realm="…"`, the realm quoted. */
  readonly challenge: string;
  /** Each user's stored hash (no inherited keys: `constructor` is a user like any other). */
  readonly users: ReadonlyMap<string, string>;
}

/** A rate zone: requests per second and burst, counted per client under `zone`. */
export interface RateLimit {
  readonly zone: string;
  readonly perSecond: number;
  readonly burst: number;
}

/** An Ingress's request limits, compiled. */
export interface CompiledLimits {
  readonly rps?: RateLimit;
  readonly rpm?: RateLimit;
  readonly connections?: { readonly zone: string; readonly limit: number };
  /** Clients the limits skip (`limit-allowlist`). */
  readonly exempt?: AddressRule;
}

/** A compiled source-address list. */
export interface AddressRule {
  /** True when `address` (a client IP, IPv4-mapped or not) is in the list. */
  contains(address: string): boolean;
}

/** CORS with its origin matcher. */
export interface CompiledCors {
  readonly policy: CorsPolicy;
  /** The `Access-Control-Allow-Origin` value for a request's `Origin`; undefined: no CORS answer. */
  allowOrigin(origin: string | undefined): string | undefined;
}

/** Compiles one Ingress's behaviour. */
export function compileRouteBehaviour(source: IngressBehaviour, ingress = ""): RouteBehaviour {
  const out: { -readonly [K in keyof RouteBehaviour]: RouteBehaviour[K] } = { source };
  if (source.limits !== undefined) out.limits = compileLimits(source.limits, ingress);
  if (source.allow !== undefined) out.allow = addressRule(createCidrMatcher(source.allow));
  if (source.deny !== undefined) out.deny = addressRule(createCidrMatcher(source.deny));
  if (source.cors !== undefined) out.cors = compileCors(source.cors);
  if (source.basicAuth !== undefined) out.basicAuth = compileBasicAuth(source.basicAuth);
  return Object.freeze(out);
}

/**
 * The limits' zones, named after the Ingress (ingress-nginx makes one zone
 * per Ingress and limit): bursts as ingress-nginx computes them (rate ×
 * `limit-burst-multiplier`).
 */
function compileLimits(limits: RequestLimits, ingress: string): CompiledLimits {
  const out: { -readonly [K in keyof CompiledLimits]: CompiledLimits[K] } = {};
  if (limits.rps !== undefined) {
    out.rps = {
      zone: `${ingress} rps`,
      perSecond: limits.rps,
      burst: limits.rps * limits.burstMultiplier,
    };
  }
  if (limits.rpm !== undefined) {
    out.rpm = {
      zone: `${ingress} rpm`,
      perSecond: limits.rpm / 60,
      burst: limits.rpm * limits.burstMultiplier,
    };
  }
  if (limits.connections !== undefined) {
    out.connections = { zone: `${ingress} conn`, limit: limits.connections };
  }
  if (limits.exempt !== undefined) out.exempt = addressRule(createCidrMatcher(limits.exempt));
  return out;
}

function addressRule(matcher: CidrMatcher): AddressRule {
  return { contains: (address) => matcher.contains(normalizeIp(address)) };
}

/**
 * ingress-nginx (`buildCorsOriginRegex`): `*` answers every request with `*`;
 * a list answers only a request whose `Origin` matches an entry, compared
 * without case, a `*.` standing for exactly one label, and echoes it.
 */
function compileCors(policy: CorsPolicy): CompiledCors {
  if (policy.origins === "*") return { policy, allowOrigin: () => "*" };
  const exact = new Set<string>();
  const wildcards: { prefix: string; suffix: string }[] = [];
  for (const origin of policy.origins) {
    const star = origin.indexOf("://*.");
    if (star < 0) exact.add(origin);
    else wildcards.push({ prefix: origin.slice(0, star + 3), suffix: origin.slice(star + 4) });
  }
  const allowOrigin = (origin: string | undefined): string | undefined => {
    if (origin === undefined) return undefined;
    const lower = origin.toLowerCase();
    if (exact.has(lower)) return origin;
    for (const { prefix, suffix } of wildcards) {
      if (!lower.startsWith(prefix) || !lower.endsWith(suffix)) continue;
      const label = lower.slice(prefix.length, lower.length - suffix.length);
      if (/^[a-z0-9-]+$/.test(label)) return origin;
    }
    return undefined;
  };
  return { policy, allowOrigin };
}

/**
 * nginx `auth_basic "<realm>"` answers `WWW-Authenticate: Basic realm="<realm>"`.
 * The realm is a quoted-string (RFC 9110 section 5.6.4): quotes and backslashes escaped.
 */
export function compileBasicAuth(auth: BasicAuth): CompiledBasicAuth {
  const quoted = auth.realm.replace(/["\\]/g, (c) => `\\${c}`);
  return Object.freeze({
    challenge: `Basic realm="${quoted}"`,
    users: new Map(Object.entries(auth.users)),
  });
}
