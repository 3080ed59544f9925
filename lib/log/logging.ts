/**
 * Structured logging for Sluice: one JSON object per line in production, a
 * readable line per record with `--log-format pretty`. Components receive a
 * {@linkcode Logger} from their caller; only `main.ts` configures sinks.
 *
 * Never log certificates, keys, tokens or `Authorization` headers.
 *
 * @module
 */
import {
  configure,
  getConsoleSink,
  getJsonLinesFormatter,
  getLogger as getLogtapeLogger,
  getStreamSink,
  getTextFormatter,
  type Logger,
  type LogLevel,
  type Sink,
} from "@logtape/logtape";

export type { Logger, LogLevel };

/** Output formats accepted by `--log-format`. */
export const LOG_FORMATS = ["json", "pretty"] as const;
export type LogFormat = typeof LOG_FORMATS[number];

/** Levels accepted by `--log-level`. */
export const LOG_LEVELS = ["trace", "debug", "info", "warning", "error", "fatal"] as const;

/** Options of {@linkcode configureLogging}. */
export interface LoggingOptions {
  readonly level: LogLevel;
  readonly format: LogFormat;
  /** Where lines go; standard error when absent. */
  readonly sink?: Sink;
}

/** Installs the process-wide sinks. Call once, from `main.ts`. */
export async function configureLogging(options: LoggingOptions): Promise<void> {
  const formatter = options.format === "json"
    ? getJsonLinesFormatter({ categorySeparator: ".", message: "rendered", properties: "flatten" })
    : getTextFormatter({ timestamp: "date-time-tz" });
  const sink = options.sink ??
    (options.format === "pretty"
      ? getConsoleSink({ formatter })
      : getStreamSink(Deno.stderr.writable, { formatter }));
  await configure({
    reset: true,
    sinks: { main: sink },
    loggers: [
      { category: ["sluice"], lowestLevel: options.level, sinks: ["main"] },
      { category: ["logtape", "meta"], lowestLevel: "warning", sinks: ["main"] },
    ],
  });
}

/** The logger of one component: records carry `component` and the category `sluice.<component>`. */
export function componentLogger(component: string): Logger {
  return getLogtapeLogger(["sluice", component]).with({ component });
}
