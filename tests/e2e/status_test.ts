/**
 * Ingress status from `--publish-service`, end to end: Sluice writes the
 * Service's cluster IP, follows the Service when it gets a load-balancer
 * address (a change that alters no route, so no rebuild announces it), and
 * clears the status of an Ingress that leaves its class.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/e2e/status_test.ts
 *
 * @module
 */
import { assert, assertEquals } from "../support/assert.ts";
import { apply } from "../support/manifests.ts";
import { waitFor } from "../support/wait.ts";
import type { KubeObject } from "../../lib/k8s/kube_client.ts";
import type { Service } from "../../lib/k8s/objects.ts";
import { SERVICES } from "../../lib/k8s/resources.ts";
import { e2eWorld, hostIngress, service, statusOf, withController } from "./cluster_fixture.ts";

Deno.test("Ingress status follows the --publish-service Service, and is cleared when the Ingress leaves the class", async () => {
  const world = await e2eWorld("e2e-status");
  const { admin, ns, at, controllerName, credentials } = world;
  try {
    const lb = await admin.client.create<Service>(SERVICES, at, {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name: "sluice-lb" },
      spec: { type: "LoadBalancer", ports: [{ name: "http", port: 80, targetPort: 8080 }] },
    } as KubeObject);
    const clusterIp = lb.spec?.clusterIP;
    assert(typeof clusterIp === "string" && clusterIp !== "", "the apiserver assigns a cluster IP");
    await apply(admin.client, service("web", 8080), at);
    await apply(
      admin.client,
      hostIngress("web", { className: ns, host: "web.e2e.test", service: "web" }),
      at,
    );
    await withController({
      credentials,
      controllerName,
      electionNamespace: ns,
      extraArgs: [`--publish-service=${ns}/sluice-lb`],
    }, async () => {
      await waitFor(
        "the cluster IP in the Ingress status",
        async () => (await statusOf(admin.client, ns, "web")).join() === clusterIp,
      );

      // A load balancer appears: no route changes, yet the status follows within seconds.
      await admin.client.patch(SERVICES, {
        namespace: ns,
        name: "sluice-lb",
        subresource: "status",
      }, {
        status: { loadBalancer: { ingress: [{ ip: "192.0.2.50" }] } },
      });
      await waitFor(
        "the load-balancer address in the Ingress status",
        async () => (await statusOf(admin.client, ns, "web")).join() === "192.0.2.50",
        { timeoutMs: 5_000 },
      );

      // The Ingress leaves our class: its status is cleared.
      await apply(
        admin.client,
        hostIngress("web", { className: "someone-else", host: "web.e2e.test", service: "web" }),
        at,
      );
      await waitFor(
        "the status to be cleared",
        async () => (await statusOf(admin.client, ns, "web")).length === 0,
      );
      assertEquals(await statusOf(admin.client, ns, "web"), []);
    });
  } finally {
    await world.close();
  }
});
