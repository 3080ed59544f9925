/**
 * The request handler the HTTP and HTTPS listeners call for every request:
 * look the request up in the current snapshot, redirect or refuse, pick an
 * endpoint, and stream the exchange with the backend.
 *
 * Owns: the status codes Sluice answers itself (400, 404, 413, 414, 426, 431,
 * 501, 502, 503, 504, 308 to HTTPS), HSTS, retries across endpoints on connect failure,
 * passive health, header rules (via `forwarded_headers.ts`), the WebSocket
 * hand-off, and access-log entries. Header fields and the peer address are
 * read before the first `await`, and nothing of `req` is touched after the
 * response is returned (Deno throws "Request closed" then).
 *
 * A request goes through named steps, each a plain function taking the
 * handler's context and the request's state (`ProxiedRequest`, one object per
 * request): validate (`readRequest`, `validate`) → route (`route`, with the
 * route's own answers in `routeAnswer`) → build the upstream request
 * (`forwardHead`, `requestBody`, `upstreamRequest`) → the attempt loop (in
 * `handle`, so a request awaits only its body and the backend) → respond
 * (`respond`, `relayUpgrade`, or `answerFailure`). A per-route behaviour (an
 * ingress-nginx annotation, a Gateway API filter) is one small function called
 * at its step: one answering instead of the backend (redirect, allowlist,
 * basic auth, CORS preflight) from `routeAnswer`, one changing what the
 * backend gets (header modifier, rewrite, mirror) after `forwardHead`, one
 * changing the answer (response header modifier, CORS headers) in `respond`.
 * Which of them a route runs is decided when the snapshot is built, not per
 * request.
 *
 * Knows nothing of Kubernetes, listeners or certificates.
 *
 * @module
 */

import type { Endpoint, Match, Snapshot } from "../routing/snapshot.ts";
import { type GatewayMatch, pickGatewayBackend } from "../routing/gateway_table.ts";
import { modifyHeaders, modifyPath, redirectLocation } from "./gateway_filters.ts";
import { corsHeaders, ingressAccess, ingressAnswer, type IngressRequest } from "./ingress_steps.ts";
import { type BasicAuthVerifier, createBasicAuthVerifier } from "./basic_auth.ts";
import { choosesCanary } from "../routing/canary_choice.ts";
import { requestCookie } from "./request_cookies.ts";
import { ClientLimits, type RateZone, zoneId } from "./client_limits.ts";
import type { CompiledLimits, RateLimit, RouteBehaviour } from "../routing/route_behaviour.ts";
import { createCidrMatcher, normalizeIp } from "../net/cidr.ts";
import { requestHeaderList } from "../upstream/deno_internal.ts";
import { parseContentLength } from "../upstream/http1.ts";
import { EndpointBalancer } from "../upstream/endpoint_balancer.ts";
import {
  type ForwardedRequest,
  type ForwardingOptions,
  forwardRequestHeaders,
  forwardResponseHeaders,
  isWebSocketUpgrade,
} from "./forwarded_headers.ts";
import { parseRequestTarget, type RequestTarget } from "./request_target.ts";
import {
  isReplayable,
  sendUpstream,
  type UpstreamRequest,
  type UpstreamResponse,
} from "../upstream/upstream_client.ts";
import { UpstreamError, type UpstreamErrorKind } from "../upstream/upstream_error.ts";
import { endpointKey, UpstreamPool } from "../upstream/upstream_pool.ts";
import {
  relayWebSocket,
  WEBSOCKET_DROP_REQUEST,
  webSocketHandshakeProblem,
  type WebSocketRelay,
} from "../websocket/websocket_relay.ts";

/** What the listener knows about the connection; read it synchronously from `Deno.serve`'s info. */
export interface ProxyRequestInfo {
  /** The TCP peer. */
  readonly remoteAddr: { readonly hostname: string; readonly port: number };
  /** True on the HTTPS listener. */
  readonly secure: boolean;
  /** Reported as `X-Forwarded-Port`: the listener's port, or the public port in front of it. */
  readonly localPort: number;
  /**
   * The authority Deno.serve puts in `req.url` when the request named none
   * (see `ConnectionInfo`): such a request without `Host` is routed
   * host-less, and the backend gets an empty `Host`.
   */
  readonly fallbackAuthority?: string;
  /**
   * Told when a WebSocket session begins and ends, by client, so the
   * listener's idle-connection timeouts leave it alone (see `ConnectionInfo`).
   */
  readonly activity?: {
    begin(peer: { readonly hostname: string; readonly port: number }): number;
    end(slot: number): void;
  };
  /** A Gateway's own address, on its listeners (see `ConnectionInfo`): only its routes answer. */
  readonly gatewayAddress?: string | undefined;
}

/** Structured logger; LogTape's `Logger` fits. */
export interface ProxyLogger {
  warn(message: string, properties?: Record<string, unknown>): void;
  error(message: string, properties?: Record<string, unknown>): void;
}

/** One line of access log, emitted when the response (body included) is over. */
export interface AccessLogEntry {
  readonly requestId: string;
  readonly method: string;
  /** Authority as received (the client's; never a metrics label). */
  readonly host: string;
  /**
   * The matched rule's host as written in the Ingress (`shop.example.com`,
   * `*.example.com`); empty for a rule without host, or when nothing matched.
   */
  readonly ruleHost: string;
  /** Target as received (path and query). */
  readonly target: string;
  readonly secure: boolean;
  /** The TCP peer. */
  readonly remoteAddress: string;
  /** The client address as told to the backend (`X-Real-IP`). */
  readonly clientIp: string;
  readonly status: number;
  /** Response body bytes relayed (backend responses only). */
  readonly bytes: number;
  readonly durationMs: number;
  /** `namespace/name` of the Ingress, when routed. */
  readonly ingress?: string;
  /** `namespace/name` of the Service, when routed. */
  readonly service?: string;
  /** The backend's key, `namespace/service:port`, when routed. */
  readonly backend?: string;
  /** `address:port` of the last endpoint tried, also when connecting to it failed. */
  readonly endpoint?: string;
  /** Endpoints tried (more than one after connect failures, or resets before any answer). */
  readonly attempts: number;
  /** Attempts that could not connect (`connect-failed`, `connect-timeout`), the last included; absent when none. */
  readonly connectFailures?: number;
  /** Why Sluice answered itself or the body was cut short. */
  readonly error?:
    | UpstreamErrorKind
    | "no-route"
    | "no-endpoints"
    | "invalid-backend"
    | "bad-request"
    | "forbidden"
    | "rate-limited"
    | "unauthorized";
}

/** Strict-Transport-Security settings (ingress-nginx defaults). */
export interface HstsOptions {
  /** Default true. */
  readonly enabled?: boolean;
  /** Default 31,536,000 (one year). */
  readonly maxAgeSeconds?: number;
  /** Default true. */
  readonly includeSubDomains?: boolean;
  /** Default false. */
  readonly preload?: boolean;
}

