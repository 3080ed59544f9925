/**
 * The behaviour an Ingress's served ingress-nginx annotations ask for, as
 * typed plain data (`IngressBehaviour`), read with the strict grammars of
 * `annotation_values.ts`. An annotation whose value does not parse is a
 * problem: the caller makes the Ingress's routes answer 503, as
 * ingress-nginx did for an Ingress whose annotations it could not use.
 *
 * Pure. Knows nothing of how the data plane applies the behaviour
 * (`lib/proxy/ingress_steps.ts`).
 *
 * @module
 */

import {
  parseBool,
  parseCidrList,
  type Parsed,
  parseInteger,
  parsePath,
  parseSize,
  parseStatusCode,
} from "./annotation_values.ts";
import { type BasicAuth, readBasicAuth, type SecretContext } from "./basic_auth.ts";

export type { BasicAuth, SecretContext };

/** A piece of a redirect `Location`: text as written, or an nginx variable read from the request. */
export type LocationPart = string | { readonly variable: RedirectVariable };

/** The nginx variables a redirect URL may use (anything else is refused). */
export type RedirectVariable = "request_uri" | "uri" | "args" | "is_args" | "host" | "scheme";

const REDIRECT_VARIABLES: readonly RedirectVariable[] = [
  "request_uri",
  "uri",
  "args",
  "is_args",
  "host",
  "scheme",
];

/** CORS as ingress-nginx's `enable-cors` family sets it. */
export interface CorsPolicy {
  /** `"*"`, or origins (`https://a.example`, `https://*.example.com`, with a port or not), lowercase. */
  readonly origins: "*" | readonly string[];
  readonly methods: string;
  readonly headers: string;
  readonly credentials: boolean;
  /** Empty: no `Access-Control-Expose-Headers`. */
  readonly exposeHeaders: string;
  readonly maxAgeSeconds: number;
}

/** What one Ingress's served annotations ask for. Absent fields: Sluice's defaults. */
export interface IngressBehaviour {
  /** `ssl-redirect`: false stops the HTTP→HTTPS redirect of TLS hosts. */
  readonly sslRedirect?: boolean;
  /** `force-ssl-redirect`: redirect to HTTPS even without a TLS section. */
  readonly forceSslRedirect?: boolean;
  /** `app-root`: where `/` is redirected (302). */
  readonly appRoot?: string;
  /** `from-to-www-redirect`: the host's `www.` twin (or bare twin) redirects to it (308). */
  readonly fromToWww?: boolean;
  /** `permanent-redirect` / `temporal-redirect`: every request answered with this redirect. */
  readonly redirect?: { readonly location: readonly LocationPart[]; readonly status: number };
  /** `allowlist-source-range` (or `whitelist-`): only these clients; others get 403. */
  readonly allow?: readonly string[];
  /** `denylist-source-range`: these clients get 403. */
  readonly deny?: readonly string[];
  /** `proxy-body-size` in bytes; 0: no limit. */
  readonly maxBodyBytes?: number;
  readonly cors?: CorsPolicy;
  /** `auth-type: basic` with `auth-secret`: requests without a listed user's password get 401. */
  readonly basicAuth?: BasicAuth;
  /** `limit-rps`, `limit-rpm`, `limit-connections`: per client address, per replica. */
  readonly limits?: RequestLimits;
  /** `upstream-vhost`: the `Host` the backend is sent (nginx `proxy_set_header Host`). */
  readonly upstreamVhost?: string;
  /** `x-forwarded-prefix`: sent as `X-Forwarded-Prefix` (nginx `proxy_set_header`). */
  readonly forwardedPrefix?: string;
}

