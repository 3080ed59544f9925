import { assert, assertStringIncludes } from "../../tests/support/assert.ts";
import { ControlPlaneMetrics } from "./control_plane_metrics.ts";
import { DataPlaneMetrics, statusClass } from "./data_plane_metrics.ts";
import { renderMetrics, snapshotMetrics } from "./exposition.ts";

Deno.test("renderMetrics() sums two workers' request counters and histograms", async () => {
  const a = new DataPlaneMetrics();
  const b = new DataPlaneMetrics();
  const ok = {
    ingress: "shop/web",
    host: "shop.example.com",
    method: "GET",
    status: 200,
    durationSeconds: 0.004,
  };
  a.request(ok);
  a.request(ok);
  b.request(ok);
  b.request({ ...ok, status: 503, method: "BREW" });
  const text = await renderMetrics([
    await snapshotMetrics(a.registry),
    await snapshotMetrics(b.registry),
  ]);
  assertStringIncludes(
    text,
    'sluice_requests_total{ingress="shop/web",host="shop.example.com",status="2xx",method="GET"} 3',
  );
  assertStringIncludes(
    text,
    'sluice_requests_total{ingress="shop/web",host="shop.example.com",status="5xx",method="OTHER"} 1',
  );
  assertStringIncludes(
    text,
    'sluice_request_duration_seconds_bucket{le="0.005",ingress="shop/web",host="shop.example.com"} 4',
  );
  assertStringIncludes(
    text,
    'sluice_request_duration_seconds_count{ingress="shop/web",host="shop.example.com"} 4',
  );
});

Deno.test("ControlPlaneMetrics exposes version, issues by kind and certificate expiry, replacing old series", async () => {
  const m = new ControlPlaneMetrics({
    watches: () => [
      {
        kind: "Ingress",
        lastSyncTime: Date.UTC(2026, 0, 1),
        restarts: 2,
        relists: 1,
        malformed: 0,
      },
      {
        kind: "Ingress",
        lastSyncTime: Date.UTC(2025, 0, 1),
        restarts: 1,
        relists: 0,
        malformed: 3,
      },
    ],
  });
  const issue = { kind: "Ingress", namespace: "a", name: "b", field: "spec", message: "x" };
  m.published(3, [issue, issue, { ...issue, kind: "Secret" }], [
    { host: "shop.example.com", secret: "shop/tls", notAfter: Date.UTC(2030, 0, 1) },
  ]);
  m.published(4, [issue], [{
    host: "api.example.com",
    secret: "api/tls",
    notAfter: Date.UTC(2031, 0, 1),
  }]);
  m.build("published", 0.02);
  const text = await renderMetrics([await snapshotMetrics(m.registry)]);
  assertStringIncludes(text, "sluice_config_version 4");
  assertStringIncludes(text, 'sluice_issues{kind="Ingress"} 1');
  assert(!text.includes('sluice_issues{kind="Secret"}'), "stale issue series removed");
  assertStringIncludes(
    text,
    `sluice_certificate_expiry_timestamp_seconds{host="api.example.com",secret="api/tls"} ${
      Date.UTC(2031, 0, 1) / 1000
    }`,
  );
  assert(!text.includes("shop.example.com"), "stale certificate series removed");
  assertStringIncludes(text, 'sluice_snapshot_builds_total{result="published"} 1');
  assertStringIncludes(text, 'sluice_watch_relists_total{kind="Ingress"} 1');
  assertStringIncludes(text, 'sluice_watch_restarts_total{kind="Ingress"} 3');
  assertStringIncludes(text, 'sluice_watch_malformed_lines_total{kind="Ingress"} 3');
  assertStringIncludes(
    text,
    `sluice_last_successful_sync_timestamp_seconds{kind="Ingress"} ${Date.UTC(2026, 0, 1) / 1000}`,
  );
});

Deno.test("statusClass() groups statuses and names anything else other", () => {
  assert(
    [statusClass(101), statusClass(204), statusClass(308), statusClass(404), statusClass(504)]
      .join() ===
      "1xx,2xx,3xx,4xx,5xx",
  );
  assert(statusClass(0) === "other" && statusClass(999) === "other");
});