export interface ProxyHandlerOptions {
  /** The current snapshot; called once per request. */
  readonly snapshot: () => Snapshot;
  readonly logger?: ProxyLogger;
  /** Receives one entry per request (after the body ended). */
  readonly onAccess?: (entry: AccessLogEntry) => void;
  /** Upstream connect timeout in ms. Default 5,000. */
  readonly connectTimeoutMs?: number;
  /** Upstream idle read/write timeout in ms (reset by every byte; never a total cap). Default 60,000. */
  readonly readTimeoutMs?: number;
  /** Pooled idle connections per endpoint. Default 64. */
  readonly maxIdlePerEndpoint?: number;
  /** Pooled connections idle longer are closed, in ms. Default 60,000. */
  readonly upstreamIdleTimeoutMs?: number;
  /** A pool to use instead of creating one (shared, or with a custom connector for tests). */
  readonly pool?: UpstreamPool;
  /** Peers whose X-Forwarded-* headers are believed (CIDRs). Default none. */
  readonly trustedProxyCidrs?: readonly string[];
  /** Request body limit in bytes (413 beyond). Default unlimited. */
  readonly maxBodyBytes?: number;
  /**
   * Limit on the request header section (sum of name + value + 4 per field); 431 beyond.
   * Default 32 KiB (nginx's 4 x 8k). Deno.serve itself answers 400 to far larger sections.
   */
  readonly maxHeaderBytes?: number;
  /**
   * Limit on the request target (path and query); 414 beyond. Default 8 KiB (a request
   * line must fit one of nginx's 8k header buffers in ingress-nginx).
   */
  readonly maxTargetBytes?: number;
  readonly hsts?: HstsOptions;
  /** Redirect plain-HTTP requests for TLS hosts to HTTPS with 308. Default true. */
  readonly sslRedirect?: boolean;
  /** Public HTTPS port used in redirect locations. Default 443. */
  readonly httpsRedirectPort?: number;
  /** Endpoints tried per request on connect failure. Default 3. */
  readonly maxAttempts?: number;
  /** How long a failing endpoint is skipped, in ms. Default 10,000. */
  readonly endpointDownMs?: number;
  /** Largest WebSocket message accepted from a backend. Default 64 MiB. */
  readonly maxWebSocketMessageBytes?: number;
  /**
   * Release the memory of each streamed body chunk as soon as it is done with,
   * rather than at V8's next collection: a request body's once written to the
   * backend, a response body's once `Deno.serve` has taken it (`deno_internal.ts`;
   * lower peak RSS under large uploads and downloads). Default true: the handler
   * serves `Deno.serve`, whose request bodies give each chunk a buffer of its
   * own. False for a caller that reads response bodies in JavaScript (it would
   * see empty chunks) or keeps its requests' body chunks.
   */
  readonly releaseBodyChunks?: boolean;
  /** WebSocket idle timeout in ms (no message either way). Default `readTimeoutMs`. */
  readonly webSocketIdleTimeoutMs?: number;
  /** Request id generator. Default: 32 random hex chars. */
  readonly newRequestId?: () => string;
  /**
   * Called with `+1` when a WebSocket relay starts and `-1`, exactly once,
   * when it has ended (any way it ends). Must not throw.
   */
  readonly onWebSocket?: (delta: 1 | -1) => void;
  /** Verifies basic authentication (ingress-nginx `auth-type: basic`); default: its own. */
  readonly basicAuth?: BasicAuthVerifier;
  /**
   * The memory of the per-client request limits (`ClientLimits.buffer`), shared by every
   * worker of the replica; default: a table of this handler's own, made when first needed.
   */
  readonly clientLimits?: SharedArrayBuffer;
  /** The status of a request over `limit-rps`, `limit-rpm` or `limit-connections`. Default 503. */
  readonly limitStatus?: number;
}

/** The handler, plus its resources. */
export interface ProxyHandler {
  (req: Request, info: ProxyRequestInfo): Promise<Response>;
  /** The shared upstream pool. */
  readonly pool: UpstreamPool;
  readonly balancer: EndpointBalancer;
  /** Closes pooled upstream connections (call at shutdown and at the end of tests). */
  close(): void;
  /**
   * Closes every live WebSocket relay: the client side with `code` (default
   * 1001 "Going away"), the backend side with a close frame too; relays
   * starting afterwards are closed the same way as soon as they start.
   * Resolves when they have all ended (each within 5 s: both sides answered
   * or the grace ran out). Call it at shutdown, right after the listeners
   * stopped accepting.
   */
  closeWebSockets(code?: number, reason?: string): Promise<void>;
}

const BUFFER_BODY_BYTES = 64 * 1024;
/**
 * How long an HTTP/2 body of unknown length waits for a reset to show before
 * its end is forwarded: Deno 2.9.6 ends such a body cleanly when the client
 * resets the stream and aborts the request signal only a moment later (see
 * docs/deno-workarounds.md, "HTTP/2", and `UpstreamRequest.confirmBodyEndMs`).
 */
const H2_BODY_END_GRACE_MS = 10;
const TEXT = "text/plain; charset=utf-8";
/** Sent with a 413: the rest of the body is not read. */
const CLOSE: Readonly<Record<string, string>> = Object.freeze({ Connection: "close" });

const STATUS_FOR: Record<UpstreamErrorKind, number> = {
  "connect-failed": 502,
  "connect-timeout": 504,
  "timeout": 504,
  "reset": 502,
  "protocol": 502,
  "body-too-large": 413,
  "client-body": 400,
  "aborted": 499,
};

const REASON: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  429: "Too Many Requests",
  404: "Not Found",
  413: "Content Too Large",
  414: "URI Too Long",
  431: "Request Header Fields Too Large",
  499: "Client Closed Request",
  426: "Upgrade Required",
  501: "Not Implemented",
  502: "Bad Gateway",
  503: "Service Unavailable",
  504: "Gateway Timeout",
};

/**
 * Creates the proxy handler. Call `close()` on it at shutdown.
 *
 * @throws {TypeError} when `trustedProxyCidrs` holds a malformed range.
 */
