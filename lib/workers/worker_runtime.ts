/**
 * What runs inside each serving worker: receives snapshot inputs from the
 * control plane ({@linkcode ToWorker}), compiles them, holds the current
 * {@linkcode Snapshot} (the one shared mutable cell, swapped by reference),
 * and serves HTTP and HTTPS on the configured ports with `reusePort`, so that
 * every worker of the pool serves the same ports and the kernel spreads
 * connections between them.
 *
 * A worker entry module calls {@linkcode runWorker} with the routing model's
 * compiler and the request handler factory (for Sluice, `lib/workers/sluice_worker.ts`).
 *
 * Knows the protocol, the listeners and the snapshot contract; nothing of
 * Kubernetes or of how requests are proxied.
 *
 * @module
 */
import { ConnectionActivity } from "../server/connection_activity.ts";
import { componentLogger, configureLogging, type Logger } from "../log/logging.ts";
import type { Snapshot } from "../routing/snapshot.ts";
import { listenHttp } from "../server/http_listener.ts";
import {
  DEFAULT_FIRST_BYTES_TIMEOUT_MS,
  DEFAULT_IDLE_TIMEOUT_MS,
  type HttpsListener,
  listenHttps,
} from "../server/https_listener.ts";
import {
  type ClientTimeout,
  hostPort,
  type Listener,
  type RequestHandler,
} from "../server/listener.ts";
import { type FromWorker, isToWorker, type SnapshotMessage, type ToWorker } from "./protocol.ts";
import { errorText } from "../log/error_text.ts";

/** The part of a worker's global scope the runtime uses (`self` in a worker). */
export interface WorkerScope {
  onmessage: ((event: MessageEvent) => void) | null;
  postMessage(message: FromWorker): void;
  close(): void;
}

/**
 * The request handler a worker entry makes, with its optional lifetime hooks:
 * `closeWebSockets()` is called as soon as the listeners stopped accepting at
 * shutdown (it closes long-lived streams such as WebSockets, with 1001, so
 * they do not hold the drain until its timeout) and should resolve, bounded,
 * when they have ended; `close()` is called after the listeners shut down.
 */
export type WorkerHandler = RequestHandler & {
  close?(): void;
  closeWebSockets?(): Promise<void>;
};

/** Options of {@linkcode runWorker}. */
export interface WorkerRuntimeOptions<D> {
  /** Compiles a posted snapshot input; throws when it is unusable (the last good one keeps serving). */
  compile(data: D, version: number): Snapshot;
  /**
   * Makes the request handler; it reads `snapshot()` once per request.
   * `handlerOptions` is `WorkerConfig.handlerOptions`. See
   * {@linkcode WorkerHandler} for when its hooks are called.
   */
  createHandler(options: {
    readonly snapshot: () => Snapshot;
    readonly handlerOptions: unknown;
    readonly logger: Logger;
  }): WorkerHandler;
  /** Called with `+1` when a request arrives and `-1` once its response has been sent (or failed). */
  onRequest?(listener: "http" | "https", delta: 1 | -1): void;
  /**
   * Called when a listener closed client connections for a timeout (`count`
   * at once): the HTTPS one (plain HTTP's are closed by the main thread's
   * connection reaper).
   */
  onClientTimeout?(listener: "http" | "https", reason: ClientTimeout, count: number): void;
  /** Answers a `collect` request with plain data (the worker's metrics). */
  collect?(): unknown | Promise<unknown>;
}

/** A response asking its client to close the connection (not a 101: its connection is upgraded). */
function closingConnection(response: Response): Response {
  if (response.status === 101) return response;
  try {
    response.headers.set("connection", "close");
  } catch {
    // Immutable headers: Deno's graceful shutdown still closes the connection after it.
  }
  return response;
}

/** `serve` for a listener on a Gateway's own address: its requests carry that address. */
function onGatewayAddress(serve: RequestHandler, gatewayAddress: string): RequestHandler {
  return (req, info) => serve(req, { ...info, gatewayAddress });
}

/** Starts a listener, or throws naming it and its flag. */
function listening<L>(
  what: "HTTP" | "HTTPS",
  hostname: string,
  port: number,
  listen: () => L,
  gateway = false,
): L {
  try {
    return listen();
  } catch (error) {
    const flag = gateway ? "--gateway-addresses" : what === "HTTP" ? "--http-port" : "--https-port";
    throw new Error(
      `Cannot listen for ${what} on "${hostPort(hostname, port)}" (${flag}): ${errorText(error)}`,
    );
  }
}

