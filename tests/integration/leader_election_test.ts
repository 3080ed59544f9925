/**
 * Two replicas competing for one Lease on the real kube-apiserver: exactly one
 * leads and writes status; a crashed leader is replaced within the lease
 * duration, a released Lease at once; a leader whose Lease is taken stops
 * leading and writing at once.
 *
 * Short durations: lease 2 s (the API counts whole seconds), renew deadline
 * 1 s, retry period 0.25 s.
 *
 * @module
 */
import { assert, assertBetween, assertEquals } from "../support/assert.ts";
import type { KubeClient } from "../../lib/k8s/kube_client.ts";
import type { Ingress } from "../../lib/k8s/objects.ts";
import { INGRESSES, LEASES } from "../../lib/k8s/resources.ts";
import { LeaderElector, type Lease } from "../../lib/publish/leader_election.ts";
import { StatusWriter } from "../../lib/publish/status_writer.ts";
import { adminClient, freshNamespace } from "../support/kube.ts";
import { waitFor } from "../support/wait.ts";

const LEASE_MS = 2_000;
const RENEW_DEADLINE_MS = 1_000;
const RETRY_MS = 250;
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

async function statusOf(client: KubeClient, ns: string): Promise<string> {
  const ingress = await client.get<Ingress>(INGRESSES, { namespace: ns, name: "web" });
  return (ingress.status?.loadBalancer?.ingress ?? []).map((a) => a.ip ?? a.hostname).join(",");
}

async function setUp(prefix: string) {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, prefix);
  await admin.client.create(INGRESSES, { namespace: ns }, {
    apiVersion: "networking.k8s.io/v1",
    kind: "Ingress",
    metadata: { name: "web" },
    spec: { defaultBackend: { service: { name: "web", port: { number: 80 } } } },
  });
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
      async () => await statusOf(admin.client, ns) === addressOf(leader),
    );

    // Crash: the leader stops renewing and does not release.
    await leader.close({ release: false });
    const crashedAt = performance.now();
    await waitFor(
      "the follower to take over and publish",
      async () => await statusOf(admin.client, ns) === addressOf(follower),
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
    await waitFor("a's status", async () => await statusOf(admin.client, ns) === "192.0.2.1");

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
