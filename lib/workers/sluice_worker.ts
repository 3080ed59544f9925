/**
 * Sluice's worker entry module: what `WorkerPool` loads in each serving
 * worker. Compiles posted translations with the routing model's
 * `buildSnapshot()` and serves them with the proxy handler
 * (`createProxyHandler`), configured by `WorkerConfig.handlerOptions`
 * ({@linkcode SluiceHandlerOptions}).
 *
 * @module
 */
import { buildSnapshot } from "../routing/snapshot_builder.ts";
import type { ServingCertificate, Snapshot } from "../routing/snapshot.ts";
import { createProxyHandler, type ProxyHandlerOptions } from "../proxy/proxy_handler.ts";
import type { Translation } from "../translate/translation.ts";
import { runWorker, type WorkerScope } from "./worker_runtime.ts";

/** The snapshot input the control plane posts to Sluice's workers. */
export interface SluiceSnapshotData {
  readonly translation: Translation;
  /** The self-signed certificate generated at start (`lib/tls/self_signed.ts`). */
  readonly defaultCertificate: ServingCertificate;
}

/** Compiles a posted {@linkcode SluiceSnapshotData} into a snapshot. */
export function compileSluiceSnapshot(data: SluiceSnapshotData, version: number): Snapshot {
  return buildSnapshot(data.translation, { version, defaultCertificate: data.defaultCertificate });
}

/**
 * The proxy settings a worker receives: the plain-data part of
 * `ProxyHandlerOptions` (no functions, no pool), as parsed from the command line.
 */
export type SluiceHandlerOptions = Omit<
  ProxyHandlerOptions,
  "snapshot" | "logger" | "onAccess" | "pool" | "newRequestId"
>;

if ("WorkerGlobalScope" in globalThis) {
  runWorker<SluiceSnapshotData>(self as unknown as WorkerScope, {
    compile: compileSluiceSnapshot,
    createHandler: ({ snapshot, handlerOptions, logger }) =>
      createProxyHandler({
        ...(handlerOptions as SluiceHandlerOptions | undefined),
        snapshot,
        logger,
      }),
  });
}
