import { assert, assertEquals, assertThrows } from "../../tests/support/assert.ts";
import { waitFor } from "../../tests/support/wait.ts";
import { KubeApiError } from "../k8s/kube_client.ts";
import { captureLogs } from "../../tests/support/captured_logs.ts";
import {
  LeaderElector,
  leaderIdentity,
  type Lease,
  type LeaseClient,
  microTime,
} from "./leader_election.ts";

/** An in-memory Lease API with optimistic concurrency; `hang` makes requests wait for their abort. */
class FakeLeases {
  lease: Lease | undefined;
  #version = 0;
  hang = false;
  requests = 0;

  client(): LeaseClient {
    const call = <T>(signal: AbortSignal | undefined, answer: () => T): Promise<T> => {
      this.requests++;
      if (!this.hang) {
        try {
          return Promise.resolve(structuredClone(answer()));
        } catch (e) {
          return Promise.reject(e);
        }
      }
      return new Promise((_, reject) => {
        signal?.addEventListener("abort", () => reject(new Error("Cannot get: aborted")));
      });
    };
    return {
      get: <T>(_r: unknown, _at: unknown, options: { signal?: AbortSignal } = {}) =>
        call(options.signal, () => {
          if (this.lease === undefined) throw new KubeApiError("get", 404, { reason: "NotFound" });
          return this.lease as T;
        }),
      create: <T>(
        _r: unknown,
        _at: unknown,
        object: unknown,
        options: { signal?: AbortSignal } = {},
      ) =>
        call(options.signal, () => {
          if (this.lease !== undefined) {
            throw new KubeApiError("create", 409, { reason: "AlreadyExists" });
          }
          return this.#store(object as Lease) as T;
        }),
      update: <T>(
        _r: unknown,
        _at: unknown,
        object: unknown,
        options: { signal?: AbortSignal } = {},
      ) =>
        call(options.signal, () => {
          const sent = object as Lease;
          if (sent.metadata?.resourceVersion !== this.lease?.metadata?.resourceVersion) {
            throw new KubeApiError("update", 409, { reason: "Conflict" });
          }
          return this.#store(sent) as T;
        }),
    } as LeaseClient;
  }

  /** Writes the Lease as an outsider would. */
  steal(holder: string, seconds: number): void {
    this.#store({
      ...this.lease,
      spec: { ...this.lease?.spec, holderIdentity: holder, leaseDurationSeconds: seconds },
    });
  }

  #store(lease: Lease): Lease {
    this.lease = {
      ...lease,
      metadata: { ...lease.metadata, resourceVersion: String(++this.#version) },
    };
    return this.lease;
  }
}

const FAST = { leaseDurationMs: 1_000, renewDeadlineMs: 300, retryPeriodMs: 50 };

function elector(leases: FakeLeases, identity: string, log: string[]) {
  return new LeaderElector({
    client: leases.client(),
    namespace: "sluice",
    identity,
    ...FAST,
    onStartedLeading: () => log.push(`${identity} started`),
    onStoppedLeading: (reason) => log.push(`${identity} stopped: ${reason}`),
  });
}

Deno.test("leaderIdentity() appends a random suffix to the host name", () => {
  assertEquals(leaderIdentity("pod-a", { randomBytes: (b) => b.fill(171) }), "pod-a_abababab");
  assert(leaderIdentity("pod-a") !== leaderIdentity("pod-a"));
});

Deno.test("microTime() writes six fractional digits as the API's MicroTime requires", () => {
  assertEquals(microTime(Date.UTC(2024, 4, 1, 10, 0, 0, 123)), "2024-05-01T10:00:00.123000Z");
});

Deno.test("LeaderElector refuses a renew deadline that does not fit the lease duration", () => {
  assertThrows(() =>
    new LeaderElector({
      client: new FakeLeases().client(),
      namespace: "n",
      leaseDurationMs: 1_000,
      renewDeadlineMs: 1_000,
    })
  );
});

