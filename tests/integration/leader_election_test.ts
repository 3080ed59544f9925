/**
 * Leader election on the real kube-apiserver. Two replicas competing for one
 * Lease: exactly one leads and writes status; a crashed leader is replaced
 * within the lease duration, a released Lease at once; a leader whose Lease is
 * taken stops leading and writing at once. And one elector under faults: a
 * partitioned, silently disconnected, stopped or forbidden leader steps down
 * within its renew deadline and leads again once healed; a Lease edited,
 * deleted, re-created or held "forever" by others; a Lease the API refuses; a
 * namespace that does not exist yet; `stop()` while the apiserver does not
 * answer. Network faults the apiserver cannot make go through the loopback TCP
 * relay of `tests/support/apiserver_relay.ts`.
 *
 * Short durations: lease 2 s (the API counts whole seconds), renew deadline
 * 1 s, retry period 0.25 s.
 *
 * @module
 */
import {
  assert,
  assertBetween,
  assertEquals,
  assertRejects,
  assertStringIncludes,
} from "../support/assert.ts";
import { KubeApiError, KubeClient } from "../../lib/k8s/kube_client.ts";
import type { Ingress } from "../../lib/k8s/objects.ts";
import { INGRESSES, LEASES, NAMESPACES } from "../../lib/k8s/resources.ts";
import {
  LeaderElector,
  type Lease,
  type LeaseClient,
  microTime,
} from "../../lib/publish/leader_election.ts";
import { StatusWriter } from "../../lib/publish/status_writer.ts";
import { adminClient, clientWithToken, freshNamespace } from "../support/kube.ts";
import { waitFor, within } from "../support/wait.ts";
import { defaultBackendIngress, webIngress } from "../support/fixture_objects.ts";
import { clientThrough, startRelay } from "../support/apiserver_relay.ts";
import { ownCluster } from "../support/reflector_harness.ts";
import { captureLogs } from "../support/captured_logs.ts";
import { controllerToken } from "../support/controller_identity.ts";
import { ROLE_BINDINGS } from "../support/rbac_resources.ts";
import {
  elector,
  ingressStatusOf,
  LEASE_MS,
  LEASE_NAME,
  RENEW_DEADLINE_MS,
  RETRY_MS,
  Timeline,
} from "../support/leader_world.ts";

/** Room for requests to a busy apiserver on a shared machine. */
const SLACK_MS = 600;

/** Counts leaders across replicas at every transition, to catch two at once. */
class LeadershipLog {
  current = new Set<string>();
  most = 0;
  readonly lines: string[] = [];
  started(identity: string): void {
    this.current.add(identity);
    this.most = Math.max(this.most, this.current.size);
    this.lines.push(`${identity} started`);
  }
  stopped(identity: string): void {
    this.current.delete(identity);
    this.lines.push(`${identity} stopped`);
  }
}

interface Replica {
  readonly identity: string;
  readonly elector: LeaderElector;
  readonly writer: StatusWriter;
  close(options?: { release?: boolean }): Promise<void>;
}

/** A replica with its own connection: an elector and a status writer publishing `address`. */
async function replica(
  identity: string,
  ns: string,
  address: string,
  log: LeadershipLog,
): Promise<Replica> {
  const { client, access } = await adminClient();
  // deno-lint-ignore prefer-const
  let writer: StatusWriter;
  const elector = new LeaderElector({
    client,
    namespace: ns,
    identity,
    leaseDurationMs: LEASE_MS,
    renewDeadlineMs: RENEW_DEADLINE_MS,
    retryPeriodMs: RETRY_MS,
    onStartedLeading: () => {
      log.started(identity);
      void writer.resync();
    },
    onStoppedLeading: () => log.stopped(identity),
  });
  writer = new StatusWriter({
    client,
    isLeader: () => elector.isLeader(),
    publishStatusAddresses: [address],
    holdOffMs: 0,
  });
  let closed: Promise<void> | undefined;
  return {
    identity,
    elector,
    writer,
    close(options = {}) {
      closed ??= (async () => {
        await elector.stop(options);
        await writer.close();
        access.close();
      })();
      return closed;
    },
  };
}

