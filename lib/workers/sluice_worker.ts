/**
 * Sluice's worker entry module: what `WorkerPool` loads in each serving
 * worker. Compiles posted translations with the routing model's
 * `buildSnapshot()` and serves them with the proxy handler
 * (`createProxyHandler`), configured by `WorkerConfig.handlerOptions`
 * ({@linkcode SluiceHandlerOptions}). Counts every request in the worker's
 * own metrics registry and writes the access log (its own batched writer,
 * `lib/log/access_log.ts`: LogTape's per-record path cost a large share of
 * the proxy's throughput).
 *
 * @module
 */
import { type AccessLogFormat, AccessLogWriter, type AccessRecord } from "../log/access_log.ts";
import { DataPlaneMetrics, type LiveLabels } from "../metrics/data_plane_metrics.ts";
import { componentLogger } from "../log/logging.ts";
import { snapshotMetrics } from "../metrics/exposition.ts";
import { buildSnapshot } from "../routing/snapshot_builder.ts";
import type { ServingCertificate, Snapshot } from "../routing/snapshot.ts";
import {
  type AccessLogEntry,
  createProxyHandler,
  type ProxyHandlerOptions,
} from "../proxy/proxy_handler.ts";
import type { Translation } from "../translate/translation.ts";
import { runWorker, type WorkerScope } from "./worker_runtime.ts";

/** The snapshot input the control plane posts to Sluice's workers. */
export interface SluiceSnapshotData {
  readonly translation: Translation;
  /** The self-signed certificate generated at start (`lib/tls/self_signed.ts`). */
  readonly defaultCertificate: ServingCertificate;
}

/**
 * What the data plane serves before the control plane published its first
 * routes: every request falls through to a default backend without
 * endpoints, so Sluice answers 503 rather than 404.
 */
export const STARTING_TRANSLATION: Translation = Object.freeze({
  routes: [],
  backends: [{
    key: "sluice/starting",
    service: "",
    endpoints: [],
    unavailable: "Sluice has not loaded its routes yet",
  }],
  defaultBackend: "sluice/starting",
  tlsHosts: [],
  certificates: [],
  issues: [],
});

/** Compiles a posted {@linkcode SluiceSnapshotData} into a snapshot. */
export function compileSluiceSnapshot(data: SluiceSnapshotData, version: number): Snapshot {
  return buildSnapshot(data.translation, { version, defaultCertificate: data.defaultCertificate });
}

/** The metric labels a translation's routes can produce: the series a worker keeps once it serves them. */
export function liveLabels(translation: Translation): LiveLabels {
  // HTTPRoute requests are labelled `HTTPRoute namespace/name` and their hostname group.
  const gatewayRoutes = (translation.gateway?.routes ?? []).flatMap((group) =>
    group.entries.map((entry) => ({ ingress: `HTTPRoute ${entry.route}`, host: group.hostname }))
  );
  return {
    routes: gatewayRoutes.length === 0
      ? translation.routes
      : [...translation.routes, ...gatewayRoutes],
    backends: translation.backends.map((b) => b.key),
  };
}

/** What {@linkcode seriesPruner} returns. */
export interface SeriesPruner {
  /** A snapshot was installed: drops the series it no longer routes to, now or owed to later. */
  installed(live: LiveLabels): Promise<void>;
  /** Pays what is owed, before `/metrics` reads the registry. */
  beforeScrape(): Promise<void>;
}

/**
 * Drops the series of routes and backends that snapshots no longer have
 * ({@linkcode DataPlaneMetrics.retain}, one pass over the series) at most
 * once per `intervalMs` as snapshots are installed (endpoint churn can bring
 * several a second), and before every scrape when one is owed; so what
 * `/metrics` shows is exact, and memory stays bounded without scrapes.
 */
export function seriesPruner(
  metrics: DataPlaneMetrics,
  options: { readonly intervalMs?: number; readonly now?: () => number } = {},
): SeriesPruner {
  const intervalMs = options.intervalMs ?? 10_000;
  const now = options.now ?? (() => performance.now());
  let owed: LiveLabels | undefined;
  let last = -Infinity;
  const prune = async (live: LiveLabels) => {
    owed = undefined;
    last = now();
    await metrics.retain(live);
  };
  return {
    installed(live) {
      if (now() - last >= intervalMs) return prune(live);
      owed = live;
      return Promise.resolve();
    },
    beforeScrape() {
      return owed === undefined ? Promise.resolve() : prune(owed);
    },
  };
}

