/**
 * The main thread's Prometheus metrics: snapshot builds and their
 * duration, the published configuration version, the last successful sync
 * and the watch restarts and relists per kind, issues by kind, the expiry of
 * every served certificate per host.
 *
 * @module
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { Issue } from "../translate/issues.ts";
import { CLIENT_TIMEOUTS_METRIC } from "./data_plane_metrics.ts";

/** A served certificate's expiry. */
export interface CertificateExpiry {
  readonly host: string;
  /** The Secret, `namespace/name`. */
  readonly secret: string;
  /** Milliseconds since the epoch. */
  readonly notAfter: number;
}

/** One watch's counters, as the reflectors keep them (cumulative). */
export interface WatchStats {
  readonly kind: string;
  readonly lastSyncTime: number | undefined;
  readonly restarts: number;
  readonly relists: number;
  readonly malformed: number;
}

/** Options of {@linkcode ControlPlaneMetrics}. */
export interface ControlPlaneMetricsOptions {
  readonly registry?: Registry;
  /** Read at every scrape: the reflectors' counters (several per kind when namespaces are watched separately). */
  readonly watches?: () => readonly WatchStats[];
  /**
   * Read at every scrape: the controller's cumulative rebuild outcomes. When
   * given, `sluice_snapshot_builds_total` follows it (and `build()` only
   * observes durations).
   */
  readonly builds?: () => BuildStats;
  /**
   * Read at every scrape: plain-HTTP connections the main thread's reaper
   * closed, by reason (cumulative). Summed with the workers' counts of the
   * same metric.
   */
  readonly clientTimeouts?: () => Readonly<Record<string, number>>;
}

/** Cumulative rebuild outcomes, as the controller counts them. */
export interface BuildStats {
  /** Translations published. */
  readonly published: number;
  /** Rebuilds whose translation equalled the one being served. */
  readonly unchanged: number;
  /** Rebuilds that failed to translate or to publish. */
  readonly failed: number;
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
  readonly #countBuilds: boolean;

  constructor(options: ControlPlaneMetricsOptions = {}) {
    const registry = options.registry ?? new Registry();
    this.registry = registry;
    const registers = [registry];
    const watches = options.watches ?? (() => []);
    const builds = options.builds;
    this.#countBuilds = builds === undefined;
    // Reflectors keep cumulative counts; these metrics read them at scrape time.
    const sumBy = (pick: (w: WatchStats) => number) => {
      const sums = new Map<string, number>();
      for (const w of watches()) sums.set(w.kind, (sums.get(w.kind) ?? 0) + pick(w));
      return sums;
    };
    this.#builds = new Counter({
      name: "sluice_snapshot_builds_total",
      help: "Routing snapshot builds, by result (published, unchanged, failed)",
      labelNames: ["result"],
      registers,
      ...(builds === undefined ? {} : {
        collect(this: Counter<"result">) {
          const b = builds();
          this.reset();
          this.inc({ result: "published" }, b.published);
          this.inc({ result: "unchanged" }, b.unchanged);
          this.inc({ result: "failed" }, b.failed);
        },
      }),
    });
    const clientTimeouts = options.clientTimeouts;
    if (clientTimeouts !== undefined) {
      new Counter({
        name: CLIENT_TIMEOUTS_METRIC.name,
        help: CLIENT_TIMEOUTS_METRIC.help,
        labelNames: ["listener", "reason"],
        registers,
        collect() {
          this.reset();
          for (const [reason, n] of Object.entries(clientTimeouts())) {
            this.inc({ listener: "http", reason }, n);
          }
        },
      });
    }
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
      collect() {
        const latest = new Map<string, number>();
        for (const w of watches()) {
          if (w.lastSyncTime === undefined) continue;
          latest.set(w.kind, Math.max(latest.get(w.kind) ?? 0, w.lastSyncTime));
        }
        for (const [kind, ms] of latest) this.set({ kind }, Math.floor(ms / 1000));
      },
    });
    this.#restarts = new Counter({
      name: "sluice_watch_restarts_total",
      help: "Watch streams reopened after a failure, by kind",
      labelNames: ["kind"],
      registers,
      collect() {
        this.reset();
        for (const [kind, n] of sumBy((w) => w.restarts)) this.inc({ kind }, n);
      },
    });
    this.#relists = new Counter({
      name: "sluice_watch_relists_total",
      help: "Lists done again because a watch or continue token expired (410 Gone), by kind",
      labelNames: ["kind"],
      registers,
      collect() {
        this.reset();
        for (const [kind, n] of sumBy((w) => w.relists)) this.inc({ kind }, n);
      },
    });
    this.#malformed = new Counter({
      name: "sluice_watch_malformed_lines_total",
      help: "Watch stream lines that could not be understood, by kind",
      labelNames: ["kind"],
      registers,
      collect() {
        this.reset();
        for (const [kind, n] of sumBy((w) => w.malformed)) this.inc({ kind }, n);
      },
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

  /** Observes one build's duration (and counts it, unless `builds` was given). */
  build(result: "published" | "unchanged" | "failed", durationSeconds: number): void {
    if (this.#countBuilds) this.#builds.inc({ result });
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
}
