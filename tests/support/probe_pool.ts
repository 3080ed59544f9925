/**
 * Test support for the worker pool tests: a pool of probe workers
 * (`snapshot_probe_worker.ts`) serving {@linkcode ProbeSnapshotData} on a
 * shared port, the snapshot data they compile, what each worker reports, and
 * plain `GET`s on fresh connections.
 *
 * @module
 */
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";
import type { ProbeSnapshotData, ProbeStats } from "./snapshot_probe_worker.ts";
import { within } from "./wait.ts";
import { startWorkerPool, type WorkerPool } from "../../lib/workers/worker_pool.ts";
import type { WorkerConfig } from "../../lib/workers/protocol.ts";

export const PROBE = new URL("./snapshot_probe_worker.ts", import.meta.url);

export const [certOld, certNew] = await Promise.all([
  generateSelfSignedCertificate({ hostnames: ["a.test"], commonName: "old" }),
  generateSelfSignedCertificate({ hostnames: ["a.test"], commonName: "new" }),
]);

export function probe(backend: string, extra: Partial<ProbeSnapshotData> = {}): ProbeSnapshotData {
  return {
    version: 0,
    routes: [{ host: "a.test", path: "/", backend: { key: backend, service: "", endpoints: [] } }],
    certificates: [],
    defaultCertificate: certOld,
    ...extra,
  };
}

/** The body of one `GET path` on a fresh connection ("" when the connection closed without one). */
export async function probeGet(port: number, path = "/", timeoutMs = 10_000): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(
      new TextEncoder().encode(`GET ${path} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n`),
    );
    const text = await within(
      timeoutMs,
      `the answer to ${path}`,
      new Response(conn.readable).text(),
    );
    return text.slice(text.indexOf("\r\n\r\n") + 4);
  } finally {
    try {
      conn.close();
    } catch {
      // Closed with its readable.
    }
  }
}

export async function withProbePool(
  count: number,
  fn: (pool: WorkerPool<ProbeSnapshotData>, port: number) => Promise<void>,
  options: { config?: Partial<WorkerConfig>; heartbeatMs?: number } = {},
): Promise<void> {
  const pool = await startWorkerPool<ProbeSnapshotData>({
    count,
    module: PROBE,
    config: { hostname: "127.0.0.1", httpPort: 0, httpsPort: null, ...options.config },
    snapshot: { version: 1, data: probe("start") },
    heartbeatMs: options.heartbeatMs ?? 0,
  });
  try {
    await fn(pool, pool.httpPort!);
  } finally {
    await pool.shutdown({ timeoutMs: 2_000 });
  }
}

export async function probeStats(pool: WorkerPool<ProbeSnapshotData>): Promise<ProbeStats[]> {
  const all = (await pool.collect({ timeoutMs: 5_000 })) as ProbeStats[];
  return all.sort((a, b) => a.worker - b.worker);
}

/** `n` requests on fresh connections (the kernel spreads them over the workers). */
export async function probeBodies(port: number, n: number, path = "/"): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(await probeGet(port, path));
  return out;
}
