/**
 * Test support: a worker entry for `lib/workers/snapshot_publication_test.ts`.
 * Compiles {@linkcode ProbeSnapshotData} (the stub snapshot plus a poison
 * that makes chosen workers fail to compile it in a chosen way) and answers
 * every request with the snapshot version it read, the version served when it
 * ended, and which worker it was. `collect()` reports how many snapshots the
 * worker compiled and which version it serves.
 *
 * Knows the worker runtime and the stub snapshot; nothing of routing.
 *
 * @module
 */
import type { Snapshot } from "../../lib/routing/snapshot.ts";
import { compileStubSnapshot, type StubSnapshotData } from "./stub_snapshot.ts";
import { runWorker, type WorkerScope } from "../../lib/workers/worker_runtime.ts";

/** How a poisoned snapshot fails in the workers it names. */
export type Poison =
  /** `compile()` throws: the worker must reject it and keep its last good snapshot. */
  | "throw"
  /**
   * `compile()` busy-loops for `spinMs` (a hung worker: only the pool's
   * heartbeat can notice), then throws. Bounded, because Deno 2.9.6 cannot
   * stop a busy worker: it would burn a core until the test process ends.
   */
  | "spin";

/** The stub snapshot input, with an optional poison. */
export interface ProbeSnapshotData extends StubSnapshotData {
  readonly poison?: Poison;
  /** Which workers the poison affects; all of them when absent. */
  readonly poisonWorkers?: readonly number[];
  /** How long `"spin"` spins. Default 4,000 ms. */
  readonly spinMs?: number;
}

/** What `collect()` answers. */
export interface ProbeStats {
  readonly worker: number;
  /** Snapshots compiled (the start one included), poisoned ones included. */
  readonly compiles: number;
  readonly version: number;
  /** Requests inside the handler now. */
  readonly inFlight: number;
}

if ("WorkerGlobalScope" in globalThis) {
  const name = (self as unknown as { name: string }).name;
  const worker = Number(name.slice(name.lastIndexOf("-") + 1));
  let compiles = 0;
  let inFlight = 0;
  let current: (() => Snapshot) | undefined;
  runWorker<ProbeSnapshotData>(self as unknown as WorkerScope, {
    compile: (data, version) => {
      compiles++;
      const poisoned = data?.poison !== undefined &&
        (data.poisonWorkers === undefined || data.poisonWorkers.includes(worker));
      if (poisoned && data.poison === "throw") {
        throw new Error(`Cannot compile snapshot "${version}": poisoned on purpose`);
      }
      if (poisoned && data.poison === "spin") {
        const end = Date.now() + (data.spinMs ?? 4_000);
        while (Date.now() < end) compiles += 0;
        throw new Error(`Cannot compile snapshot "${version}": spun on purpose`);
      }
      return compileStubSnapshot({ ...data, version });
    },
    createHandler: ({ snapshot }) => {
      current = snapshot;
      return async (req, info) => {
        const url = new URL(req.url);
        const started = snapshot();
        const ms = Number(url.searchParams.get("ms") ?? 0);
        inFlight++;
        try {
          if (ms > 0) await new Promise((resolve) => setTimeout(resolve, ms));
        } finally {
          inFlight--;
        }
        const match = started.routes.lookup(url.host, url.pathname);
        return new Response(
          `v${started.version} ${match?.backend.key ?? "none"} ended-v${snapshot().version} ` +
            `secure=${info.secure} worker=${worker}`,
        );
      };
    },
    collect: (): ProbeStats => ({ worker, compiles, version: current?.().version ?? -1, inFlight }),
  });
}
