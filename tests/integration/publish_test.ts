/**
 * Publishing back against the real kube-apiserver: Ingress status from
 * `--publish-status-address` and `--publish-service` (written again after a
 * write stuck in a partition once the leader leads again; an Ingress deleted
 * meanwhile counted as gone; a status the API refuses backed off from), Events
 * for issues (a 5,000-character message cut to the limit), and all of it as the
 * ServiceAccount bound to the RBAC in `manifests/`.
 *
 * @module
 */
import { assert, assertEquals, assertNotEquals } from "../support/assert.ts";
import { KubeClient, type KubeObject } from "../../lib/k8s/kube_client.ts";
import type { Ingress } from "../../lib/k8s/objects.ts";
import { EVENTS, INGRESSES, LEASES, SERVICES } from "../../lib/k8s/resources.ts";
import { EventRecorder, ISSUE_REASON } from "../../lib/publish/event_recorder.ts";
import { LeaderElector } from "../../lib/publish/leader_election.ts";
import {
  type PublishedService,
  StatusWriter,
  type StatusWriterOptions,
} from "../../lib/publish/status_writer.ts";
import type { Issue } from "../../lib/translate/issues.ts";
import { controllerIdentity } from "../support/controller_identity.ts";
import { adminClient, freshNamespace } from "../support/kube.ts";
import { waitFor } from "../support/wait.ts";
import { defaultBackendIngress, webIngress } from "../support/fixture_objects.ts";
import { clientThrough, startRelay } from "../support/apiserver_relay.ts";
import { elector, ingressStatusOf, Timeline } from "../support/leader_world.ts";

interface CoreEventObject extends KubeObject {
  involvedObject: { kind: string; name: string; uid?: string };
  reason: string;
  message: string;
  type: string;
  source: { component: string };
  reportingComponent: string;
}

async function createIngress(client: KubeClient, ns: string, name: string): Promise<Ingress> {
  return await client.create<Ingress>(
    INGRESSES,
    { namespace: ns },
    defaultBackendIngress(name, "sluice"),
  );
}

async function ingresses(client: KubeClient, ns: string): Promise<Ingress[]> {
  return (await client.listAll<Ingress>(INGRESSES, { namespace: ns })).items;
}

async function ingress(client: KubeClient, ns: string, name: string): Promise<Ingress> {
  return await client.get<Ingress>(INGRESSES, { namespace: ns, name });
}

Deno.test("StatusWriter publishes status addresses only on our Ingresses, only when changed, and clears them when one leaves", async () => {
  const admin = await adminClient();
  const writer = new StatusWriter({
    client: admin.client,
    isLeader: () => true,
    publishStatusAddresses: ["lb.example.com", "192.0.2.10"],
    holdOffMs: 0,
  });
  try {
    const ns = await freshNamespace(admin.client, "status");
    await createIngress(admin.client, ns, "ours");
    await createIngress(admin.client, ns, "theirs");
    const owned = new Set([`${ns}/ours`]);

    const first = await writer.sync({ ingresses: await ingresses(admin.client, ns), owned });
    assertEquals(first, { written: 1, cleared: 0, failed: 0, notLeader: 0 });
    const ours = await ingress(admin.client, ns, "ours");
    assertEquals(ours.status, {
      loadBalancer: { ingress: [{ ip: "192.0.2.10" }, { hostname: "lb.example.com" }] },
    });
    assertEquals((await ingress(admin.client, ns, "theirs")).status, { loadBalancer: {} });

    // Nothing changed: no write, the resourceVersion stays.
    const second = await writer.sync({ ingresses: await ingresses(admin.client, ns), owned });
    assertEquals(second, { written: 0, cleared: 0, failed: 0, notLeader: 0 });
    assertEquals(
      (await ingress(admin.client, ns, "ours")).metadata?.resourceVersion,
      ours.metadata?.resourceVersion,
    );

    // Another controller's status on an Ingress that is not ours is left alone.
    await admin.client.patch(INGRESSES, { namespace: ns, name: "theirs", subresource: "status" }, {
      status: { loadBalancer: { ingress: [{ ip: "198.51.100.1" }] } },
    });
    // "ours" leaves the class: cleared, since it carries exactly our addresses.
    const third = await writer.sync({
      ingresses: await ingresses(admin.client, ns),
      owned: new Set(),
    });
    assertEquals(third, { written: 0, cleared: 1, failed: 0, notLeader: 0 });
    assertEquals((await ingress(admin.client, ns, "ours")).status, { loadBalancer: {} });
    assertEquals((await ingress(admin.client, ns, "theirs")).status, {
      loadBalancer: { ingress: [{ ip: "198.51.100.1" }] },
    });

    // An Ingress deleted before the write is skipped quietly.
    const stale = await ingresses(admin.client, ns);
    await admin.client.delete(INGRESSES, { namespace: ns, name: "theirs" });
    const fourth = await writer.sync({
      ingresses: stale,
      owned: new Set([`${ns}/ours`, `${ns}/theirs`]),
    });
    assertEquals(fourth, { written: 1, cleared: 0, failed: 0, notLeader: 0 });
  } finally {
    await writer.close();
    admin.access.close();
  }
});

