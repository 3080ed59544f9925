/**
 * Events for issues (`eventForIssue()`, `EventRecorder`): one Warning Event per
 * issue within the API's limits (names, messages, surrogate pairs), once across
 * rebuilds and again when it returns, only while leading, at most `concurrency`
 * at a time, bounded for issues that flap, with backoff and one warning when the
 * API always refuses, and memory that follows the current issues.
 *
 * @module
 */
import { assert, assertEquals } from "../../tests/support/assert.ts";
import { captureLogs } from "../../tests/support/captured_logs.ts";
import type { Issue } from "../translate/issues.ts";
import {
  type CoreEvent,
  type EventClient,
  eventForIssue,
  EventRecorder,
  ISSUE_REASON,
} from "./event_recorder.ts";
import { hangingRequests } from "../../tests/support/hanging_requests.ts";
import { KubeApiError } from "../k8s/kube_client.ts";

const missingService: Issue = {
  kind: "Ingress",
  namespace: "shop",
  name: "web",
  field: "spec.rules[0].http.paths[0].backend",
  message: 'Cannot route to Service "shop/web": no such Service; the route answers 503',
};
const badHost: Issue = {
  kind: "Ingress",
  namespace: "shop",
  name: "web",
  field: "spec.rules[1].host",
  message: 'Cannot use host "a:1": ports and IPv6 addresses are not allowed',
};
const option: Issue = {
  kind: "Option",
  namespace: "",
  name: "default-ssl-certificate",
  field: "",
  message: "Cannot use default certificate",
};

function recordingClient(fail: () => boolean = () => false) {
  const events: CoreEvent[] = [];
  const client = {
    create<T>(_r: unknown, _at: unknown, object: unknown): Promise<T> {
      if (fail()) return Promise.reject(new Error("Cannot create: refused"));
      events.push(object as CoreEvent);
      return Promise.resolve(object as T);
    },
  } as EventClient;
  return { client, events };
}

Deno.test("eventForIssue() builds a Warning Event on the named object", () => {
  const event = eventForIssue(missingService, {
    suffix: "17f0a1b2c3d4e5f6",
    now: Date.UTC(2024, 4, 1, 10, 0, 0, 250),
    identity: { uid: "u-1", resourceVersion: "12" },
    reportingInstance: "pod-a_1234abcd",
  });
  assertEquals(event, {
    apiVersion: "v1",
    kind: "Event",
    metadata: { name: "web.17f0a1b2c3d4e5f6", namespace: "shop" },
    involvedObject: {
      apiVersion: "networking.k8s.io/v1",
      kind: "Ingress",
      namespace: "shop",
      name: "web",
      uid: "u-1",
      resourceVersion: "12",
    },
    reason: ISSUE_REASON,
    message:
      'spec.rules[0].http.paths[0].backend: Cannot route to Service "shop/web": no such Service; the route answers 503',
    type: "Warning",
    source: { component: "sluice" },
    reportingComponent: "sluice.dev/ingress-controller",
    reportingInstance: "pod-a_1234abcd",
    firstTimestamp: "2024-05-01T10:00:00Z",
    lastTimestamp: "2024-05-01T10:00:00Z",
    count: 1,
  });
});

Deno.test("eventForIssue() puts cluster-scoped objects' Events in default and skips options", () => {
  const event = eventForIssue(
    { kind: "IngressClass", namespace: "", name: "sluice", field: "", message: "Cannot x" },
    { suffix: "0", now: 0 },
  );
  assertEquals(event?.metadata.namespace, "default");
  assertEquals(event?.involvedObject.namespace, undefined);
  assertEquals(event?.message, "Cannot x");
  assertEquals(eventForIssue(option, { suffix: "0", now: 0 }), undefined);
});

const GATEWAY_API_ISSUES: [Issue, string | undefined][] = [
  [{ kind: "GatewayClass", namespace: "", name: "sluice", field: "", message: "m" }, undefined],
  [{ kind: "Gateway", namespace: "infra", name: "gw", field: "", message: "m" }, "infra"],
  [{ kind: "HTTPRoute", namespace: "shop", name: "web", field: "", message: "m" }, "shop"],
  [{ kind: "ReferenceGrant", namespace: "certs", name: "g", field: "", message: "m" }, "certs"],
];

for (const [issue, namespace] of GATEWAY_API_ISSUES) {
  Deno.test(`eventForIssue() names ${issue.kind} objects as gateway.networking.k8s.io/v1`, () => {
    const event = eventForIssue(issue, { suffix: "0", now: 0 });
    assertEquals(event?.involvedObject, {
      apiVersion: "gateway.networking.k8s.io/v1",
      kind: issue.kind,
      ...(namespace !== undefined ? { namespace } : {}),
      name: issue.name,
    });
    // A cluster-scoped GatewayClass's Event goes to `default`.
    assertEquals(event?.metadata.namespace, namespace ?? "default");
  });
}

Deno.test("eventForIssue() keeps names and messages within the API's limits", () => {
  const event = eventForIssue(
    { ...missingService, name: "n".repeat(253), message: "m".repeat(5000) },
    { suffix: "0123456789abcdef", now: 0 },
  );
  assertEquals(event?.metadata.name.length, 253);
  assertEquals(event?.message.length, 1024);
});

