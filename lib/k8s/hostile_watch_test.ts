/**
 * Adversarial robustness of the watch path: raw byte streams through
 * `JsonLinesStream` (lines split at every byte, malformed lines, a 10 MB line,
 * torn and failing streams), then odd but well-framed lines through
 * `KubeClient.watch()` (ERROR events, unknown types, objects of the wrong
 * shape). Bytes reach the client from the scripted loopback server of
 * `tests/support/fake_watch_server.ts`, the only way to hand `fetch` exact bytes.
 *
 * Complements `json_lines_test.ts`, `reflector_test.ts` (what the reflector
 * makes of such events) and `tests/integration/reflector_test.ts`.
 *
 * @module
 */

import { assert, assertEquals, assertRejects } from "../../tests/support/assert.ts";
import {
  startFakeWatchServer,
  watchEvent as event,
} from "../../tests/support/fake_watch_server.ts";
import { within } from "../../tests/support/wait.ts";
import { type JsonLine, JsonLinesStream } from "./json_lines.ts";
import { KubeClient, type KubeObject, type WatchItem } from "./kube_client.ts";
import { INGRESSES } from "./resources.ts";

const encoder = new TextEncoder();

async function parse(chunks: readonly Uint8Array[]): Promise<JsonLine[]> {
  return await Array.fromAsync(ReadableStream.from(chunks).pipeThrough(new JsonLinesStream()));
}

// ---------------------------------------------------------------------------
// Bytes → lines
// ---------------------------------------------------------------------------

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
  const whole = await parse([bytes]);
  assertEquals(whole.map((l) => l.ok), [true, true, false, true, true]);
  assertEquals((whole[2] as { line: string }).line, "not json at all");
  for (let at = 0; at <= bytes.length; at++) {
    assertEquals(await parse([bytes.subarray(0, at), bytes.subarray(at)]), whole, `split at ${at}`);
  }
});

Deno.test("JsonLinesStream gives the same items from one-byte chunks and from empty chunks between them", async () => {
  const bytes = encoder.encode(MIXED);
  const whole = await parse([bytes]);
  const single = Array.from(bytes, (b) => Uint8Array.of(b));
  assertEquals(await parse(single), whole);
  const withEmpty = single.flatMap((b) => [new Uint8Array(0), b]);
  assertEquals(await parse(withEmpty), whole);
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
  const items = await parse([encoder.encode(text)]);
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
  assertEquals(await parse([bytes]), [{ ok: true, value: { s: "a\ufffd\ufffdb" } }]);
});

Deno.test("JsonLinesStream parses a 10 MB line delivered in 64 KB chunks", async () => {
  const data = "x".repeat(10 * 1024 * 1024);
  const bytes = encoder.encode(`${event("ADDED", "small", "1")}\n${JSON.stringify({ data })}\n`);
  const chunks: Uint8Array[] = [];
  for (let i = 0; i < bytes.length; i += 64 * 1024) chunks.push(bytes.subarray(i, i + 64 * 1024));
  const items = await parse(chunks);
  assertEquals(items.length, 2);
  const [, big] = items;
  assert(big?.ok === true);
  assertEquals((big.value as { data: string }).data.length, data.length);
});

Deno.test("JsonLinesStream cuts a 10 MB malformed line to 513 characters in its report", async () => {
  const bytes = encoder.encode(`{"data":"${"x".repeat(10 * 1024 * 1024)}\n{"after":1}\n`);
  const items = await parse([bytes]);
  assertEquals(items.length, 2);
  assert(items[0]?.ok === false);
  assertEquals(items[0].line.length, 513);
  assertEquals(items[1], { ok: true, value: { after: 1 } });
});

Deno.test("JsonLinesStream reports a line torn by the end of the stream as malformed", async () => {
  const items = await parse([encoder.encode(`${event("ADDED", "a", "1")}\n{"type":"ADDED","obj`)]);
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

// ---------------------------------------------------------------------------
// Lines → watch items
// ---------------------------------------------------------------------------

const EMPTY_LIST = () => ({ items: [], resourceVersion: "10" });

Deno.test("KubeClient.watch() turns each odd line into an item of a known type and never throws", async () => {
  const lines = [
    JSON.stringify({ type: "ERROR", object: { kind: "Status", code: 500, message: "boom" } }),
    JSON.stringify({ type: "SYNC", object: {} }),
    JSON.stringify({ type: "added", object: { metadata: { name: "a" } } }),
    JSON.stringify({ type: "ADDED", object: null }),
    JSON.stringify({ type: "ADDED" }),
    JSON.stringify({ type: "ADDED", object: "a string" }),
    JSON.stringify({ type: 5, object: {} }),
    JSON.stringify({ type: "BOOKMARK", object: { metadata: {} } }),
    "[1,2]",
    "null",
    "{torn",
    JSON.stringify({ type: "X".repeat(1024 * 1024), object: {} }),
    event("ADDED", "good", "11"),
  ];
  await using server = startFakeWatchServer({
    list: EMPTY_LIST,
    watch: () => ({ steps: [{ send: lines.join("\n") + "\n" }, { end: true }] }),
  });
  const client = new KubeClient(server.access);
  const items: WatchItem<KubeObject>[] = await within(
    10_000,
    "the watch to end",
    Array.fromAsync(client.watch<KubeObject>(INGRESSES, { resourceVersion: "10" })),
  );
  assertEquals(items.map((i) => i.type), [
    "ERROR",
    "MALFORMED",
    "MALFORMED",
    "MALFORMED",
    "MALFORMED",
    "MALFORMED",
    "MALFORMED",
    "BOOKMARK",
    "MALFORMED",
    "MALFORMED",
    "MALFORMED",
    "MALFORMED",
    "ADDED",
  ]);
  for (const item of items) {
    if (item.type === "MALFORMED") assert(item.line.length <= 513, `${item.line.length}`);
  }
});
