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
    // The unfinished line, in pieces: only new text is searched for "\n", and the pieces are
    // joined once, when the line ends (a long line arriving in many chunks stays linear).
    let pending: string[] = [];
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
        const text = decoder.decode(chunk, { stream: true });
        let start = 0;
        for (let nl = text.indexOf("\n"); nl !== -1; nl = text.indexOf("\n", start)) {
          const tail = text.slice(start, nl);
          if (pending.length === 0) {
            emit(tail, controller);
          } else {
            pending.push(tail);
            emit(pending.join(""), controller);
            pending = [];
          }
          start = nl + 1;
        }
        if (start < text.length) pending.push(start === 0 ? text : text.slice(start));
      },
      flush(controller) {
        pending.push(decoder.decode());
        emit(pending.join(""), controller);
        pending = [];
      },
    });
  }
}
