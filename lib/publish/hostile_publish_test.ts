/**
 * Adversarial unit tests of the publishers' own logic (the API answers are
 * injected; the real-API cases live in
 * `tests/integration/hostile_publish_test.ts`): a thousand issues or
 * Ingresses at once, issues that flap, an Events API that always refuses,
 * messages that must be cut, and a status clear the store has not caught up
 * with.
 *
 * @module
 */
import { assert, assertEquals } from "../../tests/support/assert.ts";
import { KubeApiError } from "../k8s/kube_client.ts";
import type { Ingress } from "../k8s/objects.ts";
import type { Issue } from "../translate/issues.ts";
import {
  type CoreEvent,
  type EventClient,
  eventForIssue,
  EventRecorder,
} from "./event_recorder.ts";
import { type StatusClient, StatusWriter, type StatusWriterOptions } from "./status_writer.ts";
import { waitFor } from "../../tests/support/wait.ts";

function issue(i: number, message = "Cannot route: no such Service"): Issue {
  return { kind: "Ingress", namespace: "shop", name: `web-${i}`, field: "spec", message };
}

/** A leading StatusWriter publishing 192.0.2.1, with no hold-off and a silent logger. */
function leadingWriter(
  client: StatusClient,
  options: Partial<StatusWriterOptions> = {},
): StatusWriter {
  return new StatusWriter({
    client,
    isLeader: () => true,
    publishStatusAddresses: ["192.0.2.1"],
    holdOffMs: 0,
    logger: silentLogger(),
    ...options,
  });
}

function silentLogger() {
  // deno-lint-ignore no-explicit-any
  const noop = (() => {}) as any;
  // deno-lint-ignore no-explicit-any
  const logger: any = { debug: noop, info: noop, warn: noop, error: noop };
  logger.with = () => logger;
  return logger;
}

/** A logger that counts warnings. */
function countingLogger() {
  const logger = silentLogger();
  const counts = { warn: 0 };
  logger.warn = () => counts.warn++;
  return { logger, counts };
}

/** A client whose answers settle one macrotask later, tracking the most requests in flight. */
function slowEventClient(fail?: () => Error | undefined) {
  const state = { inFlight: 0, most: 0, calls: 0, events: [] as CoreEvent[] };
  const client = {
    create<T>(_r: unknown, _at: unknown, object: unknown): Promise<T> {
      state.calls++;
      state.inFlight++;
      state.most = Math.max(state.most, state.inFlight);
      return new Promise<T>((resolve, reject) =>
        setTimeout(() => {
          state.inFlight--;
          const error = fail?.();
          if (error !== undefined) reject(error);
          else {
            state.events.push(object as CoreEvent);
            resolve(object as T);
          }
        }, 0)
      );
    },
  } as EventClient;
  return { client, state };
}

Deno.test("EventRecorder creates 1,000 issues' Events once each, at most `concurrency` at a time", async () => {
  const { client, state } = slowEventClient();
  const recorder = new EventRecorder({ client, isLeader: () => true, logger: silentLogger() });
  const issues = Array.from({ length: 1_000 }, (_, i) => issue(i));
  // Two rebuilds racing: the second must not report what the first is reporting.
  const [first, second] = await Promise.all([recorder.record(issues), recorder.record(issues)]);
  assertEquals(first.created + second.created, 1_000);
  assertEquals(state.calls, 1_000);
  assert(state.most <= 4, `${state.most} Events created at once`);
  assertEquals(await recorder.record(issues), { created: 0, failed: 0 });
  assertEquals(recorder.tracked, 1_000);
  await recorder.close();
});

Deno.test("EventRecorder forgets issues that are gone, so memory follows the current issues", async () => {
  const { client } = slowEventClient();
  const recorder = new EventRecorder({ client, isLeader: () => true, logger: silentLogger() });
  for (let round = 0; round < 20; round++) {
    await recorder.record(Array.from({ length: 100 }, (_, i) => issue(round * 100 + i)));
    assertEquals(recorder.tracked, 100);
  }
  await recorder.close();
});

Deno.test("EventRecorder.record() resolves, never rejects, when the client throws synchronously", async () => {
  const client = {
    create(): Promise<never> {
      throw new TypeError("Cannot create: broken client");
    },
  } as unknown as EventClient;
  const recorder = new EventRecorder({ client, isLeader: () => true, logger: silentLogger() });
  // The first refusal holds the second Event back (the API's backoff).
  assertEquals(await recorder.record([issue(1), issue(2)]), { created: 0, failed: 1 });
  await recorder.close();
});

// Was a bug: an issue that disappears and returns (flaps) gets a new Event every time it returns, without any rate limit (client-go's recorder caps a burst per object); a flapping issue floods the Events API.
Deno.test({
  name: "EventRecorder bounds the Events an issue that flaps every rebuild creates",

  async fn() {
    const { client, state } = slowEventClient();
    const recorder = new EventRecorder({ client, isLeader: () => true, logger: silentLogger() });
    for (let rebuild = 0; rebuild < 200; rebuild++) {
      await recorder.record(rebuild % 2 === 0 ? [issue(1)] : []);
    }
    assert(state.events.length <= 25, `${state.events.length} Events for one flapping issue`);
    await recorder.close();
  },
});

