/**
 * The Prometheus text exposition of several registries at once: the control
 * plane's own and one per serving worker (each Web Worker has its own
 * isolate and so its own registry). Counters and histograms are summed
 * across workers; gauges use the aggregation declared on the metric (sum by
 * default).
 *
 * @module
 */
import {
  AggregatorRegistry,
  type MetricObjectWithValues,
  type MetricValue,
  Registry,
} from "prom-client";

/** A registry's metrics as plain, structured-clonable data (what a worker posts). */
export type MetricsSnapshot = MetricObjectWithValues<MetricValue<string>>[];

/** The content type of the text exposition format. */
export const METRICS_CONTENT_TYPE: string = Registry.PROMETHEUS_CONTENT_TYPE;

/** Reads a registry as plain data. */
export async function snapshotMetrics(registry: Registry): Promise<MetricsSnapshot> {
  return await registry.getMetricsAsJSON() as MetricsSnapshot;
}

/** Renders several registries' metrics as one exposition, aggregating same-named metrics. */
export async function renderMetrics(parts: readonly MetricsSnapshot[]): Promise<string> {
  const aggregated = AggregatorRegistry.aggregate(
    parts.map((p) => p as MetricObjectWithValues<MetricValue<string>>[]),
  );
  return await aggregated.metrics();
}
