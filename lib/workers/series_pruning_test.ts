/**
 * What the serving workers' metrics keep over a long uptime while Ingresses
 * and backends come and go (one preview Ingress per pull request, created and
 * deleted): real `sluice_worker.ts` workers, real loopback backends, the
 * metrics read back through the pool's `collect`, as `/metrics` reads them.
 *
 * @module
 */
import { assert, assertEquals } from "../../tests/support/assert.ts";
import { startEchoBackend } from "../../tests/support/echo_backend.ts";
import { within } from "../../tests/support/wait.ts";
import { closedPort } from "../../tests/support/upstream_backends.ts";
import { DataPlaneMetrics } from "../metrics/data_plane_metrics.ts";
import { type MetricsSnapshot, snapshotMetrics } from "../metrics/exposition.ts";
import { generateSelfSignedCertificate } from "../tls/self_signed.ts";
import { liveLabels, seriesPruner, type SluiceSnapshotData } from "./sluice_worker.ts";
import { startWorkerPool, type WorkerPool } from "./worker_pool.ts";

const SLUICE_WORKER = new URL("./sluice_worker.ts", import.meta.url);
const CERT = await generateSelfSignedCertificate({ hostnames: ["a.test"], commonName: "churn" });

type Translation = SluiceSnapshotData["translation"];

/** One preview environment: Ingress `preview/pr-<n>` for host `pr-<n>.test`, one endpoint. */
function preview(n: number, port: number): Pick<Translation, "routes" | "backends"> {
  const service = `preview/pr-${n}`;
  return {
    routes: [{
      host: `pr-${n}.test`,
      path: "/",
      pathType: "Prefix",
      ingress: service,
      backend: `${service}:80`,
    }],
    backends: [{ key: `${service}:80`, service, endpoints: [{ address: "127.0.0.1", port }] }],
  };
}

function translationOf(...sites: Pick<Translation, "routes" | "backends">[]): Translation {
  return {
    routes: sites.flatMap((s) => s.routes),
    backends: sites.flatMap((s) => s.backends),
    tlsHosts: [],
    certificates: [],
    issues: [],
  };
}

async function status(port: number, host: string): Promise<number> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(
      new TextEncoder().encode(`GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`),
    );
    const text = await within(10_000, `the answer for ${host}`, new Response(conn.readable).text());
    return Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
  } finally {
    try {
      conn.close();
    } catch {
      // Closed with its readable.
    }
  }
}

/** Distinct values of `label` among the samples of `metric` (all workers). */
async function labelValues(
  pool: WorkerPool<SluiceSnapshotData>,
  metric: string,
  label: string,
): Promise<Set<string>> {
  const parts = (await pool.collect({ timeoutMs: 5_000 })) as MetricsSnapshot[];
  const values = new Set<string>();
  for (const part of parts) {
    for (const family of part) {
      if (family.name !== metric) continue;
      for (const sample of family.values) {
        const value = (sample.labels as Record<string, string | number | undefined>)[label];
        if (value !== undefined) values.add(String(value));
      }
    }
  }
  return values;
}

// Was a bug: the series of every Ingress, rule host and backend that ever served a request stayed
// in every worker's registry for good; with one Ingress per pull request, /metrics grew forever.
Deno.test("a worker drops the request and upstream-error series of Ingresses and backends no longer routed", async () => {
  const echo = await startEchoBackend({ name: "preview" });
  const dead = closedPort();
  const pool = await startWorkerPool<SluiceSnapshotData>({
    count: 1,
    module: SLUICE_WORKER,
    config: {
      hostname: "127.0.0.1",
      httpPort: 0,
      httpsPort: null,
      handlerOptions: { accessLog: false },
    },
    snapshot: { version: 1, data: { translation: translationOf(), defaultCertificate: CERT } },
    heartbeatMs: 0,
  });
  try {
    const port = pool.httpPort!;
    const keep = preview(0, echo.port);
    let version = 1;
    for (let n = 1; n <= 12; n++) {
      // PR n opens (its app refuses connections at first: connect errors), PR n-1 closes.
      const broken = preview(n, dead);
      let result = await pool.publish(++version, {
        translation: translationOf(keep, broken),
        defaultCertificate: CERT,
      });
      assertEquals(result.rejected, []);
      assertEquals(await status(port, `pr-${n}.test`), 502);
      result = await pool.publish(++version, {
        translation: translationOf(keep, preview(n, echo.port)),
        defaultCertificate: CERT,
      });
      assertEquals(result.rejected, []);
      assertEquals(await status(port, `pr-${n}.test`), 200);
      assertEquals(await status(port, "pr-0.test"), 200);
    }
    const result = await pool.publish(++version, {
      translation: translationOf(keep, preview(12, echo.port)),
      defaultCertificate: CERT,
    });
    assertEquals(result.rejected, []);
    assertEquals(
      [...await labelValues(pool, "sluice_requests_total", "ingress")].sort(),
      ["preview/pr-0", "preview/pr-12"],
    );
    assertEquals(
      [...await labelValues(pool, "sluice_request_duration_seconds", "host")].sort(),
      ["pr-0.test", "pr-12.test"],
    );
    assertEquals(
      [...await labelValues(pool, "sluice_upstream_connect_errors_total", "backend")].sort(),
      ["preview/pr-12:80"],
    );
    // Series still routed keep their counts (a counter reset would be a lie).
    const parts = (await pool.collect({ timeoutMs: 5_000 })) as MetricsSnapshot[];
    const kept = parts.flatMap((p) => p).find((f) => f.name === "sluice_requests_total")!
      .values.find((v) => v.labels["ingress"] === "preview/pr-0");
    assert(kept !== undefined && kept.value === 12, `pr-0 keeps its 12 requests: ${kept?.value}`);
  } finally {
    await pool.shutdown({ timeoutMs: 2_000 });
    await echo.close();
  }
});

Deno.test("seriesPruner() prunes at most once per interval as snapshots come, and before a scrape when one is owed", async () => {
  let now = 0;
  const metrics = new DataPlaneMetrics();
  const pruner = seriesPruner(metrics, { intervalMs: 10_000, now: () => now });
  const serve = (n: number) =>
    metrics.request({
      ingress: `preview/pr-${n}`,
      host: `pr-${n}.test`,
      method: "GET",
      status: 200,
      durationSeconds: 0,
    });
  const ingresses = async () => {
    const family = (await snapshotMetrics(metrics.registry))
      .find((f) => f.name === "sluice_requests_total")!;
    return family.values.map((v) => v.labels["ingress"]).sort();
  };
  serve(1);
  serve(2);
  await pruner.installed(liveLabels(translationOf(preview(2, 1))));
  assertEquals(await ingresses(), ["preview/pr-2"]);
  // A second snapshot within the interval: owed, not paid yet.
  now += 1_000;
  await pruner.installed(liveLabels(translationOf(preview(3, 1))));
  assertEquals(await ingresses(), ["preview/pr-2"]);
  await pruner.beforeScrape();
  assertEquals(await ingresses(), []);
  // Nothing owed: a scrape costs no pass (pr-4 stays until a snapshot drops it).
  serve(4);
  await pruner.beforeScrape();
  assertEquals(await ingresses(), ["preview/pr-4"]);
  now += 10_000;
  await pruner.installed(liveLabels(translationOf(preview(5, 1))));
  assertEquals(await ingresses(), []);
});
