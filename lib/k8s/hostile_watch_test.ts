/**
 * Adversarial robustness of the watch path: raw byte streams through
 * `JsonLinesStream` (lines split at every byte, malformed lines, a 10 MB line,
 * torn and failing streams), then odd but well-framed events through
 * `KubeClient.watch()` and the `Reflector` (ERROR events with a Status,
 * unknown types, BOOKMARKs without a resourceVersion, objects without names,
 * a watch that goes silent without closing).
 * Bytes reach the client from the scripted loopback server of
 * `tests/support/fake_watch_server.ts`, the only way to hand `fetch` exact bytes.
 *
 * Complements `json_lines_test.ts` and `tests/integration/reflector_test.ts`.
 *
 * @module
 */

import { assert, assertEquals, assertRejects } from "../../tests/support/assert.ts";
import { startFakeWatchServer, type WatchStep } from "../../tests/support/fake_watch_server.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import { captureLogs } from "../control/_test_logs.ts";
import { type JsonLine, JsonLinesStream } from "./json_lines.ts";
import { KubeClient, type KubeObject, type WatchItem } from "./kube_client.ts";
import { Reflector, type ReflectorEvent, type ReflectorOptions } from "./reflector.ts";
import { INGRESSES } from "./resources.ts";

const encoder = new TextEncoder();

async function parse(chunks: readonly Uint8Array[]): Promise<JsonLine[]> {
  return await Array.fromAsync(ReadableStream.from(chunks).pipeThrough(new JsonLinesStream()));
}

