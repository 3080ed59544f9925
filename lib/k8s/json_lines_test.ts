/**
 * `JsonLinesStream`, the watch stream's line reader: lines joined across chunks
 * (split at every byte, one-byte and empty chunks, multi-byte characters),
 * blank lines and CR, malformed lines reported while the good ones around them
 * are kept (invalid UTF-8 read as U+FFFD, a 10 MB line parsed, a huge malformed
 * one cut in its report, a line torn by the end of the stream), and a failing
 * byte stream's error passed on.
 *
 * @module
 */
import { assert, assertEquals, assertRejects } from "../../tests/support/assert.ts";
import { type JsonLine, JsonLinesStream } from "./json_lines.ts";
import { watchEvent as event } from "../../tests/support/fake_watch_server.ts";

async function parse(chunks: (string | Uint8Array)[]): Promise<JsonLine[]> {
  const enc = new TextEncoder();
  const source = ReadableStream.from(chunks.map((c) => typeof c === "string" ? enc.encode(c) : c));
  return await Array.fromAsync(source.pipeThrough(new JsonLinesStream()));
}

Deno.test("JsonLinesStream joins lines split across chunks", async () => {
  assertEquals(await parse(['{"a":', '1}\n{"b"', ":2}\n"]), [
    { ok: true, value: { a: 1 } },
    { ok: true, value: { b: 2 } },
  ]);
});

Deno.test("JsonLinesStream joins a multi-byte character split across chunks", async () => {
  const bytes = new TextEncoder().encode('{"s":"é€"}\n');
  // Split inside the three-byte euro sign.
  assertEquals(await parse([bytes.slice(0, 9), bytes.slice(9)]), [{
    ok: true,
    value: { s: "é€" },
  }]);
});

Deno.test("JsonLinesStream reports a malformed line and keeps going", async () => {
  const items = await parse(['{"a":1}\nnot json\n{"b":2}\n']);
  assertEquals(items.length, 3);
  assertEquals(items[0], { ok: true, value: { a: 1 } });
  assertEquals(items[1]?.ok, false);
  assertEquals(items[1]?.ok === false ? items[1].line : "", "not json");
  assertEquals(items[2], { ok: true, value: { b: 2 } });
});

Deno.test("JsonLinesStream skips blank lines, strips CR and parses a final line without newline", async () => {
  assertEquals(await parse(['\n{"a":1}\r\n\n', '{"b":2}']), [
    { ok: true, value: { a: 1 } },
    { ok: true, value: { b: 2 } },
  ]);
});

Deno.test("JsonLinesStream cuts a huge malformed line in its report", async () => {
  const [item] = await parse(["x".repeat(10_000) + "\n"]);
  assertEquals(item?.ok, false);
  assertEquals(item?.ok === false ? item.line.length : 0, 513);
});

const encoder = new TextEncoder();

async function parseBytes(chunks: readonly Uint8Array[]): Promise<JsonLine[]> {
  return await Array.fromAsync(ReadableStream.from(chunks).pipeThrough(new JsonLinesStream()));
}

/** Events with 2-, 3- and 4-byte characters, CRLF, blank lines and one malformed line. */
const MIXED = [
  event("ADDED", "café", "1"),
  "",
  `${event("MODIFIED", "euro-€", "2")}\r`,
  "not json at all",
  event("DELETED", "clef-𝄞", "3"),
  "   ",
  JSON.stringify({ type: "BOOKMARK", object: { metadata: { resourceVersion: "4" } } }),
].join("\n") + "\n";

Deno.test("JsonLinesStream gives the same items however a stream is split in two, at every byte", async () => {
  const bytes = encoder.encode(MIXED);
  const whole = await parseBytes([bytes]);
  assertEquals(whole.map((l) => l.ok), [true, true, false, true, true]);
  assertEquals((whole[2] as { line: string }).line, "not json at all");
  for (let at = 0; at <= bytes.length; at++) {
    assertEquals(
      await parseBytes([bytes.subarray(0, at), bytes.subarray(at)]),
      whole,
      `split at ${at}`,
    );
  }
});

