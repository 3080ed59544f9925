/**
 * Sluice assembled: the data plane (serving workers), the control plane (a
 * source, the store, the controller), publishing back to the cluster, the
 * health port, and graceful shutdown. `main.ts` parses the command line and
 * calls {@linkcode startSluice}; everything here is wiring of components
 * that own their behaviour.
 *
 * @module
 */
import { ClientLimits } from "../proxy/client_limits.ts";
import type { Config } from "../config/config.ts";
import { type KubeAccess, loadKubeAccess } from "../k8s/kube_access.ts";
import { KubeClient } from "../k8s/kube_client.ts";
import { errorText } from "../log/error_text.ts";
import { componentLogger, type Logger } from "../log/logging.ts";
import { ControlPlaneMetrics, type WatchStats } from "../metrics/control_plane_metrics.ts";
import {
  METRICS_CONTENT_TYPE,
  type MetricsSnapshot,
  renderMetrics,
  snapshotMetrics,
} from "../metrics/exposition.ts";
import { Controller } from "../control/controller.ts";
import { type HealthServerOptions, serveHealth } from "../server/health_server.ts";
import { hostPort } from "../server/listener.ts";
import { deadline } from "../timers/timers.ts";
import { KubeSource } from "../sources/kube_source.ts";
import { ManifestSource } from "../sources/manifest_source.ts";
import type { ObjectSource } from "../sources/source.ts";
import { KINDS } from "../store/matters.ts";
import { createCertificateInspector } from "../tls/certificate_inspector.ts";
import { generateSelfSignedCertificate } from "../tls/self_signed.ts";
import { translate } from "../translate/translate.ts";
import type { Translation } from "../translate/translation.ts";
import { startWorkerPool, type WorkerPool } from "../workers/worker_pool.ts";
import { ConnectionActivity } from "../server/connection_activity.ts";
import { HttpConnectionReaper } from "../server/http_connection_reaper.ts";
import {
  type SluiceHandlerOptions,
  type SluiceSnapshotData,
  STARTING_TRANSLATION,
} from "../workers/sluice_worker.ts";
import { createIssueLogger } from "./issue_logger.ts";
import { type Publishing, startPublishing } from "./publishing.ts";
import { shutDown } from "./shutdown.ts";
import { GATEWAY_SUPPORTED_FEATURES } from "../translate/gateway/features.ts";
import { snapshotInput } from "../routing/snapshot_builder.ts";

/** A running Sluice. */
export interface Sluice {
  readonly httpPort: number | null;
  readonly httpsPort: number | null;
  readonly healthPort: number;
  /** Resolves once the first routes are served. */
  readonly ready: Promise<void>;
  /**
   * Graceful shutdown: not ready and the Lease handed over at once, keep serving (and
   * following the sources) for the delay, drain, then stop what is left within a short bound.
   */
  shutdown(): Promise<{ graceful: boolean }>;
}

/** Things the environment decides, passed in. */
export interface SluiceEnvironment {
  /** Listen address of every port, over `--bind-address`. Default: {@linkcode defaultBindAddress}. */
  readonly hostname?: string;
  /** `POD_NAME`, `POD_NAMESPACE`, … */
  readonly env: Readonly<Record<string, string | undefined>>;
}

/** Starts every component and resolves once the ports listen (not yet ready). */
export async function startSluice(config: Config, environment: SluiceEnvironment): Promise<Sluice> {
  const logger = componentLogger("main");
  const hostname = environment.hostname ?? config.bindAddress ?? await defaultBindAddress();
  // The health port first: a port taken by something else stops start-up before any worker
  // serves or any watch or leader election begins, and the kubelet's probes get answers
  // (live, not ready) while the rest starts.
  const parts: Parts = { started: false, shuttingDown: false };
  const health = listenHealth(hostname, config.healthPort, {
    // Not live until start-up finished: one that hangs fails the startup probe and the kubelet
    // restarts the pod. A worker lost (crashed, hung) is not restarted in-process: failing
    // liveness makes the kubelet restart the pod at full capacity. Live while draining.
    live: () =>
      parts.started &&
      (parts.shuttingDown || (parts.pool !== undefined && parts.pool.size === parts.pool.count)),
    // Every worker: a lost one (a hung one keeps its socket, Deno 2.9.6 cannot terminate a
    // busy worker) still gets its share of new connections from the kernel, so drain the pod.
    ready: () =>
      parts.controller?.ready === true && !parts.shuttingDown && parts.pool !== undefined &&
      parts.pool.size === parts.pool.count,
    metrics: () =>
      parts.scrape?.() ?? Promise.resolve({ body: "", contentType: METRICS_CONTENT_TYPE }),
    onError: (error) => logger.error("Health port error: {error}", { error: String(error) }),
  });
  try {
    return await startParts(config, { ...environment, hostname, health, parts, logger });
  } catch (error) {
    // Stopped, not terminated: a terminated worker is logged as lost, which is not what happened.
    await parts.pool?.shutdown({ timeoutMs: 1_000 });
    await parts.reaper?.stop();
    await health.shutdown();
    throw error;
  }
}

