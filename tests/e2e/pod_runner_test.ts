/**
 * The test cluster's pod runner, end to end against the real apiserver and
 * kube-controller-manager: a Pod's lifecycle (pending → running → ready →
 * terminating → gone) as the API reports it, what runs inside (its own
 * address, hostname and downward-API environment, containers sharing one
 * network), the grace period, an image it cannot run, and — through Sluice —
 * readiness taking a Pod in and out of rotation.
 *
 * Ignored, with the reason printed, where the pod runner is off (not root).
 *
 * @module
 */
import type { KubeObject } from "../../lib/k8s/kube_client.ts";
import { PODS } from "../support/core_resources.ts";
import type { SluiceProcess } from "../support/sluice_process.ts";
import { assert, assertEquals, assertMatch } from "../support/assert.ts";
import { waitFor, within } from "../support/wait.ts";
import {
  condition,
  kubectl,
  kubectlApply,
  type Pod,
  podsOf,
  podsUnavailable,
  readyPods,
  selectorService,
  whoamiDeployment,
} from "../support/workloads.ts";
import {
  type E2EWorld,
  e2eWorld,
  eventsFor,
  HostClient,
  hostIngress,
  withController,
} from "./cluster_fixture.ts";

const ignore = podsUnavailable() !== undefined;

/** Sluice against the test's world, stopped once `body` is done. */
function withSluice<T>(world: E2EWorld, body: (sluice: SluiceProcess) => Promise<T>): Promise<T> {
  return withController({
    credentials: world.credentials,
    controllerName: world.controllerName,
    electionNamespace: world.ns,
  }, body);
}

/** A test in a world of its own (a fresh namespace and IngressClass), closed whatever happens. */
function podTest(name: string, prefix: string, body: (world: E2EWorld) => Promise<void>): void {
  Deno.test({
    name,
    ignore,
    async fn() {
      const world = await e2eWorld(prefix);
      try {
        await body(world);
      } finally {
        await world.close();
      }
    },
  });
}

/** The lifecycle stage a Pod's status shows. */
function stage(pod: Pod): string {
  if (pod.metadata?.deletionTimestamp !== undefined) return "terminating";
  if (condition(pod, "Ready")) return "ready";
  if (pod.status.phase === "Running") return "running";
  return (pod.status.phase ?? "unknown").toLowerCase();
}

/** Follows Pod `ns`/`name` with a watch, recording each stage once, until it is deleted. */
function followStages(
  client: Parameters<typeof podsOf>[0],
  ns: string,
  name: string,
): { stages: string[]; latest: () => Pod | undefined; gone: Promise<void>; stop(): void } {
  const stages: string[] = [];
  let latest: Pod | undefined;
  const abort = new AbortController();
  const gone = (async () => {
    for await (
      const item of client.watch<Pod>(PODS, {
        namespace: ns,
        fieldSelector: `metadata.name=${name}`,
        resourceVersion: "0",
        signal: abort.signal,
      })
    ) {
      if (item.type === "DELETED") {
        stages.push("gone");
        return;
      }
      if (item.type === "ADDED" || item.type === "MODIFIED") {
        latest = item.object;
        const s = stage(item.object);
        if (stages.at(-1) !== s) stages.push(s);
      }
    }
  })();
  return { stages, latest: () => latest, gone, stop: () => abort.abort() };
}

/** GETs `http://<ip>:<port><path>` directly (the Pod's own address, in its network namespace). */
async function direct(
  ip: string,
  port: number,
  path = "/",
): Promise<{ status: number; body: string }> {
  const response = await fetch(`http://${ip}:${port}${path}`, {
    signal: AbortSignal.timeout(2_000),
  });
  return { status: response.status, body: await response.text() };
}

