/**
 * The control plane against a misbehaving real kube-apiserver: leader
 * election (a partitioned, stopped or forbidden leader, a Lease edited,
 * replaced or held "forever" by others), the status writer's dependence on
 * leadership, and the reflector (RBAC revoked mid-watch, a LIST that hangs,
 * an etcd restored under it, thousands of objects created while it was cut
 * off, a Secret changing type, a watch that expires every time).
 *
 * Network faults the apiserver cannot make (a partition, a dead connection)
 * go through the loopback TCP relay of `tests/support/apiserver_relay.ts`;
 * only a watch that answers 410 every time uses the scripted server.
 *
 * Short election durations as in `leader_election_test.ts`: lease 2 s,
 * renew deadline 1 s, retry period 0.25 s.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/integration/hostile_control_test.ts
 *
 * @module
 */
import { assert, assertBetween, assertEquals, assertStringIncludes } from "../support/assert.ts";
import { waitFor, within } from "../support/wait.ts";
import { adminClient, clientWithToken, freshNamespace } from "../support/kube.ts";
import { controllerToken } from "../support/controller_identity.ts";
import { clientThrough, startRelay } from "../support/apiserver_relay.ts";
import { startFakeWatchServer } from "../support/fake_watch_server.ts";
import { TEST_CERT_PEM, TEST_KEY_PEM } from "../support/test_certs.ts";
import { webIngressSpec } from "../support/fixture_objects.ts";
import { captureLogs } from "../support/captured_logs.ts";
import { KubeApiError, KubeClient } from "../../lib/k8s/kube_client.ts";
import type { Ingress } from "../../lib/k8s/objects.ts";
import { INGRESSES, LEASES, NAMESPACES, SECRETS, SERVICES } from "../../lib/k8s/resources.ts";
import { CLUSTER_ROLE_BINDINGS, ROLE_BINDINGS } from "../support/rbac_resources.ts";
import {
  LeaderElector,
  type LeaderElectorOptions,
  type Lease,
  type LeaseClient,
  microTime,
} from "../../lib/publish/leader_election.ts";
import { StatusWriter } from "../../lib/publish/status_writer.ts";
import type { Kind } from "../../lib/store/matters.ts";
import { ObjectStore } from "../../lib/store/object_store.ts";
import { TLS_SECRET_SELECTOR } from "../../lib/sources/kube_source.ts";
import { ownCluster, recordingTimers, reflectInto } from "../support/reflector_harness.ts";

const LEASE_MS = 2_000;
const RENEW_DEADLINE_MS = 1_000;
const RETRY_MS = 250;
/** Room for requests to a busy apiserver on a shared machine. */
const SLACK_MS = 600;
const LEASE_NAME = "sluice-leader";

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/** Leadership transitions of one or more electors, with monotonic times. */
class Timeline {
  readonly entries: { what: string; at: number }[] = [];
  mark(what: string): void {
    this.entries.push({ what, at: performance.now() });
  }
  at(what: string): number | undefined {
    return this.entries.find((e) => e.what === what)?.at;
  }
  count(what: string): number {
    return this.entries.filter((e) => e.what === what).length;
  }
  toString(): string {
    const t0 = this.entries[0]?.at ?? 0;
    return this.entries.map((e) => `${Math.round(e.at - t0)} ms ${e.what}`).join(", ");
  }
}

function elector(
  client: LeaseClient,
  ns: string,
  identity: string,
  timeline: Timeline,
  extra: Partial<LeaderElectorOptions> = {},
): LeaderElector {
  return new LeaderElector({
    client,
    namespace: ns,
    identity,
    leaseDurationMs: LEASE_MS,
    renewDeadlineMs: RENEW_DEADLINE_MS,
    retryPeriodMs: RETRY_MS,
    onStartedLeading: () => timeline.mark(`${identity} started`),
    onStoppedLeading: () => timeline.mark(`${identity} stopped`),
    ...extra,
  });
}

/** A Lease client that counts its requests. */
function counting(client: LeaseClient): { client: LeaseClient; requests: () => number } {
  let requests = 0;
  return {
    client: {
      get: (...args) => (requests++, client.get(...args)),
      create: (...args) => (requests++, client.create(...args)),
      update: (...args) => (requests++, client.update(...args)),
    } as LeaseClient,
    requests: () => requests,
  };
}

