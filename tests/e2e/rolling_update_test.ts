/**
 * A Deployment rolled, scaled and disrupted under load through Sluice, with
 * every piece real: the Deployment and ReplicaSet controllers of
 * kube-controller-manager make and delete the Pods, the pod runner runs
 * `traefik/whoami` in them (which, like the image, exits at once on
 * SIGTERM: no preStop sleep, no draining), the EndpointSlice controller
 * follows their readiness, and the real kubectl drives it all. 200 requests
 * a second, half on keep-alive connections and half on fresh ones, must all
 * answer 200 (Sluice retries an idempotent request on another endpoint when
 * one refuses or resets it before answering).
 *
 * Ignored, with the reason printed, where the pod runner is off (not root).
 *
 * @module
 */
import { assertEquals } from "../support/assert.ts";
import { quantile, startPacedTraffic } from "../support/paced_traffic.ts";
import { waitFor } from "../support/wait.ts";
import {
  kubectl,
  kubectlApply,
  podsOf,
  podsUnavailable,
  readyPods,
  rolloutStatus,
  selectorService,
  whoamiDeployment,
} from "../support/workloads.ts";
import { e2eWorld, HostClient, hostIngress, withController } from "./cluster_fixture.ts";

const HOST = "rolling.pods.test";
const RATE = 200;

Deno.test({
  name: "A rolling restart, a scale 3→1→3 and a deleted Pod under 200 req/s lose no request",
  ignore: podsUnavailable() !== undefined,
  async fn() {
    const world = await e2eWorld("rolling");
    try {
      const { client } = world.admin;
      const ns = world.ns;
      /** Waits until the Deployment has `n` Pods, all Ready, none terminating or left over. */
      const settled = (n: number) => readyPods(client, ns, "web", n, 90_000);
      await kubectlApply(ns, [
        whoamiDeployment("web", { replicas: 3, readinessPeriodSeconds: 1 }),
        selectorService("web"),
        hostIngress("web", { className: world.className, host: HOST, service: "web" }),
      ]);
      await readyPods(client, ns, "web", 3);
      await withController({
        credentials: world.credentials,
        controllerName: world.controllerName,
        electionNamespace: ns,
      }, async (sluice) => {
        using http = new HostClient();
        await waitFor("Sluice to serve the Deployment", async () => {
          return (await http.get(sluice.httpPort, HOST)).status === 200;
        }, { timeoutMs: 15_000 });

        const traffic = startPacedTraffic({
          port: sluice.httpPort,
          host: HOST,
          rate: RATE,
          maxRequests: RATE * 120,
        });
        const phases: { name: string; from: number; to: number }[] = [];
        const phase = async (name: string, body: () => Promise<unknown>) => {
          const from = performance.now();
          await body();
          phases.push({ name, from, to: performance.now() });
        };
        try {
          await waitFor("traffic to flow", () => traffic.results.length >= RATE / 2);
          await phase("rollout restart", async () => {
            await kubectl(["rollout", "restart", "deployment/web", "-n", ns]);
            await rolloutStatus(ns, "web");
            await settled(3);
          });
          await phase("scale 3→1", async () => {
            await kubectl(["scale", "deployment/web", "-n", ns, "--replicas=1"]);
            await settled(1);
          });
          await phase("scale 1→3", async () => {
            await kubectl(["scale", "deployment/web", "-n", ns, "--replicas=3"]);
            await settled(3);
          });
          await phase("pod deleted", async () => {
            const [victim] = await podsOf(client, ns, "web");
            await kubectl(["delete", "pod", victim!.metadata!.name!, "-n", ns, "--wait=true"]);
            await settled(3);
          });
          const end = performance.now() + 1_000;
          await waitFor("a last second of traffic", () => performance.now() >= end);
        } finally {
          await traffic.stop();
        }

        const results = traffic.results;
        const failures = results.filter((r) => r.failure !== undefined);
        const report = (name: string, from: number, to: number) => {
          const during = results.filter((r) => r.start >= from && r.start < to);
          const ms = during.map((r) => r.ms);
          return `${name.padEnd(16)} ${String(during.length).padStart(6)} requests, ${
            during.filter((r) => r.failure).length
          } failed, p50 ${quantile(ms, 0.5).toFixed(1)} ms, p99 ${
            quantile(ms, 0.99).toFixed(1)
          } ms, ${((to - from) / 1000).toFixed(1)} s`;
        };
        // deno-lint-ignore no-console
        console.log(
          [
            `rolling update under ${RATE} req/s (keep-alive and fresh connections alternating):`,
            ...phases.map((p) => "  " + report(p.name, p.from, p.to)),
            "  " + report("all", results[0]?.start ?? 0, performance.now()),
            `  pods answering: ${new Set(results.map((r) => r.hostname)).size}`,
            ...(failures.length
              ? [
                `  failures: ${
                  JSON.stringify(failures.slice(0, 10).map((f) => [f.kind, f.failure]))
                }`,
              ]
              : []),
          ].join("\n"),
        );
        assertEquals(failures.length, 0, "every request answered 200");
      });
    } finally {
      await world.close();
    }
  },
});