/** ingress-nginx's request limits (nginx `limit_req … nodelay` and `limit_conn`). */
export interface RequestLimits {
  /** `limit-rps`: requests per second, with a burst of this × `burstMultiplier`. */
  readonly rps?: number;
  /** `limit-rpm`: requests per minute, with a burst of this × `burstMultiplier`. */
  readonly rpm?: number;
  /** `limit-burst-multiplier` (default 5). */
  readonly burstMultiplier: number;
  /** `limit-connections`: requests in flight at once. */
  readonly connections?: number;
  /** `limit-allowlist` (or `limit-whitelist`): client CIDRs the limits skip. */
  readonly exempt?: readonly string[];
}

/** A served annotation whose value cannot be used. */
export interface AnnotationProblem {
  /** The annotation's name without the prefix. */
  readonly annotation: string;
  readonly problem: string;
}

/** Reads the value of a served annotation (name without prefix); undefined when not set. */
export type AnnotationReader = (name: string) => string | undefined;

/** ingress-nginx's redirect codes (`permanent-redirect-code`, `temporal-redirect-code`). */
const REDIRECT_CODES = [300, 301, 302, 303, 304, 307, 308];

/** ingress-nginx's CORS defaults. */
export const CORS_DEFAULTS: CorsPolicy = Object.freeze({
  origins: "*",
  methods: "GET, PUT, POST, DELETE, PATCH, OPTIONS",
  headers:
    "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization",
  credentials: true,
  exposeHeaders: "",
  maxAgeSeconds: 1_728_000,
});

/**
 * Reads the served annotations of one Ingress. Returns the behaviour (absent
 * when no served annotation is set) and the problems, one per annotation that
 * does not parse. `secrets` finds the Secret of basic authentication; without
 * it, an Ingress asking for basic authentication has a problem (fail closed).
 */
export function readIngressBehaviour(
  read: AnnotationReader,
  secrets?: SecretContext,
): { behaviour?: IngressBehaviour; problems: AnnotationProblem[] } {
  const problems: AnnotationProblem[] = [];
  const out: { -readonly [K in keyof IngressBehaviour]: IngressBehaviour[K] } = {};
  const value = <T>(name: string, parse: (text: string) => Parsed<T>): T | undefined => {
    const text = read(name);
    if (text === undefined) return undefined;
    const parsed = parse(text);
    if (parsed.problem !== undefined) {
      problems.push({ annotation: name, problem: parsed.problem });
      return undefined;
    }
    return parsed.value;
  };

  const sslRedirect = value("ssl-redirect", parseBool);
  if (sslRedirect !== undefined) out.sslRedirect = sslRedirect;
  const force = value("force-ssl-redirect", parseBool);
  if (force !== undefined) out.forceSslRedirect = force;
  const appRoot = value("app-root", parsePath);
  if (appRoot !== undefined) out.appRoot = appRoot;
  const fromToWww = value("from-to-www-redirect", parseBool);
  if (fromToWww !== undefined) out.fromToWww = fromToWww;

  // ingress-nginx (annotations/redirect): temporal-redirect is read first and wins.
  const temporalCode = value(
    "temporal-redirect-code",
    (t) => parseStatusCode(t, REDIRECT_CODES),
  ) ?? 302;
  const permanentCode = value(
    "permanent-redirect-code",
    (t) => parseStatusCode(t, REDIRECT_CODES),
  ) ?? 301;
  const temporal = value("temporal-redirect", parseRedirectUrl);
  const permanent = value("permanent-redirect", parseRedirectUrl);
  if (temporal !== undefined) out.redirect = { location: temporal, status: temporalCode };
  else if (permanent !== undefined) out.redirect = { location: permanent, status: permanentCode };

  // ingress-nginx: allowlist-source-range wins over its older name.
  const allow = value("allowlist-source-range", parseCidrList) ??
    value("whitelist-source-range", parseCidrList);
  if (allow !== undefined) out.allow = allow;
  const deny = value("denylist-source-range", parseCidrList);
  if (deny !== undefined) out.deny = deny;

  const size = value("proxy-body-size", parseSize);
  if (size !== undefined) out.maxBodyBytes = size;

  const cors = value("enable-cors", parseBool);
  if (cors === true) out.cors = readCors(value);

  const vhost = value("upstream-vhost", parseVhost);
  if (vhost !== undefined) out.upstreamVhost = vhost;
  const prefix = value("x-forwarded-prefix", parsePrefix);
  if (prefix !== undefined) out.forwardedPrefix = prefix;

  const limits = readLimits(value);
  if (limits !== undefined) out.limits = limits;

  const auth = readBasicAuth(read, secrets ?? { namespace: "" });
  for (const p of auth.problems) problems.push(p);
  if (auth.basicAuth !== undefined) out.basicAuth = auth.basicAuth;

  return Object.keys(out).length === 0 ? { problems } : { behaviour: out, problems };
}