export function createProxyHandler(options: ProxyHandlerOptions): ProxyHandler {
  const ctx = handlerContext(options);

  // The steps, in order (see the module comment). No step is a closure or an awaited function
  // of its own: each request costs one state object, and awaits only the body and the backend.
  async function handle(req: Request, info: ProxyRequestInfo): Promise<Response> {
    // Validate: everything from req/info synchronously, then what Sluice refuses itself.
    const clientHeaders = requestHeaderList(req);
    const x = readRequest(ctx, req, info, clientHeaders);
    const refused = validate(ctx, x, info.fallbackAuthority);
    if (refused !== undefined) return refused;

    // Route: the lookup, then what the route answers itself.
    const routed = route(ctx, x, clientHeaders);
    if (routed instanceof Response) return routed;

    // Build the upstream request: its head, then its body (awaited only when there is one).
    let head = forwardHead(ctx, x, clientHeaders, info);
    if (head instanceof Response) return head;
    if (routed.behaviour !== undefined) {
      // The preaccess phase (nginx limit_req, limit_conn), then the access phase of an
      // Ingress's annotations, on the client address forwardHead found.
      const limits = routed.behaviour.limits;
      if (limits !== undefined && !admitted(ctx, x, limits)) {
        return refuse(ctx, x, ctx.limitStatus, "rate-limited");
      }
      const denied = ingressAccess(routed.behaviour, x.clientIp ?? x.peer);
      if (denied !== undefined) return refuse(ctx, x, denied, "forbidden");
      const auth = routed.behaviour.basicAuth;
      if (auth !== undefined) {
        // Basic authentication, after the source ranges (nginx `satisfy all`).
        const verdict = await ctx.basicAuth.check(
          auth,
          headerValues(clientHeaders, "authorization"),
        );
        if (verdict === 400) return refuse(ctx, x, 400, "bad-request");
        if (verdict === 401) {
          return refuse(ctx, x, 401, "unauthorized", { "WWW-Authenticate": auth.challenge });
        }
      }
    }
    if (x.gateway !== undefined) head = gatewayRequestFilters(x, x.gateway, head);
    else if (routed.behaviour !== undefined) head = ingressRequestFields(routed.behaviour, head);
    let body = requestBody(x, req);
    if (body instanceof Promise) {
      try {
        body = checkBodyLength(x, await body);
      } catch (error) {
        return refuseBody(ctx, x, error);
      }
    }
    const request = upstreamRequest(ctx, x, req, head, body);
    if (x.gateway !== undefined && x.gateway.mirrors.size > 0) mirror(ctx, x.gateway, request);

    // The attempt loop: round-robin; on a failure that allows it try the next endpoint.
    let upstream: UpstreamResponse | undefined;
    let failure: UpstreamError | undefined;
    let tried: Set<string> | undefined;
    while (x.attempts < ctx.maxAttempts) {
      const endpoint = ctx.balancer.choose(routed.backend, tried);
      if (endpoint === undefined) break;
      x.endpoint = endpoint;
      x.attempts++;
      try {
        upstream = await sendUpstream(ctx.pool, endpoint, request);
        ctx.balancer.markUp(endpoint);
        break;
      } catch (error) {
        failure = x.deadline?.aborted
          ? new UpstreamError("timeout", "The HTTPRoute rule's timeout passed", { cause: error })
          : asUpstreamError(error);
        if (x.deadline?.aborted || !mayRetry(x, failure, request)) break;
        ctx.balancer.markDown(endpoint);
        (tried ??= new Set()).add(endpointKey(endpoint));
      }
    }

    // Respond: Sluice's own answer, the WebSocket hand-off, or the backend's answer.
    if (upstream === undefined) return answerFailure(ctx, x, failure);
    if (upstream.tunnel !== undefined) {
      return relayUpgrade(ctx, x, req, info, { ...upstream, tunnel: upstream.tunnel });
    }
    return respond(ctx, x, upstream);
  }

  const handler = handle as ProxyHandler;
  Object.defineProperties(handler, {
    pool: { value: ctx.pool },
    balancer: { value: ctx.balancer },
    close: { value: () => ctx.pool.close() },
    closeWebSockets: {
      value: (code?: number, reason?: string) => closeWebSockets(ctx, code, reason),
    },
  });
  return handler;
}

/** What every request's steps share: the options resolved once, the pool, the live relays. */
interface HandlerContext {
  readonly snapshot: () => Snapshot;
  readonly pool: UpstreamPool;
  readonly balancer: EndpointBalancer;
  readonly forwarding: ForwardingOptions;
  readonly newRequestId: () => string;
  readonly maxHeaderBytes: number;
  readonly maxTargetBytes: number;
  readonly maxBodyBytes: number | undefined;
  readonly maxAttempts: number;
  readonly sslRedirect: boolean;
  readonly hsts: string | undefined;
  readonly redirectPort: number;
  readonly releaseBodyChunks: boolean;
  readonly wsOptions: { readonly idleTimeoutMs: number; readonly maxMessageBytes: number };
  readonly logger: ProxyLogger | undefined;
  readonly onAccess: ((entry: AccessLogEntry) => void) | undefined;
  readonly onWebSocket: ((delta: 1 | -1) => void) | undefined;
  readonly basicAuth: BasicAuthVerifier;
  /** Made when a route with limits first needs it. */
  clientLimits: ClientLimits | undefined;
  readonly clientLimitsBuffer: SharedArrayBuffer | undefined;
  readonly limitStatus: number;
  readonly relays: Set<WebSocketRelay>;
  /** Set by `closeWebSockets`: relays starting afterwards are closed at once. */
  closingWebSockets: { readonly code: number; readonly reason: string } | undefined;
}

function handlerContext(options: ProxyHandlerOptions): HandlerContext {
  const readTimeoutMs = options.readTimeoutMs ?? 60_000;
  const pool = options.pool ?? new UpstreamPool({
    connectTimeoutMs: options.connectTimeoutMs ?? 5_000,
    ioTimeoutMs: readTimeoutMs,
    ...(options.maxIdlePerEndpoint === undefined
      ? {}
      : { maxIdlePerEndpoint: options.maxIdlePerEndpoint }),
    ...(options.upstreamIdleTimeoutMs === undefined
      ? {}
      : { idleTimeoutMs: options.upstreamIdleTimeoutMs }),
  });
  const newRequestId = options.newRequestId ?? (() => crypto.randomUUID().replaceAll("-", ""));
  return {
    snapshot: options.snapshot,
    pool,
    balancer: new EndpointBalancer({ downForMs: options.endpointDownMs ?? 10_000 }),
    forwarding: { trusted: createCidrMatcher(options.trustedProxyCidrs ?? []), newRequestId },
    newRequestId,
    maxHeaderBytes: options.maxHeaderBytes ?? 32 * 1024,
    maxTargetBytes: options.maxTargetBytes ?? 8 * 1024,
    maxBodyBytes: options.maxBodyBytes,
    maxAttempts: Math.max(1, options.maxAttempts ?? 3),
    sslRedirect: options.sslRedirect ?? true,
    hsts: hstsValue(options.hsts),
    redirectPort: options.httpsRedirectPort ?? 443,
    releaseBodyChunks: options.releaseBodyChunks ?? true,
    wsOptions: {
      idleTimeoutMs: options.webSocketIdleTimeoutMs ?? readTimeoutMs,
      maxMessageBytes: options.maxWebSocketMessageBytes ?? 64 * 1024 * 1024,
    },
    logger: options.logger,
    onAccess: options.onAccess,
    onWebSocket: options.onWebSocket,
    basicAuth: options.basicAuth ?? createBasicAuthVerifier(),
    clientLimits: undefined,
    clientLimitsBuffer: options.clientLimits,
    limitStatus: options.limitStatus ?? 503,
    relays: new Set(),
    closingWebSockets: undefined,
  };
}

/**
 * One request on its way through the steps: what was read from it, then what
 * the steps learnt. The access line reports it as it stands.
 */
