/**
 * The graceful shutdown sequence of a running Sluice: hand the Lease over at
 * once, keep serving (and following the sources) for the delay, drain the
 * workers, then stop what is left within a short bound so the exit stays
 * inside the pod's grace period.
 *
 * Knows the order of things, not how each part stops: the parts are passed in.
 *
 * @module
 */
import { settlesWithin } from "../timers/timers.ts";
import type { PoolShutdownResult } from "../workers/worker_pool.ts";

/** After the drain, how long the watches and the Lease release may take before Sluice exits anyway. */
export const STOP_AFTER_DRAIN_MS = 2_000;

/** What {@linkcode shutDown} stops, in the order it stops them. */
export interface ShutdownParts {
  /** Leader election, status and Events: stopped first, awaited after the drain. */
  readonly publishing?: { stop(): Promise<void> } | undefined;
  /** The serving workers, drained after the delay. */
  readonly pool: { shutdown(options: { timeoutMs: number }): Promise<PoolShutdownResult> };
  /** Plain HTTP's client timeouts, stopped once the workers are. */
  readonly reaper?: { stop(): Promise<void> } | undefined;
  /** The watches: they run until the drain is over (endpoints still change meanwhile). */
  readonly controller: { stop(): Promise<void> };
  /** The Kubernetes API access (its HTTP client), closed last but the health port. */
  readonly access?: { close(): void } | undefined;
  /** The health port, answering (live, not ready) until the end. */
  readonly health: { shutdown(): Promise<void> };
}

/** Options of {@linkcode shutDown}. */
export interface ShutdownOptions {
  /** How long to keep serving before the drain begins (`--shutdown-delay`). */
  readonly delayMs: number;
  /** How long the drain may take (`--shutdown-timeout`). */
  readonly timeoutMs: number;
  /** LogTape's `Logger` fits. */
  readonly logger: {
    info(message: string, properties: Record<string, unknown>): void;
    warn(message: string, properties: Record<string, unknown>): void;
  };
  /** Default {@linkcode STOP_AFTER_DRAIN_MS}. */
  readonly stopAfterDrainMs?: number;
}

/**
 * Runs the shutdown sequence; resolves with whether every request finished.
 * The caller says "not ready" before calling it.
 */
export async function shutDown(
  parts: ShutdownParts,
  options: ShutdownOptions,
): Promise<{ graceful: boolean }> {
  const { logger, delayMs, timeoutMs } = options;
  const stopAfterDrainMs = options.stopAfterDrainMs ?? STOP_AFTER_DRAIN_MS;
  logger.info(
    "Shutting down: not ready now, serving {delay} ms more, then draining for up to {timeout} ms",
    { delay: delayMs, timeout: timeoutMs },
  );
  // Publishing is the cluster's business, not the traffic's: hand the Lease over now, so
  // another replica leads while this one drains (the release is bounded by the renew
  // deadline, and no longer adds to the drain). The watches keep running: endpoints that
  // change during the drain must still reach the workers.
  const publishingStopped = parts.publishing?.stop() ?? Promise.resolve();
  await new Promise((resolve) => setTimeout(resolve, delayMs));
  const drained = await parts.pool.shutdown({ timeoutMs });
  await parts.reaper?.stop();
  // What is left must not push the exit past the grace period: an apiserver that no longer
  // answers gets a short, fixed wait.
  const stopped = await settlesWithin(
    Promise.all([parts.controller.stop(), publishingStopped]),
    stopAfterDrainMs,
  );
  if (!stopped) {
    logger.warn(
      "Cannot stop the watches and leader election within {ms} ms: exiting anyway",
      { ms: stopAfterDrainMs },
    );
  }
  parts.access?.close();
  await settlesWithin(parts.health.shutdown(), stopAfterDrainMs);
  logger.info("Stopped ({state})", { state: drainedState(drained) });
  return { graceful: drained.graceful };
}

function drainedState(drained: PoolShutdownResult): string {
  if (drained.graceful) return "every request finished";
  const open = drained.openConnections;
  return open > 0
    ? `${open} connection${open === 1 ? "" : "s"} cut`
    : "requests still running at the deadline were cut";
}
