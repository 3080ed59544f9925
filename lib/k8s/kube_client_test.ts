/**
 * `KubeClient.watch()` given odd but well-framed lines (ERROR events, unknown
 * types, objects of the wrong shape): each becomes an item of a known type, and
 * nothing throws. Bytes reach the client from the scripted loopback server of
 * `tests/support/fake_watch_server.ts`, the only way to hand `fetch` exact
 * bytes. What the reflector makes of such events is in `reflector_test.ts`; the
 * real apiserver in `tests/integration/kube_client_test.ts`.
 *
 * @module
 */
import { assert, assertEquals } from "../../tests/support/assert.ts";
import {
  startFakeWatchServer,
  watchEvent as event,
} from "../../tests/support/fake_watch_server.ts";
import { within } from "../../tests/support/wait.ts";
import { KubeClient, type KubeObject, type WatchItem } from "./kube_client.ts";
import { INGRESSES } from "./resources.ts";

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