async function setUp(prefix: string) {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, prefix);
  await admin.client.create(INGRESSES, { namespace: ns }, defaultBackendIngress("web"));
  const log = new LeadershipLog();
  const a = await replica("replica-a", ns, "192.0.2.1", log);
  const b = await replica("replica-b", ns, "192.0.2.2", log);
  const sync = async (r: Replica) =>
    await r.writer.sync({
      ingresses: (await admin.client.listAll<Ingress>(INGRESSES, { namespace: ns })).items,
      owned: new Set([`${ns}/web`]),
    });
  return { admin, ns, log, a, b, sync };
}

function addressOf(r: Replica): string {
  return r.identity === "replica-a" ? "192.0.2.1" : "192.0.2.2";
}

Deno.test("two replicas: exactly one leads and writes status; a crashed leader is replaced within the lease duration", async () => {
  const { admin, ns, log, a, b, sync } = await setUp("elect-crash");
  try {
    a.elector.start();
    b.elector.start();
    const leader = await waitFor(
      "one replica to lead",
      () => a.elector.isLeader() ? a : b.elector.isLeader() ? b : undefined,
    );
    const follower = leader === a ? b : a;
    await waitFor(
      "the follower to see the leader",
      () => follower.elector.leader === leader.identity,
    );
    assertEquals(follower.elector.isLeader(), false);

    // Both sync the same state; only the leader writes.
    const [fromLeader, fromFollower] = await Promise.all([sync(leader), sync(follower)]);
    assertEquals(fromFollower, { written: 0, cleared: 0, failed: 0, notLeader: 1 });
    assertEquals(fromLeader.notLeader, 0);
    await waitFor(
      "the leader's status",
      async () => await ingressStatusOf(admin.client, ns) === addressOf(leader),
    );

    // Crash: the leader stops renewing and does not release.
    await leader.close({ release: false });
    const crashedAt = performance.now();
    await waitFor(
      "the follower to take over and publish",
      async () => await ingressStatusOf(admin.client, ns) === addressOf(follower),
      { timeoutMs: LEASE_MS + RETRY_MS + SLACK_MS + 2_000 },
    );
    const takeover = performance.now() - crashedAt;
    // Not before the old lease could have expired, not much after.
    assertBetween(
      takeover,
      LEASE_MS - RETRY_MS * 2,
      LEASE_MS + RETRY_MS * 1.2 + SLACK_MS,
      "takeover ms",
    );
    assertEquals(log.most, 1, `never two leaders at once: ${log.lines.join(", ")}`);
    const lease = await admin.client.get<Lease>(LEASES, { namespace: ns, name: "sluice-leader" });
    assertEquals(lease.spec?.holderIdentity, follower.identity);
    assertEquals(lease.spec?.leaseTransitions, 1);
    // deno-lint-ignore no-console
    console.log(`takeover after a crash: ${Math.round(takeover)} ms (lease ${LEASE_MS} ms)`);
  } finally {
    await a.close();
    await b.close();
    admin.access.close();
  }
});

Deno.test("two replicas: a released Lease is taken over at once", async () => {
  const { admin, log, a, b } = await setUp("elect-release");
  try {
    a.elector.start();
    await waitFor("a to lead", () => a.elector.isLeader());
    b.elector.start();
    await waitFor("b to see a lead", () => b.elector.leader === a.identity);
    await a.close(); // releases
    const releasedAt = performance.now();
    await waitFor("b to lead", () => b.elector.isLeader(), { timeoutMs: LEASE_MS });
    const takeover = performance.now() - releasedAt;
    assert(takeover < RETRY_MS * 1.2 + SLACK_MS, `took over ${takeover} ms after the release`);
    assertEquals(log.most, 1);
    assertEquals(log.lines, ["replica-a started", "replica-a stopped", "replica-b started"]);
    // deno-lint-ignore no-console
    console.log(`takeover after a release: ${Math.round(takeover)} ms`);
  } finally {
    await a.close();
    await b.close();
    admin.access.close();
  }
});