function ingress(name: string, host = `${name}.example.com`) {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "Ingress",
    metadata: { name },
    spec: webIngressSpec(host),
  };
}

async function statusOf(client: KubeClient, ns: string, name = "web"): Promise<string> {
  const found = await client.get<Ingress>(INGRESSES, { namespace: ns, name });
  return (found.status?.loadBalancer?.ingress ?? []).map((a) => a.ip ?? a.hostname).join(",");
}

async function holderOf(client: KubeClient, ns: string): Promise<string | undefined> {
  try {
    const lease = await client.get<Lease>(LEASES, { namespace: ns, name: LEASE_NAME });
    return lease.spec?.holderIdentity ?? "";
  } catch (error) {
    if (error instanceof KubeApiError && error.isNotFound) return undefined;
    throw error;
  }
}

const names = (store: ObjectStore, kind: Kind) =>
  store.list(kind).map((o) => o.metadata?.name ?? "").sort();

/**
 * Reflector settings for an apiserver that will be stopped or cut off: short
 * server-side watch timeouts (a stopping apiserver drains open watches) and
 * short backoffs.
 */
const STOPPABLE = {
  watchTimeoutSeconds: [2, 3] as const,
  watchGraceMs: 1_000,
  backoff: { initialMs: 100, maxMs: 400 },
};

// ---------------------------------------------------------------------------
// Leader election
// ---------------------------------------------------------------------------

Deno.test("a leader cut off by a partition stops leading within its renew deadline, before a follower can take over", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hc-partition");
  await using relay = startRelay(admin.client.server);
  // HTTP/1.1, so that a request abandoned at the deadline takes its dead connection with it.
  const cut = await clientThrough(relay, { http2: false });
  const timeline = new Timeline();
  const a = elector(cut.client, ns, "a", timeline);
  const b = elector(admin.client, ns, "b", timeline);
  try {
    a.start();
    await waitFor("a to lead", () => a.isLeader());
    b.start();
    await waitFor("b to see a lead", () => b.leader === "a");
    relay.setMode("drop");
    const cutAt = performance.now();
    await waitFor("b to take over", () => b.isLeader(), { timeoutMs: LEASE_MS * 3 });
    const stoppedA = timeline.at("a stopped");
    const startedB = timeline.at("b started");
    assert(stoppedA !== undefined && startedB !== undefined, timeline.toString());
    // a gives up within its renew deadline of its last renewal (at most a retry before the cut)...
    assertBetween(stoppedA - cutAt, 0, RENEW_DEADLINE_MS + SLACK_MS, "ms until a stopped");
    // ...and b only after the lease it last saw renewed has run out: never two leaders.
    assert(startedB - stoppedA >= LEASE_MS - RENEW_DEADLINE_MS - RETRY_MS, timeline.toString());
    assertEquals(a.isLeader(), false);

    // The partition heals: a follows b again and does not take the Lease back.
    relay.setMode("pass");
    await waitFor("a to see b lead", () => a.leader === "b", { timeoutMs: 5_000 });
    assertEquals(await holderOf(admin.client, ns), "b");
    assertEquals(timeline.count("a started"), 1, timeline.toString());
  } finally {
    await a.stop({ release: false });
    await b.stop();
    cut.access.close();
    admin.access.close();
  }
});