// Was a bug: when the Events API always refuses (e.g. 403, RBAC missing), every record() call (every rebuild) re-sends every issue's Event and logs one warning per issue; no backoff, no once-only diagnostic.
Deno.test({
  name: "EventRecorder backs off and warns once when the Events API always refuses",

  async fn() {
    const forbidden = () =>
      new KubeApiError("create", 403, { reason: "Forbidden", message: "events is forbidden" });
    const { client, state } = slowEventClient(forbidden);
    const { logger, counts } = countingLogger();
    const recorder = new EventRecorder({ client, isLeader: () => true, logger });
    const issues = Array.from({ length: 100 }, (_, i) => issue(i));
    for (let rebuild = 0; rebuild < 10; rebuild++) {
      const result = await recorder.record(issues);
      assertEquals(result.created, 0);
    }
    assert(state.calls <= 200, `${state.calls} Event creations refused with 403`);
    assert(counts.warn <= 10, `${counts.warn} warnings logged`);
    await recorder.close();
  },
});

// Was a bug: the message was cut at 1,023 UTF-16 code units, which could split a surrogate pair.
Deno.test({
  name: "eventForIssue() never cuts a message inside a surrogate pair",

  fn() {
    for (const pad of ["", "x"]) {
      const text = `Cannot use host "${pad}${"\u{1F600}".repeat(1_000)}"`;
      const event = eventForIssue(issue(1, text), { suffix: "0123456789abcdef", now: 0 })!;
      assert(event.message.length <= 1024);
      assert(event.message.isWellFormed(), `a lone surrogate with pad "${pad}"`);
    }
  },
});

Deno.test("eventForIssue() keeps the Event name within 253 characters for a 253-character object name", () => {
  const long = { ...issue(1), name: "a".repeat(253) };
  const event = eventForIssue(long, { suffix: "0123456789abcdef", now: 0 })!;
  assertEquals(event.metadata.name.length, 253);
  assert(event.metadata.name.endsWith(".0123456789abcdef"));
  assertEquals(event.involvedObject.name, long.name);
});

function ingress(key: string, ips: string[] = [], resourceVersion = "1"): Ingress {
  const [namespace, name] = key.split("/");
  return {
    metadata: { namespace: namespace!, name: name!, resourceVersion },
    status: { loadBalancer: ips.length > 0 ? { ingress: ips.map((ip) => ({ ip })) } : {} },
  };
}

function slowStatusClient(fail: (name: string) => Error | undefined = () => undefined) {
  const state = { inFlight: 0, most: 0, patches: [] as string[] };
  const client = {
    patch<T>(_r: unknown, at: { name?: string }): Promise<T> {
      state.patches.push(at.name ?? "");
      state.inFlight++;
      state.most = Math.max(state.most, state.inFlight);
      return new Promise<T>((resolve, reject) =>
        setTimeout(() => {
          state.inFlight--;
          const error = fail(at.name ?? "");
          if (error !== undefined) reject(error);
          else resolve({ metadata: { resourceVersion: "99" } } as T);
        }, 0)
      );
    },
  } as StatusClient;
  return { client, state };
}

Deno.test("StatusWriter writes 1,000 Ingresses' statuses once each, at most `concurrency` at a time, in one pass", async () => {
  const { client, state } = slowStatusClient();
  const writer = leadingWriter(client);
  const keys = Array.from({ length: 1_000 }, (_, i) => `shop/web-${i}`);
  const input = { ingresses: keys.map((k) => ingress(k)), owned: new Set(keys) };
  const results = await Promise.all([writer.sync(input), writer.sync(input), writer.sync(input)]);
  assertEquals(results[0]!.written, 1_000);
  assertEquals(state.patches.length, 1_000);
  assert(state.most <= 4, `${state.most} status patches at once`);
  // Until the store catches up, nothing is written again.
  assertEquals((await writer.sync(input)).written, 0);
  assertEquals(state.patches.length, 1_000);
  await writer.close();
});

Deno.test("StatusWriter retries a conflicting write with growing delays, not in a tight loop", async () => {
  const { client, state } = slowStatusClient(() =>
    new KubeApiError("patch", 409, { reason: "Conflict" })
  );
  const writer = leadingWriter(client, { retryMs: { min: 20, max: 80 } });
  const started = performance.now();
  assertEquals(
    (await writer.sync({ ingresses: [ingress("shop/web")], owned: new Set(["shop/web"]) })).failed,
    1,
  );
  // Retries run by themselves: 20, 40, 80, 80 ms later.
  await waitFor("five attempts", () => state.patches.length >= 5, { timeoutMs: 5_000 });
  const elapsed = performance.now() - started;
  assert(elapsed >= 20 + 40 + 80 + 80 - 10, `5 attempts within ${elapsed} ms`);
  await writer.close();
});

// Was a bug: after a successful clear, #apply deletes the #written entry and nothing remembers the clear, so every pass before the store catches up re-sends the clear (with a stale resourceVersion: a 409 and a retry in the real API).
Deno.test({
  name: "StatusWriter does not repeat a clear the store has not caught up with",

  async fn() {
    const { client, state } = slowStatusClient();
    const writer = leadingWriter(client);
    const left = {
      ingresses: [ingress("shop/left", ["192.0.2.1"], "7")],
      owned: new Set<string>(),
    };
    assertEquals((await writer.sync(left)).cleared, 1);
    for (let rebuild = 0; rebuild < 5; rebuild++) await writer.sync(left);
    assertEquals(state.patches, ["left"]);
    await writer.close();
  },
});