function event(type: string, name: string, rv: string): string {
  return JSON.stringify({
    type,
    object: { kind: "Ingress", metadata: { namespace: "shop", name, resourceVersion: rv } },
  });
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
// Lines → watch items → reflector
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

/**
 * Starts a reflector over `steps` (first watch; later ones are held open without a byte) and
 * records what reaches the store side and when each watch request arrived.
 */
function reflect(
  steps: readonly WatchStep[],
  options: Pick<ReflectorOptions, "watchTimeoutSeconds" | "watchGraceMs"> = {},
) {
  const logs = captureLogs();
  const delivered: ReflectorEvent[] = [];
  const watchedAt: number[] = [];
  const server = startFakeWatchServer({
    list: EMPTY_LIST,
    watch: (_url, n) => {
      watchedAt.push(performance.now());
      return n === 0 ? { steps } : undefined;
    },
  });
  const reflector = new Reflector({
    client: new KubeClient(server.access),
    resource: INGRESSES,
    onEvent: (e) => delivered.push(e),
    logger: logs.logger,
    minWatchMs: 0,
    backoff: { initialMs: 10, maxMs: 20 },
    ...options,
  });
  reflector.start();
  return {
    logs,
    delivered,
    watchedAt,
    server,
    reflector,
    async [Symbol.asyncDispose]() {
      await reflector.stop();
      await server.close();
      logs[Symbol.dispose]();
    },
  };
}

Deno.test("Reflector skips and counts events for objects without name, namespace or resourceVersion, and keeps watching", async () => {
  const odd = [
    { type: "ADDED", object: {} },
    { type: "ADDED", object: { metadata: null } },
    { type: "ADDED", object: { metadata: "shop/a" } },
    { type: "ADDED", object: { metadata: { namespace: "shop", name: "" } } },
    {
      type: "MODIFIED",
      object: { metadata: { namespace: "shop", name: 5, resourceVersion: "12" } },
    },
    { type: "DELETED", object: { metadata: { name: "no-namespace", resourceVersion: "13" } } },
    { type: "ADDED", object: { metadata: { namespace: "shop", name: "no-rv" } } },
    {
      type: "ADDED",
      object: { metadata: { namespace: "shop", name: "rv-number", resourceVersion: 14 } },
    },
    { type: "ADDED", object: [] },
  ];
  await using run = reflect([
    { send: odd.map((e) => JSON.stringify(e)).join("\n") + "\n" },
    { send: `${event("ADDED", "good", "20")}\n` },
    { end: true },
  ]);
  await waitFor("the second watch", () => run.server.watches.length === 2);
  const upserts = run.delivered.filter((e) => e.type !== "replace");
  assertEquals(upserts.map((e) => e.type === "upsert" ? e.object.metadata?.name : "?"), ["good"]);
  const status = run.reflector.status;
  assertEquals([status.malformed, status.events, status.restarts, status.relists], [9, 1, 0, 0]);
  assertEquals(run.server.watches[1]!.searchParams.get("resourceVersion"), "20");
});

Deno.test("Reflector counts a BOOKMARK without a usable resourceVersion and resumes from the last good one", async () => {
  const bookmarks = [{ metadata: {} }, { metadata: { resourceVersion: "" } }, {
    metadata: { resourceVersion: 99 },
  }, { metadata: null }];
  await using run = reflect([
    { send: `${event("ADDED", "a", "11")}\n` },
    ...bookmarks.map((object) => ({ send: JSON.stringify({ type: "BOOKMARK", object }) + "\n" })),
    { end: true },
  ]);
  await waitFor("the second watch", () => run.server.watches.length === 2);
  assertEquals(run.server.watches[1]!.searchParams.get("resourceVersion"), "11");
  const status = run.reflector.status;
  assertEquals([status.bookmarks, status.malformed, status.restarts], [0, 4, 0]);
});

Deno.test("Reflector answers an ERROR event with a non-410 Status by watching again from the same resourceVersion", async () => {
  await using run = reflect([
    { send: `${event("ADDED", "a", "11")}\n` },
    {
      send: JSON.stringify({
        type: "ERROR",
        object: { kind: "Status", status: "Failure", code: 500, message: "etcd is sad" },
      }) + "\n",
    },
    // Anything after the ERROR is not read.
    { send: `${event("ADDED", "b", "12")}\n` },
  ]);
  await waitFor("the second watch", () => run.server.watches.length === 2);
  assertEquals(run.server.watches[1]!.searchParams.get("resourceVersion"), "11");
  const status = run.reflector.status;
  assertEquals([status.restarts, status.relists, status.lists], [1, 0, 1]);
  assert(status.lastError?.includes("etcd is sad"), status.lastError);
});

Deno.test("Reflector lists again after an ERROR event whose Status says Expired, whatever its code", async () => {
  for (const object of [{ code: 410 }, { reason: "Expired", code: 200 }, { reason: "Gone" }]) {
    await using run = reflect([
      { send: JSON.stringify({ type: "ERROR", object: { kind: "Status", ...object } }) + "\n" },
    ]);
    await waitFor("a second LIST", () => run.reflector.status.lists === 2);
    assertEquals(run.reflector.status.relists, 1, JSON.stringify(object));
    assertEquals(run.reflector.status.restarts, 0, JSON.stringify(object));
  }
});

Deno.test("Reflector answers an ERROR event with an empty or odd Status as a failed watch, not a crash", async () => {
  for (const object of [{}, { code: "410" }, { message: { nested: true } }, { code: null }]) {
    await using run = reflect([{ send: JSON.stringify({ type: "ERROR", object }) + "\n" }]);
    await waitFor("the second watch", () => run.server.watches.length === 2);
    assertEquals(run.reflector.status.restarts, 1, JSON.stringify(object));
    assertEquals(run.reflector.status.relists, 0, JSON.stringify(object));
  }
});

Deno.test("Reflector gives up on a watch gone silent at its own deadline and resumes from the last resourceVersion", async () => {
  // The server's timeout (1 s) plus the grace (500 ms): past it the client stops waiting.
  const deadlineMs = 1_500;
  // One change, then nothing: no byte and no close, as from a server whose connection went
  // half-open (a node or a NAT entry gone). Only the client's own deadline ends such a watch.
  await using run = reflect([{ send: `${event("ADDED", "a", "11")}\n` }], {
    watchTimeoutSeconds: [1, 1],
    watchGraceMs: 500,
  });
  await waitFor("the change", () => run.reflector.status.events === 1);
  await waitFor("a second watch", () => run.server.watches.length === 2, {
    timeoutMs: deadlineMs + 5_000,
  });
  const waited = run.watchedAt[1]! - run.watchedAt[0]!;
  // Not before the deadline (less the first request's way to the server), not long after it.
  assert(waited >= deadlineMs - 250, `watched again after ${Math.round(waited)} ms`);
  assert(waited < deadlineMs + 2_000, `watched again after ${Math.round(waited)} ms`);
  // Before resuming, one LIST asks whether the server still has that resourceVersion.
  const check = run.server.requests.find((url) =>
    url.searchParams.get("resourceVersionMatch") === "NotOlderThan"
  );
  assertEquals(check?.searchParams.get("resourceVersion"), "11");
  assertEquals(run.server.watches.map((url) => url.searchParams.get("resourceVersion")), [
    "10",
    "11",
  ]);
  const status = run.reflector.status;
  assertEquals([status.lists, status.relists, status.restarts, status.events], [1, 0, 1, 1]);
  assert(status.lastError?.includes("outlived its deadline"), status.lastError);
  assertEquals(run.delivered.map((e) => e.type), ["replace", "upsert"]);
});

// Was a bug (a CI run's teardown hung 8m41s, then passed): stop() that came while a LIST (or a
// resourceVersion check) was settling let the loop go on to a watch whose request signal was never
// aborted, so stop() waited for the server to end the watch, minutes later.
Deno.test("Reflector.stop() during a LIST that still completes ends the loop at once, without a watch left open", async () => {
  using logs = captureLogs();
  let stopping: Promise<void> | undefined;
  let watchSignal: AbortSignal | undefined;
  const client = {
    list: async () => {
      // The answer is already here when stop() aborts (once start() has returned): the LIST
      // completes anyway.
      await null;
      stopping = reflector.stop();
      return { items: [], resourceVersion: "10", continue: "" };
    },
    async *watch(_r: unknown, options: { signal?: AbortSignal }) {
      watchSignal = options.signal;
      // As fetch: an aborted signal fails the request at once.
      if (options.signal?.aborted) throw new DOMException("The request was aborted", "AbortError");
      // A quiet watch: ends only when its signal aborts (a real one, at the server's timeout).
      await new Promise((resolve) => options.signal?.addEventListener("abort", resolve));
      yield* [];
    },
  } as unknown as ConstructorParameters<typeof Reflector>[0]["client"];
  const reflector = new Reflector({
    client,
    resource: INGRESSES,
    onEvent: () => {},
    logger: logs.logger,
  });
  reflector.start();
  await waitFor("stop() to be called", () => stopping !== undefined);
  await within(5_000, "stop() to resolve", stopping!);
  assert(watchSignal === undefined || watchSignal.aborted, "no watch left running");
});