// Was a bug: lib/k8s/kube_access.ts let Deno's fetch speak HTTP/2 to the apiserver: every request shared
// one connection, Deno has no HTTP/2 health check (client-go pings after 30 s), and aborting a
// request resets only its stream, so a connection that died silently (a NAT or load balancer
// dropping the flow) is reused forever and the elector, reflectors and status writer all hang
// until the kernel gives the socket up (about 15 minutes). Now HTTP/1.1 only.
Deno.test({
  name: "a leader whose connection died silently leads again once the network heals",
  async fn() {
    const admin = await adminClient();
    const ns = await freshNamespace(admin.client, "hc-dead-h2");
    await using relay = startRelay(admin.client.server);
    const cut = await clientThrough(relay); // the client Sluice builds
    const timeline = new Timeline();
    const a = elector(cut.client, ns, "a", timeline);
    try {
      a.start();
      await waitFor("a to lead", () => a.isLeader());
      relay.setMode("drop"); // the connection is dead for good
      await waitFor("a to stop", () => timeline.at("a stopped") !== undefined);
      relay.setMode("pass"); // new connections work again
      await waitFor("a to lead again", () => a.isLeader(), { timeoutMs: 5_000 });
    } finally {
      relay.cutAll();
      await a.stop({ release: false });
      cut.access.close();
      admin.access.close();
    }
  },
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
    await admin.client.create(INGRESSES, { namespace: ns }, ingress("web"));
    await using relay = startRelay(admin.client.server);
    const cut = await clientThrough(relay, { http2: false });
    const timeline = new Timeline();
    const a = elector(cut.client, ns, "a", timeline);
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
      await waitFor("the status", async () => await statusOf(admin.client, ns) === "192.0.2.7", {
        timeoutMs: 5_000,
      });
    } finally {
      relay.cutAll();
      await a.stop({ release: false });
      await writer.close();
      cut.access.close();
      admin.access.close();
    }
  },
});

Deno.test("a leader whose apiserver stops steps down within its renew deadline, writes nothing meanwhile, and leads again after the restart", async () => {
  const own = await ownCluster();
  using logs = captureLogs();
  const ns = "sluice";
  await own.client.create(NAMESPACES, {}, { metadata: { name: ns } });
  await own.client.create(INGRESSES, { namespace: ns }, ingress("web"));
  const timeline = new Timeline();
  const a = elector(own.client, ns, "a", timeline, { logger: logs.logger });
  let patches = 0;
  const writer = new StatusWriter({
    client: { patch: (...args) => (patches++, own.client.patch(...args)) },
    isLeader: () => a.isLeader(),
    publishStatusAddresses: ["192.0.2.8"],
    holdOffMs: 0,
  });
  const input = async () => ({
    ingresses: (await own.client.listAll<Ingress>(INGRESSES, { namespace: ns })).items,
    owned: new Set([`${ns}/web`]),
  });
  try {
    a.start();
    await waitFor("a to lead", () => a.isLeader());
    const before = await input();
    const stopping = own.stop();
    await waitFor("a to stop leading", () => timeline.at("a stopped") !== undefined, {
      timeoutMs: 10_000,
    });
    // Never past the deadline from its last renewal: the failed renewals were logged meanwhile.
    assert(!a.isLeader());
    assertEquals(await writer.sync(before), { written: 0, cleared: 0, failed: 0, notLeader: 1 });
    assertEquals(patches, 0);
    await stopping;

    await own.start();
    const back = performance.now();
    await waitFor("a to lead again", () => a.isLeader(), { timeoutMs: 10_000 });
    assert(performance.now() - back < RETRY_MS * 1.2 + 2 * SLACK_MS, timeline.toString());
    assertEquals(await writer.sync(await input()), {
      written: 1,
      cleared: 0,
      failed: 0,
      notLeader: 0,
    });
    assertEquals(await statusOf(own.client, ns), "192.0.2.8");
    // The outage is reported, but once per distinct failure, not every retry period.
    const warnings = logs.lines().filter((l) => l.includes("Cannot acquire or renew Lease"));
    assert(warnings.length >= 1, logs.lines().join("\n"));
    assert(warnings.filter((l) => l.startsWith("warning")).length <= 3, warnings.join("\n"));
  } finally {
    await a.stop();
    await writer.close();
    await own.close();
  }
});