Deno.test("JsonLinesStream gives the same items from one-byte chunks and from empty chunks between them", async () => {
  const bytes = encoder.encode(MIXED);
  const whole = await parseBytes([bytes]);
  const single = Array.from(bytes, (b) => Uint8Array.of(b));
  assertEquals(await parseBytes(single), whole);
  const withEmpty = single.flatMap((b) => [new Uint8Array(0), b]);
  assertEquals(await parseBytes(withEmpty), whole);
});

Deno.test("JsonLinesStream reports each kind of malformed line and keeps the good lines around it", async () => {
  const lines: [string, boolean][] = [
    ['{"type":"ADDED"', false], // torn object
    ['{"a":1}{"b":2}', false], // two objects on one line
    ['{"a":1,}', false], // trailing comma
    ["{'a':1}", false], // single quotes
    ['{"a":NaN}', false],
    ['{"a":"tab\tinside"}', false], // raw control character in a string
    ['{"a":"nul\u0000inside"}', false],
    ["]", false],
    ["\r", true], // blank after the CR is stripped: skipped, not an item
    ["null", true],
    ["123", true],
    ['"just a string"', true],
    ['{"ok":true}', true],
  ];
  const text = lines.map(([line]) => line).join("\n") + "\n";
  const items = await parseBytes([encoder.encode(text)]);
  const expected = lines.filter(([line]) => line !== "\r").map(([, ok]) => ok);
  assertEquals(items.map((i) => i.ok), expected);
  for (const item of items) {
    if (!item.ok) assert(item.error !== "" && item.line !== "", JSON.stringify(item));
  }
});

Deno.test("JsonLinesStream reads invalid UTF-8 inside a string as U+FFFD rather than failing the line", async () => {
  const head = encoder.encode('{"s":"a');
  const tail = encoder.encode('b"}\n');
  const bytes = new Uint8Array([...head, 0xff, 0xc3, ...tail]); // a stray byte, a torn 2-byte sequence
  assertEquals(await parseBytes([bytes]), [{ ok: true, value: { s: "a\ufffd\ufffdb" } }]);
});

Deno.test("JsonLinesStream parses a 10 MB line delivered in 64 KB chunks", async () => {
  const data = "x".repeat(10 * 1024 * 1024);
  const bytes = encoder.encode(`${event("ADDED", "small", "1")}\n${JSON.stringify({ data })}\n`);
  const chunks: Uint8Array[] = [];
  for (let i = 0; i < bytes.length; i += 64 * 1024) chunks.push(bytes.subarray(i, i + 64 * 1024));
  const items = await parseBytes(chunks);
  assertEquals(items.length, 2);
  const [, big] = items;
  assert(big?.ok === true);
  assertEquals((big.value as { data: string }).data.length, data.length);
});

Deno.test("JsonLinesStream cuts a 10 MB malformed line to 513 characters in its report", async () => {
  const bytes = encoder.encode(`{"data":"${"x".repeat(10 * 1024 * 1024)}\n{"after":1}\n`);
  const items = await parseBytes([bytes]);
  assertEquals(items.length, 2);
  assert(items[0]?.ok === false);
  assertEquals(items[0].line.length, 513);
  assertEquals(items[1], { ok: true, value: { after: 1 } });
});

Deno.test("JsonLinesStream reports a line torn by the end of the stream as malformed", async () => {
  const items = await parseBytes([
    encoder.encode(`${event("ADDED", "a", "1")}\n{"type":"ADDED","obj`),
  ]);
  assertEquals(items.map((i) => i.ok), [true, false]);
});

Deno.test("JsonLinesStream passes a failing byte stream's error on to its reader", async () => {
  const source = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(encoder.encode(`${event("ADDED", "a", "1")}\n{"torn":`));
      controller.error(new Error("connection reset"));
    },
  });
  const lines = source.pipeThrough(new JsonLinesStream());
  await assertRejects(() => Array.fromAsync(lines), Error, "connection reset");
});