/**
 * The proxy settings a worker receives: the plain-data part of
 * `ProxyHandlerOptions` (no functions, no pool), as parsed from the command
 * line, plus whether to write access logs.
 */
export type SluiceHandlerOptions =
  & Omit<
    ProxyHandlerOptions,
    "snapshot" | "logger" | "onAccess" | "onWebSocket" | "pool" | "newRequestId"
  >
  & {
    readonly accessLog?: boolean;
    /** As `--log-format`. Default `"json"`. */
    readonly accessLogFormat?: AccessLogFormat;
  };

/** One access-log record's fields (JSON keys of the line). */
export function accessLogFields(entry: AccessLogEntry): AccessRecord {
  const query = entry.target.indexOf("?");
  return {
    client: entry.clientIp,
    method: entry.method,
    host: entry.host,
    path: query === -1 ? entry.target : entry.target.slice(0, query),
    status: entry.status,
    bytes: entry.bytes,
    duration_ms: Math.round(entry.durationMs * 1000) / 1000,
    upstream: entry.endpoint ?? "",
    ingress: entry.ingress ?? "",
    service: entry.service ?? "",
    attempts: entry.attempts,
    request_id: entry.requestId,
    ...(entry.error === undefined ? {} : { error: entry.error }),
  };
}

/**
 * Counts one finished request in the worker's metrics. The `host` label is
 * the matched rule's host, never the client's `Host` (unbounded cardinality).
 */
export function observeRequest(metrics: DataPlaneMetrics, entry: AccessLogEntry): void {
  metrics.request({
    ingress: entry.ingress ?? "",
    host: entry.ruleHost,
    method: entry.method,
    status: entry.status,
    durationSeconds: entry.durationMs / 1000,
  });
  const backend = entry.backend;
  if (backend === undefined) return;
  // Every attempt but the last failed (to connect, or reset or timed out before any answer) and
  // was retried.
  for (let i = 1; i < entry.attempts; i++) metrics.retry(backend);
  for (let i = 0; i < (entry.connectFailures ?? 0); i++) metrics.connectError(backend);
}

if ("WorkerGlobalScope" in globalThis) {
  const metrics = new DataPlaneMetrics();
  const pruner = seriesPruner(metrics);
  runWorker<SluiceSnapshotData>(self as unknown as WorkerScope, {
    compile: (data, version) => {
      const snapshot = compileSluiceSnapshot(data, version);
      // Ingresses and backends come and go (a preview Ingress per pull request): drop their series.
      pruner.installed(liveLabels(data.translation)).catch((error) =>
        componentLogger("metrics").warn("Cannot drop the series of removed routes: {error}", {
          error: String(error),
        })
      );
      return snapshot;
    },
    createHandler: ({ snapshot, handlerOptions, logger }) => {
      const { accessLog = true, accessLogFormat = "json", ...proxyOptions } =
        (handlerOptions ?? {}) as SluiceHandlerOptions;
      const writer = accessLog
        ? new AccessLogWriter({
          format: accessLogFormat,
          onDrop: () => metrics.accessLogDropped(),
        })
        : undefined;
      const options: ProxyHandlerOptions = {
        ...proxyOptions,
        snapshot,
        logger,
        onAccess(entry) {
          observeRequest(metrics, entry);
          writer?.write(accessLogFields(entry));
        },
        onWebSocket: (delta) => metrics.websocket(delta),
      };
      const handler = createProxyHandler(options);
      return Object.assign(
        (req: Request, info: Parameters<typeof handler>[1]) => handler(req, info),
        {
          close() {
            handler.close();
            writer?.close();
          },
          closeWebSockets: () => handler.closeWebSockets(),
        },
      );
    },
    onRequest: (listener, delta) => metrics.activeRequest(listener, delta),
    onClientTimeout: (listener, reason, count) => metrics.clientTimeout(listener, reason, count),
    collect: async () => {
      await pruner.beforeScrape();
      return await snapshotMetrics(metrics.registry);
    },
  });
}