Deno.test("a leader whose Lease RBAC is revoked steps down within its renew deadline, warns once per refused request, and retries only at its retry period", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hc-lease-rbac");
  const granted = await controllerToken(admin.client, ns);
  const sa = await clientWithToken(granted.token);
  using logs = captureLogs();
  const timeline = new Timeline();
  const leases = counting(sa.client);
  const a = elector(leases.client, ns, "a", timeline, { logger: logs.logger });
  const binding = { namespace: ns, name: "sluice-leader-election" };
  try {
    await waitFor("the Role to take effect", async () => {
      try {
        await sa.client.get(LEASES, { namespace: ns, name: "absent" });
        return false;
      } catch (error) {
        return error instanceof KubeApiError && error.isNotFound;
      }
    });
    a.start();
    await waitFor("a to lead", () => a.isLeader());
    const saved = await admin.client.get<Record<string, unknown>>(ROLE_BINDINGS, binding);
    await admin.client.delete(ROLE_BINDINGS, binding);
    const revokedAt = performance.now();
    await waitFor("a to stop leading", () => timeline.at("a stopped") !== undefined, {
      timeoutMs: 5_000,
    });
    assertBetween(timeline.at("a stopped")! - revokedAt, 0, RENEW_DEADLINE_MS + SLACK_MS, "ms");

    const requestsBefore = leases.requests();
    const windowStart = performance.now();
    await waitFor("two more seconds of retries", () => performance.now() - windowStart > 2_000, {
      timeoutMs: 3_000,
    });
    const rate = (leases.requests() - requestsBefore) / ((performance.now() - windowStart) / 1000);
    // One GET per retry period (jittered up to +20 %), not a hot loop.
    assert(rate <= 1000 / RETRY_MS + 1, `${rate.toFixed(1)} requests/s while forbidden`);
    // Once per distinct failure (the update, then the get), each naming the refusal.
    const warnings = logs.lines().filter((l) =>
      l.startsWith("warning") && l.includes("Cannot acquire or renew Lease")
    );
    assertBetween(warnings.length, 1, 2, `warnings:\n${logs.lines().join("\n")}`);
    for (const warning of warnings) assertStringIncludes(warning, "is forbidden");

    // Granted again: a leads again without a restart.
    const { metadata, ...rest } = saved as { metadata: { name: string } };
    await admin.client.create(ROLE_BINDINGS, { namespace: ns }, {
      ...rest,
      metadata: { name: metadata.name },
    });
    await waitFor("a to lead again", () => a.isLeader(), { timeoutMs: 5_000 });
  } finally {
    await a.stop();
    sa.access.close();
    await granted.cleanup();
    admin.access.close();
  }
});

// Was a bug: LeaderElector gave up an attempt at the first 409 after a fresh read, so another
// writer editing the Lease (a label, an annotation) made every renewal miss and the leader stepped
// down; it now re-reads and retries at once, a few times per attempt, like RetryOnConflict.
Deno.test("a leader keeps leading while someone else keeps editing its Lease (409 on renewal)", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hc-lease-409");
  const timeline = new Timeline();
  const a = elector(admin.client, ns, "a", timeline);
  try {
    a.start();
    await waitFor("a to lead", () => a.isLeader());
    const until = performance.now() + 4 * RETRY_MS + RENEW_DEADLINE_MS;
    let edits = 0;
    while (performance.now() < until) {
      const lease = await admin.client.get<Lease>(LEASES, { namespace: ns, name: LEASE_NAME });
      try {
        await admin.client.update(LEASES, { namespace: ns, name: LEASE_NAME }, {
          ...lease,
          metadata: { ...lease.metadata, labels: { edit: String(edits) } },
        });
        edits++;
      } catch (error) {
        if (!(error instanceof KubeApiError && error.isConflict)) throw error;
      }
    }
    assert(edits > 10, `${edits} edits`);
    assert(a.isLeader());
    assertEquals(timeline.toString().includes("stopped"), false, timeline.toString());
    const lease = await admin.client.get<Lease>(LEASES, { namespace: ns, name: LEASE_NAME });
    assertEquals(lease.spec?.holderIdentity, "a");
    assertEquals(lease.spec?.leaseTransitions ?? 0, 0);
  } finally {
    await a.stop();
    admin.access.close();
  }
});

Deno.test("a leader whose Lease is deleted and re-created by another holder stops leading at once", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hc-lease-replaced");
  const timeline = new Timeline();
  const a = elector(admin.client, ns, "a", timeline);
  try {
    a.start();
    await waitFor("a to lead", () => a.isLeader());
    await admin.client.delete(LEASES, { namespace: ns, name: LEASE_NAME });
    const now = microTime(Date.now());
    await admin.client.create(LEASES, { namespace: ns }, {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name: LEASE_NAME },
      spec: { holderIdentity: "b", leaseDurationSeconds: 30, acquireTime: now, renewTime: now },
    }).catch((error) => {
      // a re-created it first: take it over by update instead.
      if (!(error instanceof KubeApiError && error.isConflict)) throw error;
      return admin.client.get<Lease>(LEASES, { namespace: ns, name: LEASE_NAME }).then((l) =>
        admin.client.update(LEASES, { namespace: ns, name: LEASE_NAME }, {
          ...l,
          spec: { ...l.spec, holderIdentity: "b", leaseDurationSeconds: 30 },
        })
      );
    });
    const replacedAt = performance.now();
    await waitFor("a to stop leading", () => !a.isLeader(), { timeoutMs: 3_000 });
    assert(performance.now() - replacedAt < RETRY_MS + SLACK_MS, timeline.toString());
    assertEquals(a.leader, "b");
    // And it does not take it back while b's 30 s run.
    await waitFor("a few retries", () => performance.now() - replacedAt > 4 * RETRY_MS);
    assertEquals(await holderOf(admin.client, ns), "b");
    assertEquals(timeline.count("a started"), 1);
  } finally {
    await a.stop();
    admin.access.close();
  }
});

