/**
 * Adversarial publishing against the real kube-apiserver: a Lease deleted or
 * skewed under the elector, Lease fields the API refuses, status writes to a
 * deleted Ingress or refused by validation, and Events whose message is far
 * beyond the usual length.
 *
 * Short durations as in `leader_election_test.ts`: lease 2 s, renew deadline
 * 1 s, retry period 0.25 s.
 *
 * @module
 */
import { assert, assertEquals, assertRejects } from "../support/assert.ts";
import { KubeApiError, type KubeClient, type KubeObject } from "../../lib/k8s/kube_client.ts";
import type { Ingress } from "../../lib/k8s/objects.ts";
import { EVENTS, INGRESSES, LEASES } from "../../lib/k8s/resources.ts";
import { EventRecorder } from "../../lib/publish/event_recorder.ts";
import { LeaderElector, type Lease, microTime } from "../../lib/publish/leader_election.ts";
import { StatusWriter, type StatusWriterOptions } from "../../lib/publish/status_writer.ts";
import type { Issue } from "../../lib/translate/issues.ts";
import { adminClient, freshNamespace } from "../support/kube.ts";
import { waitFor } from "../support/wait.ts";

const LEASE_MS = 2_000;
const RENEW_DEADLINE_MS = 1_000;
const RETRY_MS = 250;
const LEASE_NAME = "sluice-leader";

async function createIngress(client: KubeClient, ns: string, name: string): Promise<Ingress> {
  return await client.create<Ingress>(INGRESSES, { namespace: ns }, {
    apiVersion: "networking.k8s.io/v1",
    kind: "Ingress",
    metadata: { name },
    spec: { defaultBackend: { service: { name: "web", port: { number: 80 } } } },
  });
}

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

Deno.test("StatusWriter counts a write to an Ingress deleted meanwhile as gone, not failed, and does not retry it", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hostile-status-gone");
  const { writer, patches } = countingWriter(admin.client, {
    publishStatusAddresses: ["192.0.2.1"],
    retryMs: { min: 50, max: 50 },
  });
  try {
    const stale = await createIngress(admin.client, ns, "web");
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
      const web = await createIngress(admin.client, ns, "web");
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

interface CoreEventObject extends KubeObject {
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
    const events = (await admin.client.listAll<CoreEventObject>(EVENTS, { namespace: ns })).items;
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
