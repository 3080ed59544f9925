/**
 * Two Sluice replicas with leader election, as real processes against the
 * real apiserver: both serve traffic, only the leader writes Ingress status,
 * and when the leader is killed (SIGKILL, so it cannot release its Lease)
 * the other takes over within the lease duration without a restart.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/e2e/leader_election_test.ts
 *
 * @module
 */
import { assert, assertEquals } from "../support/assert.ts";
import { apply } from "../support/manifests.ts";
import { waitFor } from "../support/wait.ts";
import type { KubeClient } from "../../lib/k8s/kube_client.ts";
import { LEASES } from "../../lib/k8s/resources.ts";
import type { SluiceProcess } from "../support/sluice_process.ts";
import {
  e2eWorld,
  HostClient,
  hostIngress,
  logsWith,
  service,
  startController,
  statusOf,
  withLogsOnFailure,
} from "./cluster_fixture.ts";

/** The lease duration Sluice uses (`lib/publish/leader_election.ts`). */
const LEASE_DURATION_MS = 15_000;
/** Its retry period, jittered by up to +20 % while not leading. */
const RETRY_PERIOD_MS = 2_400;

async function holder(client: KubeClient, ns: string, name: string): Promise<string | undefined> {
  try {
    const lease = await client.get<{ spec?: { holderIdentity?: string } }>(LEASES, {
      namespace: ns,
      name,
    });
    return lease.spec?.holderIdentity || undefined;
  } catch {
    return undefined;
  }
}

Deno.test("Only the leader replica writes Ingress status, and the other takes over within the lease duration when it is killed", async () => {
  const world = await e2eWorld("e2e-leader");
  const { admin, ns, at, controllerName, credentials } = world;
  using http = new HostClient();
  const replicas = new Map<string, { sluice: SluiceProcess; address: string }>();
  const logs = () => [...replicas].map(([pod, r]) => [pod, r.sluice] as const);
  try {
    await withLogsOnFailure(logs, async () => {
      await apply(admin.client, service("web", 8080), at);
      await apply(
        admin.client,
        hostIngress("web", { className: ns, host: "web.e2e.test", service: "web" }),
        at,
      );
      const start = async (pod: string, address: string) => {
        const sluice = await startController({
          credentials,
          controllerName,
          electionNamespace: ns,
          podName: pod,
          extraArgs: [
            "--election-id=e2e-leader",
            `--publish-status-address=${address}`,
            "--log-level=debug",
          ],
        });
        replicas.set(pod, { sluice, address });
      };
      await Promise.all([start("sluice-a", "192.0.2.11"), start("sluice-b", "192.0.2.12")]);
      await Promise.all([...replicas.values()].map((r) => r.sluice.ready()));

      const leaderIdentity = await waitFor(
        "a replica to hold the Lease",
        () => holder(admin.client, ns, "e2e-leader"),
      );
      const leaderPod = leaderIdentity.replace(/_[0-9a-f]{8}$/, "");
      const followerPod = leaderPod === "sluice-a" ? "sluice-b" : "sluice-a";
      const leader = replicas.get(leaderPod);
      const follower = replicas.get(followerPod);
      assert(leader !== undefined && follower !== undefined, `leader ${leaderIdentity}`);
      await waitFor(
        "the leader's address in the Ingress status",
        async () => (await statusOf(admin.client, ns, "web")).join() === leader.address,
      );

      // Both replicas serve; a new Ingress is routed by both and gets the leader's status.
      await apply(
        admin.client,
        hostIngress("web-2", { className: ns, host: "web-2.e2e.test", service: "web" }),
        at,
      );
      for (const { sluice } of replicas.values()) {
        // 503: routed, but the Service has no endpoints (404 would mean no route).
        await waitFor(
          "both replicas to route the new Ingress",
          async () => (await http.get(sluice.httpPort, "web-2.e2e.test")).status === 503,
        );
      }
      await waitFor(
        "the leader's address on the new Ingress",
        async () => (await statusOf(admin.client, ns, "web-2")).join() === leader.address,
      );
      assertEquals(await statusOf(admin.client, ns, "web"), [leader.address]);
      assert(logsWith(leader.sluice, "Wrote the status of Ingress").length >= 2);
      assertEquals(logsWith(follower.sluice, "Wrote the status of Ingress"), []);

      // The leader dies without releasing the Lease: the follower takes over.
      const killed = performance.now();
      await leader.sluice.stop("SIGKILL");
      await waitFor(
        "the follower's address in the Ingress status",
        async () => (await statusOf(admin.client, ns, "web")).join() === follower.address,
        { timeoutMs: LEASE_DURATION_MS + 4 * RETRY_PERIOD_MS, intervalMs: 100 },
      );
      const takeoverMs = performance.now() - killed;
      // The Lease expires at most LEASE_DURATION after the leader's last renewal (before the
      // kill); the follower notices at its next retry; then it writes status.
      assert(
        takeoverMs <= LEASE_DURATION_MS + RETRY_PERIOD_MS + 1_000,
        `took over after ${Math.round(takeoverMs)} ms`,
      );
      assertEquals(await statusOf(admin.client, ns, "web-2"), [follower.address]);
      assert((await holder(admin.client, ns, "e2e-leader"))?.startsWith(`${followerPod}_`));
      assert(logsWith(follower.sluice, "Wrote the status of Ingress").length >= 2);
      // It kept serving throughout, without a restart.
      assertEquals((await http.get(follower.sluice.httpPort, "web.e2e.test")).status, 503);
    });
  } finally {
    await Promise.all([...replicas.values()].map((r) => r.sluice.stop()));
    await world.close();
  }
});