Deno.test("a Lease held by a silent holder for 2^31-1 seconds is not taken over, and is polled only at the retry period", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hc-lease-forever");
  const now = microTime(Date.now());
  await admin.client.create(LEASES, { namespace: ns }, {
    apiVersion: "coordination.k8s.io/v1",
    kind: "Lease",
    metadata: { name: LEASE_NAME },
    spec: {
      holderIdentity: "ghost",
      leaseDurationSeconds: 2 ** 31 - 1,
      acquireTime: now,
      renewTime: now,
    },
  });
  const timeline = new Timeline();
  const leases = counting(admin.client);
  const a = elector(leases.client, ns, "a", timeline);
  try {
    const started = performance.now();
    a.start();
    await waitFor("a to see the ghost", () => a.leader === "ghost");
    await waitFor("two seconds", () => performance.now() - started > 2_000, { timeoutMs: 3_000 });
    assertEquals(a.isLeader(), false);
    assert(leases.requests() <= 2_000 / RETRY_MS + 2, `${leases.requests()} requests in 2 s`);
    assertEquals(await holderOf(admin.client, ns), "ghost");
  } finally {
    await a.stop();
    admin.access.close();
  }
});

Deno.test("an elector whose namespace does not exist yet warns once and leads once it is created", async () => {
  const admin = await adminClient();
  const ns = `hc-no-ns-${crypto.randomUUID().slice(0, 8)}`;
  using logs = captureLogs();
  const timeline = new Timeline();
  const a = elector(admin.client, ns, "a", timeline, { logger: logs.logger });
  try {
    a.start();
    await waitFor(
      "a warning",
      () => logs.lines().some((l) => l.startsWith("warning") && l.includes(`"${ns}"`)),
      { timeoutMs: 3_000 },
    );
    const waitStart = performance.now();
    await waitFor("a few retries", () => performance.now() - waitStart > 4 * RETRY_MS);
    assertEquals(a.isLeader(), false);
    const warnings = logs.lines().filter((l) => l.startsWith("warning"));
    assertEquals(warnings.length, 1, warnings.join("\n"));
    await admin.client.create(NAMESPACES, {}, { metadata: { name: ns } });
    await waitFor("a to lead", () => a.isLeader(), { timeoutMs: 3_000 });
  } finally {
    await a.stop();
    admin.access.close();
  }
});

Deno.test("stop() returns within the renew deadline while the apiserver does not answer", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hc-stop-hung");
  await using relay = startRelay(admin.client.server);
  const cut = await clientThrough(relay);
  const timeline = new Timeline();
  const a = elector(cut.client, ns, "a", timeline);
  try {
    a.start();
    await waitFor("a to lead", () => a.isLeader());
    relay.setMode("drop");
    const stopping = performance.now();
    await within(RENEW_DEADLINE_MS * 2 + SLACK_MS, "stop()", a.stop());
    assert(performance.now() - stopping <= RENEW_DEADLINE_MS * 2 + SLACK_MS);
    assertEquals(timeline.count("a stopped"), 1);
  } finally {
    relay.cutAll();
    await a.stop();
    cut.access.close();
    admin.access.close();
  }
});

// ---------------------------------------------------------------------------
// Reflector
// ---------------------------------------------------------------------------

