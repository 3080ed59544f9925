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
 * Knows nothing of Kubernetes, listeners or certificates.
 *
 * @module
 */

import type { Endpoint, Match, Snapshot } from "../routing/snapshot.ts";
import { createCidrMatcher, normalizeIp } from "./cidr.ts";
import { requestHeaderList } from "./_deno_internal.ts";
import { parseContentLength } from "./_http1.ts";
import { EndpointBalancer } from "./endpoint_balancer.ts";
import {
  forwardRequestHeaders,
  forwardResponseHeaders,
  isWebSocketUpgrade,
} from "./forwarded_headers.ts";
import { parseRequestTarget } from "./request_target.ts";
import {
  isReplayable,
  sendUpstream,
  type UpstreamRequest,
  type UpstreamResponse,
} from "./upstream_client.ts";
import { UpstreamError, type UpstreamErrorKind } from "./upstream_error.ts";
import { endpointKey, UpstreamPool } from "./upstream_pool.ts";
import {
  relayWebSocket,
  WEBSOCKET_DROP_REQUEST,
  webSocketHandshakeProblem,
  type WebSocketRelay,
} from "./websocket_relay.ts";

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
  readonly error?: UpstreamErrorKind | "no-route" | "no-endpoints" | "bad-request";
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
   * backend, a response body's once `Deno.serve` has taken it (`_deno_internal.ts`;
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
  const balancer = new EndpointBalancer({ downForMs: options.endpointDownMs ?? 10_000 });
  const trusted = createCidrMatcher(options.trustedProxyCidrs ?? []);
  const newRequestId = options.newRequestId ?? (() => crypto.randomUUID().replaceAll("-", ""));
  const maxHeaderBytes = options.maxHeaderBytes ?? 32 * 1024;
  const maxTargetBytes = options.maxTargetBytes ?? 8 * 1024;
  const maxBodyBytes = options.maxBodyBytes;
  const maxAttempts = Math.max(1, options.maxAttempts ?? 3);
  const sslRedirect = options.sslRedirect ?? true;
  const hsts = hstsValue(options.hsts);
  const redirectPort = options.httpsRedirectPort ?? 443;
  const releaseBodyChunks = options.releaseBodyChunks ?? true;
  const wsOptions = {
    idleTimeoutMs: options.webSocketIdleTimeoutMs ?? readTimeoutMs,
    maxMessageBytes: options.maxWebSocketMessageBytes ?? 64 * 1024 * 1024,
  };
  const logger = options.logger;
  const onAccess = options.onAccess;
  const onWebSocket = options.onWebSocket;
  const relays = new Set<WebSocketRelay>();
  let closingWebSockets: { code: number; reason: string } | undefined;

  async function handle(req: Request, info: ProxyRequestInfo): Promise<Response> {
    const started = onAccess === undefined ? 0 : performance.now();
    // --- Everything from req/info, synchronously. ---
    const method = req.method;
    const url = req.url;
    const clientHeaders = requestHeaderList(req);
    const peer = normalizeIp(info.remoteAddr.hostname);
    const secure = info.secure;

    let hostHeader: string | undefined;
    let hostName: string | undefined;
    // HTTP/2 requests carry no Host header: the access log then names the URL's authority.
    const parsed: { authority?: string } = {};
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

    const log = (
      status: number,
      fields: Partial<AccessLogEntry> & { requestId?: string; clientIp?: string } = {},
    ) => {
      if (onAccess === undefined) return;
      onAccess({
        // An answer given before the forwarding fields were built gets an id of its own, so
        // every line can be matched (nginx gives every request one).
        requestId: fields.requestId ?? newRequestId(),
        method,
        host: fields.host ?? hostHeader ?? parsed.authority ?? "",
        ruleHost: fields.ruleHost ?? "",
        target: fields.target ?? "",
        secure,
        remoteAddress: peer,
        clientIp: fields.clientIp ?? peer,
        status,
        bytes: fields.bytes ?? 0,
        durationMs: performance.now() - started,
        attempts: fields.attempts ?? 0,
        ...(fields.ingress === undefined ? {} : { ingress: fields.ingress }),
        ...(fields.service === undefined ? {} : { service: fields.service }),
        ...(fields.backend === undefined ? {} : { backend: fields.backend }),
        ...(fields.endpoint === undefined ? {} : { endpoint: fields.endpoint }),
        ...(fields.connectFailures === undefined
          ? {}
          : { connectFailures: fields.connectFailures }),
        ...(fields.error === undefined ? {} : { error: fields.error }),
      });
    };

    if (headerBytes > maxHeaderBytes) {
      log(431, { error: "bad-request" });
      return plain(431);
    }
    if (url.length > maxTargetBytes && targetLength(url) > maxTargetBytes) {
      log(414, { error: "bad-request" });
      return plain(414);
    }
    let where = parseRequestTarget(url, hostHeader);
    // Ambiguous: a dot segment behind an escaped slash, which a backend decoding `%2F` would
    // resolve out of the routed path.
    if (where === undefined || where.ambiguous) {
      log(400, { error: "bad-request" });
      return plain(400);
    }
    if (
      (hostHeader === undefined || hostHeader === "") && where.authority === info.fallbackAuthority
    ) {
      // No host named (HTTP/1.0 may omit Host: HAProxy's httpchk does), and Deno made up
      // "localhost:<its port>": route host-less, and send the backend an empty Host (RFC 9112
      // section 3.2), as nginx serves such a request from its default server.
      where = { ...where, authority: "", hostname: "" };
    }
    parsed.authority = where.authority;
    if (method === "CONNECT") {
      // A tunnel request: Deno turns its authority-form target into "/", and an ingress
      // opens no tunnels (nginx refuses CONNECT too).
      log(501, { error: "bad-request", target: where.target });
      return plain(501);
    }
    if (transferEncoding !== undefined && transferEncoding.trim().toLowerCase() !== "chunked") {
      // Deno accepts "gzip, chunked" and strips only the chunking; we cannot forward that faithfully.
      log(501, { error: "bad-request", target: where.target });
      return plain(501);
    }
    if (
      (method === "GET" || method === "HEAD") &&
      (transferEncoding !== undefined ||
        (contentLengthText !== undefined && parseContentLength(contentLengthText) !== 0))
    ) {
      // Deno.serve reads and discards GET/HEAD bodies without exposing them: forwarding the
      // request without its body would change its meaning, so say so instead.
      log(501, { error: "bad-request", target: where.target });
      return plain(501);
    }
    let declaredLength: number | undefined;
    if (contentLengthText !== undefined) {
      declaredLength = parseContentLength(contentLengthText);
      if (declaredLength === undefined) {
        log(400, { error: "bad-request", target: where.target });
        return plain(400);
      }
      if (maxBodyBytes !== undefined && declaredLength > maxBodyBytes) {
        log(413, { error: "body-too-large", target: where.target });
        return plain(413, { Connection: "close" });
      }
    }

    const snapshot = options.snapshot();
    const match = snapshot.routes.lookup(where.authority, where.routePath);
    if (match === undefined) {
      log(404, { error: "no-route", target: where.target });
      return plain(404);
    }
    const routed = {
      ingress: match.ingress,
      service: match.backend.service,
      backend: match.backend.key,
      ruleHost: match.host,
      target: where.target,
    };
    if (match.tls && !secure && sslRedirect) {
      const port = redirectPort === 443 ? "" : `:${redirectPort}`;
      log(308, routed);
      return new Response(null, {
        status: 308,
        headers: [["Location", `https://${where.hostname}${port}${locationPath(where.forward)}`]],
      });
    }
    if (match.backend.endpoints.length === 0) {
      log(503, { ...routed, error: "no-endpoints" });
      return plain(503);
    }

    const upgrade = isWebSocketUpgrade(method, clientHeaders);
    if (upgrade) {
      const problem = webSocketHandshakeProblem(clientHeaders);
      if (problem !== undefined) {
        log(problem, { ...routed, error: "bad-request" });
        return plain(problem, problem === 426 ? { "Sec-WebSocket-Version": "13" } : undefined);
      }
    }
    const forwarded = forwardRequestHeaders(clientHeaders, {
      authority: where.authority,
      peer,
      scheme: secure ? "https" : "http",
      port: info.localPort,
      upgrade,
      ...(upgrade ? { drop: WEBSOCKET_DROP_REQUEST } : {}),
    }, { trusted, newRequestId });
    const ids = { requestId: forwarded.requestId, clientIp: forwarded.clientIp, ...routed };

    // The body: none, buffered when small and declared, else streamed.
    let body: Uint8Array<ArrayBuffer> | ReadableStream<Uint8Array> | null = null;
    let streamLength: number | undefined;
    const reqBody = upgrade ? null : req.body;
    try {
      if (reqBody !== null) {
        if (declaredLength !== undefined && declaredLength <= BUFFER_BODY_BYTES) {
          body = await req.bytes();
          // An HTTP/2 stream reset mid-body ends it early instead of failing (Deno 2.9.6).
          if (body.length !== declaredLength) {
            throw new Error(
              `Cannot read request body: got ${body.length} of ${declaredLength} bytes (Content-Length)`,
            );
          }
        } else if (declaredLength !== undefined) {
          body = reqBody;
          streamLength = declaredLength;
        } else {
          body = await peekBody(reqBody);
        }
      } else if (declaredLength === 0) {
        body = new Uint8Array(0);
      }
    } catch (error) {
      log(400, { ...ids, error: "client-body" });
      logger?.warn("Cannot read request body", {
        component: "proxy",
        requestId: ids.requestId,
        error: String(error),
      });
      return plain(400);
    }

    // A request over HTTP/1.x that streams no body and upgrades nothing gets its client's signal
    // read only if its exchange turns out slow: Deno.serve pays an async op for each request whose
    // signal is read. Over HTTP/2 it must be read at once: a signal first read after the client
    // reset the stream never aborts (Deno 2.9.6), and clients reset streams by the thousand.
    // Deno tells neither protocol, but keeps HTTP/1.x field names as sent, and HTTP/2 names are
    // lowercase on the wire (RFC 9113 section 8.2.1): a Host field spelt with a capital is
    // HTTP/1.x, as every common client spells it. A lowercase `host` gets the signal at once.
    const lazySignal = !upgrade && !(body instanceof ReadableStream) &&
      hostName !== undefined && hostName !== "host";
    const signal = lazySignal ? undefined : req.signal;
    const request: UpstreamRequest = {
      method,
      // The path routed on (dot segments resolved, slashes merged), not the one received: a
      // backend resolving the received one its own way could reach another rule's path.
      target: where.forward,
      headers: forwarded.headers,
      body,
      contentLength: streamLength,
      maxBodyBytes,
      signal,
      clientSignal: lazySignal ? () => req.signal : undefined,
      upgrade,
      releaseBodyChunks,
      // A heuristic for HTTP/2 (Deno does not say which protocol a request came over): h2
      // requests usually carry no Host field, HTTP/1.1 ones must. An h2 client that also sends
      // `host` gets no grace; an HTTP/1.x request without Host waits the 10 ms for nothing.
      ...(hostHeader === undefined ? { confirmBodyEndMs: H2_BODY_END_GRACE_MS } : {}),
    };

    // Endpoints: round-robin; on a failure that allows it (below) try the next one.
    let upstream: UpstreamResponse | undefined;
    let failure: UpstreamError | undefined;
    let endpoint: Endpoint | undefined;
    let attempts = 0;
    let connectFailures = 0;
    let tried: Set<string> | undefined;
    while (attempts < maxAttempts) {
      const next = balancer.choose(match.backend, tried);
      if (next === undefined) break;
      endpoint = next;
      attempts++;
      try {
        upstream = await sendUpstream(pool, endpoint, request);
        balancer.markUp(endpoint);
        break;
      } catch (error) {
        failure = error instanceof UpstreamError
          ? error
          : new UpstreamError("reset", "Cannot proxy", { cause: error });
        // Another endpoint gets the request when this one could not be reached, or (an
        // idempotent, replayable request) reset it or stayed silent past the read timeout
        // before any answer, as nginx's default `proxy_next_upstream error timeout` does.
        const unreachable = failure.kind === "connect-failed" || failure.kind === "connect-timeout";
        if (unreachable) connectFailures++;
        const retry = unreachable ||
          ((failure.kind === "reset" || failure.kind === "timeout") && failure.beforeResponse &&
            isReplayable(request));
        if (!retry) break;
        balancer.markDown(endpoint);
        (tried ??= new Set()).add(endpointKey(endpoint));
      }
    }
    const endpointText = endpoint === undefined ? undefined : endpointKey(endpoint);

    if (upstream === undefined) {
      const kind = failure?.kind ?? "connect-failed";
      const status = STATUS_FOR[kind];
      if (kind !== "aborted" && kind !== "body-too-large") {
        logger?.warn("Cannot proxy request", {
          component: "proxy",
          requestId: ids.requestId,
          ingress: match.ingress,
          service: match.backend.service,
          endpoint: endpointText,
          attempts,
          kind,
          error: failure?.message,
        });
      }
      log(status, {
        ...ids,
        attempts,
        error: kind,
        ...(endpointText ? { endpoint: endpointText } : {}),
        ...(connectFailures === 0 ? {} : { connectFailures }),
      });
      return plain(status, kind === "body-too-large" ? { Connection: "close" } : undefined);
    }

    const done = {
      ...ids,
      attempts,
      ...(endpointText ? { endpoint: endpointText } : {}),
      ...(connectFailures === 0 ? {} : { connectFailures }),
    };
    if (upstream.tunnel !== undefined) {
      let accepted: ReturnType<typeof relayWebSocket>;
      try {
        accepted = relayWebSocket(req, { ...upstream, tunnel: upstream.tunnel }, wsOptions);
      } catch (error) {
        upstream.tunnel.conn.close();
        logger?.warn("Cannot accept WebSocket upgrade from backend", {
          component: "proxy",
          requestId: ids.requestId,
          service: match.backend.service,
          error: String(error),
        });
        log(502, { ...done, error: "protocol" });
        return plain(502);
      }
      // Upgraded: from here on only the 101 may be answered (see relayWebSocket).
      const { response, relay } = accepted;
      track(relay);
      // The connection stays busy for the session's whole life (idle timeouts leave it alone).
      const activity = info.activity;
      const slot = activity?.begin(info.remoteAddr);
      // Logged when the session ends, with its whole duration (as nginx logs a WebSocket).
      void relay.ended.then(() => {
        if (slot !== undefined) activity!.end(slot);
        log(101, done);
      });
      return response;
    }

    return respond(upstream, match, secure, done, log);
  }

  function track(relay: WebSocketRelay): void {
    relays.add(relay);
    onWebSocket?.(1);
    relay.ended.then(() => {
      relays.delete(relay);
      onWebSocket?.(-1);
    });
    if (closingWebSockets !== undefined) {
      relay.close(closingWebSockets.code, closingWebSockets.reason);
    }
  }

  async function closeWebSockets(code = 1001, reason = "Going away"): Promise<void> {
    closingWebSockets ??= { code, reason };
    await Promise.all([...relays].map((relay) => relay.close(code, reason)));
  }

  function respond(
    upstream: UpstreamResponse,
    match: Match,
    secure: boolean,
    fields: Partial<AccessLogEntry> & { requestId: string },
    log: (status: number, fields: Partial<AccessLogEntry>) => void,
  ): Response {
    const headers = forwardResponseHeaders(upstream.headers, {
      connectionTokens: upstream.connectionTokens,
      // RFC 6797 section 7.2: never over plain HTTP, whoever set it.
      hsts: !secure ? null : match.tls ? hsts : undefined,
    });
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
      logger?.warn("Cannot relay backend response", {
        component: "proxy",
        requestId: fields.requestId,
        service: match.backend.service,
        status: upstream.status,
        error: String(error),
      });
      log(502, { ...fields, error: "protocol" });
      return plain(502);
    }
    if (onAccess !== undefined) {
      upstream.done.then((outcome) => {
        const error = outcome.complete ? undefined : (outcome.error?.kind ?? "reset");
        log(upstream.status, { ...fields, bytes: outcome.bytes, ...(error ? { error } : {}) });
      });
    }
    return response;
  }

  const handler = handle as ProxyHandler;
  Object.defineProperties(handler, {
    pool: { value: pool },
    balancer: { value: balancer },
    close: { value: () => pool.close() },
    closeWebSockets: { value: closeWebSockets },
  });
  return handler;
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
