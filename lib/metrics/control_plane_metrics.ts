/**
 * The control plane's Prometheus metrics: snapshot builds and their
 * duration, the published configuration version, the last successful sync
 * and the watch restarts and relists per kind, issues by kind, and the
 * expiry of every served certificate per host.
 *
 * @module
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { Issue } from "../translate/issues.ts";

/** A served certificate's expiry. */
export interface CertificateExpiry {
  readonly host: string;
  /** The Secret, `namespace/name`. */
  readonly secret: string;
  /** Milliseconds since the epoch. */
  readonly notAfter: number;
}

/** The control plane's metrics and the registry that exposes them. */
export class ControlPlaneMetrics {
  readonly registry: Registry;
  readonly #builds: Counter<"result">;
  readonly #buildDuration: Histogram;
  readonly #version: Gauge;
  readonly #lastSync: Gauge<"kind">;
  readonly #restarts: Counter<"kind">;
  readonly #relists: Counter<"kind">;
  readonly #malformed: Counter<"kind">;
  readonly #issues: Gauge<"kind">;
  readonly #certExpiry: Gauge<"host" | "secret">;

  constructor(registry: Registry = new Registry()) {
    this.registry = registry;
    const registers = [registry];
    this.#builds = new Counter({
      name: "sluice_snapshot_builds_total",
      help: "Routing snapshot builds, by result (published, unchanged, failed)",
      labelNames: ["result"],
      registers,
    });
    this.#buildDuration = new Histogram({
      name: "sluice_snapshot_build_duration_seconds",
      help: "Time to translate the store into a routing snapshot",
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers,
    });
    this.#version = new Gauge({
      name: "sluice_config_version",
      help: "Version of the routing snapshot being served",
      registers,
      aggregator: "max",
    });
    this.#lastSync = new Gauge({
      name: "sluice_last_successful_sync_timestamp_seconds",
      help: "When each kind was last listed or watched successfully, seconds since the epoch",
      labelNames: ["kind"],
      registers,
      aggregator: "max",
    });
    this.#restarts = new Counter({
      name: "sluice_watch_restarts_total",
      help: "Watch streams reopened after they ended or failed, by kind",
      labelNames: ["kind"],
      registers,
    });
    this.#relists = new Counter({
      name: "sluice_watch_relists_total",
      help: "Full lists after a watch expired (410 Gone), by kind",
      labelNames: ["kind"],
      registers,
    });
    this.#malformed = new Counter({
      name: "sluice_watch_malformed_lines_total",
      help: "Watch stream lines that could not be understood, by kind",
      labelNames: ["kind"],
      registers,
    });
    this.#issues = new Gauge({
      name: "sluice_issues",
      help: "Problems found in users' objects by the last translation, by object kind",
      labelNames: ["kind"],
      registers,
      aggregator: "max",
    });
    this.#certExpiry = new Gauge({
      name: "sluice_certificate_expiry_timestamp_seconds",
      help: "notAfter of the certificate served for each host, seconds since the epoch",
      labelNames: ["host", "secret"],
      registers,
      aggregator: "max",
    });
  }

  build(result: "published" | "unchanged" | "failed", durationSeconds: number): void {
    this.#builds.inc({ result });
    this.#buildDuration.observe(durationSeconds);
  }

  published(
    version: number,
    issues: readonly Issue[],
    certificates: readonly CertificateExpiry[],
  ): void {
    this.#version.set(version);
    this.#issues.reset();
    const byKind = new Map<string, number>();
    for (const i of issues) byKind.set(i.kind, (byKind.get(i.kind) ?? 0) + 1);
    for (const [kind, n] of byKind) this.#issues.set({ kind }, n);
    this.#certExpiry.reset();
    for (const c of certificates) {
      this.#certExpiry.set({ host: c.host, secret: c.secret }, Math.floor(c.notAfter / 1000));
    }
  }

  synced(kind: string, atMs: number): void {
    this.#lastSync.set({ kind }, Math.floor(atMs / 1000));
  }

  restart(kind: string): void {
    this.#restarts.inc({ kind });
  }

  relist(kind: string): void {
    this.#relists.inc({ kind });
  }

  malformed(kind: string): void {
    this.#malformed.inc({ kind });
  }
}