/** Options of {@linkcode defaultBindAddress}. */
export interface BindAddressProbeOptions {
  /** How long the connection over 127.0.0.1 may take before `0.0.0.0` is chosen. Default 2 s. */
  readonly timeoutMs?: number;
  /** Opens the probe connection (tests hand in one that stalls). Default `Deno.connect`. */
  readonly connect?: (options: Deno.ConnectOptions) => Promise<Deno.Conn>;
}

/**
 * `::` where a socket listening on it takes IPv4 too (Linux's default,
 * `net.ipv6.bindv6only=0`; tried with a connection over 127.0.0.1): IPv6-only
 * and dual-stack clusters reach the pod, and the kubelet can probe its IPv6
 * address; IPv4 clients arrive as `::ffff:a.b.c.d`, which the proxy reports
 * as `a.b.c.d`. Else `0.0.0.0` (no IPv6 in the pod, or IPv6-only sockets),
 * also when the probe is not accepted within `timeoutMs`: with IPv6-only
 * sockets another process's IPv4 listener on the same port would take the
 * connection, and a firewall dropping it would stall the connect.
 */
export async function defaultBindAddress(options: BindAddressProbeOptions = {}): Promise<string> {
  const connect = options.connect ?? Deno.connect;
  const probeDeadline = deadline(options.timeoutMs ?? 2_000);
  let listener: Deno.Listener | undefined;
  try {
    listener = Deno.listen({ hostname: "::", port: 0 });
    const accepted = listener.accept();
    accepted.then((conn) => conn.close(), () => {});
    const connected = connect({
      hostname: "127.0.0.1",
      port: (listener.addr as Deno.NetAddr).port,
      signal: probeDeadline.signal,
    });
    connected.then((conn) => conn.close(), () => {});
    const timedOut = new Promise<never>((_, reject) => {
      probeDeadline.signal.addEventListener("abort", () => reject(probeDeadline.signal.reason), {
        once: true,
      });
    });
    await Promise.race([Promise.all([connected, accepted]), timedOut]);
    return "::";
  } catch {
    return "0.0.0.0";
  } finally {
    probeDeadline.clear();
    listener?.close();
  }
}

/** Serves the health port, or throws naming it. */
function listenHealth(
  hostname: string,
  port: number,
  options: Omit<HealthServerOptions, "hostname" | "port">,
): Deno.HttpServer<Deno.NetAddr> {
  try {
    return serveHealth({ ...options, hostname, port });
  } catch (error) {
    throw new Error(
      `Cannot listen on the health port "${hostPort(hostname, port)}" (--health-port): ${
        errorText(error)
      }`,
    );
  }
}

/** What {@linkcode startParts} wires in, beside the config. */
interface StartContext extends SluiceEnvironment {
  readonly hostname: string;
  readonly health: Deno.HttpServer<Deno.NetAddr>;
  readonly parts: Parts;
  readonly logger: Logger;
}

/** The running parts the health port reports on, filled in as they start. */
interface Parts {
  pool?: WorkerPool<SluiceSnapshotData>;
  /** Plain HTTP's client timeouts. */
  reaper?: HttpConnectionReaper;
  controller?: Controller;
  /** Renders `/metrics` once the metrics exist. */
  scrape?: () => Promise<{ body: string; contentType: string }>;
  /** Every part started (`startSluice` is about to resolve). */
  started: boolean;
  shuttingDown: boolean;
}

