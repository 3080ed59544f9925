/**
 * What the reflector and control-plane integration tests share: a reflector
 * writing into a fresh store, timers that record the backoffs asked for, and
 * a kube-apiserver of the test's own to stop, restart or restore (the shared
 * test cluster must keep running).
 *
 * Test support only; knows the reflector's options and the cluster harness,
 * nothing of the tests.
 *
 * @module
 */
import { buildCluster, type RunningCluster, startCluster } from "../cluster/harness.ts";
import { abortableSleep } from "../../lib/k8s/backoff.ts";
import { loadKubeAccess } from "../../lib/k8s/kube_access.ts";
import { KubeClient } from "../../lib/k8s/kube_client.ts";
import {
  Reflector,
  type ReflectorClient,
  type ReflectorOptions,
  type ReflectorTimers,
} from "../../lib/k8s/reflector.ts";
import type { Resource } from "../../lib/k8s/resources.ts";
import type { Kind } from "../../lib/store/matters.ts";
import { ObjectStore } from "../../lib/store/object_store.ts";

/** Options of {@linkcode reflectInto}: a reflector's, less what it fills in. */
export type ReflectIntoOptions =
  & Omit<ReflectorOptions, "onEvent" | "client" | "resource" | "logger">
  & { logger: ReflectorOptions["logger"] };

/** A reflector of `kind` (started) writing into a fresh store. */
export function reflectInto(
  kind: Kind,
  source: { client: ReflectorClient; resource: Resource },
  options: ReflectIntoOptions,
): { reflector: Reflector; store: ObjectStore } {
  const store = new ObjectStore();
  const reflector = new Reflector({
    ...options,
    client: source.client,
    resource: source.resource,
    onEvent: (event) => {
      if (event.type === "replace") store.replace(kind, event.items, event);
      else if (event.type === "upsert") store.upsert(kind, event.object);
      else store.delete(kind, event.object);
    },
  });
  reflector.start();
  return { reflector, store };
}

/**
 * Timers that record every sleep shorter than `backoffsBelowMs` (the backoffs;
 * watch and LIST deadlines are longer) in `backoffs`.
 */
export function recordingTimers(
  backoffsBelowMs: number,
): ReflectorTimers & { backoffs: number[] } {
  const backoffs: number[] = [];
  return {
    backoffs,
    now: () => Date.now(),
    sleep: (ms, signal) => {
      if (ms < backoffsBelowMs) backoffs.push(ms);
      return abortableSleep(ms, signal);
    },
  };
}

/** A kube-apiserver of the test's own, with an admin client of it. */
export interface OwnCluster {
  readonly kubeconfig: string;
  readonly client: KubeClient;
  /** The apiserver running now (a new one after each start). */
  cluster(): RunningCluster;
  stop(): Promise<void>;
  /** Starts it again on the same port, data (unless `fresh`), certificates and tokens. */
  start(options?: { fresh?: boolean }): Promise<void>;
  /** Stops it, runs `between`, and starts it again as {@linkcode OwnCluster.start} does. */
  restart(between?: () => Promise<void>): Promise<void>;
  /** Closes the client, stops the apiserver and removes its files. */
  close(): Promise<void>;
}

/** Builds (or finds cached) and starts {@linkcode OwnCluster}. */
export async function ownCluster(): Promise<OwnCluster> {
  const bin = await buildCluster();
  let cluster: RunningCluster = await startCluster(bin, { workloads: false });
  const port = Number(new URL(cluster.server).port);
  const workDir = cluster.workDir;
  const kubeconfig = cluster.kubeconfig;
  const access = await loadKubeAccess({ kubeconfig });
  const own: OwnCluster = {
    kubeconfig,
    client: new KubeClient(access),
    cluster: () => cluster,
    stop: () => cluster.stop(),
    async start(options = {}) {
      if (options.fresh) await Deno.remove(`${workDir}/etcd`, { recursive: true });
      cluster = await startCluster(bin, { workDir, port, workloads: false });
    },
    async restart(between) {
      await cluster.stop();
      await between?.();
      await own.start();
    },
    async close() {
      access.close();
      await cluster.stop();
      await Deno.remove(workDir, { recursive: true }).catch(() => {});
    },
  };
  return own;
}
