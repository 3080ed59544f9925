/**
 * What the data plane's metrics keep over a long uptime while Ingresses, rule
 * hosts and backends churn: series of what is no longer routed are dropped
 * when a snapshot is installed ({@linkcode DataPlaneMetrics.retain}), and
 * nothing else moves.
 *
 * @module
 */
import { assertEquals } from "../../tests/support/assert.ts";
import { DataPlaneMetrics, type LiveLabels } from "./data_plane_metrics.ts";
import { type MetricsSnapshot, snapshotMetrics } from "./exposition.ts";

/** Series per metric name (histograms: one per label set, not per bucket). */
async function seriesCounts(metrics: DataPlaneMetrics): Promise<Record<string, number>> {
  const snap: MetricsSnapshot = await snapshotMetrics(metrics.registry);
  const out: Record<string, number> = {};
  for (const family of snap) {
    const sets = new Set<string>();
    for (const v of family.values) {
      const { le: _, ...labels } = v.labels as Record<string, unknown>;
      sets.add(JSON.stringify(labels));
    }
    out[family.name] = family.values.length === 0 ? 0 : sets.size;
  }
  return out;
}

function value(
  snap: MetricsSnapshot,
  name: string,
  labels: Record<string, string>,
): number | undefined {
  for (const family of snap) {
    for (const v of family.values) {
      const metricName = (v as { metricName?: string }).metricName ?? family.name;
      if (metricName !== name) continue;
      const l = v.labels as Record<string, string | number>;
      if (Object.entries(labels).every(([k, x]) => String(l[k]) === x)) return v.value;
    }
  }
  return undefined;
}

function prServed(metrics: DataPlaneMetrics, n: number): void {
  for (const [method, status] of [["GET", 200], ["POST", 502], ["BREW", 404]] as const) {
    metrics.request({
      ingress: `preview/pr-${n}`,
      host: `pr-${n}.example.com`,
      method,
      status,
      durationSeconds: 0.01,
    });
  }
  metrics.connectError(`preview/pr-${n}:80`);
  metrics.retry(`preview/pr-${n}:80`);
}

function livePr(...ns: number[]): LiveLabels {
  return {
    routes: ns.map((n) => ({ ingress: `preview/pr-${n}`, host: `pr-${n}.example.com` })),
    backends: ns.map((n) => `preview/pr-${n}:80`),
  };
}

// Was a bug: a series, once made, stayed for the worker's lifetime: with one Ingress per pull
// request (and its backend), every worker's registry and /metrics grew without bound.
Deno.test("retain() keeps the series count bounded across 500 Ingresses created and deleted", async () => {
  const metrics = new DataPlaneMetrics();
  for (let n = 1; n <= 500; n++) {
    prServed(metrics, n);
    // The next snapshot: PR n-1 merged and its preview Ingress deleted.
    await metrics.retain(livePr(n));
  }
  const counts = await seriesCounts(metrics);
  assertEquals(counts["sluice_requests_total"], 3);
  assertEquals(counts["sluice_request_duration_seconds"], 1);
  assertEquals(counts["sluice_upstream_connect_errors_total"], 1);
  assertEquals(counts["sluice_upstream_retries_total"], 1);
});

Deno.test("retain() keeps the counts of series still routed and Sluice's own answers, and reports what it dropped", async () => {
  const metrics = new DataPlaneMetrics();
  prServed(metrics, 1);
  prServed(metrics, 1);
  prServed(metrics, 2);
  metrics.request({ ingress: "", host: "", method: "GET", status: 404, durationSeconds: 0 });
  // 3 request series + 1 duration series + 1 connect-error + 1 retry series of PR 2.
  assertEquals(await metrics.retain(livePr(1)), 6);
  const snap = await snapshotMetrics(metrics.registry);
  assertEquals(value(snap, "sluice_requests_total", { ingress: "preview/pr-1", method: "GET" }), 2);
  assertEquals(
    value(snap, "sluice_request_duration_seconds_count", { ingress: "preview/pr-1" }),
    6,
  );
  assertEquals(
    value(snap, "sluice_upstream_connect_errors_total", { backend: "preview/pr-1:80" }),
    2,
  );
  assertEquals(value(snap, "sluice_requests_total", { ingress: "", status: "4xx" }), 1);
  assertEquals(value(snap, "sluice_requests_total", { ingress: "preview/pr-2" }), undefined);
  assertEquals(
    value(snap, "sluice_upstream_retries_total", { backend: "preview/pr-2:80" }),
    undefined,
  );
});

Deno.test("retain() drops an Ingress's series for a rule host it no longer has, and keeps the others", async () => {
  const metrics = new DataPlaneMetrics();
  for (const host of ["old.example.com", "new.example.com"]) {
    metrics.request({ ingress: "shop/web", host, method: "GET", status: 200, durationSeconds: 0 });
  }
  await metrics.retain({
    routes: [{ ingress: "shop/web", host: "new.example.com" }],
    backends: [],
  });
  const snap = await snapshotMetrics(metrics.registry);
  assertEquals(value(snap, "sluice_requests_total", { host: "old.example.com" }), undefined);
  assertEquals(
    value(snap, "sluice_request_duration_seconds_count", { host: "old.example.com" }),
    undefined,
  );
  assertEquals(value(snap, "sluice_requests_total", { host: "new.example.com" }), 1);
});

Deno.test("overlapping retain() calls never drop what the newest snapshot routes", async () => {
  const metrics = new DataPlaneMetrics();
  prServed(metrics, 1);
  prServed(metrics, 2);
  // Snapshot A (without PR 2) is still pruning when snapshot B (with PR 2 again) is installed:
  // B decides, so PR 2's counters are not reset under its feet.
  const older = metrics.retain(livePr(1));
  const newer = metrics.retain(livePr(1, 2));
  await Promise.all([older, newer]);
  const snap = await snapshotMetrics(metrics.registry);
  assertEquals(value(snap, "sluice_requests_total", { ingress: "preview/pr-2", method: "GET" }), 1);
  assertEquals(
    value(snap, "sluice_upstream_connect_errors_total", { backend: "preview/pr-2:80" }),
    1,
  );
});