Deno.test("StatusWriter publishes the publish Service's cluster IP, then its load-balancer status", async () => {
  const admin = await adminClient();
  const writer = new StatusWriter({
    client: admin.client,
    isLeader: () => true,
    holdOffMs: 0,
  });
  try {
    const ns = await freshNamespace(admin.client, "status-svc");
    await createIngress(admin.client, ns, "web");
    const owned = new Set([`${ns}/web`]);

    // The Service does not exist yet: nothing is written.
    const none = await writer.sync({ ingresses: await ingresses(admin.client, ns), owned });
    assertEquals(none.written, 0);

    const service = await admin.client.create<PublishedService>(SERVICES, { namespace: ns }, {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name: "sluice" },
      spec: { type: "LoadBalancer", ports: [{ name: "http", port: 80 }] },
    });
    const clusterIP = service.spec?.clusterIP;
    assert(clusterIP !== undefined && clusterIP !== "", "the apiserver assigns a cluster IP");
    await writer.sync({
      ingresses: await ingresses(admin.client, ns),
      owned,
      publishService: service,
    });
    assertEquals((await ingress(admin.client, ns, "web")).status?.loadBalancer, {
      ingress: [{ ip: clusterIP }],
    });

    // A load balancer comes up: the Service's status wins over its cluster IP.
    await admin.client.patch(SERVICES, { namespace: ns, name: "sluice", subresource: "status" }, {
      status: {
        loadBalancer: { ingress: [{ ip: "203.0.113.7" }, { hostname: "lb.cloud.example" }] },
      },
    });
    const balanced = await admin.client.get<PublishedService>(SERVICES, {
      namespace: ns,
      name: "sluice",
    });
    const result = await writer.sync({
      ingresses: await ingresses(admin.client, ns),
      owned,
      publishService: balanced,
    });
    assertEquals(result.written, 1);
    assertEquals((await ingress(admin.client, ns, "web")).status?.loadBalancer, {
      ingress: [{ ip: "203.0.113.7" }, { hostname: "lb.cloud.example" }],
    });
  } finally {
    await writer.close();
    admin.access.close();
  }
});

function issueOn(ns: string, message: string): Issue {
  return {
    kind: "Ingress",
    namespace: ns,
    name: "web",
    field: "spec.defaultBackend",
    message,
  };
}

async function events(client: KubeClient, ns: string): Promise<CoreEventObject[]> {
  const list = await client.listAll<CoreEventObject>(EVENTS, { namespace: ns });
  return list.items.filter((e) => e.source?.component === "sluice");
}

Deno.test("EventRecorder creates one Event per issue across rebuilds, again when it returns, none when not leading", async () => {
  const admin = await adminClient();
  let leading = true;
  const ns = await freshNamespace(admin.client, "events");
  const web = await createIngress(admin.client, ns, "web");
  const recorder = new EventRecorder({
    client: admin.client,
    isLeader: () => leading,
    reportingInstance: "test-replica",
    lookup: ({ kind, name }) =>
      kind === "Ingress" && name === "web"
        ? { uid: web.metadata?.uid, resourceVersion: web.metadata?.resourceVersion }
        : undefined,
  });
  try {
    const missing = issueOn(ns, 'Cannot route to Service "web": no such Service');
    for (let rebuild = 0; rebuild < 3; rebuild++) await recorder.record([missing]);
    const once = await events(admin.client, ns);
    assertEquals(once.length, 1);
    const event = once[0]!;
    assertEquals(
      [event.type, event.reason, event.involvedObject.kind, event.involvedObject.name],
      ["Warning", ISSUE_REASON, "Ingress", "web"],
    );
    assertEquals(event.involvedObject.uid, web.metadata?.uid);
    assertEquals(event.reportingComponent, "sluice.dev/ingress-controller");
    assertEquals(event.message, `spec.defaultBackend: ${missing.message}`);

    await recorder.record([]); // fixed…
    await recorder.record([missing]); // …and broken again
    assertEquals((await events(admin.client, ns)).length, 2);

    leading = false;
    const other = issueOn(ns, "Cannot route: something else");
    assertEquals(await recorder.record([missing, other]), { created: 0, failed: 0 });
    assertEquals((await events(admin.client, ns)).length, 2);
    leading = true;
    assertEquals(await recorder.record([missing, other]), { created: 1, failed: 0 });
    assertEquals((await events(admin.client, ns)).length, 3);
  } finally {
    await recorder.close();
    admin.access.close();
  }
});

