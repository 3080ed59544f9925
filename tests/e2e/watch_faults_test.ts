/**
 * Watch faults end to end, on an apiserver of this test's own (the shared
 * one must keep running): the apiserver stopped while Sluice serves, traffic
 * still flowing on the last snapshot and Sluice still ready; the apiserver
 * restarted on the same data, and Sluice catching up with a change made
 * after the restart.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/e2e/watch_faults_test.ts
 *
 * @module
 */
import { assertEquals } from "../support/assert.ts";
import { apply } from "../support/manifests.ts";
import { createTestHost } from "../support/netns.ts";
import { waitFor } from "../support/wait.ts";
import { buildCluster, type RunningCluster, startCluster } from "../cluster/harness.ts";
import {
  assertRunning,
  e2eWorld,
  HostClient,
  hostIngress,
  logsWith,
  webBackend,
  withController,
} from "./cluster_fixture.ts";

Deno.test("Sluice keeps serving its last snapshot while the apiserver is down and catches up after a restart", async () => {
  const bin = await buildCluster();
  let cluster: RunningCluster = await startCluster(bin, { workloads: false });
  const port = Number(new URL(cluster.server).port);
  const workDir = cluster.workDir;
  try {
    const world = await e2eWorld("e2e-faults", { kubeconfig: cluster.kubeconfig });
    const { admin, ns, at, controllerName, credentials } = world;
    try {
      await using host = await createTestHost({ name: "pod-web" });
      using http = new HostClient();
      await webBackend(admin.client, at, host);
      await apply(
        admin.client,
        hostIngress("before", { className: ns, host: "before.e2e.test", service: "web" }),
        at,
      );
      await withController(
        { credentials, controllerName, electionNamespace: ns },
        async (sluice, exit) => {
          assertEquals((await http.get(sluice.httpPort, "before.e2e.test")).pod, "web-1");

          await cluster.stop();
          // Sluice noticed: its watches fail and retry with a backoff.
          await waitFor(
            "Sluice to notice the apiserver is gone",
            () => logsWith(sluice, "retrying after a backoff").length > 0,
            { timeoutMs: 15_000 },
          );
          // Still serving the last snapshot, and still ready.
          for (let i = 0; i < 20; i++) {
            assertEquals((await http.get(sluice.httpPort, "before.e2e.test")).pod, "web-1");
          }
          const readyz = await fetch(`http://127.0.0.1:${sluice.healthPort}/readyz`);
          await readyz.body?.cancel();
          assertEquals(readyz.status, 200);

          cluster = await startCluster(bin, { workDir, port, workloads: false });
          // A change made after the restart is served: the watches resumed (or relisted).
          await apply(
            admin.client,
            hostIngress("after", { className: ns, host: "after.e2e.test", service: "web" }),
            at,
          );
          await waitFor(
            "the Ingress created after the restart to be served",
            async () => (await http.get(sluice.httpPort, "after.e2e.test")).pod === "web-1",
            { timeoutMs: 45_000, intervalMs: 100 },
          );
          assertEquals((await http.get(sluice.httpPort, "before.e2e.test")).pod, "web-1");
          assertRunning(sluice, exit);
        },
      );
    } finally {
      await world.close();
    }
  } finally {
    await cluster.stop();
    await Deno.remove(workDir, { recursive: true }).catch(() => {});
  }
});