/** Starts the data plane, the control plane and publishing behind a listening health port. */
async function startParts(config: Config, context: StartContext): Promise<Sluice> {
  const { health, parts, logger, env } = context;
  const defaultCertificate = await generateSelfSignedCertificate();
  const pool = await startDataPlane(config, context, defaultCertificate);
  const { source, client, access } = await openSource(config, logger);
  const metrics = controlPlaneMetrics(source, parts);
  const logIssues = createIssueLogger(componentLogger("translate"));
  let version = 0;
  let publishing: Publishing | undefined;
  const publish = async (translation: Translation): Promise<void> => {
    version++;
    const result = await pool.publish(version, {
      translation: snapshotInput(translation),
      defaultCertificate,
    });
    for (const r of result.rejected) {
      logger.error("Worker {worker} kept its last routes: {message}", { ...r });
    }
    // Not published: the controller counts the error and tries again (else the first real
    // routes could be refused while Sluice reported ready with the start-up table).
    if (result.rejected.length > 0) {
      throw new Error(`${result.rejected.length} worker(s) refused snapshot ${version}`);
    }
    metrics.published(version, translation.issues, certificateExpiries(translation));
    logIssues(translation.issues);
    publishing?.published(translation);
  };
  const controller = createController(config, { source, metrics, publish });
  parts.controller = controller;

  if (client !== undefined) {
    const namespace = config.electionNamespace ?? env.POD_NAMESPACE ??
      await inClusterNamespace() ?? "default";
    publishing = startPublishing({
      client,
      store: controller.store,
      classes: {
        controllerName: config.controllerName,
        ingressClass: config.ingressClass,
        watchIngressWithoutClass: config.watchIngressWithoutClass,
      },
      electionId: config.electionId,
      electionNamespace: namespace,
      identity: env.POD_NAME ?? Deno.hostname(),
      publishService: config.publishService,
      publishStatusAddresses: config.publishStatusAddresses,
      logger: componentLogger("publish"),
    });
  }
  controller.start();

  parts.scrape = async () => {
    const scraped: MetricsSnapshot[] = [await snapshotMetrics(metrics.registry)];
    for (const worker of await pool.collect()) scraped.push(worker as MetricsSnapshot);
    return { body: await renderMetrics(scraped), contentType: METRICS_CONTENT_TYPE };
  };

  let stopping: Promise<{ graceful: boolean }> | undefined;
  parts.started = true;
  return {
    httpPort: pool.httpPort,
    httpsPort: pool.httpsPort,
    healthPort: health.addr.port,
    ready: controller.whenReady,
    shutdown() {
      if (stopping === undefined) {
        parts.shuttingDown = true;
        stopping = shutDown(
          { publishing, pool, reaper: parts.reaper, controller, access, health },
          { delayMs: config.shutdownDelayMs, timeoutMs: config.shutdownTimeoutMs, logger },
        );
      }
      return stopping;
    },
  };
}

/** The proxy's settings, from the command line. */
function handlerOptions(config: Config, clientLimits: SharedArrayBuffer): SluiceHandlerOptions {
  return {
    clientLimits,
    limitStatus: config.limitStatusCode,
    accessLog: config.accessLog,
    accessLogFormat: config.logFormat,
    connectTimeoutMs: config.proxyConnectTimeoutMs,
    readTimeoutMs: config.proxyReadTimeoutMs,
    trustedProxyCidrs: config.trustedProxyCidrs,
    ...(config.maxBodyBytes > 0 ? { maxBodyBytes: config.maxBodyBytes } : {}),
    hsts: { enabled: config.hsts, maxAgeSeconds: config.hstsMaxAgeSeconds },
    sslRedirect: config.sslRedirect,
    httpsRedirectPort: config.httpsRedirectPort,
  };
}

/**
 * Starts the serving workers (listening at once, answering 503 until the first routes arrive)
 * and, for plain HTTP, the reaper of its idle clients; both go into `context.parts`.
 */
async function startDataPlane(
  config: Config,
  context: StartContext,
  defaultCertificate: SluiceSnapshotData["defaultCertificate"],
): Promise<WorkerPool<SluiceSnapshotData>> {
  const { hostname, parts, logger } = context;
  // Deno.serve gives plain HTTP no client timeouts: the workers count their requests per client
  // port, and a reaper on this thread closes the connections past a timeout.
  const activity = new ConnectionActivity();
  const pool = await startWorkerPool<SluiceSnapshotData>({
    count: config.workers,
    module: new URL("../workers/sluice_worker.ts", import.meta.url),
    config: {
      hostname,
      gatewayAddresses: config.gatewayAddresses,
      httpPort: config.httpPort,
      httpsPort: config.httpsPort,
      firstBytesTimeoutMs: config.clientFirstBytesTimeoutMs,
      idleTimeoutMs: config.clientIdleTimeoutMs,
      connectionActivity: activity.buffer,
      // One table of per-client request limits for every worker (ingress-nginx limit-rps…).
      handlerOptions: handlerOptions(config, new ClientLimits().buffer),
      logging: { level: config.logLevel, format: config.logFormat },
    },
    snapshot: { version: 0, data: { translation: STARTING_TRANSLATION, defaultCertificate } },
  });
  parts.pool = pool;
  if (pool.httpPort !== null) {
    parts.reaper = new HttpConnectionReaper({
      port: pool.httpPort,
      activity,
      firstBytesTimeoutMs: config.clientFirstBytesTimeoutMs,
      idleTimeoutMs: config.clientIdleTimeoutMs,
      onUnavailable: (reason) =>
        logger.warn(
          "Plain-HTTP connections get no client timeouts (one that sends nothing or sits idle stays open): {reason}",
          { reason },
        ),
    });
    parts.reaper.start();
  }
  logger.info("Serving HTTP on {httpPort} and HTTPS on {httpsPort} with {workers} workers", {
    httpPort: pool.httpPort,
    httpsPort: pool.httpsPort,
    workers: config.workers,
  });
  return pool;
}

