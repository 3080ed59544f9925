/**
 * Structured logging for Sluice: one JSON object per line in production, a
 * readable line per record with `--log-format pretty`. Components receive a
 * {@linkcode Logger} from their caller; only `main.ts` configures sinks.
 *
 * Never log certificates, keys, tokens or `Authorization` headers. As a
 * defence in depth, every line is redacted before it is written
 * ({@linkcode redactLine}): properties named like credentials are replaced,
 * and PEM blocks, bearer tokens and JWTs are cut out of any text.
 *
 * The access log does not go through here: see `access_log.ts`.
 *
 * @module
 */
import {
  configure,
  dispose,
  getConsoleSink,
  getJsonLinesFormatter,
  getLogger as getLogtapeLogger,
  getStreamSink,
  getTextFormatter,
  type Logger,
  type LogLevel,
  type LogRecord,
  type Sink,
  type TextFormatter,
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

/** Property names whose values are never written (compared in lower case, `-`/`_` ignored). */
const SECRET_PROPERTIES = new Set([
  "authorization",
  "proxyauthorization",
  "cookie",
  "setcookie",
  "token",
  "bearertoken",
  "password",
  "privatekey",
  "keypem",
  "tlskey",
  "tls.key",
  "certpem",
  "tlscrt",
  "tls.crt",
]);

const REDACTIONS: readonly [RegExp, string][] = [
  // PEM blocks, also with their newlines escaped inside a JSON string.
  [/-----BEGIN [A-Z0-9 ]+-----[\s\S]*?-----END [A-Z0-9 ]+-----/g, "[REDACTED PEM]"],
  // An unterminated PEM block: drop everything after its header.
  [/-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[^"]*/g, "[REDACTED PEM]"],
  [/\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+/gi, "$1 [REDACTED]"],
  // JSON Web Tokens (ServiceAccount tokens are JWTs).
  [/\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]+/g, "[REDACTED JWT]"],
];

/** Cuts PEM blocks, bearer and basic credentials and JWTs out of a formatted line. */
export function redactLine(line: string): string {
  let out = line;
  for (const [pattern, replacement] of REDACTIONS) out = out.replace(pattern, replacement);
  return out;
}

/** `record` with the values of credential-like properties replaced. */
export function redactRecord(record: LogRecord): LogRecord {
  let properties: Record<string, unknown> | undefined;
  for (const key of Object.keys(record.properties)) {
    if (SECRET_PROPERTIES.has(key.toLowerCase().replace(/[-_]/g, ""))) {
      properties ??= { ...record.properties };
      properties[key] = "[REDACTED]";
    }
  }
  return properties === undefined ? record : { ...record, properties };
}

/** Wraps a formatter so that what it writes is redacted. */
export function redacting(formatter: TextFormatter): TextFormatter {
  return (record) => redactLine(formatter(redactRecord(record)));
}

/**
 * Standard error as a stream whose failed writes are dropped: once the log
 * reader is gone (a broken pipe: journald restarted, `| head`), a log line
 * must not reject unhandled inside the sink and end the process mid-drain.
 */
function forgivingStderr(): WritableStream<Uint8Array> {
  let broken = false;
  return new WritableStream({
    async write(chunk) {
      if (broken) return;
      try {
        let offset = 0;
        while (offset < chunk.length) offset += await Deno.stderr.write(chunk.subarray(offset));
      } catch {
        broken = true;
      }
    },
  });
}

/** Installs the process-wide sinks. Call once per isolate (`main.ts`, each worker). */
export async function configureLogging(options: LoggingOptions): Promise<void> {
  const formatter = redacting(
    options.format === "json"
      ? getJsonLinesFormatter({
        categorySeparator: ".",
        message: "rendered",
        properties: "flatten",
      })
      : getTextFormatter({ timestamp: "date-time-tz" }),
  );
  const sink = options.sink ??
    (options.format === "pretty"
      ? getConsoleSink({ formatter })
      : getStreamSink(forgivingStderr(), { formatter }));
  await configure({
    reset: true,
    sinks: { main: sink },
    loggers: [
      { category: ["sluice"], lowestLevel: options.level, sinks: ["main"] },
      { category: ["logtape", "meta"], lowestLevel: "warning", sinks: ["main"] },
    ],
  });
}

/** Flushes and closes the sinks; call before the process exits. */
export async function flushLogging(): Promise<void> {
  await dispose();
}

/** The logger of one component: records carry `component` and the category `sluice.<component>`. */
export function componentLogger(component: string): Logger {
  return getLogtapeLogger(["sluice", component]).with({ component });
}