Deno.test("Reflector keeps its objects, warns with the 403 and backs off while its RBAC is revoked, and catches up once restored", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hc-refl-rbac");
  await admin.client.create(INGRESSES, { namespace: ns }, ingress("before"));
  const granted = await controllerToken(admin.client, ns);
  const sa = await clientWithToken(granted.token);
  using logs = captureLogs();
  const timers = recordingTimers(1_000);
  const bindingName = `sluice-${ns}`;
  const { reflector, store } = reflectInto("Ingress", { client: sa.client, resource: INGRESSES }, {
    namespace: ns,
    ...STOPPABLE,
    watchTimeoutSeconds: [1, 1],
    timers,
    logger: logs.logger,
  });
  try {
    await within(10_000, "the first list", reflector.synced);
    assertEquals(names(store, "Ingress"), ["before"]);
    await granted.cleanup(); // the ClusterRoleBinding goes
    await waitFor("four refused reconnects", () => timers.backoffs.length >= 4, {
      timeoutMs: 10_000,
    });
    // The last good copy stays; the refusal is said plainly; the retries slow down.
    assertEquals(names(store, "Ingress"), ["before"]);
    assertStringIncludes(reflector.status.lastError ?? "", "forbidden");
    assert(
      logs.lines().some((l) => l.startsWith("warning") && l.includes("is forbidden")),
      logs.lines().join("\n"),
    );
    const [first, , , fourth] = timers.backoffs;
    assert(fourth! > first! * 2, `backoffs ${timers.backoffs.join(", ")}`);

    await admin.client.create(INGRESSES, { namespace: ns }, ingress("during"));
    await admin.client.create(CLUSTER_ROLE_BINDINGS, {}, {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRoleBinding",
      metadata: { name: bindingName },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "sluice" },
      subjects: [{ kind: "ServiceAccount", name: "sluice", namespace: ns }],
    });
    await waitFor(
      "the Ingress created while forbidden",
      () => store.get("Ingress", `${ns}/during`),
      {
        timeoutMs: 10_000,
      },
    );
    assertEquals(names(store, "Ingress"), ["before", "during"]);
  } finally {
    await reflector.stop();
    sa.access.close();
    await admin.client.delete(CLUSTER_ROLE_BINDINGS, { name: bindingName }).catch(() => {});
    admin.access.close();
  }
});

// Was a bug: Reflector sent its LIST requests without a deadline: a LIST caught on a connection
// that died (a partition, a vanished apiserver host) hung for good and the reflector never synced;
// each LIST request now has `listTimeoutMs` (default 60 s) and is retried after a backoff.
Deno.test("Reflector abandons a LIST that gets no answer and lists again", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hc-refl-hung-list");
  await admin.client.create(INGRESSES, { namespace: ns }, ingress("web"));
  await using relay = startRelay(admin.client.server);
  const cut = await clientThrough(relay, { http2: false });
  using logs = captureLogs();
  relay.setMode("drop");
  const { reflector, store } = reflectInto("Ingress", { client: cut.client, resource: INGRESSES }, {
    namespace: ns,
    ...STOPPABLE,
    listTimeoutMs: 500,
    logger: logs.logger,
  });
  try {
    await waitFor("a LIST to be given up", () => reflector.status.errors >= 1, {
      timeoutMs: 5_000,
    });
    assertStringIncludes(reflector.status.lastError ?? "", "no answer within 500 ms");
    relay.setMode("pass");
    await within(5_000, "the first list", reflector.synced);
    assertEquals(names(store, "Ingress"), ["web"]);
  } finally {
    relay.cutAll();
    await reflector.stop();
    cut.access.close();
    admin.access.close();
  }
});