Deno.test("the RBAC in manifests/ suffices for leader election, status and Events", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "publish-rbac");
  const sa = await controllerIdentity(admin.client, ns);
  const elector = new LeaderElector({
    client: sa.client,
    namespace: ns,
    identity: "rbac-replica",
    leaseDurationMs: 2_000,
    renewDeadlineMs: 1_000,
    retryPeriodMs: 250,
  });
  const isLeader = () => elector.isLeader();
  const writer = new StatusWriter({
    client: sa.client,
    isLeader,
    publishStatusAddresses: ["192.0.2.20"],
    holdOffMs: 0,
  });
  const recorder = new EventRecorder({ client: sa.client, isLeader });
  try {
    await createIngress(admin.client, ns, "web");
    // Authorization catches up with new bindings asynchronously.
    await waitFor("the bindings to take effect", async () => {
      try {
        await sa.client.get(LEASES, { namespace: ns, name: "absent" });
      } catch (e) {
        return (e as { status?: number }).status === 404;
      }
      return false;
    });
    elector.start();
    await waitFor("the ServiceAccount to lead", isLeader);

    const result = await writer.sync({
      ingresses: await ingresses(admin.client, ns),
      owned: new Set([`${ns}/web`]),
    });
    assertEquals(result, { written: 1, cleared: 0, failed: 0, notLeader: 0 });
    assertEquals((await ingress(admin.client, ns, "web")).status?.loadBalancer, {
      ingress: [{ ip: "192.0.2.20" }],
    });
    assertEquals(await recorder.record([issueOn(ns, "Cannot route: test")]), {
      created: 1,
      failed: 0,
    });

    await elector.stop();
    const lease = await admin.client.get<{ spec: { holderIdentity?: string } }>(LEASES, {
      namespace: ns,
      name: "sluice-leader",
    });
    assertNotEquals(lease.spec.holderIdentity, "rbac-replica", "the Lease was released");
  } finally {
    await elector.stop();
    await writer.close();
    await recorder.close();
    await sa.cleanup();
    admin.access.close();
  }
});

// Was a bug: StatusWriter.#apply (lib/publish/status_writer.ts) sent its PATCH without a signal or
// a deadline: a write caught in a partition hung, `#running` never settled, and no later pass ran,
// so after leadership returned the status was never written again (and close() hung). Each write
// (and each Event create) now has a deadline (writeTimeoutMs, 10 s) and close() aborts them.
Deno.test({
  name:
    "StatusWriter writes status again after a write stuck in a partition, once the leader leads again",
  async fn() {
    const admin = await adminClient();
    const ns = await freshNamespace(admin.client, "hc-stuck-status");
    await admin.client.create(INGRESSES, { namespace: ns }, webIngress("web"));
    await using relay = startRelay(admin.client.server);
    const cut = await clientThrough(relay, { http2: false });
    const timeline = new Timeline();
    const a = elector(cut.client, { namespace: ns, identity: "a", timeline });
    const writer = new StatusWriter({
      client: cut.client,
      isLeader: () => a.isLeader(),
      publishStatusAddresses: ["192.0.2.7"],
      holdOffMs: 0,
      retryMs: { min: 100, max: 400 },
      writeTimeoutMs: 1_000,
    });
    const sync = async () =>
      await writer.sync({
        ingresses: (await admin.client.listAll<Ingress>(INGRESSES, { namespace: ns })).items,
        owned: new Set([`${ns}/web`]),
      });
    try {
      a.start();
      await waitFor("a to lead", () => a.isLeader());
      relay.setMode("drop");
      void sync(); // this write is lost in the partition
      await waitFor("a to stop", () => timeline.at("a stopped") !== undefined);
      relay.setMode("pass");
      await waitFor("a to lead again", () => a.isLeader(), { timeoutMs: 5_000 });
      void sync();
      await waitFor(
        "the status",
        async () => await ingressStatusOf(admin.client, ns) === "192.0.2.7",
        {
          timeoutMs: 5_000,
        },
      );
    } finally {
      relay.cutAll();
      await a.stop({ release: false });
      await writer.close();
      cut.access.close();
      admin.access.close();
    }
  },
});

