/**
 * The data plane's Prometheus metrics, one set per serving worker: requests
 * by Ingress, rule host, status class and method; request durations;
 * upstream connect errors and retries; requests in flight by listener;
 * WebSockets being relayed; and access-log lines dropped because standard
 * error could not keep up.
 *
 * Label values come from the routing table (the Ingress `namespace/name`
 * and the rule's host as written), never from what a client sent, so a
 * hostile client cannot grow the number of series. Nor can a long uptime:
 * when a snapshot is installed, {@linkcode DataPlaneMetrics.retain} drops the
 * series of Ingresses, rule hosts and backends it no longer routes to (as
 * ingress-nginx drops a deleted Ingress's metrics), so preview environments
 * created and deleted per pull request do not grow `/metrics` for good. Knows
 * nothing of how requests are served.
 *
 * @module
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";

/** Methods kept as label values; anything else is counted as `OTHER`. */
const METHODS = new Set([
  "GET",
  "HEAD",
  "POST",
  "PUT",
  "PATCH",
  "DELETE",
  "OPTIONS",
  "CONNECT",
  "TRACE",
]);

/** Request duration buckets, seconds: 1 ms to 60 s. */
export const DURATION_BUCKETS: readonly number[] = [
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
  10,
  30,
  60,
];

/** What one finished request contributes. */
export interface RequestObservation {
  /** `namespace/name` of the matched Ingress; empty when nothing matched or Sluice answered itself. */
  readonly ingress: string;
  /** The matched rule's host as written; empty for rules without host or no match. */
  readonly host: string;
  readonly method: string;
  readonly status: number;
  readonly durationSeconds: number;
}

/** The label values a routing snapshot can produce: what {@linkcode DataPlaneMetrics.retain} keeps. */
export interface LiveLabels {
  /** `ingress` and `host` of every route (series with an empty `ingress`, Sluice's own answers, are always kept). */
  readonly routes: Iterable<{ readonly ingress: string; readonly host: string }>;
  /** Every backend key. */
  readonly backends: Iterable<string>;
}

interface LiveSets {
  readonly routes: ReadonlySet<string>;
  readonly backends: ReadonlySet<string>;
}

/** One `ingress`/`host` pair as a set member (neither holds a newline). */
function routeKey(ingress: string, host: string): string {
  return `${ingress}\n${host}`;
}

/**
 * Client connections closed for a timeout, by listener and reason: counted
 * by the workers (HTTPS) and by the main thread's connection reaper (plain
 * HTTP), summed at scrape.
 */
export const CLIENT_TIMEOUTS_METRIC = {
  name: "sluice_client_timeouts_total",
  help:
    "Client connections closed for a timeout, by listener and reason (first-bytes, idle, head, send, tls-handshake)",
} as const;

/** The data plane's metrics and the registry that exposes them. */
export class DataPlaneMetrics {
  readonly registry: Registry;
  readonly #requests: Counter<"ingress" | "host" | "status" | "method">;
  readonly #duration: Histogram<"ingress" | "host">;
  readonly #connectErrors: Counter<"backend">;
  readonly #retries: Counter<"backend">;
  readonly #activeRequests: Gauge<"listener">;
  readonly #websockets: Gauge;
  readonly #accessLogDropped: Counter;
  readonly #clientTimeouts: Counter<"listener" | "reason">;
  /** What the newest {@linkcode DataPlaneMetrics.retain} call keeps. */
  #live: LiveSets | undefined;

