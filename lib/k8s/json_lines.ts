/**
 * Splits a byte stream of newline-delimited JSON (a Kubernetes watch body)
 * into parsed values. A line that is not JSON becomes a `malformed` item, not
 * an exception, so a watch loop can log and count it and carry on. Knows
 * nothing about Kubernetes.
 *
 * @module
 */

/** One line of the stream: parsed JSON, or why it could not be parsed. */
export type JsonLine =
  | { readonly ok: true; readonly value: unknown }
  | { readonly ok: false; readonly line: string; readonly error: string };

/** Longest line kept verbatim in a `malformed` item (the rest is cut). */
const MAX_REPORTED_LINE = 512;

/**
 * A transform from bytes to JSON lines. Lines may be split anywhere across
 * chunks, including inside a multi-byte UTF-8 character. Blank lines are
 * skipped; a final line without a newline is parsed at end of stream.
 */
export class JsonLinesStream extends TransformStream<Uint8Array, JsonLine> {
  constructor() {
    const decoder = new TextDecoder();
    let pending = "";
    const emit = (line: string, controller: TransformStreamDefaultController<JsonLine>) => {
      const text = line.endsWith("\r") ? line.slice(0, -1) : line;
      if (text.trim() === "") return;
      try {
        controller.enqueue({ ok: true, value: JSON.parse(text) });
      } catch (e) {
        controller.enqueue({
          ok: false,
          line: text.length > MAX_REPORTED_LINE ? `${text.slice(0, MAX_REPORTED_LINE)}…` : text,
          error: e instanceof Error ? e.message : String(e),
        });
      }
    };
    super({
      transform(chunk, controller) {
        pending += decoder.decode(chunk, { stream: true });
        let start = 0;
        for (let nl = pending.indexOf("\n"); nl !== -1; nl = pending.indexOf("\n", start)) {
          emit(pending.slice(start, nl), controller);
          start = nl + 1;
        }
        pending = pending.slice(start);
      },
      flush(controller) {
        pending += decoder.decode();
        emit(pending, controller);
        pending = "";
      },
    });
  }
}
