/**
 * The reflector over a scripted watch server (`tests/support/fake_watch_server.ts`),
 * for what the real kube-apiserver cannot be made to do on demand: events for
 * objects without a name, namespace or resourceVersion, BOOKMARKs without a
 * resourceVersion, ERROR events with odd Statuses, a watch that goes silent
 * without closing, and stop() racing a LIST. Behaviour against the real
 * apiserver (lists, pages, bookmarks, restarts, 410 after compaction) is in
 * `tests/integration/reflector_test.ts`.
 *
 * @module
 */

import { assert, assertEquals } from "../../tests/support/assert.ts";
import {
  startFakeWatchServer,
  watchEvent as event,
  type WatchStep,
} from "../../tests/support/fake_watch_server.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import { captureLogs } from "../../tests/support/captured_logs.ts";
import { KubeClient } from "./kube_client.ts";
import { Reflector, type ReflectorEvent, type ReflectorOptions } from "./reflector.ts";
import { INGRESSES } from "./resources.ts";

const EMPTY_LIST = () => ({ items: [], resourceVersion: "10" });

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