podTest(
  "The pod runner takes a Pod from pending to running, ready, terminating and gone",
  "pods-lifecycle",
  async (world) => {
    const { client } = world.admin;
    const watch = followStages(client, world.ns, "two");
    const pod: KubeObject = {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "two" },
      spec: {
        terminationGracePeriodSeconds: 10,
        containers: [
          {
            name: "echo",
            image: "registry.k8s.io/gateway-api/echo-basic:v1.5.1",
            env: [
              { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
              { name: "NAMESPACE", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
            ],
            readinessProbe: {
              httpGet: { path: "/", port: 3000 },
              initialDelaySeconds: 1,
              periodSeconds: 1,
            },
            // Served on for a second after deletion, then SIGTERM.
            lifecycle: { preStop: { sleep: { seconds: 1 } } },
          },
          { name: "whoami", image: "docker.io/traefik/whoami:v1.10", args: ["--port", "8000"] },
        ],
      },
    } as KubeObject;
    await kubectlApply(world.ns, [pod]);

    await waitFor(
      "Pod two to be ready",
      () => watch.latest() && stage(watch.latest()!) === "ready",
      {
        timeoutMs: 30_000,
      },
    );
    const ready = watch.latest()!;
    const ip = ready.status.podIP!;
    assertMatch(ip, /^10\.245\.\d+\.\d+$/, "a private address (EndpointSlices refuse loopback)");
    assertEquals(ready.spec.nodeName, "sluice-node");

    // What runs inside: the downward API's environment, and both containers on one address.
    const echo = JSON.parse((await direct(ip, 3000, "/hello")).body);
    assertEquals([echo.pod, echo.namespace, echo.path], ["two", world.ns, "/hello"]);
    const whoami = await direct(ip, 8000);
    assertEquals(whoami.status, 200);
    assertMatch(whoami.body, /^Hostname: two$/m, "the Pod's hostname is its name");
    assertMatch(whoami.body, new RegExp(`^IP: ${ip.replaceAll(".", "\\.")}$`, "m"));

    const deleting = performance.now();
    await kubectl(["delete", "pod", "two", "-n", world.ns, "--wait=false"]);
    await waitFor("Pod two to be terminating", () => watch.stages.includes("terminating"));
    // The preStop sleep runs before SIGTERM: the Pod still answers.
    assertEquals((await direct(ip, 3000)).status, 200);
    await within(15_000, "Pod two to be gone", watch.gone);
    const tookMs = performance.now() - deleting;
    assertEquals(watch.stages, ["pending", "running", "ready", "terminating", "gone"]);
    assert(tookMs >= 1_000, `the preStop sleep of 1 s ran before the Pod went (${tookMs} ms)`);
    // Its network namespace went with it.
    const after = await direct(ip, 3000).then(() => "answered", (e) => String(e));
    assert(after !== "answered", "nothing answers on a deleted Pod's address");
    watch.stop();
  },
);

podTest(
  "The grace period bounds a Pod's preStop hook, then SIGTERM ends the Pod",
  "pods-grace",
  async (world) => {
    const { client } = world.admin;
    const deployment = whoamiDeployment("slow", {
      replicas: 1,
      terminationGracePeriodSeconds: 2,
    });
    // A preStop hook that would hold the Pod for a minute: whoami answers /?wait=60s late.
    const podSpec = (deployment.spec as { template: { spec: { containers: KubeObject[] } } })
      .template.spec;
    podSpec.containers[0] = {
      ...podSpec.containers[0],
      lifecycle: { preStop: { httpGet: { path: "/?wait=60s", port: "http" } } },
    };
    await kubectlApply(world.ns, [deployment]);
    const [pod] = await readyPods(client, world.ns, "slow", 1);
    const watch = followStages(client, world.ns, pod!.metadata!.name!);
    const started = performance.now();
    await kubectl(["delete", "pod", pod!.metadata!.name!, "-n", world.ns, "--wait=false"]);
    await within(20_000, "the Pod to be gone", watch.gone);
    const tookMs = performance.now() - started;
    // 2 s of grace used up by the hook, then SIGTERM (whoami exits at once; the kubelet's
    // minimum of 2 s more would apply to a process that did not).
    assert(tookMs >= 1_900 && tookMs < 8_000, `gone 2 s after deletion, not 60 s (${tookMs} ms)`);
    watch.stop();
  },
);

podTest(
  "A Pod whose image the pod runner cannot run stays Pending with an Event saying why",
  "pods-image",
  async (world) => {
    const { client } = world.admin;
    await kubectlApply(world.ns, [{
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "web" },
      spec: { containers: [{ name: "nginx", image: "nginx:1.27" }] },
    } as KubeObject]);
    const event = await waitFor("an Event about the image", async () => {
      const events = await eventsFor(client, world.ns, "Pod", "web");
      return events.find((e) => e.type === "Warning" && e.reason === "Failed");
    }, { timeoutMs: 15_000 });
    assertMatch(event.message, /cannot run image "nginx:1\.27": it runs only/);
    const pod = await waitFor("the Pod's container status", async () => {
      const p = await client.get<Pod>(PODS, { namespace: world.ns, name: "web" });
      return p.status.containerStatuses?.length ? p : undefined;
    });
    assertEquals(pod.status.phase, "Pending");
    assertEquals(pod.spec.nodeName, "sluice-node");
    assertEquals(pod.status.containerStatuses?.[0]?.state.waiting?.reason, "ErrImagePull");
    assertEquals(condition(pod, "Ready"), false);
    await kubectl(["delete", "pod", "web", "-n", world.ns, "--timeout=20s"]);
  },
);