/** Where the objects come from: a manifest directory, or the Kubernetes API (with its client). */
async function openSource(
  config: Config,
  logger: Logger,
): Promise<{ source: ObjectSource; client?: KubeClient; access?: KubeAccess }> {
  if (config.manifests !== undefined) {
    return {
      source: new ManifestSource({
        directory: config.manifests,
        logger: componentLogger("manifests"),
      }),
    };
  }
  const access = await loadKubeAccess({ kubeconfig: config.kubeconfig });
  logger.info("Using the Kubernetes API at {server} ({origin})", {
    server: access.server,
    origin: access.origin,
  });
  const client = new KubeClient(access, { userAgent: "sluice" });
  const source = new KubeSource({
    client,
    logger: componentLogger("watch"),
    watchNamespaces: [...config.watchNamespaces],
    ...(config.defaultSslCertificate
      ? { defaultSslCertificate: config.defaultSslCertificate }
      : {}),
    ...(config.defaultBackendService
      ? { defaultBackendService: config.defaultBackendService }
      : {}),
    // Watched on its own when --watch-namespace leaves its namespace out.
    ...(config.publishService ? { publishService: config.publishService } : {}),
    gatewayApi: config.gatewayApi,
  });
  return { source, client, access };
}

/** The control plane's metrics; they read the source's, the reaper's and the controller's counters at scrape time. */
function controlPlaneMetrics(source: ObjectSource, parts: Parts): ControlPlaneMetrics {
  return new ControlPlaneMetrics({
    watches: () => watchStats(source),
    clientTimeouts: () => {
      const { sweeps: _, ...closed } = parts.reaper?.stats ?? { sweeps: 0 };
      return closed;
    },
    builds: () => {
      const s = parts.controller?.stats();
      return {
        published: s?.publishes ?? 0,
        unchanged: s?.unchanged ?? 0,
        failed: (s?.translateErrors ?? 0) + (s?.publishErrors ?? 0),
      };
    },
  });
}

/** The controller: `source` in, each translation to `publish`, every build timed in `metrics`. */
function createController(
  config: Config,
  options: {
    source: ObjectSource;
    metrics: ControlPlaneMetrics;
    publish: (translation: Translation) => Promise<void>;
  },
): Controller {
  const { metrics } = options;
  return new Controller({
    sources: [options.source],
    settings: {
      controllerName: config.controllerName,
      ingressClass: config.ingressClass,
      watchIngressWithoutClass: config.watchIngressWithoutClass,
      ignoreAccessAnnotations: config.ignoreAccessAnnotations,
      allowCrossNamespaceSecrets: config.allowCrossNamespaceSecrets,
      gatewayApi: config.gatewayApi,
      gatewaySupportedFeatures: GATEWAY_SUPPORTED_FEATURES,
      gatewayAddresses: config.gatewayAddresses,
      ...(config.defaultBackendService
        ? { defaultBackendService: config.defaultBackendService }
        : {}),
      ...(config.defaultSslCertificate
        ? { defaultSslCertificate: config.defaultSslCertificate }
        : {}),
    },
    inspectCertificate: createCertificateInspector(),
    // Timed here: the controller counts rebuilds, the metrics want each one's duration.
    translate: (objects, options) => {
      const started = performance.now();
      let outcome: "published" | "failed" = "failed";
      try {
        const translation = translate(objects, options);
        outcome = "published";
        return translation;
      } finally {
        metrics.build(outcome, (performance.now() - started) / 1000);
      }
    },
    publish: options.publish,
    logger: componentLogger("controller"),
  });
}

function watchStats(source: ObjectSource): WatchStats[] {
  const status = source.status();
  if (status.type !== "kubernetes") {
    // A manifest directory is read whole: every kind synced at its last complete load.
    return KINDS.map((kind) => ({
      kind,
      lastSyncTime: status.lastLoadTime,
      restarts: 0,
      relists: 0,
      malformed: 0,
    }));
  }
  return status.reflectors.map((r) => ({
    kind: r.kind,
    lastSyncTime: r.lastEventTime ?? r.lastSyncTime,
    restarts: r.restarts,
    relists: r.relists,
    malformed: r.malformed,
  }));
}

function certificateExpiries(translation: Translation) {
  const out = [];
  for (const c of translation.certificates) {
    for (const host of c.hosts) {
      out.push({ host, secret: c.secret, notAfter: Date.parse(c.notAfter) });
    }
  }
  const d = translation.defaultCertificate;
  if (d !== undefined) out.push({ host: "*", secret: d.secret, notAfter: Date.parse(d.notAfter) });
  return out;
}

async function inClusterNamespace(): Promise<string | undefined> {
  try {
    const text = await Deno.readTextFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace");
    return text.trim() || undefined;
  } catch {
    return undefined;
  }
}
