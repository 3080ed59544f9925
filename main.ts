/**
 * Sluice's entry point: parses the command line, configures logging, starts
 * Sluice, and shuts it down gracefully on SIGTERM or SIGINT; another one a
 * second later exits at once (see `lib/app/stop_signals.ts`). SIGHUP is
 * logged and ignored. `sluice migrate-check …` runs that command instead
 * (`lib/migrate/migrate_command.ts`) and exits with its status.
 * Wiring only.
 *
 * @module
 */
// deno-lint-ignore-file no-console
import { parseConfig } from "./lib/config/config.ts";
import { availableCpus } from "./lib/config/cpu_limit.ts";
import { errorText } from "./lib/log/error_text.ts";
import { componentLogger, configureLogging, flushLogging } from "./lib/log/logging.ts";
import { type Sluice, startSluice } from "./lib/app/sluice.ts";
import { settlesWithin } from "./lib/timers/timers.ts";
import { stopSignals } from "./lib/app/stop_signals.ts";
import { runMigrateCheck, stdioOutput } from "./lib/migrate/migrate_command.ts";
import denoJson from "./deno.json" with { type: "json" };

if (Deno.args[0] === "migrate-check") {
  Deno.exit(await runMigrateCheck(Deno.args.slice(1), stdioOutput()));
}

const parsed = parseConfig(Deno.args, {
  env: Deno.env.toObject(),
  cpus: availableCpus(),
  version: `${denoJson.version} (Deno ${Deno.version.deno}, ${Deno.build.target})`,
});
if (parsed.kind === "help" || parsed.kind === "version") {
  console.log(parsed.text);
  Deno.exit(0);
}
if (parsed.kind === "error") {
  console.error(`sluice: ${parsed.message}`);
  Deno.exit(2);
}
const config = parsed.config;
await configureLogging({ level: config.logLevel, format: config.logFormat });
const logger = componentLogger("main");

/** Exits once buffered log lines are written (bounded: a stuck sink must not keep us alive). */
async function exit(code: number): Promise<never> {
  await settlesWithin(flushLogging(), 2_000);
  Deno.exit(code);
}

// Listening from the start: a signal during start-up (which can hang, for example on a
// kubeconfig that never reads) must end the process with a word, not by the signal's default.
let running: Sluice | undefined;
let signalled = false;
const judge = stopSignals();
const onSignal = (signal: Deno.Signal) => {
  const verdict = judge();
  if (verdict === "repeat") {
    // One Ctrl-C reaches us twice under `deno task` and `deno run --watch` (see stop_signals.ts).
    logger.debug("Received {signal} again: the same stop request", { signal });
    return;
  }
  if (verdict === "force") {
    logger.warn("Second {signal}: exiting now", { signal });
    void exit(1);
    return;
  }
  signalled = true;
  logger.info("Received {signal}", { signal });
  if (running === undefined) {
    // Not ready yet, so no traffic was sent here: nothing to drain.
    logger.info("Stopping during start-up: nothing to drain", {});
    void exit(0);
    return;
  }
  // Exit 0 after a shutdown, also one that had to leave requests unfinished at the deadline
  // (logged): the orchestrator asked for it.
  running.shutdown().then(() => exit(0), (error) => {
    logger.error("Cannot shut down cleanly: {error}", { error: String(error) });
    return exit(1);
  });
};
Deno.addSignalListener("SIGTERM", () => onSignal("SIGTERM"));
Deno.addSignalListener("SIGINT", () => onSignal("SIGINT"));
// nginx reloads on SIGHUP, so an operator may send it out of habit: by default it would end the
// process at once, with no drain. There is nothing to reload (routes follow the cluster live;
// flags need a restart), so say so and carry on.
Deno.addSignalListener("SIGHUP", () => {
  logger.warn(
    "Received {signal}: ignored, nothing to reload (routes follow the cluster as it changes; flags take a restart)",
    { signal: "SIGHUP" },
  );
});

try {
  const started = await startSluice(config, { env: Deno.env.toObject() });
  // A signal that came during start-up is exiting already.
  if (!signalled) running = started;
} catch (error) {
  logger.fatal("Cannot start: {error}", {
    error: errorText(error),
  });
  await exit(1);
}