Deno.test("EventRecorder reports an issue once across rebuilds and again after it returns", async () => {
  const { client, events } = recordingClient();
  const recorder = new EventRecorder({ client, isLeader: () => true });
  assertEquals(await recorder.record([missingService, option]), { created: 1, failed: 0 });
  assertEquals(await recorder.record([missingService, option]), { created: 0, failed: 0 });
  assertEquals(await recorder.record([missingService, badHost]), { created: 1, failed: 0 });
  assertEquals(await recorder.record([badHost]), { created: 0, failed: 0 });
  assertEquals(await recorder.record([badHost, missingService]), { created: 1, failed: 0 });
  assertEquals(events.map((e) => e.message.split(":")[0]), [
    "spec.rules[0].http.paths[0].backend",
    "spec.rules[1].host",
    "spec.rules[0].http.paths[0].backend",
  ]);
  assertEquals(recorder.tracked, 2);
  await recorder.close();
});

Deno.test("EventRecorder records nothing while not leading and catches up once leading", async () => {
  const { client, events } = recordingClient();
  let leader = false;
  const recorder = new EventRecorder({ client, isLeader: () => leader });
  assertEquals(await recorder.record([missingService]), { created: 0, failed: 0 });
  assertEquals(events.length, 0);
  leader = true;
  assertEquals(await recorder.record([missingService]), { created: 1, failed: 0 });
  await recorder.close();
});

Deno.test("EventRecorder retries an issue whose Event could not be created", async () => {
  let refuse = true;
  let now = 0;
  const { client, events } = recordingClient(() => refuse);
  const recorder = new EventRecorder({ client, isLeader: () => true, wallClock: () => now });
  assertEquals(await recorder.record([missingService]), { created: 0, failed: 1 });
  refuse = false;
  // Not before the refusal's backoff (1 s) has passed.
  assertEquals(await recorder.record([missingService]), { created: 0, failed: 0 });
  now += 1_000;
  assertEquals(await recorder.record([missingService]), { created: 1, failed: 0 });
  assertEquals(events.length, 1);
  await recorder.close();
});

Deno.test("EventRecorder tracks at most maxTracked issues", async () => {
  const { client, events } = recordingClient();
  const recorder = new EventRecorder({ client, isLeader: () => true, maxTracked: 2 });
  const many = Array.from({ length: 5 }, (_, i) => ({ ...badHost, message: `Cannot ${i}` }));
  assertEquals((await recorder.record(many)).created, 2);
  assertEquals(recorder.tracked, 2);
  assert(events.every((e) => e.involvedObject.name === "web"));
  await recorder.close();
});

Deno.test("EventRecorder fills uid and resourceVersion from the lookup", async () => {
  const { client, events } = recordingClient();
  const recorder = new EventRecorder({
    client,
    isLeader: () => true,
    lookup: ({ kind, namespace, name }) =>
      kind === "Ingress" && namespace === "shop" && name === "web"
        ? { uid: "u-9", resourceVersion: "3" }
        : undefined,
  });
  await recorder.record([missingService]);
  assertEquals(events[0]?.involvedObject.uid, "u-9");
  assertEquals(events[0]?.involvedObject.resourceVersion, "3");
  await recorder.close();
});

Deno.test("EventRecorder.resync() reports the last issues once leadership is gained", async () => {
  const { client, events } = recordingClient();
  let leader = false;
  const recorder = new EventRecorder({ client, isLeader: () => leader });
  await recorder.record([missingService, badHost]);
  leader = true;
  assertEquals(await recorder.resync(), { created: 2, failed: 0 });
  assertEquals(await recorder.resync(), { created: 0, failed: 0 });
  assertEquals(events.length, 2);
  await recorder.close();
});

// Was a bug: close() aborts the creates in flight (they have a deadline now), and that was warned
// about as the API refusing Events ("holding Events back") on every shutdown with one in flight.
Deno.test("EventRecorder.close() ends a create in flight without warning about it", async () => {
  using logs = captureLogs();
  const { started, hang } = hangingRequests();
  const client = { create: (_r, _at, _object, options) => hang(options) } as EventClient;
  const recorder = new EventRecorder({ client, isLeader: () => true, logger: logs.logger });
  const recorded = recorder.record([missingService]);
  await started;
  await recorder.close();
  await recorded;
  assertEquals(logs.lines().filter((line) => line.startsWith("warning")), []);
});

function issue(i: number, message = "Cannot route: no such Service"): Issue {
  return { kind: "Ingress", namespace: "shop", name: `web-${i}`, field: "spec", message };
}

function quietLogger() {
  // deno-lint-ignore no-explicit-any
  const noop = (() => {}) as any;
  // deno-lint-ignore no-explicit-any
  const logger: any = { debug: noop, info: noop, warn: noop, error: noop };
  logger.with = () => logger;
  return logger;
}

/** A logger that counts warnings. */
function countingLogger() {
  const logger = quietLogger();
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
  const recorder = new EventRecorder({ client, isLeader: () => true, logger: quietLogger() });
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
  const recorder = new EventRecorder({ client, isLeader: () => true, logger: quietLogger() });
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
  const recorder = new EventRecorder({ client, isLeader: () => true, logger: quietLogger() });
  // The first refusal holds the second Event back (the API's backoff).
  assertEquals(await recorder.record([issue(1), issue(2)]), { created: 0, failed: 1 });
  await recorder.close();
});

// Was a bug: an issue that disappears and returns (flaps) gets a new Event every time it returns, without any rate limit (client-go's recorder caps a burst per object); a flapping issue floods the Events API.
Deno.test({
  name: "EventRecorder bounds the Events an issue that flaps every rebuild creates",

  async fn() {
    const { client, state } = slowEventClient();
    const recorder = new EventRecorder({ client, isLeader: () => true, logger: quietLogger() });
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
