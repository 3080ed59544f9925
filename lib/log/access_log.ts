/**
 * The access log's own writer: one JSON object per request, encoded by hand
 * and written to standard error in batches, because LogTape's per-record
 * formatting and stream sink cost the proxy a large share of its throughput
 * (`deno task bench:access-log`; docs/benchmarks.md). Lines look like every other
 * Sluice log line (`@timestamp`, `level`, `logger`, `component`, `message`)
 * followed by the request's fields.
 *
 * Batches are cut at line boundaries into writes of at most 4 KiB, so that
 * on a pipe (a container's log stream) each write is atomic and lines of
 * several workers and of the main thread never interleave. A batch is
 * written when it reaches that size or after `flushMs`, whichever is first.
 * When the output cannot keep up, a line that would take the bytes held
 * (buffered, or handed to the output and not yet written) past
 * `maxBufferedBytes` is dropped and counted (`onDrop`), rather than growing
 * memory.
 *
 * With `--log-format pretty` the lines are text for people instead, in the
 * shape of the other pretty lines (`2024-05-01 10:00:00.123 +00 [INF]
 * sluice·access: GET shop.test/cart 200, …`); values a client chose are
 * quoted and escaped there when they hold anything but printable ASCII.
 *
 * Knows nothing of requests beyond the fields it is given.
 *
 * @module
 */

/** One access-log record's fields, in the order they are written. */
export interface AccessRecord {
  readonly client: string;
  readonly method: string;
  readonly host: string;
  /** Path without the query string (queries may carry secrets). */
  readonly path: string;
  readonly status: number;
  readonly bytes: number;
  readonly duration_ms: number;
  /** `address:port` of the endpoint, empty when none was reached. */
  readonly upstream: string;
  readonly ingress: string;
  readonly service: string;
  readonly attempts: number;
  readonly request_id: string;
  readonly error?: string;
}

/** How lines are written: as `--log-format`. */
export type AccessLogFormat = "json" | "pretty";

/** Where batches go. */
export interface AccessLogOutput {
  /** Writes all of `bytes` (may be partial: the rest is written again). */
  write(bytes: Uint8Array): Promise<number>;
  /** Writes synchronously, for the final flush. */
  writeSync(bytes: Uint8Array): number;
}

/** Options of {@linkcode AccessLogWriter}. */
export interface AccessLogWriterOptions {
  /** Default: standard error. */
  readonly output?: AccessLogOutput;
  /** Longest time a line waits in the buffer, ms. Default 50. */
  readonly flushMs?: number;
  /**
   * Most bytes held, buffered or being written; a line beyond is dropped. Default 4 MiB.
   */
  readonly maxBufferedBytes?: number;
  /** Runs once per dropped line (the metrics' counter). */
  readonly onDrop?: () => void;
  /** Wall clock, ms since the epoch. Default `Date.now`. */
  readonly now?: () => number;
  /** Default `"json"`. */
  readonly format?: AccessLogFormat;
}

