/**
 * The per-route steps of an Ingress's ingress-nginx annotations
 * (`RouteBehaviour`), in the order ingress-nginx's nginx runs them:
 *
 * 1. {@linkcode ingressAnswer}, the rewrite phase: `app-root` (server level,
 *    `/` only), then in the location the CORS preflight (204), the
 *    `permanent-`/`temporal-redirect`, and last the HTTPS redirect
 *    (`ssl-redirect`, `force-ssl-redirect`; ingress-nginx does it in Lua at
 *    the end of the phase).
 * 2. {@linkcode ingressAccess}, the access phase: `denylist-source-range`,
 *    then `allowlist-source-range` (nginx `deny …; allow …; deny all;`): 403.
 *    Then basic authentication (`auth-type: basic`, nginx `auth_basic` under
 *    the default `satisfy all`): 401 with the realm's challenge, checked by
 *    `basic_auth.ts` (asynchronous: bcrypt), and `Authorization` dropped
 *    from what the backend gets.
 * 3. {@linkcode corsHeaders} on the backend's answer.
 *
 * Each is a small pure function of the request's fields: no I/O, no Deno.
 *
 * @module
 */

import type { RouteBehaviour } from "../routing/route_behaviour.ts";
import type { LocationPart } from "../translate/nginx/ingress_behaviour.ts";

/** What the steps read of a request. */
export interface IngressRequest {
  readonly method: string;
  readonly secure: boolean;
  /** The host the request named, without port (nginx `$host`). */
  readonly hostname: string;
  /** The authority as routed (host and port as sent). */
  readonly authority: string;
  /** The normalised path (nginx `$uri`). */
  readonly path: string;
  /** The target as received, path and query (nginx `$request_uri`). */
  readonly requestUri: string;
  /** The query without `?` (nginx `$args`), empty when none. */
  readonly query: string;
  /** The `Origin` header, if any. */
  readonly origin: string | undefined;
}

/** An answer Sluice gives instead of the backend. */
export interface StepAnswer {
  readonly status: number;
  readonly headers: readonly [string, string][];
}

/** The controller-wide settings the steps follow. */
export interface IngressStepOptions {
  /** `--ssl-redirect`: redirect HTTP to HTTPS for TLS hosts. */
  readonly sslRedirect: boolean;
  /** The port named in HTTPS redirects (`--https-redirect-port`). */
  readonly redirectPort: number;
}

/**
 * The rewrite phase: an answer instead of the backend, or undefined. `tls`:
 * the host is in a TLS section (HTTPS redirect by default).
 */
export function ingressAnswer(
  behaviour: RouteBehaviour | undefined,
  request: IngressRequest,
  options: IngressStepOptions & { readonly tls: boolean },
): StepAnswer | undefined {
  const source = behaviour?.source;
  const scheme = request.secure ? "https" : "http";
  // ingress-nginx (nginx.tmpl, server level): `if ($uri = /) { return 302 …app-root; }`.
  if (source?.appRoot !== undefined && request.path === "/") {
    return redirect(302, `${scheme}://${request.authority}${source.appRoot}`);
  }
  const cors = behaviour?.cors;
  if (cors !== undefined && request.method === "OPTIONS") {
    const origin = cors.allowOrigin(request.origin);
    if (origin !== undefined) {
      return {
        status: 204,
        headers: [
          ...corsFields(cors.policy, origin),
          ["Content-Type", "text/plain charset=UTF-8"],
          ["Content-Length", "0"],
        ],
      };
    }
  }
  if (source?.redirect !== undefined) {
    return redirect(source.redirect.status, expand(source.redirect.location, request));
  }
  if (!request.secure) {
    const https = source?.forceSslRedirect === true ||
      (options.tls && options.sslRedirect && source?.sslRedirect !== false);
    if (https) {
      const port = options.redirectPort === 443 ? "" : `:${options.redirectPort}`;
      return redirect(308, `https://${request.hostname}${port}${request.requestUri}`);
    }
  }
  return undefined;
}

/** The access phase: 403 for a client the source ranges refuse, else undefined. */
export function ingressAccess(
  behaviour: RouteBehaviour | undefined,
  clientIp: string,
): 403 | undefined {
  if (behaviour === undefined) return undefined;
  if (behaviour.deny?.contains(clientIp) === true) return 403;
  if (behaviour.allow !== undefined && !behaviour.allow.contains(clientIp)) return 403;
  return undefined;
}

/**
 * The CORS fields for the backend's answer (ingress-nginx `more_set_headers`:
 * they replace the backend's own), or undefined when CORS does not apply.
 */
export function corsHeaders(
  behaviour: RouteBehaviour | undefined,
  origin: string | undefined,
): [string, string][] | undefined {
  const cors = behaviour?.cors;
  if (cors === undefined) return undefined;
  const allowed = cors.allowOrigin(origin);
  return allowed === undefined ? undefined : corsFields(cors.policy, allowed);
}

function corsFields(
  policy: NonNullable<RouteBehaviour["cors"]>["policy"],
  origin: string,
): [string, string][] {
  const fields: [string, string][] = [["Access-Control-Allow-Origin", origin]];
  if (policy.credentials) fields.push(["Access-Control-Allow-Credentials", "true"]);
  fields.push(["Access-Control-Allow-Methods", policy.methods]);
  fields.push(["Access-Control-Allow-Headers", policy.headers]);
  if (policy.exposeHeaders !== "") {
    fields.push(["Access-Control-Expose-Headers", policy.exposeHeaders]);
  }
  fields.push(["Access-Control-Max-Age", String(policy.maxAgeSeconds)]);
  return fields;
}

function redirect(status: number, location: string): StepAnswer {
  return { status, headers: [["Location", location]] };
}

/** A redirect target with its nginx variables read from the request. */
function expand(parts: readonly LocationPart[], request: IngressRequest): string {
  let out = "";
  for (const part of parts) {
    if (typeof part === "string") {
      out += part;
      continue;
    }
    switch (part.variable) {
      case "request_uri":
        out += request.requestUri;
        break;
      case "uri":
        out += request.path;
        break;
      case "args":
        out += request.query;
        break;
      case "is_args":
        out += request.query === "" ? "" : "?";
        break;
      case "host":
        out += request.hostname;
        break;
      case "scheme":
        out += request.secure ? "https" : "http";
        break;
    }
  }
  return out;
}