interface ProxiedRequest {
  /** `performance.now()` at the start; 0 without an access log. */
  readonly started: number;
  readonly method: string;
  readonly url: string;
  /** The TCP peer, IPv4-mapped addresses unmapped. */
  readonly peer: string;
  readonly secure: boolean;
  /** Set on a Gateway's own address (`--gateway-addresses`). */
  readonly gatewayAddress: string | undefined;
  /** The `Origin` field, read when the route has CORS (ingress-nginx `enable-cors`). */
  origin: string | undefined;
  /** Ends the request's count under `limit-connections` (called by its access line). */
  leave: (() => void) | undefined;
  /** The first Host field's value (HTTP/2 requests carry none). */
  readonly hostHeader: string | undefined;
  /** The first Host field's name as sent (lowercase: likely HTTP/2). */
  readonly hostName: string | undefined;
  readonly contentLengthText: string | undefined;
  /** Every Transfer-Encoding field, joined with commas. */
  readonly transferEncoding: string | undefined;
  /** The header section's size: name + value + 4 per field. */
  readonly headerBytes: number;
  /** The target, once validated (the authority corrected for a request naming none). */
  where: RequestTarget | undefined;
  /** The Content-Length, once validated. */
  declaredLength: number | undefined;
  /** The route, once looked up. */
  match: Match | undefined;
  /** The HTTPRoute entry, when a Gateway API route matched (then `match` is its chosen backend). */
  gateway: GatewayMatch | undefined;
  /** Aborts at the HTTPRoute rule's timeout (then the answer is 504). */
  deadline: AbortSignal | undefined;
  /** A WebSocket upgrade (known once routed). */
  upgrade: boolean;
  /** From the forwarding headers; an answer before them logs a fresh id. */
  requestId: string | undefined;
  clientIp: string | undefined;
  /** The endpoint tried last. */
  endpoint: Endpoint | undefined;
  attempts: number;
  /** Attempts that could not connect. */
  connectFailures: number;
}

/** Reads what the steps need from `req` and `info`, synchronously (Deno throws once answered). */
function readRequest(
  ctx: HandlerContext,
  req: Request,
  info: ProxyRequestInfo,
  clientHeaders: [string, string][],
): ProxiedRequest {
  const started = ctx.onAccess === undefined ? 0 : performance.now();
  let hostHeader: string | undefined;
  let hostName: string | undefined;
  let contentLengthText: string | undefined;
  let transferEncoding: string | undefined;
  let headerBytes = 0;
  for (const [name, value] of clientHeaders) {
    headerBytes += name.length + value.length + 4;
    const lower = name.length === 4 || name.length === 14 || name.length === 17
      ? name.toLowerCase()
      : "";
    if (lower === "host") {
      hostName ??= name;
      hostHeader ??= value;
    } else if (lower === "content-length") contentLengthText ??= value;
    else if (lower === "transfer-encoding") {
      transferEncoding = transferEncoding === undefined ? value : `${transferEncoding},${value}`;
    }
  }
  return {
    started,
    method: req.method,
    url: req.url,
    peer: normalizeIp(info.remoteAddr.hostname),
    secure: info.secure,
    gatewayAddress: info.gatewayAddress,
    origin: undefined,
    leave: undefined,
    hostHeader,
    hostName,
    contentLengthText,
    transferEncoding,
    headerBytes,
    where: undefined,
    declaredLength: undefined,
    match: undefined,
    gateway: undefined,
    deadline: undefined,
    upgrade: false,
    requestId: undefined,
    clientIp: undefined,
    endpoint: undefined,
    attempts: 0,
    connectFailures: 0,
  };
}

/**
 * The validate step: the limits, the target, and the framing Sluice cannot
 * forward faithfully. Sets `x.where` and `x.declaredLength`; returns the
 * answer to a request refused.
 */
function validate(
  ctx: HandlerContext,
  x: ProxiedRequest,
  fallbackAuthority: string | undefined,
): Response | undefined {
  if (x.headerBytes > ctx.maxHeaderBytes) return refuse(ctx, x, 431, "bad-request");
  const url = x.url;
  if (url.length > ctx.maxTargetBytes && targetLength(url) > ctx.maxTargetBytes) {
    return refuse(ctx, x, 414, "bad-request");
  }
  let where = parseRequestTarget(url, x.hostHeader);
  // Ambiguous: a dot segment behind an escaped slash, which a backend decoding `%2F` would
  // resolve out of the routed path.
  if (where === undefined || where.ambiguous) return refuse(ctx, x, 400, "bad-request");
  const hostHeader = x.hostHeader;
  if ((hostHeader === undefined || hostHeader === "") && where.authority === fallbackAuthority) {
    // No host named (HTTP/1.0 may omit Host: HAProxy's httpchk does), and Deno made up
    // "localhost:<its port>": route host-less, and send the backend an empty Host (RFC 9112
    // section 3.2), as nginx serves such a request from its default server.
    where = { ...where, authority: "", hostname: "" };
  }
  x.where = where;
  const { method, transferEncoding, contentLengthText } = x;
  if (method === "CONNECT") {
    // A tunnel request: Deno turns its authority-form target into "/", and an ingress
    // opens no tunnels (nginx refuses CONNECT too).
    return refuse(ctx, x, 501, "bad-request");
  }
  if (transferEncoding !== undefined && transferEncoding.trim().toLowerCase() !== "chunked") {
    // Deno accepts "gzip, chunked" and strips only the chunking; we cannot forward that faithfully.
    return refuse(ctx, x, 501, "bad-request");
  }
  if (
    (method === "GET" || method === "HEAD") &&
    (transferEncoding !== undefined ||
      (contentLengthText !== undefined && parseContentLength(contentLengthText) !== 0))
  ) {
    // Deno.serve reads and discards GET/HEAD bodies without exposing them: forwarding the
    // request without its body would change its meaning, so say so instead.
    return refuse(ctx, x, 501, "bad-request");
  }
  if (contentLengthText !== undefined) {
    const declaredLength = parseContentLength(contentLengthText);
    if (declaredLength === undefined) return refuse(ctx, x, 400, "bad-request");
    x.declaredLength = declaredLength;
  }
  return undefined;
}

/**
 * The route step: the lookup in the current snapshot (404 without a match),
 * then the route's own answers ({@linkcode routeAnswer}), then 503 for a
 * backend without endpoints. Sets `x.match`.
 */
