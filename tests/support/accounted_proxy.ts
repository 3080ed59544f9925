/**
 * Test support for what the access log and the data plane's metrics say: the
 * real proxy handler on `Deno.serve` routing `BOOKS_HOST` to given endpoints, its
 * entries run through the worker's own `accessLogFields()` and
 * `observeRequest()` into {@linkcode Books} a test reads, and a loopback
 * backend that records every request head it answers.
 *
 * @module
 */
import type { AccessRecord } from "../../lib/log/access_log.ts";
import type { AccessLogEntry, ProxyHandlerOptions } from "../../lib/proxy/proxy_handler.ts";
import type { Endpoint } from "../../lib/routing/snapshot.ts";
import { DataPlaneMetrics } from "../../lib/metrics/data_plane_metrics.ts";
import { startProxy } from "./proxy_harness.ts";
import { accessLogFields, observeRequest } from "../../lib/workers/sluice_worker.ts";
import { snapshotMetrics } from "../../lib/metrics/exposition.ts";
import { ok, startBackend, type UpstreamBackend } from "./upstream_backends.ts";

export const BOOKS_HOST = "shop.example.com";

export interface Books {
  readonly port: number;
  /** Access-log records, as the worker writes them. */
  readonly lines: AccessRecord[];
  readonly entries: AccessLogEntry[];
  /** A sample's value (0 when absent), labels matched as a subset. */
  sample(name: string, labels?: Record<string, string>): Promise<number>;
}

export async function withBooks(
  endpoints: readonly Endpoint[],
  fn: (books: Books) => Promise<void>,
  options: Partial<ProxyHandlerOptions> & { tls?: boolean } = {},
): Promise<void> {
  const metrics = new DataPlaneMetrics();
  const lines: AccessRecord[] = [];
  const entries: AccessLogEntry[] = [];
  const { tls = false, ...rest } = options;
  const proxy = await startProxy({
    routes: [{ host: BOOKS_HOST, endpoints, tls, ingress: "shop/web", service: "shop/web" }],
    readTimeoutMs: 5_000,
    ...rest,
    onAccess(entry) {
      entries.push(entry);
      observeRequest(metrics, entry);
      lines.push(accessLogFields(entry));
    },
  });
  try {
    await fn({
      port: proxy.port,
      lines,
      entries,
      async sample(name, labels = {}) {
        const snap = await snapshotMetrics(metrics.registry);
        let total = 0;
        for (const family of snap) {
          for (const value of family.values) {
            const metricName = (value as { metricName?: string }).metricName ?? family.name;
            if (metricName !== name) continue;
            const l = value.labels as Record<string, string | number>;
            if (Object.entries(labels).every(([k, v]) => String(l[k]) === v)) total += value.value;
          }
        }
        return total;
      },
    });
  } finally {
    await proxy.close();
  }
}

/** The request id field a backend saw in `head`. */
export function requestIdOf(head: string): string {
  return /\r\nx-request-id:\s*([^\r]*)/i.exec(head)?.[1] ?? "";
}

/** A backend that answers `ok(body)` and records each request head. */
export function recordingBackend(body: string): UpstreamBackend & { heads: string[] } {
  const heads: string[] = [];
  const backend = startBackend(async (conn) => {
    for (;;) {
      const head = await conn.readHead();
      if (head === null) return;
      heads.push(head);
      await conn.write(ok(body));
    }
  });
  return Object.assign(backend, { heads });
}