// Was a bug: after the apiserver came back on a restored (older) etcd, Reflector resumed its watch
// from its own, now future, resourceVersion; the apiserver holds such a watch open without a word
// until its revision reaches that number, so objects deleted by the restore kept being served and
// new ones were never seen. After a failed watch it now asks for one object at its
// resourceVersion ("NotOlderThan"): "Too large resource version" means relist.
Deno.test("Reflector lists again when the apiserver comes back with older data (etcd restored) instead of keeping a stale copy", async () => {
  const own = await ownCluster();
  using logs = captureLogs();
  const { client } = own;
  await client.create(NAMESPACES, {}, { metadata: { name: "shop" } });
  await client.create(NAMESPACES, {}, { metadata: { name: "other" } });
  // Move the revision well past what a fresh apiserver writes while it starts.
  await Promise.all(
    Array.from({ length: 150 }, (_, i) =>
      client.create(SERVICES, { namespace: "other" }, {
        apiVersion: "v1",
        kind: "Service",
        metadata: { name: `s${i}` },
        spec: { ports: [{ port: 80 }] },
      })),
  );
  await client.create(INGRESSES, { namespace: "shop" }, ingress("lost-in-restore"));
  const { reflector, store } = reflectInto("Ingress", { client, resource: INGRESSES }, {
    namespace: "shop",
    ...STOPPABLE,
    logger: logs.logger,
  });
  try {
    await within(10_000, "the first list", reflector.synced);
    const before = Number(reflector.status.resourceVersion);
    await own.stop();
    await own.start({ fresh: true });
    await client.create(NAMESPACES, {}, { metadata: { name: "shop" } });
    await client.create(INGRESSES, { namespace: "shop" }, ingress("after-restore"));
    const now = Number((await client.list(INGRESSES, { namespace: "shop" })).resourceVersion);
    assert(now < before, `restored revision ${now} is not older than ${before}`);
    await waitFor(
      "the restored state",
      () => names(store, "Ingress").join() === "after-restore",
      { timeoutMs: 20_000 },
    );
    assert(reflector.status.relists >= 1);
    assert(
      logs.lines().some((l) => l.includes("Too large resource version")),
      logs.lines().join("\n"),
    );
  } finally {
    await reflector.stop();
    await own.close();
  }
});

Deno.test("Reflector catches up with 2,000 Ingresses created while its connection was cut", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hc-refl-burst");
  await using relay = startRelay(admin.client.server);
  const cut = await clientThrough(relay);
  using logs = captureLogs();
  const { reflector, store } = reflectInto("Ingress", { client: cut.client, resource: INGRESSES }, {
    namespace: ns,
    ...STOPPABLE,
    logger: logs.logger,
  });
  try {
    await within(10_000, "the first list", reflector.synced);
    relay.setMode("refuse");
    relay.cutAll();
    await waitFor("the watch to fail", () => reflector.status.restarts >= 1);
    const total = 2_000;
    const queue = Array.from({ length: total }, (_, i) => i);
    const worker = async () => {
      for (let i = queue.shift(); i !== undefined; i = queue.shift()) {
        await admin.client.create(INGRESSES, { namespace: ns }, ingress(`web-${i}`));
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    assertEquals(store.size("Ingress"), 0);
    relay.setMode("pass");
    const healed = performance.now();
    await waitFor("every Ingress", () => store.size("Ingress") === total, { timeoutMs: 20_000 });
    const took = performance.now() - healed;
    assert(took < 15_000, `caught up after ${Math.round(took)} ms`);
    // Each object once: none lost, none twice (the store is keyed by namespace/name).
    assertEquals(new Set(names(store, "Ingress")).size, total);
    assertEquals(reflector.status.malformed, 0);
  } finally {
    await reflector.stop();
    cut.access.close();
    admin.access.close();
  }
});

Deno.test("Reflector drops a TLS Secret replaced by an Opaque one of the same name, and takes it back when it returns as TLS", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hc-refl-secret-type");
  using logs = captureLogs();
  const tls = {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name: "cert" },
    type: "kubernetes.io/tls",
    stringData: { "tls.crt": TEST_CERT_PEM, "tls.key": TEST_KEY_PEM },
  };
  const opaque = { ...tls, type: "Opaque" };
  const at = { namespace: ns, name: "cert" };
  await admin.client.create(SECRETS, { namespace: ns }, tls);
  const { reflector, store } = reflectInto("Secret", { client: admin.client, resource: SECRETS }, {
    namespace: ns,
    fieldSelector: TLS_SECRET_SELECTOR,
    logger: logs.logger,
  });
  try {
    await within(10_000, "the first list", reflector.synced);
    assertEquals(names(store, "Secret"), ["cert"]);
    // The API keeps a Secret's type immutable...
    const current = await admin.client.get<Record<string, unknown>>(SECRETS, at);
    const refused = await admin.client.update(SECRETS, at, { ...current, type: "Opaque" }).then(
      () => 200,
      (error) => error instanceof KubeApiError ? error.status : 0,
    );
    assertEquals(refused, 422);
    // ...so it is replaced under the same name.
    await admin.client.delete(SECRETS, at);
    await admin.client.create(SECRETS, { namespace: ns }, opaque);
    await waitFor("the TLS Secret to go", () => store.size("Secret") === 0);
    // An Opaque Secret never reaches the store, whatever happens to it.
    await admin.client.patch(SECRETS, at, { metadata: { labels: { touched: "yes" } } });
    await admin.client.delete(SECRETS, at);
    await admin.client.create(SECRETS, { namespace: ns }, tls);
    await waitFor("the TLS Secret to be back", () => store.size("Secret") === 1);
    assertEquals(reflector.status.malformed, 0);
    assertEquals(reflector.status.lists, 1);
  } finally {
    await reflector.stop();
    admin.access.close();
  }
});