function route(
  ctx: HandlerContext,
  x: ProxiedRequest,
  clientHeaders: readonly [string, string][],
): Match | Response {
  const where = x.where!;
  const snapshot = ctx.snapshot();
  if (snapshot.gateway !== undefined) {
    const found = snapshot.gateway.lookup({
      address: x.gatewayAddress,
      port: x.secure ? 443 : 80,
      host: where.authority,
      path: where.matchPath,
      method: x.method,
      header: (name) => headerValues(clientHeaders, name),
      query: queryOf(where.forward).slice(1),
    });
    if (found !== undefined) {
      if (tooLarge(x, ctx.maxBodyBytes)) return refuse(ctx, x, 413, "body-too-large", CLOSE);
      return routeGateway(ctx, x, found, where);
    }
  }
  if (snapshot.routes.wwwRedirect !== undefined) {
    // ingress-nginx `from-to-www-redirect`: `return 308 $scheme://<twin>$request_uri`.
    const twin = snapshot.routes.wwwRedirect(where.authority);
    if (twin !== undefined) {
      logAccess(ctx, x, 308);
      const location = `${x.secure ? "https" : "http"}://${twin}${locationPath(where.forward)}`;
      return new Response(null, { status: 308, headers: [["Location", location]] });
    }
  }
  if (where.matchPath === "/" && snapshot.routes.appRoot !== undefined) {
    // ingress-nginx `app-root`, at server level: `/` of the host, whichever Ingress routes it.
    const appRoot = snapshot.routes.appRoot(where.authority);
    if (appRoot !== undefined) {
      logAccess(ctx, x, 302);
      const location = `${x.secure ? "https" : "http"}://${where.authority}${appRoot}`;
      return new Response(null, { status: 302, headers: [["Location", location]] });
    }
  }
  const match = snapshot.routes.lookup(where.authority, where.matchPath);
  if (match === undefined) return refuse(ctx, x, 404, "no-route");
  x.match = match;
  // ingress-nginx: `proxy-body-size` (client_max_body_size per location) overrides the global.
  if (tooLarge(x, bodyLimit(ctx, match))) return refuse(ctx, x, 413, "body-too-large", CLOSE);
  const answer = routeAnswer(ctx, x, match, where, clientHeaders);
  if (answer !== undefined) return answer;
  const routed = match.canary === undefined ? match : canaryOrMain(x, match, clientHeaders);
  if (routed.backend.endpoints.length === 0) return refuse(ctx, x, 503, "no-endpoints");
  return routed;
}

/**
 * The route with the canary Ingress's backend when the request picks it
 * (`canary_choice.ts`); ingress-nginx keeps the main backend while the
 * canary has no endpoints. Sets `x.match`.
 */
function canaryOrMain(
  x: ProxiedRequest,
  match: Match,
  clientHeaders: readonly [string, string][],
): Match {
  const canary = match.canary!;
  if (canary.backend.endpoints.length === 0) return match;
  const picked = choosesCanary(canary, {
    header: (name) => headerValues(clientHeaders, name)[0],
    cookie: (name) => requestCookie(clientHeaders, name),
    random: Math.random(),
  });
  if (!picked) return match;
  return x.match = { ...match, backend: canary.backend };
}

/**
 * Per-route behaviours that answer instead of the backend, each one small
 * function called here in turn: today the redirect of plain HTTP to HTTPS for
 * a TLS host. Access rules, authentication, CORS preflights and configured
 * redirects (ingress-nginx annotations, HTTPRoute `RequestRedirect`) belong
 * here too, chosen per route when the snapshot is built.
 */
function routeAnswer(
  ctx: HandlerContext,
  x: ProxiedRequest,
  match: Match,
  where: RequestTarget,
  clientHeaders: readonly [string, string][],
): Response | undefined {
  const behaviour = match.behaviour;
  if (behaviour === undefined) {
    if (match.tls && !x.secure && ctx.sslRedirect) return httpsRedirect(ctx, x, where);
    return undefined;
  }
  const request = ingressRequest(x, where, clientHeaders);
  x.origin = request.origin;
  const answer = ingressAnswer(behaviour, request, {
    sslRedirect: ctx.sslRedirect,
    redirectPort: ctx.redirectPort,
    tls: match.tls,
  });
  if (answer === undefined) return undefined;
  logAccess(ctx, x, answer.status);
  return new Response(null, { status: answer.status, headers: answer.headers });
}

/** What the ingress-nginx annotation steps read of a request. */
function ingressRequest(
  x: ProxiedRequest,
  where: RequestTarget,
  clientHeaders: readonly [string, string][],
): IngressRequest {
  const query = queryOf(where.forward);
  return {
    method: x.method,
    secure: x.secure,
    hostname: where.hostname,
    authority: where.authority,
    path: where.matchPath,
    requestUri: locationPath(where.forward),
    query: query.slice(1),
    origin: headerValues(clientHeaders, "origin")[0],
  };
}

/** The body limit of a route: its Ingress's `proxy-body-size` (0: none), else `--max-body-size`. */
function bodyLimit(ctx: HandlerContext, match: Match): number | undefined {
  const own = match.behaviour?.source.maxBodyBytes;
  if (own === undefined) return ctx.maxBodyBytes;
  return own === 0 ? undefined : own;
}

/** `fields` with the CORS fields replacing the backend's own (ingress-nginx `more_set_headers`). */
function withCors(
  fields: [string, string][],
  cors: [string, string][] | undefined,
): [string, string][] {
  if (cors === undefined) return fields;
  const names = new Set(cors.map(([name]) => name.toLowerCase()));
  return [...fields.filter(([name]) => !names.has(name.toLowerCase())), ...cors];
}

/**
 * The request limits of an Ingress (nginx `limit_req … nodelay` per rate, then
 * `limit_conn`) for the client: false when one refuses it. A request admitted
 * under `limit-connections` is counted until its access line (`x.leave`).
 */
function admitted(ctx: HandlerContext, x: ProxiedRequest, limits: CompiledLimits): boolean {
  const client = x.clientIp ?? x.peer;
  if (limits.exempt?.contains(client) === true) return true;
  const table = ctx.clientLimits ??= new ClientLimits(
    ctx.clientLimitsBuffer === undefined ? {} : { buffer: ctx.clientLimitsBuffer },
  );
  if (limits.rps !== undefined && !table.admit(rateZone(limits.rps), client)) return false;
  if (limits.rpm !== undefined && !table.admit(rateZone(limits.rpm), client)) return false;
  const connections = limits.connections;
  if (connections !== undefined) {
    const ticket = table.enter(zoneIdOf(connections.zone), client, connections.limit);
    if (ticket === undefined) return false;
    x.leave = () => table.leave(ticket);
  }
  return true;
}

const RATE_ZONES = new WeakMap<RateLimit, RateZone>();
const ZONE_IDS = new Map<string, number>();

function rateZone(limit: RateLimit): RateZone {
  let zone = RATE_ZONES.get(limit);
  if (zone === undefined) {
    zone = { id: zoneIdOf(limit.zone), perSecond: limit.perSecond, burst: limit.burst };
    RATE_ZONES.set(limit, zone);
  }
  return zone;
}

function zoneIdOf(name: string): number {
  let id = ZONE_IDS.get(name);
  if (id === undefined) {
    if (ZONE_IDS.size > 10_000) ZONE_IDS.clear();
    ZONE_IDS.set(name, id = zoneId(name));
  }
  return id;
}

/** The declared body is over `limit`. */
function tooLarge(x: ProxiedRequest, limit: number | undefined): boolean {
  return limit !== undefined && x.declaredLength !== undefined && x.declaredLength > limit;
}

/**
 * The route step for an HTTPRoute entry: its own answers (a redirect, 500 for
 * an entry or a backend share that cannot be served), then the backend picked
 * by weight. Sets `x.gateway` and `x.match`.
 */