/** Asks Sluice `n` times; resolves with the answering hostnames (whoami's), failing on any non-200. */
async function hostnames(client: HostClient, port: number, host: string, n: number) {
  const seen: string[] = [];
  for (let i = 0; i < n; i++) {
    const a = await client.get(port, host);
    assertEquals(a.status, 200, a.body);
    seen.push(a.body.match(/^Hostname: (.+)$/m)?.[1] ?? "?");
  }
  return seen;
}

podTest(
  "A Pod failing its readiness probe leaves Sluice's rotation, and comes back when it passes",
  "pods-readiness",
  async (world) => {
    const { client } = world.admin;
    const host = "ready.pods.test";
    await kubectlApply(world.ns, [
      whoamiDeployment("web", { replicas: 2, readinessPeriodSeconds: 1 }),
      selectorService("web"),
      hostIngress("web", { className: world.className, host, service: "web" }),
    ]);
    const pods = await readyPods(client, world.ns, "web", 2);
    const [sick, well] = pods.map((p) => ({ name: p.metadata!.name!, ip: p.status.podIP! }));
    await withSluice(world, async (sluice) => {
      using http = new HostClient();
      await waitFor("both Pods to answer through Sluice", async () => {
        const seen = new Set(await hostnames(http, sluice.httpPort, host, 6));
        return seen.has(sick!.name) && seen.has(well!.name);
      }, { timeoutMs: 15_000 });

      // whoami's /health answers what was last POSTed to it.
      const set = await fetch(`http://${sick!.ip}:8000/health`, { method: "POST", body: "503" });
      assertEquals(set.status, 503);
      await set.body?.cancel();
      await waitFor("the sick Pod to be unready", async () => {
        const p = await client.get<Pod>(PODS, { namespace: world.ns, name: sick!.name });
        return !condition(p, "Ready");
      }, { timeoutMs: 10_000 });
      await waitFor("Sluice to stop sending to the sick Pod", async () => {
        return (await hostnames(http, sluice.httpPort, host, 10)).every((h) => h === well!.name);
      }, { timeoutMs: 5_000 });
      const after = await hostnames(http, sluice.httpPort, host, 50);
      assertEquals(new Set(after), new Set([well!.name]), "out of rotation");

      const heal = await fetch(`http://${sick!.ip}:8000/health`, { method: "POST", body: "200" });
      await heal.body?.cancel();
      await waitFor("the healed Pod back in rotation", async () => {
        return (await hostnames(http, sluice.httpPort, host, 10)).includes(sick!.name);
      }, { timeoutMs: 10_000 });
    });
  },
);

podTest(
  "A Service with no ready Pods answers 503, then 200 within 1 s of its first Pod turning Ready",
  "pods-first-ready",
  async (world) => {
    const { client } = world.admin;
    const host = "first.pods.test";
    await kubectlApply(world.ns, [
      whoamiDeployment("web", { replicas: 0, readinessPeriodSeconds: 1 }),
      selectorService("web"),
      hostIngress("web", { className: world.className, host, service: "web" }),
    ]);
    await withSluice(world, async (sluice) => {
      using http = new HostClient();
      const before = await waitFor("Sluice to route the host", async () => {
        const a = await http.get(sluice.httpPort, host);
        return a.status === 404 ? undefined : a;
      });
      assertEquals(before.status, 503, "no ready Pods: 503");

      // Watch for the Pod's Ready condition while polling Sluice.
      const abort = new AbortController();
      const readyAt = (async () => {
        for await (
          const item of client.watch<Pod>(PODS, {
            namespace: world.ns,
            labelSelector: "app=web",
            resourceVersion: "0",
            signal: abort.signal,
          })
        ) {
          if (item.type === "MODIFIED" && condition(item.object, "Ready")) {
            return performance.now();
          }
        }
        throw new Error("the watch ended before a Pod was ready");
      })();
      await kubectl(["scale", "deployment/web", "-n", world.ns, "--replicas=1"]);
      const okAt = await waitFor("Sluice to answer 200", async () => {
        const a = await http.get(sluice.httpPort, host);
        return a.status === 200 ? performance.now() : a.status === 503 ? undefined : (() => {
          throw new Error(`unexpected status ${a.status}`);
        })();
      }, { timeoutMs: 30_000, intervalMs: 5 });
      const ready = await within(5_000, "the Ready condition in the watch", readyAt);
      abort.abort();
      const lagMs = okAt - ready;
      // deno-lint-ignore no-console
      console.log(`first Pod Ready → Sluice answers 200: ${lagMs.toFixed(0)} ms`);
      assert(lagMs < 1_000, `200 within 1 s of Ready (took ${lagMs.toFixed(0)} ms)`);
    });
  },
);