Deno.test("a leader whose Lease is taken stops leading and writing status at once", async () => {
  const { admin, ns, log, a, b, sync } = await setUp("elect-steal");
  try {
    await b.close(); // one replica is enough here
    a.elector.start();
    await waitFor("a to lead", () => a.elector.isLeader());
    await sync(a);
    await waitFor(
      "a's status",
      async () => await ingressStatusOf(admin.client, ns) === "192.0.2.1",
    );

    // The admin writes another holder into the Lease.
    const lease = await admin.client.get<Lease>(LEASES, { namespace: ns, name: "sluice-leader" });
    await admin.client.update(LEASES, { namespace: ns, name: "sluice-leader" }, {
      ...lease,
      spec: { ...lease.spec, holderIdentity: "intruder", leaseDurationSeconds: 30 },
    });
    const stolenAt = performance.now();
    await waitFor("a to stop leading", () => !log.current.has("replica-a"), {
      timeoutMs: RETRY_MS + SLACK_MS + 1_000,
    });
    const noticed = performance.now() - stolenAt;
    assert(noticed < RETRY_MS + SLACK_MS, `noticed after ${noticed} ms`);
    assertEquals(a.elector.isLeader(), false);
    assertEquals(a.elector.leader, "intruder");
    // deno-lint-ignore no-console
    console.log(`stolen Lease noticed after ${Math.round(noticed)} ms`);

    // Someone wipes the status: a no longer writes it back.
    await admin.client.patch(INGRESSES, { namespace: ns, name: "web", subresource: "status" }, {
      status: { loadBalancer: null },
    });
    const before = await admin.client.get<Ingress>(INGRESSES, { namespace: ns, name: "web" });
    assertEquals(await sync(a), { written: 0, cleared: 0, failed: 0, notLeader: 1 });
    const after = await admin.client.get<Ingress>(INGRESSES, { namespace: ns, name: "web" });
    assertEquals(after.metadata?.resourceVersion, before.metadata?.resourceVersion);
    const held = await admin.client.get<Lease>(LEASES, { namespace: ns, name: "sluice-leader" });
    assertEquals(held.spec?.holderIdentity, "intruder");
  } finally {
    await a.close();
    await b.close();
    admin.access.close();
  }
});

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

async function holderOf(client: KubeClient, ns: string): Promise<string | undefined> {
  try {
    const lease = await client.get<Lease>(LEASES, { namespace: ns, name: LEASE_NAME });
    return lease.spec?.holderIdentity ?? "";
  } catch (error) {
    if (error instanceof KubeApiError && error.isNotFound) return undefined;
    throw error;
  }
}