async function createClasslessIngress(
  client: KubeClient,
  ns: string,
  name: string,
): Promise<Ingress> {
  return await client.create<Ingress>(INGRESSES, { namespace: ns }, defaultBackendIngress(name));
}

Deno.test("StatusWriter counts a write to an Ingress deleted meanwhile as gone, not failed, and does not retry it", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hostile-status-gone");
  const { writer, patches } = countingWriter(admin.client, {
    publishStatusAddresses: ["192.0.2.1"],
    retryMs: { min: 50, max: 50 },
  });
  try {
    const stale = await createClasslessIngress(admin.client, ns, "web");
    await admin.client.delete(INGRESSES, { namespace: ns, name: "web" });
    const result = await writer.sync({ ingresses: [stale], owned: new Set([`${ns}/web`]) });
    assertEquals(result, { written: 0, cleared: 0, failed: 0, notLeader: 0 });
    assertEquals(patches(), 1);
    // Once the store has caught up, nothing is written.
    assertEquals(await writer.sync({ ingresses: [], owned: new Set() }), {
      written: 0,
      cleared: 0,
      failed: 0,
      notLeader: 0,
    });
    assertEquals(patches(), 1);
  } finally {
    await writer.close();
    admin.access.close();
  }
});

// Was a bug: StatusWriter.#schedule lets any fresh sync cut a retry's backoff short, so a status the API always refuses (422) is re-sent on every rebuild (each published translation), not with the 1 s..30 s backoff.
Deno.test({
  name: "StatusWriter backs off from a status the API refuses, however often it is synced",

  async fn() {
    const admin = await adminClient();
    const ns = await freshNamespace(admin.client, "hostile-status-422");
    const { writer, patches } = countingWriter(admin.client, {
      // Not an IP, and not a valid DNS name either: the API answers 422.
      publishStatusAddresses: ["Not_A-Valid.Host!"],
      retryMs: { min: 60_000, max: 60_000 },
      logger: silentLogger(),
    });
    try {
      const web = await createClasslessIngress(admin.client, ns, "web");
      const input = { ingresses: [web], owned: new Set([`${ns}/web`]) };
      assertEquals((await writer.sync(input)).failed, 1);
      // Ten rebuilds in the next moments, the Ingress unchanged.
      for (let rebuild = 0; rebuild < 10; rebuild++) await writer.sync(input);
      assert(patches() <= 2, `${patches()} status patches refused with 422 within one backoff`);
    } finally {
      await writer.close();
      admin.access.close();
    }
  },
});

/** A leading StatusWriter on the real API (no hold-off) that counts its PATCH requests. */
function countingWriter(
  client: KubeClient,
  options: Omit<StatusWriterOptions, "client" | "isLeader" | "holdOffMs">,
): { writer: StatusWriter; patches: () => number } {
  let patches = 0;
  const counting = {
    patch: <T>(...args: Parameters<KubeClient["patch"]>) => {
      patches++;
      return client.patch<T>(...args);
    },
  };
  const writer = new StatusWriter({
    client: counting,
    isLeader: () => true,
    holdOffMs: 0,
    ...options,
  });
  return { writer, patches: () => patches };
}

function silentLogger() {
  // deno-lint-ignore no-explicit-any
  const noop = (() => {}) as any;
  // deno-lint-ignore no-explicit-any
  return { debug: noop, info: noop, warn: noop, error: noop, with: () => silentLogger() } as any;
}

interface EventWithMessage extends KubeObject {
  message: string;
}

Deno.test("EventRecorder gets an Event with a 5,000-character multi-byte message accepted, cut to the limit", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hostile-events-long");
  const recorder = new EventRecorder({ client: admin.client, isLeader: () => true });
  try {
    const issue: Issue = {
      kind: "Ingress",
      namespace: ns,
      name: "web",
      field: "metadata.annotations",
      message: `Cannot use annotation value "${"é\u2603".repeat(2_500)}"`,
    };
    assertEquals(await recorder.record([issue]), { created: 1, failed: 0 });
    const events = (await admin.client.listAll<EventWithMessage>(EVENTS, { namespace: ns })).items;
    assertEquals(events.length, 1);
    const message = events[0]!.message;
    assert(message.length <= 1024, `message of ${message.length} characters`);
    assert(message.endsWith("…"));
    assert(message.startsWith("metadata.annotations: Cannot use annotation value"));
  } finally {
    await recorder.close();
    admin.access.close();
  }
});
