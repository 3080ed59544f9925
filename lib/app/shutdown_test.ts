import { assertEquals } from "../../tests/support/assert.ts";
import type { PoolShutdownResult } from "../workers/worker_pool.ts";
import { shutDown, type ShutdownParts } from "./shutdown.ts";

/** Parts that record when each is asked to stop and when each has stopped. */
function recordingParts(options: { drained?: PoolShutdownResult; controllerHangs?: boolean } = {}) {
  const steps: string[] = [];
  const lines: string[] = [];
  let hung: (() => void) | undefined;
  const stopping = (name: string) => async () => {
    steps.push(`${name} stopping`);
    await Promise.resolve();
    steps.push(`${name} stopped`);
  };
  const parts: ShutdownParts = {
    publishing: { stop: stopping("publishing") },
    pool: {
      shutdown: ({ timeoutMs }) => {
        steps.push(`pool draining for ${timeoutMs} ms`);
        return Promise.resolve(options.drained ?? { graceful: true, openConnections: 0 });
      },
    },
    reaper: { stop: stopping("reaper") },
    controller: {
      stop: options.controllerHangs
        ? () => {
          steps.push("controller stopping");
          return new Promise<void>((resolve) => hung = resolve);
        }
        : stopping("controller"),
    },
    access: { close: () => void steps.push("access closed") },
    health: { shutdown: stopping("health") },
  };
  const logger = {
    info: (message: string, properties: Record<string, unknown>) =>
      lines.push(`${message} ${JSON.stringify(properties)}`),
    warn: (message: string, properties: Record<string, unknown>) =>
      lines.push(`${message} ${JSON.stringify(properties)}`),
  };
  return { parts, steps, lines, logger, release: () => hung?.() };
}

Deno.test("shutDown() hands publishing over first, drains after the delay, and closes the health port last", async () => {
  const { parts, steps, lines, logger } = recordingParts();
  const result = await shutDown(parts, { delayMs: 0, timeoutMs: 5_000, logger });
  assertEquals(result, { graceful: true });
  assertEquals(steps, [
    "publishing stopping",
    "publishing stopped",
    "pool draining for 5000 ms",
    "reaper stopping",
    "reaper stopped",
    "controller stopping",
    "controller stopped",
    "access closed",
    "health stopping",
    "health stopped",
  ]);
  assertEquals(lines, [
    'Shutting down: not ready now, serving {delay} ms more, then draining for up to {timeout} ms {"delay":0,"timeout":5000}',
    'Stopped ({state}) {"state":"every request finished"}',
  ]);
});

Deno.test("shutDown() exits anyway when the watches do not stop within the bound after the drain", async () => {
  const { parts, steps, lines, logger, release } = recordingParts({
    drained: { graceful: false, openConnections: 2 },
    controllerHangs: true,
  });
  const result = await shutDown(parts, {
    delayMs: 0,
    timeoutMs: 5_000,
    logger,
    stopAfterDrainMs: 10,
  });
  release();
  assertEquals(result, { graceful: false });
  assertEquals(steps.slice(-3), ["access closed", "health stopping", "health stopped"]);
  assertEquals(lines.slice(1), [
    'Cannot stop the watches and leader election within {ms} ms: exiting anyway {"ms":10}',
    'Stopped ({state}) {"state":"2 connections cut"}',
  ]);
});
