/**
 * The reflector over a scripted watch server (`tests/support/fake_watch_server.ts`),
 * for what the real kube-apiserver cannot be made to do on demand: events for
 * objects without a name, namespace or resourceVersion, BOOKMARKs without a
 * resourceVersion, ERROR events with odd Statuses, a watch that goes silent
 * without closing, and stop() racing a LIST. Behaviour against the real
 * apiserver (lists, pages, bookmarks, restarts, 410 after compaction) is in
 * `tests/integration/reflector_test.ts`.
 *
 * Optional resources (a CRD that may be missing) run over a scripted client
 * and fake timers instead, to pin their pacing: a 404 LIST is an empty, synced
 * list, said once and looked at again every `absentRetryMs`.
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
import { FakeTimers } from "../../tests/support/fake_timers.ts";
import { KubeApiError, KubeClient } from "./kube_client.ts";
import { Reflector, type ReflectorEvent, type ReflectorOptions } from "./reflector.ts";
import { HTTP_ROUTES, INGRESSES } from "./resources.ts";

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

// ---------------------------------------------------------------------------
// Optional resources (a CRD that may not be installed, such as Gateway API's)
// ---------------------------------------------------------------------------

const ROUTE = { metadata: { namespace: "shop", name: "web", resourceVersion: "7" } };

/**
 * A scripted API server for one CRD, over fake timers: every LIST, resourceVersion check and
 * WATCH is answered 404 until `install()`; then LISTs answer `items` and a WATCH stays open
 * until `endWatch()` (a clean end, as when the CRD is deleted) or `tearWatch()` (a failure).
 */
function crdWorld(options: { optional?: boolean; onEvent?: (e: ReflectorEvent) => void } = {}) {
  const logs = captureLogs();
  const timers = new FakeTimers();
  const delivered: ReflectorEvent[] = [];
  /** `list`, `check` (a resourceVersion check) or `watch`, in order, with the answer's status. */
  const calls: string[] = [];
  let installed = false;
  let items: unknown[] = [];
  let endOpenWatch: ((torn: boolean) => void) | undefined;
  const notFound = (action: string) =>
    new KubeApiError(action, 404, {
      kind: "Status",
      status: "Failure",
      reason: "NotFound",
      code: 404,
      message: "the server could not find the requested resource",
    });
  const client = {
    list: (_r: unknown, o: { resourceVersionMatch?: string }) => {
      calls.push(
        `${o.resourceVersionMatch === undefined ? "list" : "check"} ${installed ? 200 : 404}`,
      );
      if (!installed) return Promise.reject(notFound("list HTTPRoutes"));
      return Promise.resolve({ items: structuredClone(items), resourceVersion: "7", continue: "" });
    },
    async *watch(_r: unknown, o: { signal?: AbortSignal }) {
      calls.push(`watch ${installed ? 200 : 404}`);
      if (!installed) throw notFound("watch HTTPRoutes");
      const torn = await new Promise<boolean>((resolve) => {
        endOpenWatch = resolve;
        o.signal?.addEventListener("abort", () => resolve(false), { once: true });
      });
      endOpenWatch = undefined;
      if (torn) throw new Error("the connection was reset");
      yield* [];
    },
  } as unknown as ReflectorOptions["client"];
  const reflector = new Reflector({
    client,
    resource: HTTP_ROUTES,
    namespace: "shop",
    onEvent: (e) => {
      options.onEvent?.(e);
      delivered.push(e);
    },
    logger: logs.logger,
    timers,
    random: () => 0.5,
    backoff: { initialMs: 10, maxMs: 20 },
    ...(options.optional === false ? {} : { optional: { absentRetryMs: 5_000 } }),
  });
  reflector.start();
  return {
    logs,
    timers,
    delivered,
    calls,
    reflector,
    install(objects: unknown[]) {
      installed = true;
      items = objects;
    },
    uninstall() {
      installed = false;
      items = [];
    },
    endWatch(torn: boolean) {
      assert(endOpenWatch !== undefined, "a watch is open");
      endOpenWatch(torn);
    },
    /** Lines logged about the resource being absent. */
    absentLogs: () => logs.lines().filter((l) => l.includes("is not served by the API server")),
    /** Moves fake time on in small steps until `done()` (backoffs here are at most 20 ms). */
    until: (what: string, done: () => boolean) =>
      waitFor(what, async () => done() || (await timers.advance(10), false)),
    async [Symbol.asyncDispose]() {
      await reflector.stop();
      logs[Symbol.dispose]();
    },
  };
}

