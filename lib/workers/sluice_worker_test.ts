/**
 * `observeRequest()`: how the worker labels and counts a request in its metrics
 * (by the rule's host, errors by the backend key, a retry after a reset as a
 * retry).
 *
 * @module
 */
import { assert, assertStringIncludes } from "../../tests/support/assert.ts";
import { DataPlaneMetrics } from "../metrics/data_plane_metrics.ts";
import { renderMetrics, snapshotMetrics } from "../metrics/exposition.ts";
import type { AccessLogEntry } from "../proxy/proxy_handler.ts";
import { observeRequest } from "./sluice_worker.ts";

const ENTRY: AccessLogEntry = {
  requestId: "r1",
  method: "GET",
  host: "random-1234.shop.example",
  ruleHost: "*.shop.example",
  target: "/",
  secure: false,
  remoteAddress: "127.0.0.1",
  clientIp: "127.0.0.1",
  status: 502,
  bytes: 0,
  durationMs: 3,
  ingress: "shop/web",
  service: "shop/web",
  backend: "shop/web:8080",
  endpoint: "10.0.0.1:8080",
  attempts: 2,
  connectFailures: 2,
  error: "connect-failed",
};

Deno.test("observeRequest() labels requests by the rule's host and errors by the backend key", async () => {
  const metrics = new DataPlaneMetrics();
  observeRequest(metrics, ENTRY);
  const text = await renderMetrics([await snapshotMetrics(metrics.registry)]);
  assertStringIncludes(text, 'host="*.shop.example"');
  assert(!text.includes("random-1234"), "the client's Host must never become a label");
  assertStringIncludes(text, 'sluice_upstream_connect_errors_total{backend="shop/web:8080"} 2');
  assertStringIncludes(text, 'sluice_upstream_retries_total{backend="shop/web:8080"} 1');
});

// Was a bug: every attempt but the last counted as a connect error, also after a GET was retried
// because its endpoint reset the connection before answering (connected fine).
Deno.test("observeRequest() counts a retry after a reset as a retry, not as a connect error", async () => {
  const metrics = new DataPlaneMetrics();
  const { connectFailures: _, error: __, ...served } = ENTRY;
  observeRequest(metrics, { ...served, status: 200 });
  const text = await renderMetrics([await snapshotMetrics(metrics.registry)]);
  assertStringIncludes(text, 'sluice_upstream_retries_total{backend="shop/web:8080"} 1');
  assert(
    !text.includes('sluice_upstream_connect_errors_total{backend="shop/web:8080"}'),
    "no connect error was counted",
  );
});
