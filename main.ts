/**
 * Sluice's entry point: parses the command line, configures logging, starts
 * Sluice, and shuts it down gracefully on SIGTERM or SIGINT. Wiring only.
 *
 * @module
 */
// deno-lint-ignore-file no-console
import { parseConfig } from "./lib/config/config.ts";
import { availableCpus } from "./lib/config/cpu_limit.ts";
import { errorText } from "./lib/log/error_text.ts";
import { componentLogger, configureLogging, flushLogging } from "./lib/log/logging.ts";
import { startSluice } from "./lib/app/sluice.ts";

const parsed = parseConfig(Deno.args, {
  env: Deno.env.toObject(),
  cpus: availableCpus(),
});
if (parsed.kind === "help") {
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

let sluice;
try {
  sluice = await startSluice(config, { env: Deno.env.toObject() });
} catch (error) {
  logger.fatal("Cannot start: {error}", {
    error: errorText(error),
  });
  await flushLogging();
  Deno.exit(1);
}

const running = sluice;
let signalled = false;
const onSignal = (signal: Deno.Signal) => {
  if (signalled) {
    logger.warn("Second {signal}: exiting now", { signal });
    Deno.exit(1);
  }
  signalled = true;
  logger.info("Received {signal}", { signal });
  // Exit 0 after a shutdown, also one that had to leave requests unfinished at the deadline
  // (logged): the orchestrator asked for it.
  running.shutdown().then(async () => {
    await flushLogging();
    Deno.exit(0);
  }, async (error) => {
    logger.error("Cannot shut down cleanly: {error}", { error: String(error) });
    await flushLogging();
    Deno.exit(1);
  });
};
Deno.addSignalListener("SIGTERM", () => onSignal("SIGTERM"));
Deno.addSignalListener("SIGINT", () => onSignal("SIGINT"));
