/**
 * The contract between origins of objects (the Kubernetes API, a directory of
 * YAML manifests) and the store they fill: a source writes whole lists and
 * single changes into a {@linkcode StoreWriter}, says when it has delivered a
 * complete first picture, and reports its state.
 *
 * Sources only deliver objects: they know nothing about routing or about
 * which changes matter.
 *
 * @module
 */
import type { ReflectorStatus } from "../k8s/reflector.ts";
import type { ObjectStore } from "../store/object_store.ts";

/** Where a source writes: the store's write methods (or a wrapper that also schedules rebuilds). */
export type StoreWriter = Pick<ObjectStore, "replace" | "upsert" | "delete">;

/** State of the Kubernetes source: one entry per reflector. */
export interface KubeSourceStatus {
  readonly type: "kubernetes";
  readonly synced: boolean;
  readonly reflectors: readonly ReflectorStatus[];
}

/** State of the manifest source. */
export interface ManifestSourceStatus {
  readonly type: "manifests";
  readonly synced: boolean;
  readonly directory: string;
  /** Manifest files currently read. */
  readonly files: number;
  /** Files whose current text cannot be loaded (their last good objects are kept). */
  readonly failedFiles: readonly string[];
  /** Complete loads of the directory. */
  readonly loads: number;
  /** Wall-clock milliseconds of the last load. */
  readonly lastLoadTime: number | undefined;
  /** Documents skipped (unknown kind, no name, …) in the files as they are now. */
  readonly skippedDocuments: number;
}

export type SourceStatus = KubeSourceStatus | ManifestSourceStatus;

/** An origin of objects. */
export interface ObjectSource {
  /** For logs: `kubernetes`, `manifests`. */
  readonly name: string;
  /** Starts delivering into `writer` (once). */
  start(writer: StoreWriter): void;
  /** Resolves once a complete first picture has been written; stays pending if stopped before. */
  readonly synced: Promise<void>;
  readonly isSynced: boolean;
  status(): SourceStatus;
  /** Stops delivering; resolves when nothing of it is left running. */
  stop(): Promise<void>;
}
