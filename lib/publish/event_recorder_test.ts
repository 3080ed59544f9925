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