Deno.test("a leader cut off by a partition stops leading within its renew deadline, before a follower can take over", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hc-partition");
  await using relay = startRelay(admin.client.server);
  // HTTP/1.1, so that a request abandoned at the deadline takes its dead connection with it.
  const cut = await clientThrough(relay, { http2: false });
  const timeline = new Timeline();
  const a = elector(cut.client, { namespace: ns, identity: "a", timeline });
  const b = elector(admin.client, { namespace: ns, identity: "b", timeline });
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
    const a = elector(cut.client, { namespace: ns, identity: "a", timeline });
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

Deno.test("a leader whose apiserver stops steps down within its renew deadline, writes nothing meanwhile, and leads again after the restart", async () => {
  const own = await ownCluster();
  using logs = captureLogs();
  const ns = "sluice";
  await own.client.create(NAMESPACES, {}, { metadata: { name: ns } });
  await own.client.create(INGRESSES, { namespace: ns }, webIngress("web"));
  const timeline = new Timeline();
  const a = elector(own.client, { namespace: ns, identity: "a", timeline, logger: logs.logger });
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
    assertEquals(await ingressStatusOf(own.client, ns), "192.0.2.8");
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
  const a = elector(leases.client, { namespace: ns, identity: "a", timeline, logger: logs.logger });
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
  const a = elector(admin.client, { namespace: ns, identity: "a", timeline });
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
  const a = elector(admin.client, { namespace: ns, identity: "a", timeline });
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
  const a = elector(leases.client, { namespace: ns, identity: "a", timeline });
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
  const a = elector(admin.client, { namespace: ns, identity: "a", timeline, logger: logs.logger });
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
  const a = elector(cut.client, { namespace: ns, identity: "a", timeline });
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

function electorFor(client: KubeClient, ns: string, identity: string, log: string[]) {
  return new LeaderElector({
    client,
    namespace: ns,
    identity,
    leaseDurationMs: LEASE_MS,
    renewDeadlineMs: RENEW_DEADLINE_MS,
    retryPeriodMs: RETRY_MS,
    onStartedLeading: () => log.push("started"),
    onStoppedLeading: (reason) => log.push(`stopped: ${reason}`),
  });
}

Deno.test({
  name: "a leader whose Lease is deleted re-creates it and keeps leading",
  async fn() {
    const admin = await adminClient();
    const ns = await freshNamespace(admin.client, "hostile-lease-del");
    const log: string[] = [];
    const elector = electorFor(admin.client, ns, "replica-a", log);
    try {
      elector.start();
      await waitFor("a to lead", () => elector.isLeader());
      await admin.client.delete(LEASES, { namespace: ns, name: LEASE_NAME });
      await waitFor("the Lease to be re-created", async () => {
        try {
          const lease = await admin.client.get<Lease>(LEASES, { namespace: ns, name: LEASE_NAME });
          return lease.spec?.holderIdentity === "replica-a";
        } catch (error) {
          if (error instanceof KubeApiError && error.isNotFound) return false;
          throw error;
        }
      }, { timeoutMs: 5_000 });
      // Nobody else could have taken it: leadership should never have lapsed.
      assertEquals(log, ["started"]);
    } finally {
      await elector.stop();
      admin.access.close();
    }
  },
});

Deno.test("a Lease held by a silent holder whose renewTime is a day in the future is taken over after its duration", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hostile-lease-skew");
  const log: string[] = [];
  const future = microTime(Date.now() + 86_400_000);
  await admin.client.create(LEASES, { namespace: ns }, {
    apiVersion: "coordination.k8s.io/v1",
    kind: "Lease",
    metadata: { name: LEASE_NAME },
    spec: {
      holderIdentity: "ghost \u2603 with spaces and a very long name ".repeat(6),
      leaseDurationSeconds: 1,
      acquireTime: future,
      renewTime: future,
      leaseTransitions: 7,
    },
  });
  const elector = electorFor(admin.client, ns, "replica-a", log);
  try {
    const start = performance.now();
    elector.start();
    await waitFor("a to lead", () => elector.isLeader(), { timeoutMs: 5_000 });
    const took = performance.now() - start;
    // Held for one second from our first observation, not until the written renewTime.
    assert(took >= 1_000 - RETRY_MS, `took over after ${took} ms`);
    const lease = await admin.client.get<Lease>(LEASES, { namespace: ns, name: LEASE_NAME });
    assertEquals(lease.spec?.holderIdentity, "replica-a");
    assertEquals(lease.spec?.leaseTransitions, 8);
    assertEquals(lease.spec?.leaseDurationSeconds, 2);
  } finally {
    await elector.stop();
    admin.access.close();
  }
});

Deno.test("the API refuses a Lease with a negative or zero leaseDurationSeconds", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hostile-lease-neg");
  try {
    for (const seconds of [-5, 0]) {
      const error = await assertRejects(() =>
        admin.client.create(LEASES, { namespace: ns }, {
          apiVersion: "coordination.k8s.io/v1",
          kind: "Lease",
          metadata: { name: `neg${seconds < 0 ? "m" : "z"}` },
          spec: { holderIdentity: "x", leaseDurationSeconds: seconds },
        })
      );
      assert(error instanceof KubeApiError && error.status === 422, String(error));
    }
  } finally {
    admin.access.close();
  }
});