/** A path of RFC 3986 path characters (no quotes, spaces or controls). */
function parsePrefix(text: string): Parsed<string> {
  return /^\/[A-Za-z0-9._~!$&'()*+,;=:@%/-]{0,1024}$/.test(text)
    ? { value: text }
    : { problem: `${JSON.stringify(text)} is not a path` };
}

/** A host name or address with an optional port, as a `Host` field holds it (no nginx variables). */
function parseVhost(text: string): Parsed<string> {
  return /^(?:[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?$/.test(
      text,
    )
    ? { value: text }
    : { problem: `${JSON.stringify(text)} is not a host name with an optional port` };
}

/** ingress-nginx (annotations/ratelimit): the limits apply when one of them is above zero. */
function readLimits(
  value: <T>(name: string, parse: (text: string) => Parsed<T>) => T | undefined,
): RequestLimits | undefined {
  const count = (text: string) => parseInteger(text, 0, 1_000_000);
  const rps = value("limit-rps", count);
  const rpm = value("limit-rpm", count);
  const connections = value("limit-connections", count);
  const burstMultiplier = value("limit-burst-multiplier", (t) => parseInteger(t, 1, 1_000)) ?? 5;
  const exempt = value("limit-allowlist", parseCidrList) ??
    value("limit-whitelist", parseCidrList);
  const out: { -readonly [K in keyof RequestLimits]: RequestLimits[K] } = { burstMultiplier };
  if (rps !== undefined && rps > 0) out.rps = rps;
  if (rpm !== undefined && rpm > 0) out.rpm = rpm;
  if (connections !== undefined && connections > 0) out.connections = connections;
  if (out.rps === undefined && out.rpm === undefined && out.connections === undefined) {
    return undefined;
  }
  if (exempt !== undefined) out.exempt = exempt;
  return out;
}

function readCors(
  value: <T>(name: string, parse: (text: string) => Parsed<T>) => T | undefined,
): CorsPolicy {
  // ingress-nginx's grammars (annotations/cors: items separated by a comma, a space, or both),
  // written so that no input backtracks: a separator between items is required, so items are
  // whole runs of their characters. (Go runs its own regular expressions in linear time; the
  // same ones in JavaScript backtrack without end on some inputs.) Only a space, not any
  // whitespace: the value goes into a response field.
  const listed = (item: string, what: string) => {
    const grammar = new RegExp(`^${item}(?:(?:, ?| )${item})*(?:, ?| )?$`);
    return (text: string): Parsed<string> =>
      text.length <= 4096 && grammar.test(text)
        ? { value: text }
        : { problem: `${JSON.stringify(text)} is not a list of ${what}` };
  };
  return {
    origins: value("cors-allow-origin", parseOrigins) ?? CORS_DEFAULTS.origins,
    methods: value("cors-allow-methods", listed("[A-Za-z]+", "methods")) ??
      CORS_DEFAULTS.methods,
    headers: value("cors-allow-headers", listed("[A-Za-z0-9_-]+", "header names")) ??
      CORS_DEFAULTS.headers,
    credentials: value("cors-allow-credentials", parseBool) ?? CORS_DEFAULTS.credentials,
    exposeHeaders: value("cors-expose-headers", listed("(?:[A-Za-z0-9_-]+|\\*)", "header names")) ??
      CORS_DEFAULTS.exposeHeaders,
    maxAgeSeconds: value("cors-max-age", (t) => parseInteger(t, 0, 2_147_483_647)) ??
      CORS_DEFAULTS.maxAgeSeconds,
  };
}

/** ingress-nginx's origin grammar: `*`, or `http(s)://[*.]host[:port]`, comma-separated. */
const ORIGIN = /^https?:\/\/(\*\.)?[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*(:[0-9]{1,5})?$/;

function parseOrigins(text: string): Parsed<"*" | string[]> {
  const items = text.split(",").map((s) => s.trim()).filter((s) => s !== "");
  if (items.length === 0) return { problem: "the list of origins is empty" };
  if (items.includes("*")) {
    return items.length === 1
      ? { value: "*" }
      : { problem: `${JSON.stringify(text)} mixes "*" with other origins` };
  }
  for (const item of items) {
    if (!ORIGIN.test(item)) {
      return { problem: `${JSON.stringify(item)} is not an origin (scheme://host[:port])` };
    }
  }
  return { value: items.map((s) => s.toLowerCase()) };
}

/**
 * A redirect target: an absolute http(s) URL whose `$name` / `${name}` parts
 * are the nginx variables of {@linkcode RedirectVariable} (ingress-nginx
 * writes the value into `return <code> <url>;`, where nginx expands them).
 */
export function parseRedirectUrl(text: string): Parsed<LocationPart[]> {
  // deno-lint-ignore no-control-regex
  if (/[\u0000-\u0020\u007f"'\\;{}]/.test(text.replace(/\$\{[a-z_]+\}/g, ""))) {
    return {
      problem: `${
        JSON.stringify(text)
      } contains spaces, quotes or characters nginx would read as syntax`,
    };
  }
  // It goes into a `Location` field, which holds printable ASCII only (escape the rest).
  if (/[^\x21-\x7e]/.test(text)) {
    return { problem: `${JSON.stringify(text)} holds characters other than ASCII` };
  }
  const parts: LocationPart[] = [];
  let rest = text;
  let literal = "";
  while (rest.length > 0) {
    const m = /^\$(?:\{([a-z_]+)\}|([a-z_]+))/.exec(rest);
    if (m === null) {
      literal += rest[0];
      rest = rest.slice(1);
      continue;
    }
    const name = (m[1] ?? m[2]) as RedirectVariable;
    if (!REDIRECT_VARIABLES.includes(name)) {
      return {
        problem: `${JSON.stringify(text)} uses the variable $${name}; only ${
          REDIRECT_VARIABLES.map((v) => `$${v}`).join(", ")
        } are supported`,
      };
    }
    if (literal !== "") parts.push(literal);
    literal = "";
    parts.push({ variable: name });
    rest = rest.slice(m[0].length);
  }
  if (literal !== "") parts.push(literal);
  // The scheme and host must be written out, and end before the first variable: a variable in
  // or right after the host (`https://app.example.com$args` with `?@evil.example`) could
  // change the host the client goes to. `$uri` and `$request_uri` always start with `/`.
  const head = typeof parts[0] === "string" ? parts[0] : "";
  const m = /^(https?):\/\/([^/?#@\\]+)([/?#].*)?$/s.exec(head);
  if (m === null) {
    return {
      problem: `${JSON.stringify(text)} does not start with http:// or https:// and a host`,
    };
  }
  const next = parts[1];
  if (
    m[3] === undefined && next !== undefined && typeof next !== "string" &&
    next.variable !== "request_uri" && next.variable !== "uri"
  ) {
    return {
      problem: `${JSON.stringify(text)} puts $${next.variable} right after the host, where it ` +
        "could change the host; put a / before it",
    };
  }
  try {
    const url = new URL(`${m[1]}://${m[2]}`);
    if (url.username !== "" || url.password !== "") throw new Error("userinfo");
  } catch {
    return { problem: `${JSON.stringify(text)} does not name a valid host` };
  }
  return { value: parts };
}