/** Largest single write: atomic on a pipe (PIPE_BUF is 4096 on Linux). */
const MAX_WRITE = 4096;
const NEEDS_ESCAPE = /[^\x20-\x7e]|["\\]/;
// After JSON.stringify no raw control character is left: what is not printable ASCII is non-ASCII.
const NON_ASCII = /[^ -~]/g;

/**
 * A JSON string literal in pure ASCII (non-ASCII as `\uXXXX`, so a line's
 * length is its byte count), without `JSON.stringify`'s cost for the
 * common, clean case.
 */
export function jsonString(value: string): string {
  if (!NEEDS_ESCAPE.test(value)) return `"${value}"`;
  return JSON.stringify(value).replace(
    NON_ASCII,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/**
 * One access-log line (with its newline) for `record` at `timeMs`, at most
 * 4 KiB: a longer one could not be written atomically, so a client's
 * over-long `host` or `path` (up to the header and target limits, 32 and
 * 8 KiB) is cut, ending in `...`, until the line fits.
 */
export function encodeAccessLine(
  record: AccessRecord,
  timeMs: number,
  format: AccessLogFormat = "json",
): string {
  const encode = format === "pretty" ? encodePrettyLine : encodeLine;
  const line = encode(record, timeMs);
  if (lineBytes(line, format) <= MAX_WRITE) return line;
  // Every other field is short and bounded; escaped, a character takes at most 6 bytes, so two
  // fields of 256 characters always fit.
  for (let keep = 1024;; keep >>= 1) {
    const cut = encode({
      ...record,
      host: shorten(record.host, keep),
      path: shorten(record.path, keep),
    }, timeMs);
    if (lineBytes(cut, format) <= MAX_WRITE || keep <= 16) return cut;
  }
}

function shorten(value: string, keep: number): string {
  if (value.length <= keep) return value;
  // Never half of a surrogate pair.
  const end = /[\ud800-\udbff]/.test(value[keep - 1]!) ? keep - 1 : keep;
  return `${value.slice(0, end)}...`;
}

function encodeLine(record: AccessRecord, timeMs: number): string {
  let line = `{"@timestamp":"${new Date(timeMs).toISOString()}"` +
    `,"level":"INFO","message":"request","logger":"sluice.access","component":"access"` +
    `,"client":${jsonString(record.client)}` +
    `,"method":${jsonString(record.method)}` +
    `,"host":${jsonString(record.host)}` +
    `,"path":${jsonString(record.path)}` +
    `,"status":${record.status}` +
    `,"bytes":${record.bytes}` +
    `,"duration_ms":${record.duration_ms}` +
    `,"upstream":${jsonString(record.upstream)}` +
    `,"ingress":${jsonString(record.ingress)}` +
    `,"service":${jsonString(record.service)}` +
    `,"attempts":${record.attempts}` +
    `,"request_id":${jsonString(record.request_id)}`;
  if (record.error !== undefined) line += `,"error":${jsonString(record.error)}`;
  return line + "}\n";
}

/** The category of pretty lines, as LogTape writes the others' (`sluice·main`). */
const PRETTY_CATEGORY = "sluice·access";
/**
 * Bytes a pretty line has beyond its length in characters: its category's
 * `·` (every value is written in ASCII).
 */
const PRETTY_EXTRA_BYTES = new TextEncoder().encode(PRETTY_CATEGORY).length -
  PRETTY_CATEGORY.length;

/** A line's size in bytes. */
function lineBytes(line: string, format: AccessLogFormat): number {
  return line.length + (format === "pretty" ? PRETTY_EXTRA_BYTES : 0);
}

/** Printable ASCII but space, quote and backslash: written as is in a pretty line. */
const PLAIN = /^[!#-[\]-~]+$/;

/** A value in a pretty line: as is when plain, else a JSON string (so no control character). */
function prettyValue(value: string): string {
  return PLAIN.test(value) ? value : jsonString(value);
}

/**
 * The pretty line: LogTape's text layout (`getTextFormatter`, timestamp
 * `date-time-tz`, UTC) with the request's fields in words.
 */
function encodePrettyLine(record: AccessRecord, timeMs: number): string {
  const time = new Date(timeMs).toISOString().replace("T", " ").replace("Z", " +00");
  let line = `${time} [INF] ${PRETTY_CATEGORY}: ${prettyValue(record.method)} ` +
    `${prettyValue(record.host + record.path)} ${record.status}, ${record.bytes} bytes in ` +
    `${record.duration_ms} ms, client ${prettyValue(record.client)}`;
  if (record.ingress !== "") line += `, ingress ${prettyValue(record.ingress)}`;
  if (record.service !== "") line += `, service ${prettyValue(record.service)}`;
  if (record.upstream !== "") line += `, upstream ${prettyValue(record.upstream)}`;
  if (record.attempts > 1) line += `, ${record.attempts} attempts`;
  if (record.error !== undefined) line += `, error ${jsonString(record.error)}`;
  return `${line}, request ${prettyValue(record.request_id)}\n`;
}

/** Buffers access-log lines and writes them in batches. Call `close()` at shutdown. */
export class AccessLogWriter {
  #output: AccessLogOutput;
  #flushMs: number;
  #maxBuffered: number;
  #now: () => number;
  #onDrop: (() => void) | undefined;
  #format: AccessLogFormat;
  #lines: string[] = [];
  #buffered = 0;
  /** Bytes handed to the output and not yet written. */
  #inFlight = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #writing: Promise<void> = Promise.resolve();
  #encoder = new TextEncoder();
  #dropped = 0;
  #closed = false;

  constructor(options: AccessLogWriterOptions = {}) {
    this.#output = options.output ?? Deno.stderr;
    this.#flushMs = options.flushMs ?? 50;
    this.#maxBuffered = options.maxBufferedBytes ?? 4 * 1024 * 1024;
    this.#now = options.now ?? Date.now;
    this.#onDrop = options.onDrop;
    this.#format = options.format ?? "json";
  }

  /** Lines dropped so far because the output could not keep up. */
  get dropped(): number {
    return this.#dropped;
  }

  /** Queues one record. */
  write(record: AccessRecord): void {
    if (this.#closed) return;
    const line = encodeAccessLine(record, this.#now(), this.#format);
    const bytes = lineBytes(line, this.#format);
    if (this.#buffered + this.#inFlight + bytes > this.#maxBuffered) {
      this.#dropped++;
      this.#onDrop?.();
      return;
    }
    this.#lines.push(line);
    this.#buffered += bytes;
    if (this.#buffered >= MAX_WRITE) this.#flush();
    else if (this.#timer === undefined) {
      this.#timer = setTimeout(() => this.#flush(), this.#flushMs);
      // A pending flush never keeps a worker alive on its own.
      Deno.unrefTimer(this.#timer as unknown as number);
    }
  }

  /** Writes everything buffered (synchronously) and stops accepting records. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const chunk of this.#take()) {
      let offset = 0;
      try {
        while (offset < chunk.length) offset += this.#output.writeSync(chunk.subarray(offset));
      } catch {
        return; // The output is gone: nothing more can be said.
      }
    }
  }

  /** Resolves once every batch handed to the output so far was written. */
  async settled(): Promise<void> {
    await this.#writing;
  }

  #flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const bytes = this.#buffered;
    const chunks = this.#take();
    if (chunks.length === 0) return;
    // Was a bug: bytes handed to a stalled output were no longer counted, so nothing was ever
    // dropped and the queue of pending writes grew without bound.
    this.#inFlight += bytes;
    this.#writing = this.#writing.then(async () => {
      try {
        for (const chunk of chunks) {
          let offset = 0;
          while (offset < chunk.length) offset += await this.#output.write(chunk.subarray(offset));
        }
      } finally {
        this.#inFlight -= bytes;
      }
    }).catch(() => {
      // The output is gone (closed pipe): access lines cannot be written anywhere.
    });
  }

  /** Takes the buffered lines as encoded writes of at most MAX_WRITE bytes, whole lines each. */
  #take(): Uint8Array[] {
    const chunks: Uint8Array[] = [];
    let batch = "";
    let batchBytes = 0;
    for (const line of this.#lines) {
      const bytes = lineBytes(line, this.#format);
      if (batchBytes > 0 && batchBytes + bytes > MAX_WRITE) {
        chunks.push(this.#encoder.encode(batch));
        batch = "";
        batchBytes = 0;
      }
      batch += line;
      batchBytes += bytes;
    }
    if (batch.length > 0) chunks.push(this.#encoder.encode(batch));
    this.#lines = [];
    this.#buffered = 0;
    return chunks;
  }
}