function routeGateway(
  ctx: HandlerContext,
  x: ProxiedRequest,
  found: GatewayMatch,
  where: RequestTarget,
): Match | Response {
  x.gateway = found;
  const entry = found.entry;
  for (const filter of entry.filters) {
    if (filter.type !== "RequestRedirect") continue;
    const location = redirectLocation(filter, {
      scheme: x.secure ? "https" : "http",
      hostname: where.hostname,
      port: x.secure ? 443 : 80,
      path: where.routePath,
      query: queryOf(where.forward),
    }, entry);
    logAccess(ctx, x, filter.statusCode);
    return new Response(null, { status: filter.statusCode, headers: [["Location", location]] });
  }
  const picked = entry.respond === undefined ? pickGatewayBackend(found, Math.random()) : undefined;
  // Gateway API (HTTPBackendRef): requests for an invalid backend, or a rule
  // without any, answer 500.
  if (picked?.backend === undefined) return refuse(ctx, x, 500, "invalid-backend");
  const match: Match = {
    ingress: `HTTPRoute ${entry.route}`,
    host: found.hostname,
    path: entry.matches.path.value,
    pathType: entry.matches.path.type === "Exact" ? "Exact" : "Prefix",
    backend: picked.backend,
    tls: false,
  };
  x.match = match;
  if (picked.backend.endpoints.length === 0) return refuse(ctx, x, 503, "no-endpoints");
  return match;
}

/** Request filters of an HTTPRoute entry, in order: header modifiers and URL rewrites. */
/**
 * The request fields an Ingress's annotations set (nginx `proxy_set_header`,
 * replacing the client's): `upstream-vhost` as `Host`, `x-forwarded-prefix`.
 */
function ingressRequestFields(behaviour: RouteBehaviour, head: ForwardedRequest): ForwardedRequest {
  const { upstreamVhost, forwardedPrefix } = behaviour.source;
  if (upstreamVhost === undefined && forwardedPrefix === undefined) return head;
  const set: { name: string; value: string }[] = [];
  if (upstreamVhost !== undefined) set.push({ name: "host", value: upstreamVhost });
  if (forwardedPrefix !== undefined) {
    set.push({ name: "x-forwarded-prefix", value: forwardedPrefix });
  }
  return { ...head, headers: modifyHeaders(head.headers, { set, add: [], remove: [] }) };
}

function gatewayRequestFilters(
  x: ProxiedRequest,
  found: GatewayMatch,
  head: ForwardedRequest,
): ForwardedRequest {
  let headers = head.headers;
  for (const filter of found.entry.filters) {
    if (filter.type === "RequestHeaderModifier") {
      headers = modifyHeaders(headers, filter.modifier);
    } else if (filter.type === "URLRewrite") {
      if (filter.hostname !== undefined) {
        headers = modifyHeaders(headers, {
          set: [{ name: "host", value: filter.hostname }],
          add: [],
          remove: [],
        });
      }
      if (filter.path !== undefined) {
        const where = x.where!;
        const path = modifyPath(where.routePath, filter.path, found.entry);
        x.where = { ...where, forward: `${path}${queryOf(where.forward)}` };
      }
    }
  }
  return headers === head.headers ? head : { ...head, headers };
}

/**
 * Gateway API `RequestMirror`: a copy of the request to each mirror backend
 * (its share of requests, by `fraction`), its answer discarded. Only
 * requests whose body is absent or buffered are mirrored: a streamed body is
 * read once, by the real backend.
 */
function mirror(ctx: HandlerContext, found: GatewayMatch, request: UpstreamRequest): void {
  if (request.body instanceof ReadableStream || request.upgrade) return;
  for (const filter of found.entry.filters) {
    if (filter.type !== "RequestMirror" || Math.random() >= filter.fraction) continue;
    const backend = found.mirrors.get(filter.backend.key);
    const endpoint = backend === undefined ? undefined : ctx.balancer.choose(backend);
    if (endpoint === undefined) continue;
    const copy: UpstreamRequest = {
      ...request,
      // Its own bytes: the real request's may be released once written.
      body: request.body instanceof Uint8Array ? request.body.slice() : request.body,
      signal: undefined,
      clientSignal: undefined,
      releaseBodyChunks: false,
    };
    sendUpstream(ctx.pool, endpoint, copy).then(
      (answer) => {
        if (answer.body instanceof ReadableStream) answer.body.cancel().catch(() => {});
      },
      () => {},
    );
  }
}

/** The values of a field, by lowercase name. */
function headerValues(fields: readonly [string, string][], name: string): string[] {
  const values: string[] = [];
  for (const [n, v] of fields) {
    if (n.length === name.length && n.toLowerCase() === name) values.push(v);
  }
  return values;
}

/** Fields dropped from the client's request: the WebSocket extensions, and the credentials of basic auth. */
const AUTH_DROP_REQUEST: ReadonlySet<string> = new Set(["authorization"]);
const WEBSOCKET_AUTH_DROP_REQUEST: ReadonlySet<string> = new Set([
  ...WEBSOCKET_DROP_REQUEST,
  ...AUTH_DROP_REQUEST,
]);

function dropped(upgrade: boolean, auth: boolean): { drop?: ReadonlySet<string> } {
  // ingress-nginx: `proxy_set_header Authorization "";` where basic auth is on.
  if (auth) return { drop: upgrade ? WEBSOCKET_AUTH_DROP_REQUEST : AUTH_DROP_REQUEST };
  return upgrade ? { drop: WEBSOCKET_DROP_REQUEST } : {};
}

/** The query of a target, with its `?`, or empty. */
function queryOf(target: string): string {
  const at = target.indexOf("?");
  return at < 0 ? "" : target.slice(at);
}

/** 308 to the same target over HTTPS. */
function httpsRedirect(ctx: HandlerContext, x: ProxiedRequest, where: RequestTarget): Response {
  const port = ctx.redirectPort === 443 ? "" : `:${ctx.redirectPort}`;
  logAccess(ctx, x, 308);
  return new Response(null, {
    status: 308,
    headers: [["Location", `https://${where.hostname}${port}${locationPath(where.forward)}`]],
  });
}

/**
 * The head of the upstream request: a WebSocket handshake checked, the
 * forwarding rules applied (`forwarded_headers.ts`). Per-route changes to the
 * request (header modifiers, rewrites) belong after this step, on its fields.
 * Sets `x.upgrade`, `x.requestId` and `x.clientIp`.
 */
function forwardHead(
  ctx: HandlerContext,
  x: ProxiedRequest,
  clientHeaders: [string, string][],
  info: ProxyRequestInfo,
): ForwardedRequest | Response {
  const upgrade = isWebSocketUpgrade(x.method, clientHeaders);
  if (upgrade) {
    x.upgrade = true;
    const problem = webSocketHandshakeProblem(clientHeaders);
    if (problem !== undefined) {
      return refuse(
        ctx,
        x,
        problem,
        "bad-request",
        problem === 426 ? { "Sec-WebSocket-Version": "13" } : undefined,
      );
    }
  }
  const forwarded = forwardRequestHeaders(clientHeaders, {
    authority: x.where!.authority,
    peer: x.peer,
    scheme: x.secure ? "https" : "http",
    port: info.localPort,
    upgrade,
    ...(dropped(upgrade, x.match?.behaviour?.basicAuth !== undefined)),
  }, ctx.forwarding);
  x.requestId = forwarded.requestId;
  x.clientIp = forwarded.clientIp;
  return forwarded;
}