Deno.test("Reflector of an optional resource answered 404 is synced with an empty list, says so once, and looks again every absentRetryMs", async () => {
  await using world = crdWorld();
  await within(5_000, "the reflector to be synced", world.reflector.synced);
  assertEquals(world.delivered, [{ type: "replace", namespace: "shop", items: [] }]);
  const status = world.reflector.status;
  assertEquals(
    [status.synced, status.absent, status.errors, status.lists, status.watching],
    [true, true, 0, 0, false],
  );
  assertEquals(world.absentLogs().length, 1);
  assert(world.absentLogs()[0]!.startsWith("info:"), world.absentLogs()[0]);

  // The next look is absentRetryMs away, not a backoff.
  await waitFor("the retry to be scheduled", () => world.timers.nextAt === 5_000);
  await world.timers.advance(4_999);
  assertEquals(world.calls, ["list 404"]);
  await world.timers.advance(1);
  await waitFor("a second LIST", () => world.calls.length === 2);
  await world.timers.advance(5_000);
  await waitFor("a third LIST", () => world.calls.length === 3);
  // Still absent: not delivered again, not logged again, not an error.
  assertEquals(world.calls, ["list 404", "list 404", "list 404"]);
  assertEquals(world.delivered.length, 1);
  assertEquals(world.absentLogs().length, 1);
  assertEquals([world.reflector.status.absent, world.reflector.status.errors], [true, 0]);
});

Deno.test("Reflector of an optional resource lists and watches it once its CRD is installed", async () => {
  await using world = crdWorld();
  await within(5_000, "the reflector to be synced", world.reflector.synced);
  world.install([ROUTE]);
  await waitFor("the retry to be scheduled", () => world.timers.nextAt === 5_000);
  await world.timers.advance(5_000);
  await waitFor("a watch", () => world.reflector.status.watching);
  assertEquals(world.calls, ["list 404", "list 200", "watch 200"]);
  assertEquals(world.delivered, [
    { type: "replace", namespace: "shop", items: [] },
    { type: "replace", namespace: "shop", items: [ROUTE] },
  ]);
  const status = world.reflector.status;
  assertEquals([status.absent, status.lists, status.errors, status.resourceVersion], [
    false,
    1,
    0,
    "7",
  ]);
  assert(world.logs.lines().some((l) => l.includes("is served by the API server now")));
});

for (const [how, torn] of [["fails", true], ["ends", false]] as const) {
  Deno.test(`Reflector of an optional resource empties its list when the CRD is removed and the watch ${how}`, async () => {
    await using world = crdWorld();
    world.install([ROUTE]);
    await waitFor("the retry to be scheduled", () => world.timers.nextAt === 5_000);
    await world.timers.advance(5_000);
    await waitFor("a watch", () => world.reflector.status.watching);

    world.uninstall();
    world.endWatch(torn);
    await world.until(
      "the reflector to find the resource absent",
      () => world.reflector.status.absent === true,
    );
    assertEquals(world.delivered.map((e) => e.type === "replace" ? e.items.length : e.type), [
      0,
      1,
      0,
    ]);
    // Resumed as after any failure: the resourceVersion check found nothing, then the LIST.
    assertEquals(world.calls.slice(-2), ["check 404", "list 404"]);
    assertEquals(world.absentLogs().length, 2);
    assertEquals(world.reflector.status.resourceVersion, "");
    assertEquals(world.reflector.status.synced, true);
  });
}

Deno.test("Reflector of a resource that is not optional counts a 404 LIST as a failure and stays unsynced", async () => {
  await using world = crdWorld({ optional: false });
  await world.until("three LISTs", () => world.calls.length >= 3);
  const status = world.reflector.status;
  assertEquals([status.synced, status.absent, world.delivered.length], [false, undefined, 0]);
  assert(status.errors >= 2, `errors ${status.errors}`);
  assert(status.lastError?.includes("could not find the requested resource"), status.lastError);
  assertEquals(world.absentLogs(), []);
  // Paced by the backoff (at most 20 ms here), not by absentRetryMs.
  assert(world.timers.now() < 5_000, `retried after ${world.timers.now()} ms`);
});

// Was a bug: a consumer that threw on the empty list of an absent resource ended the loop for
// good (the reflector never synced, nothing was ever listed again).
Deno.test("Reflector of an optional resource tries the empty list again when its consumer throws", async () => {
  let refusals = 1;
  await using world = crdWorld({
    onEvent: () => {
      if (refusals-- > 0) throw new Error("the store is broken");
    },
  });
  await world.until("the reflector to be synced", () => world.reflector.status.synced);
  const status = world.reflector.status;
  assertEquals([status.absent, status.errors], [true, 1]);
  assert(status.lastError?.includes("the store is broken"), status.lastError);
  assertEquals(world.delivered, [{ type: "replace", namespace: "shop", items: [] }]);
  assertEquals(world.absentLogs().length, 1);
});
