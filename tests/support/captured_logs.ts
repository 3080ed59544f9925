/**
 * Test support: a logger whose records are kept in memory, for tests that
 * check what the control plane logs (malformed lines, parse errors). Uses
 * LogTape's process-wide configuration, so it is reset on dispose. Nothing in
 * production imports it.
 *
 * @module
 */
import { configureSync, getLogger, type LogRecord, resetSync } from "@logtape/logtape";
import type { Logger } from "../../lib/log/logging.ts";

/** Captured records and a logger that feeds them. */
export interface CapturedLogs extends Disposable {
  readonly logger: Logger;
  readonly records: LogRecord[];
  /** Each record rendered as text, `level: message`. */
  lines(): string[];
}

/** Routes the category `test` into memory until disposed. */
export function captureLogs(component = "test"): CapturedLogs {
  const records: LogRecord[] = [];
  configureSync({
    reset: true,
    sinks: { memory: (record: LogRecord) => records.push(record) },
    loggers: [
      { category: ["test"], sinks: ["memory"], lowestLevel: "debug" },
      { category: ["logtape", "meta"], sinks: [], lowestLevel: "warning" },
    ],
  });
  return {
    logger: getLogger(["test", component]).with({ component }),
    records,
    lines: () =>
      records.map((r) =>
        `${r.level}: ${
          r.message.map((part) => typeof part === "string" ? part : JSON.stringify(part)).join("")
        }`
      ),
    [Symbol.dispose]: () => resetSync(),
  };
}