/** A request body as sent upstream: none, buffered bytes, or a stream. */
type RequestBody = Uint8Array<ArrayBuffer> | ReadableStream<Uint8Array> | null;

/**
 * The body: none, buffered when small and declared, else streamed (a stream
 * of unknown length peeked first). A promise only when it must be read.
 */
function requestBody(x: ProxiedRequest, req: Request): RequestBody | Promise<RequestBody> {
  const reqBody = x.upgrade ? null : req.body;
  const declaredLength = x.declaredLength;
  if (reqBody === null) return declaredLength === 0 ? new Uint8Array(0) : null;
  if (declaredLength === undefined) return peekBody(reqBody);
  return declaredLength <= BUFFER_BODY_BYTES ? req.bytes() : reqBody;
}

/** A buffered body as read, checked against its declared length. */
function checkBodyLength(x: ProxiedRequest, body: RequestBody): RequestBody {
  // An HTTP/2 stream reset mid-body ends it early instead of failing (Deno 2.9.6).
  if (body instanceof Uint8Array && body.length !== x.declaredLength) {
    throw new Error(
      `Cannot read request body: got ${body.length} of ${x.declaredLength} bytes (Content-Length)`,
    );
  }
  return body;
}

/** 400: the client's body could not be read. */
function refuseBody(ctx: HandlerContext, x: ProxiedRequest, error: unknown): Response {
  logAccess(ctx, x, 400, "client-body");
  ctx.logger?.warn("Cannot read request body", {
    component: "proxy",
    requestId: x.requestId,
    error: String(error),
  });
  return plain(400);
}

/** The exchange to attempt with each endpoint in turn. */
function upstreamRequest(
  ctx: HandlerContext,
  x: ProxiedRequest,
  req: Request,
  head: ForwardedRequest,
  body: RequestBody,
): UpstreamRequest {
  // A request over HTTP/1.x that streams no body and upgrades nothing gets its client's signal
  // read only if its exchange turns out slow: Deno.serve pays an async op for each request whose
  // signal is read. Over HTTP/2 it must be read at once: a signal first read after the client
  // reset the stream never aborts (Deno 2.9.6), and clients reset streams by the thousand.
  // Deno tells neither protocol, but keeps HTTP/1.x field names as sent, and HTTP/2 names are
  // lowercase on the wire (RFC 9113 section 8.2.1): a Host field spelt with a capital is
  // HTTP/1.x, as every common client spells it. A lowercase `host` gets the signal at once.
  const stream = body instanceof ReadableStream;
  // An HTTPRoute rule's timeout (Gateway API HTTPRouteTimeouts) ends the exchange: 504.
  const timeoutMs = x.gateway?.timeoutMs;
  if (timeoutMs !== undefined) x.deadline = AbortSignal.timeout(timeoutMs);
  const lazySignal = x.deadline === undefined && !x.upgrade && !stream &&
    x.hostName !== undefined && x.hostName !== "host";
  return {
    method: x.method,
    // The path routed on (dot segments resolved, slashes merged), not the one received: a
    // backend resolving the received one its own way could reach another rule's path.
    target: x.where!.forward,
    headers: head.headers,
    body,
    contentLength: stream ? x.declaredLength : undefined,
    maxBodyBytes: x.gateway === undefined ? bodyLimit(ctx, x.match!) : ctx.maxBodyBytes,
    signal: lazySignal
      ? undefined
      : x.deadline === undefined
      ? req.signal
      : AbortSignal.any([req.signal, x.deadline]),
    clientSignal: lazySignal ? () => req.signal : undefined,
    upgrade: x.upgrade,
    releaseBodyChunks: ctx.releaseBodyChunks,
    // A heuristic for HTTP/2 (Deno does not say which protocol a request came over): h2
    // requests usually carry no Host field, HTTP/1.1 ones must. An h2 client that also sends
    // `host` gets no grace; an HTTP/1.x request without Host waits the 10 ms for nothing.
    ...(x.hostHeader === undefined ? { confirmBodyEndMs: H2_BODY_END_GRACE_MS } : {}),
  };
}

function asUpstreamError(error: unknown): UpstreamError {
  return error instanceof UpstreamError
    ? error
    : new UpstreamError("reset", "Cannot proxy", { cause: error });
}

/**
 * Whether another endpoint gets the request after `failure`: when this one
 * could not be reached, or (an idempotent, replayable request) reset it or
 * stayed silent past the read timeout before any answer, as nginx's default
 * `proxy_next_upstream error timeout` does. Counts connect failures in `x`.
 */
function mayRetry(x: ProxiedRequest, failure: UpstreamError, request: UpstreamRequest): boolean {
  if (failure.kind === "connect-failed" || failure.kind === "connect-timeout") {
    x.connectFailures++;
    return true;
  }
  return (failure.kind === "reset" || failure.kind === "timeout") && failure.beforeResponse &&
    isReplayable(request);
}

/** Sluice's answer when no endpoint answered: 502, 504, 413, 400 or 499. */
function answerFailure(
  ctx: HandlerContext,
  x: ProxiedRequest,
  failure: UpstreamError | undefined,
): Response {
  const kind = failure?.kind ?? "connect-failed";
  const status = STATUS_FOR[kind];
  if (kind !== "aborted" && kind !== "body-too-large") {
    const match = x.match!;
    ctx.logger?.warn("Cannot proxy request", {
      component: "proxy",
      requestId: x.requestId,
      ingress: match.ingress,
      service: match.backend.service,
      endpoint: x.endpoint === undefined ? undefined : endpointKey(x.endpoint),
      attempts: x.attempts,
      kind,
      error: failure?.message,
    });
  }
  return refuse(ctx, x, status, kind, kind === "body-too-large" ? CLOSE : undefined);
}

/** The backend accepted the upgrade: relay the WebSocket session. */
function relayUpgrade(
  ctx: HandlerContext,
  x: ProxiedRequest,
  req: Request,
  info: ProxyRequestInfo,
  upstream: UpstreamResponse & { tunnel: NonNullable<UpstreamResponse["tunnel"]> },
): Response {
  let accepted: ReturnType<typeof relayWebSocket>;
  try {
    accepted = relayWebSocket(req, upstream, ctx.wsOptions);
  } catch (error) {
    upstream.tunnel.conn.close();
    ctx.logger?.warn("Cannot accept WebSocket upgrade from backend", {
      component: "proxy",
      requestId: x.requestId,
      service: x.match!.backend.service,
      error: String(error),
    });
    return refuse(ctx, x, 502, "protocol");
  }
  // Upgraded: from here on only the 101 may be answered (see relayWebSocket).
  const { response, relay } = accepted;
  track(ctx, relay);
  // The connection stays busy for the session's whole life (idle timeouts leave it alone).
  const activity = info.activity;
  const slot = activity?.begin(info.remoteAddr);
  // Logged when the session ends, with its whole duration (as nginx logs a WebSocket).
  void relay.ended.then(() => {
    if (slot !== undefined) activity!.end(slot);
    logAccess(ctx, x, 101);
  });
  return response;
}