Deno.test("LeaderElector creates a missing Lease and renews it", async () => {
  const leases = new FakeLeases();
  const log: string[] = [];
  const a = elector(leases, "a", log);
  a.start();
  await waitFor("a to lead", () => a.isLeader());
  assertEquals(leases.lease?.spec?.holderIdentity, "a");
  assertEquals(leases.lease?.spec?.leaseDurationSeconds, 1);
  const renewed = leases.lease?.spec?.renewTime;
  await waitFor("a renewal", () => leases.lease?.spec?.renewTime !== renewed);
  assertEquals(leases.lease?.spec?.leaseTransitions, 0);
  await a.stop();
  assertEquals(leases.lease?.spec?.holderIdentity, "");
  assertEquals(log, ["a started", "a stopped: stopping"]);
});

Deno.test("LeaderElector stops leading at once when renewing hangs past the renew deadline", async () => {
  const leases = new FakeLeases();
  const log: string[] = [];
  const a = elector(leases, "a", log);
  a.start();
  await waitFor("a to lead", () => a.isLeader());
  leases.hang = true;
  const hungAt = performance.now();
  await waitFor("a to stop leading", () => log.length === 2, { timeoutMs: 2_000 });
  const after = performance.now() - hungAt;
  assert(after <= FAST.renewDeadlineMs + 100, `stopped ${after} ms after renewals hung`);
  assertEquals(log[1], "a stopped: no renewal within 300 ms");
  assertEquals(a.isLeader(), false);
  leases.hang = false;
  // Still competing: the Lease still names it, so it leads again without a restart.
  await waitFor("a to lead again", () => a.isLeader());
  await a.stop({ release: false });
});

Deno.test("LeaderElector stops leading at once when another holder appears", async () => {
  const leases = new FakeLeases();
  const log: string[] = [];
  const a = elector(leases, "a", log);
  a.start();
  await waitFor("a to lead", () => a.isLeader());
  leases.steal("intruder", 60);
  await waitFor("a to stop leading", () => !a.isLeader(), { timeoutMs: 1_000 });
  assertEquals(log, ["a started", 'a stopped: the Lease is held by "intruder"']);
  assertEquals(a.leader, "intruder");
  await a.stop();
  assertEquals(
    leases.lease?.spec?.holderIdentity,
    "intruder",
    "a released nothing it did not hold",
  );
});

Deno.test("LeaderElector takes over an abandoned Lease after its duration, counting a transition", async () => {
  const leases = new FakeLeases();
  const log: string[] = [];
  const a = elector(leases, "a", log);
  const b = elector(leases, "b", log);
  a.start();
  await waitFor("a to lead", () => a.isLeader());
  b.start();
  await waitFor("b to see a", () => b.leader === "a");
  await a.stop({ release: false });
  const stoppedAt = performance.now();
  await waitFor("b to lead", () => b.isLeader(), { timeoutMs: 3_000 });
  const took = performance.now() - stoppedAt;
  assert(took >= FAST.leaseDurationMs - 2 * FAST.retryPeriodMs, `took over after ${took} ms`);
  assertEquals(leases.lease?.spec?.leaseTransitions, 1);
  await b.stop();
  assertEquals(log, ["a started", "a stopped: stopping", "b started", "b stopped: stopping"]);
});

// Was a bug: the leader's log said the Lease "is held by" its own identity before "Started
// leading", and "is held by nobody" as it released the Lease.
Deno.test("LeaderElector logs others holding the Lease, never itself: it says it started leading and released", async () => {
  using logs = captureLogs();
  const leases = new FakeLeases();
  leases.steal("other", 1);
  const a = new LeaderElector({
    client: leases.client(),
    namespace: "sluice",
    identity: "a",
    ...FAST,
    logger: logs.logger,
  });
  a.start();
  await waitFor("a to lead", () => a.isLeader(), { timeoutMs: 3_000 });
  await a.stop();
  assertEquals(logs.lines(), [
    "info: Lease sluice/sluice-leader is held by other",
    "info: Started leading Lease sluice/sluice-leader as a",
    "info: Stopped leading Lease sluice/sluice-leader: stopping",
    "info: Released Lease sluice/sluice-leader",
  ]);
});