// Was a bug: a watch that delivered an event before its 410 counted as healthy, which reset the
// backoff and skipped the pause between relists, so a server answering "event, then 410" every
// time was hammered with LISTs in a tight loop; health is now judged by how long the watch lasted.
Deno.test("Reflector paces its relists when every watch expires at once, with or without an event first", async () => {
  using logs = captureLogs();
  for (const withEvent of [false, true]) {
    const expired = JSON.stringify({
      type: "ERROR",
      object: { kind: "Status", code: 410, reason: "Expired", message: "too old resource version" },
    }) + "\n";
    const added = (n: number) =>
      JSON.stringify({
        type: "ADDED",
        object: { metadata: { namespace: "shop", name: `w${n}`, resourceVersion: String(20 + n) } },
      }) + "\n";
    await using server = startFakeWatchServer({
      list: () => ({ items: [], resourceVersion: "10" }),
      watch: (_url, n) => ({ steps: [{ send: withEvent ? added(n) + expired : expired }] }),
    });
    const timers = recordingTimers(1_000);
    const { reflector } = reflectInto("Ingress", {
      client: new KubeClient(server.access),
      resource: INGRESSES,
    }, {
      backoff: { initialMs: 50, maxMs: 400 },
      timers,
      logger: logs.logger,
    });
    try {
      const started = performance.now();
      await waitFor("a second and a half", () => performance.now() - started > 1_500, {
        timeoutMs: 2_500,
      });
      const lists = reflector.status.lists;
      // 50 + 100 + 200 + 400 + 400 ms (±20 %) fit in 1.5 s: about six lists, not hundreds.
      assertBetween(lists, 2, 9, `lists with${withEvent ? "" : "out"} an event first`);
      assert(timers.backoffs.length >= 2, `backoffs ${timers.backoffs.join(", ")}`);
    } finally {
      await reflector.stop();
    }
  }
});

// Was a bug: Reflector answered "Too large resource version" (the server's data is older than its
// copy) like any failure, watching again from the same version; it now lists again.
Deno.test('Reflector lists again when a watch answers "Too large resource version", as an ERROR event or as a 504', async () => {
  using logs = captureLogs();
  const tooLarge = {
    kind: "Status",
    status: "Failure",
    message: "Timeout: Too large resource version: 900, current: 12",
    reason: "Timeout",
    details: { causes: [{ reason: "ResourceVersionTooLarge" }], retryAfterSeconds: 1 },
    code: 504,
  };
  for (const asEvent of [true, false]) {
    let listed = 0;
    await using server = startFakeWatchServer({
      list: () => ({ items: [], resourceVersion: String(900 + listed++) }),
      watch: (_url, n) =>
        n > 0
          ? undefined // held open
          : asEvent
          ? { steps: [{ send: JSON.stringify({ type: "ERROR", object: tooLarge }) + "\n" }] }
          : { status: 504, body: tooLarge },
    });
    const { reflector } = reflectInto("Ingress", {
      client: new KubeClient(server.access),
      resource: INGRESSES,
    }, {
      backoff: { initialMs: 20, maxMs: 100 },
      logger: logs.logger,
    });
    try {
      await waitFor("a relist", () => reflector.status.lists === 2);
      await waitFor("the second watch", () => server.watches.length === 2);
      assertEquals(server.watches[1]!.searchParams.get("resourceVersion"), "901");
      assertEquals(reflector.status.relists, 1);
    } finally {
      await reflector.stop();
    }
  }
});