function track(ctx: HandlerContext, relay: WebSocketRelay): void {
  ctx.relays.add(relay);
  ctx.onWebSocket?.(1);
  relay.ended.then(() => {
    ctx.relays.delete(relay);
    ctx.onWebSocket?.(-1);
  });
  if (ctx.closingWebSockets !== undefined) {
    relay.close(ctx.closingWebSockets.code, ctx.closingWebSockets.reason);
  }
}

async function closeWebSockets(
  ctx: HandlerContext,
  code = 1001,
  reason = "Going away",
): Promise<void> {
  ctx.closingWebSockets ??= { code, reason };
  await Promise.all([...ctx.relays].map((relay) => relay.close(code, reason)));
}

/**
 * The respond step: the backend's answer, its hop-by-hop fields stripped and
 * HSTS set (per-route changes to the answer, such as response header
 * modifiers, belong here); logged once its body is over.
 */
function respond(ctx: HandlerContext, x: ProxiedRequest, upstream: UpstreamResponse): Response {
  let headers = forwardResponseHeaders(upstream.headers, {
    connectionTokens: upstream.connectionTokens,
    // RFC 6797 section 7.2: never over plain HTTP, whoever set it.
    hsts: !x.secure ? null : x.match!.tls ? ctx.hsts : undefined,
  });
  if (x.gateway !== undefined) {
    for (const filter of x.gateway.entry.filters) {
      if (filter.type === "ResponseHeaderModifier") {
        headers = modifyHeaders(headers, filter.modifier);
      }
    }
  } else if (x.match!.behaviour?.cors !== undefined) {
    headers = withCors(headers, corsHeaders(x.match!.behaviour, x.origin));
  }
  let response: Response;
  try {
    // No statusText: Deno writes the standard reason phrase anyway, and an odd one must not fail.
    // Fields are appended after construction: Deno 2.9.6 converts a `headers` init through
    // WebIDL (a copy of every pair, a ByteString scan of every value) and then builds a
    // native response it drops again; appending skips both (docs/benchmarks.md).
    response = upstream.status === 200
      ? new Response(upstream.body)
      : new Response(upstream.body, { status: upstream.status });
    const fields = response.headers;
    for (const [name, value] of headers) fields.append(name, value);
  } catch (error) {
    // Status out of range or a field Deno refuses: the backend's fault.
    if (upstream.body instanceof ReadableStream) upstream.body.cancel().catch(() => {});
    ctx.logger?.warn("Cannot relay backend response", {
      component: "proxy",
      requestId: x.requestId,
      service: x.match!.backend.service,
      status: upstream.status,
      error: String(error),
    });
    return refuse(ctx, x, 502, "protocol");
  }
  if (ctx.onAccess !== undefined || x.leave !== undefined) {
    upstream.done.then((outcome) => {
      const error = outcome.complete ? undefined : (outcome.error?.kind ?? "reset");
      logAccess(ctx, x, upstream.status, error, outcome.bytes);
    });
  }
  return response;
}

/** Sluice's own answer `status`, logged with `error`. */
function refuse(
  ctx: HandlerContext,
  x: ProxiedRequest,
  status: number,
  error: NonNullable<AccessLogEntry["error"]>,
  extra?: Record<string, string>,
): Response {
  logAccess(ctx, x, status, error);
  return plain(status, extra);
}

/** Emits the access line of `x` as it stands (no-op without `onAccess`). */
function logAccess(
  ctx: HandlerContext,
  x: ProxiedRequest,
  status: number,
  error?: AccessLogEntry["error"],
  bytes = 0,
): void {
  // The request is over for limit-connections (its access line is its last word).
  if (x.leave !== undefined) {
    x.leave();
    x.leave = undefined;
  }
  const onAccess = ctx.onAccess;
  if (onAccess === undefined) return;
  const { match, where, endpoint } = x;
  onAccess({
    // An answer given before the forwarding fields were built gets an id of its own, so
    // every line can be matched (nginx gives every request one).
    requestId: x.requestId ?? ctx.newRequestId(),
    method: x.method,
    // HTTP/2 requests have no Host header: the access log then names the URL's authority.
    host: x.hostHeader ?? where?.authority ?? "",
    ruleHost: match?.host ?? "",
    target: where?.target ?? "",
    secure: x.secure,
    remoteAddress: x.peer,
    clientIp: x.clientIp ?? x.peer,
    status,
    bytes,
    durationMs: performance.now() - x.started,
    attempts: x.attempts,
    ...(match === undefined
      ? {}
      : { ingress: match.ingress, service: match.backend.service, backend: match.backend.key }),
    ...(endpoint === undefined ? {} : { endpoint: endpointKey(endpoint) }),
    ...(x.connectFailures === 0 ? {} : { connectFailures: x.connectFailures }),
    ...(error === undefined ? {} : { error }),
  });
}

/** The length of the path and query of Deno's absolute `req.url`. */
function targetLength(url: string): number {
  const path = url.indexOf("/", url.indexOf("://") + 3);
  return path === -1 ? 1 : url.length - path;
}

/**
 * A request target as a `Location` path: Deno hands over the target's UTF-8
 * as characters, which a header would carry as Latin-1 bytes; characters
 * outside visible ASCII are percent-encoded as UTF-8 instead.
 */
function locationPath(target: string): string {
  return /^[\x21-\x7e]*$/.test(target)
    ? target
    : target.replace(/[^\x21-\x7e]+/g, (run) => encodeURIComponent(run));
}

function hstsValue(options: HstsOptions | undefined): string | undefined {
  if (options?.enabled === false) return undefined;
  let value = `max-age=${options?.maxAgeSeconds ?? 31_536_000}`;
  if (options?.includeSubDomains ?? true) value += "; includeSubDomains";
  if (options?.preload ?? false) value += "; preload";
  return value;
}

function plain(status: number, extra?: Record<string, string>): Response {
  return new Response(`${REASON[status] ?? "Error"}\n`, {
    status,
    headers: { "Content-Type": TEXT, ...extra },
  });
}

/**
 * A body of unknown length (chunked HTTP/1.1, or HTTP/2 without
 * content-length): peek the first chunk so an empty body is sent without any
 * framing header rather than as an empty chunked body.
 */
async function peekBody(
  body: ReadableStream<Uint8Array>,
): Promise<ReadableStream<Uint8Array> | null> {
  const reader = body.getReader();
  let first: ReadableStreamReadResult<Uint8Array>;
  try {
    // Deno gives a request without any body framing one empty chunk before the end.
    do first = await reader.read(); while (!first.done && first.value.length === 0);
  } catch (error) {
    reader.releaseLock();
    throw error;
  }
  if (first.done) {
    reader.releaseLock();
    return null;
  }
  const head = first.value;
  return new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(head);
    },
    async pull(controller) {
      try {
        const next = await reader.read();
        if (next.done) controller.close();
        else controller.enqueue(next.value);
      } catch (error) {
        controller.error(error);
      }
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  }, { highWaterMark: 0 });
}