/** Serves on behalf of the control plane until told to shut down. Call once, from the worker entry module. */
export function runWorker<D>(scope: WorkerScope, options: WorkerRuntimeOptions<D>): void {
  let worker = -1;
  let current: Snapshot | undefined;
  const httpsListeners: HttpsListener[] = [];
  let handler: WorkerHandler | undefined;
  const listeners: { readonly name: "http" | "https"; readonly listener: Listener }[] = [];
  // Requests in flight per listener, as the listeners count them (for the shutdown report too).
  const inFlight = { http: 0, https: 0 };
  const snapshot = (): Snapshot => {
    if (current === undefined) throw new Error("Cannot serve: no snapshot installed yet");
    return current;
  };
  const logger = () => componentLogger("worker").with({ worker });
  // Set when the drain begins: responses then ask their client to close the connection, so a
  // keep-alive client opens its next request elsewhere instead of having it cut.
  let draining = false;
  // Checked when the response is ready, not when the request came: a request in flight when the
  // drain began is answered after it.
  const closeIfDraining = (response: Response) => draining ? closingConnection(response) : response;
  const serve: RequestHandler = (req, info) => {
    const answer = handler!(req, info);
    return answer instanceof Promise ? answer.then(closeIfDraining) : closeIfDraining(answer);
  };

  const install = (message: SnapshotMessage<D>): void => {
    if (current !== undefined && message.version <= current.version) return;
    current = options.compile(message.data, message.version);
  };

  const apply = async (message: SnapshotMessage<D>): Promise<void> => {
    try {
      install(message);
    } catch (error) {
      logger().error("Cannot apply snapshot {version}: {error}", {
        version: message.version,
        error: String(error),
      });
      scope.postMessage({
        type: "rejected",
        worker,
        version: message.version,
        message: errorText(error),
      });
      return;
    }
    // Acknowledge once new TLS handshakes see the new certificates.
    for (const https of httpsListeners) {
      if (https.refresh()) await https.settled();
    }
    scope.postMessage({ type: "applied", worker, version: message.version });
  };

  const start = async (message: Extract<ToWorker<D>, { type: "start" }>): Promise<void> => {
    worker = message.worker;
    const { config } = message;
    if (config.logging !== undefined) await configureLogging(config.logging);
    install(message.snapshot);
    handler = options.createHandler({
      snapshot,
      handlerOptions: config.handlerOptions,
      logger: componentLogger("proxy").with({ worker }),
    });
    const hostname = config.hostname ?? "0.0.0.0";
    const counted = (listener: "http" | "https") => ({
      onRequest: (delta: 1 | -1) => {
        inFlight[listener] += delta;
        options.onRequest?.(listener, delta);
      },
    });
    const clientTimeouts = {
      firstBytesTimeoutMs: config.firstBytesTimeoutMs ?? DEFAULT_FIRST_BYTES_TIMEOUT_MS,
      idleTimeoutMs: config.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS,
    };
    // The main listeners, then the same ports on each Gateway address (`--gateway-addresses`),
    // whose requests carry that address so that only its Gateway's routes answer them.
    const openHttp = (address: string, port: number, gatewayAddress?: string) => {
      const http = listening(
        "HTTP",
        address,
        port,
        () =>
          listenHttp(
            gatewayAddress === undefined ? serve : onGatewayAddress(serve, gatewayAddress),
            {
              hostname: address,
              port,
              reusePort: true,
              ...(config.connectionActivity === undefined
                ? {}
                : { activity: new ConnectionActivity(config.connectionActivity) }),
              ...counted("http"),
            },
          ),
        gatewayAddress !== undefined,
      );
      listeners.push({ name: "http", listener: http });
      return http.addr.port;
    };
    const openHttps = (address: string, port: number, gatewayAddress?: string) => {
      const https = listening(
        "HTTPS",
        address,
        port,
        () =>
          listenHttps(
            gatewayAddress === undefined ? serve : onGatewayAddress(serve, gatewayAddress),
            {
              hostname: address,
              port,
              certificates: () => snapshot().certificates,
              ...clientTimeouts,
              ...(config.maxServerNames === undefined
                ? {}
                : { maxServerNames: config.maxServerNames }),
              ...counted("https"),
              onClientTimeout: (reason: ClientTimeout, count: number) =>
                options.onClientTimeout?.("https", reason, count),
              logger: logger(),
            },
          ),
        gatewayAddress !== undefined,
      );
      listeners.push({ name: "https", listener: https });
      httpsListeners.push(https);
      return https.addr.port;
    };
    const httpPort = config.httpPort === null ? null : openHttp(hostname, config.httpPort);
    const httpsPort = config.httpsPort === null ? null : openHttps(hostname, config.httpsPort);
    for (const address of config.gatewayAddresses ?? []) {
      if (httpPort !== null) openHttp(address, httpPort, address);
      if (httpsPort !== null) openHttps(address, httpsPort, address);
    }
    for (const { name, listener } of listeners) {
      void listener.closed.then(() => {
        if (draining) return;
        // Deno closed the server on its own: this worker no longer serves its share of the
        // port. Failing makes the pool count it lost, so the pod turns unready and not live
        // and the kubelet restarts it, instead of a "ready" pod refusing connections.
        const text = `Cannot serve: the ${name.toUpperCase()} listener's server closed on its own`;
        logger().error(text);
        scope.postMessage({ type: "failed", worker, message: text });
        scope.close();
      });
    }
    scope.postMessage({ type: "listening", worker, httpPort, httpsPort });
    scope.postMessage({ type: "applied", worker, version: message.snapshot.version });
  };

  const stop = async (timeoutMs: number): Promise<void> => {
    draining = true;
    // Stop accepting first, then close WebSockets (1001) at once rather than
    // letting them hold the drain. (Deno 2.9.6's own graceful shutdown also
    // closes upgraded WebSockets, "Server shutting down"; this does not rely on it,
    // and makes the relays send the backend its close frame.) Bounded: 5 s per relay.
    const drained = Promise.all(listeners.map((l) => l.listener.shutdown({ timeoutMs })));
    const closed = closeWebSockets();
    const results = await drained;
    // A listener that cannot count what it left open (`Deno.serve`) still had its requests counted.
    const open = results.reduce(
      (sum, r, i) => sum + (r.graceful ? 0 : r.openConnections ?? inFlight[listeners[i]!.name]),
      0,
    );
    await closed;
    handler?.close?.();
    scope.postMessage({
      type: "stopped",
      worker,
      graceful: results.every((r) => r.graceful),
      openConnections: open,
    });
    scope.onmessage = null;
    scope.close();
  };

  const closeWebSockets = async (): Promise<void> => {
    try {
      await handler?.closeWebSockets?.();
    } catch (error) {
      logger().warn("Cannot close WebSockets: {error}", { error: String(error) });
    }
  };

  let queue = Promise.resolve();
  scope.onmessage = (event) => {
    const message: unknown = event.data;
    if (!isToWorker<D>(message)) return;
    if (message.type === "ping") {
      scope.postMessage({ type: "pong", worker });
      return;
    }
    if (message.type === "heap") {
      // A full collection first when the process exposes one (`--v8-flags=--expose-gc`).
      const gc = (globalThis as { gc?: () => void }).gc;
      gc?.();
      const { heapUsed, heapTotal, external } = Deno.memoryUsage();
      const heap = { heapUsed, heapTotal, external, collected: gc !== undefined };
      scope.postMessage({ type: "heap", worker, id: message.id, heap });
      return;
    }
    if (message.type === "collect") {
      // Not queued behind snapshot installs: statistics are read, never change state.
      void (async () => {
        let data: unknown = null;
        try {
          data = await options.collect?.() ?? null;
        } catch (error) {
          logger().warn("Cannot collect statistics: {error}", { error: String(error) });
        }
        scope.postMessage({ type: "collected", worker, id: message.id, data });
      })();
      return;
    }
    queue = queue.then(async () => {
      switch (message.type) {
        case "start":
          return await start(message);
        case "snapshot":
          return await apply(message);
        case "shutdown":
          return await stop(message.timeoutMs);
      }
    }).catch((error) => {
      scope.postMessage({
        type: "failed",
        worker,
        message: errorText(error),
      });
      scope.close();
    });
  };
}