  constructor(registry: Registry = new Registry()) {
    this.registry = registry;
    const registers = [registry];
    this.#requests = new Counter({
      name: "sluice_requests_total",
      help: "Requests answered, by Ingress (namespace/name), rule host, status class and method",
      labelNames: ["ingress", "host", "status", "method"],
      registers,
    });
    this.#duration = new Histogram({
      name: "sluice_request_duration_seconds",
      help:
        "Time from request to the end of its response (body sent or cut; a WebSocket: its whole session), by Ingress and rule host",
      labelNames: ["ingress", "host"],
      buckets: [...DURATION_BUCKETS],
      registers,
    });
    this.#connectErrors = new Counter({
      name: "sluice_upstream_connect_errors_total",
      help: "Failed connections to backend endpoints, by backend (namespace/service:port)",
      labelNames: ["backend"],
      registers,
    });
    this.#retries = new Counter({
      name: "sluice_upstream_retries_total",
      help:
        "Requests retried on another endpoint after a connection failure, or a reset or read timeout before any answer, by backend",
      labelNames: ["backend"],
      registers,
    });
    this.#activeRequests = new Gauge({
      name: "sluice_active_requests",
      help:
        "Requests being answered (until the response, or its stream, has been sent), by listener",
      labelNames: ["listener"],
      registers,
    });
    this.#websockets = new Gauge({
      name: "sluice_active_websockets",
      help: "WebSocket connections being relayed",
      registers,
    });
    this.#accessLogDropped = new Counter({
      name: "sluice_access_log_dropped_lines_total",
      help: "Access-log lines dropped because standard error could not keep up",
      registers,
    });
    this.#clientTimeouts = new Counter({
      name: CLIENT_TIMEOUTS_METRIC.name,
      help: CLIENT_TIMEOUTS_METRIC.help,
      labelNames: ["listener", "reason"],
      registers,
    });
  }

  /** Counts client connections a listener closed for a timeout. */
  clientTimeout(listener: "http" | "https", reason: string, count = 1): void {
    this.#clientTimeouts.inc({ listener, reason }, count);
  }

  /** Counts a finished request. */
  request(o: RequestObservation): void {
    const method = METHODS.has(o.method) ? o.method : "OTHER";
    this.#requests.inc({ ingress: o.ingress, host: o.host, status: statusClass(o.status), method });
    this.#duration.observe({ ingress: o.ingress, host: o.host }, o.durationSeconds);
  }

  connectError(backend: string): void {
    this.#connectErrors.inc({ backend });
  }

  retry(backend: string): void {
    this.#retries.inc({ backend });
  }

  /** `+1` when a request arrives, `-1` once its response has been sent. */
  activeRequest(listener: "http" | "https", delta: 1 | -1): void {
    this.#activeRequests.inc({ listener }, delta);
  }

  /** `+1` when a relay starts, `-1` when it ends. */
  websocket(delta: 1 | -1): void {
    this.#websockets.inc(delta);
  }

  /**
   * Drops the series of Ingresses, rule hosts and backends not in `live` (the
   * snapshot just installed): requests and their durations by `ingress` and
   * `host`, connect errors and retries by `backend`. Series still routed keep
   * their counts. Costs one pass over the series per call, nothing per
   * request. A request that was in flight on the previous snapshot can bring
   * a dropped series back when it ends; the next call drops it again.
   *
   * @returns how many series were dropped.
   */
  async retain(live: LiveLabels): Promise<number> {
    const routes = new Set<string>();
    for (const r of live.routes) routes.add(routeKey(r.ingress, r.host));
    this.#live = { routes, backends: new Set(live.backends) };
    const [requests, connectErrors, retries] = await Promise.all([
      this.#requests.get(),
      this.#connectErrors.get(),
      this.#retries.get(),
    ]);
    // Calls may overlap: the newest snapshot's labels decide.
    const keep = this.#live;
    let dropped = 0;
    const gone = new Map<string, { ingress: string; host: string }>();
    for (const { labels } of requests.values) {
      const ingress = String(labels.ingress ?? "");
      const host = String(labels.host ?? "");
      if (ingress === "" || keep.routes.has(routeKey(ingress, host))) continue;
      this.#requests.remove(labels);
      dropped++;
      gone.set(routeKey(ingress, host), { ingress, host });
    }
    // `request()` writes a duration series with every request series: the pairs found above.
    for (const labels of gone.values()) {
      this.#duration.remove(labels);
      dropped++;
    }
    const byBackend = [
      { counter: this.#connectErrors, samples: connectErrors.values },
      { counter: this.#retries, samples: retries.values },
    ];
    for (const { counter, samples } of byBackend) {
      for (const { labels } of samples) {
        if (keep.backends.has(String(labels.backend ?? ""))) continue;
        counter.remove(labels);
        dropped++;
      }
    }
    return dropped;
  }

  /** Counts one access-log line dropped (the writer's `onDrop`). */
  accessLogDropped(): void {
    this.#accessLogDropped.inc();
  }
}

/** `200` → `2xx`. */
export function statusClass(status: number): string {
  return status >= 100 && status < 600 ? `${Math.floor(status / 100)}xx` : "other";
}
