/**
 * Pods' logs through the API (`pods/log`, `kubectl logs`), served by the
 * test cluster's pod runner as a kubelet serves them: the apiserver calls the
 * Node's kubelet endpoint, which answers with the container's output and the
 * kubelet's query parameters (`sinceTime`, `timestamps`, `tailLines`,
 * `limitBytes`, `previous`, `follow`). The Gateway API conformance suite's
 * mirror tests read echo-basic's log this way.
 *
 * Ignored, with the reason printed, where the pod runner is off (not root).
 *
 * @module
 */
import type { KubeClient, KubeObject } from "../../lib/k8s/kube_client.ts";
import { KubeApiError } from "../../lib/k8s/kube_client.ts";
import { PODS } from "../support/core_resources.ts";
import { assert, assertEquals, assertMatch, assertRejects } from "../support/assert.ts";
import { waitFor, within } from "../support/wait.ts";
import {
  condition,
  kubectl,
  kubectlApply,
  type Pod,
  podsUnavailable,
} from "../support/workloads.ts";
import { type E2EWorld, e2eWorld } from "./cluster_fixture.ts";

const ignore = podsUnavailable() !== undefined;

/** A test in a world of its own (a fresh namespace), closed whatever happens. */
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

/** GET `pods/log` of Pod `ns`/`name`; resolves with the response (its body unread). */
function podLog(
  client: KubeClient,
  ns: string,
  name: string,
  query: Record<string, string | number | boolean>,
  signal?: AbortSignal,
): Promise<Response> {
  return client.request("GET", `/api/v1/namespaces/${ns}/pods/${name}/log`, { query, signal });
}

async function podLogText(
  client: KubeClient,
  ns: string,
  name: string,
  query: Record<string, string | number | boolean>,
): Promise<string> {
  return await (await podLog(client, ns, name, query)).text();
}

/** The echo-basic Pod the conformance suite's mirror backends are, ready, with its address. */
async function echoPod(world: E2EWorld, name: string): Promise<string> {
  await kubectlApply(world.ns, [{
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name },
    spec: {
      terminationGracePeriodSeconds: 2,
      containers: [{
        name: "echo",
        image: "registry.k8s.io/gateway-api/echo-basic:v1.5.1",
        env: [
          { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
          { name: "NAMESPACE", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
        ],
        readinessProbe: { httpGet: { path: "/", port: 3000 }, periodSeconds: 1 },
      }],
    },
  } as KubeObject]);
  const pod = await waitFor(`Pod ${name} to be ready`, async () => {
    const p = await world.admin.client.get<Pod>(PODS, { namespace: world.ns, name });
    return condition(p, "Ready") ? p : undefined;
  }, { timeoutMs: 30_000, intervalMs: 100 });
  return pod.status.podIP!;
}

/** Asks the echo Pod at `ip` for `path` directly; echo-basic logs each request it answers. */
async function ask(ip: string, path: string): Promise<void> {
  const response = await fetch(`http://${ip}:3000${path}`, { signal: AbortSignal.timeout(2_000) });
  await response.body?.cancel();
  assertEquals(response.status, 200);
}

podTest(
  "A running Pod's log reads through the API as the conformance suite's mirror tests read it",
  "pods-logs",
  async (world) => {
    const { client } = world.admin;
    const ip = await echoPod(world, "echo");
    // The suite asks for lines since a time, in whole seconds (RFC 3339).
    const since = new Date(Math.floor(Date.now() / 1000) * 1000 - 1000).toISOString()
      .replace(".000Z", "Z");
    await ask(ip, "/mirror-me?n=1");
    const line = "Echoing back request made to /mirror-me?n=1 to client";
    const log = await waitFor("the request in the Pod's log", async () => {
      const text = await podLogText(client, world.ns, "echo", {
        container: "echo",
        sinceTime: since,
      });
      return text.includes(line) ? text : undefined;
    }, { timeoutMs: 10_000, intervalMs: 200 });
    assert(log.endsWith("\n"), "whole lines");

    // A time after every line so far leaves none of them.
    const later = new Date(Date.now() + 2_000).toISOString().replace(/\.\d+Z$/, "Z");
    assertEquals(await podLogText(client, world.ns, "echo", { sinceTime: later }), "");

    // kubectl logs, with the kubelet's tailLines and timestamps.
    const tail = await kubectl([
      "logs",
      "echo",
      "-n",
      world.ns,
      "-c",
      "echo",
      "--tail=1",
      "--timestamps",
    ]);
    assertMatch(
      tail,
      /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z Echoing back request made to \/mirror-me\?n=1 to client \(.+\)\n$/,
    );
    assertEquals(
      await podLogText(client, world.ns, "echo", { tailLines: 1, limitBytes: 12 }),
      "Echoing back",
    );

    // No run before this one: previous is refused, as the kubelet refuses it.
    const previous = await assertRejects(
      () => podLogText(client, world.ns, "echo", { previous: true }),
      KubeApiError,
    );
    assertEquals(previous.status, 400);
    assertMatch(previous.message, /previous terminated container "echo" in pod "echo" not found/);
  },
);

podTest(
  "Following a Pod's log streams the lines it writes afterwards",
  "pods-logs-follow",
  async (world) => {
    const { client } = world.admin;
    const ip = await echoPod(world, "echo");
    const abort = new AbortController();
    const response = await podLog(
      client,
      world.ns,
      "echo",
      { follow: true, tailLines: 0 },
      abort.signal,
    );
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    let seen = "";
    try {
      await ask(ip, "/followed");
      await within(
        10_000,
        "the request's line on the followed log",
        (async () => {
          while (!seen.includes("request made to /followed to client")) {
            const { value, done } = await reader.read();
            if (done) throw new Error(`the log stream ended: ${JSON.stringify(seen)}`);
            seen += value;
          }
        })(),
      );
    } finally {
      abort.abort();
      await reader.cancel().catch(() => {});
    }
    assert(!seen.includes("/mirror"), "tailLines=0: no earlier line");
  },
);

podTest(
  "A restarted container's previous run reads with previous=true",
  "pods-logs-previous",
  async (world) => {
    const { client } = world.admin;
    // whoami refuses an unknown flag, saying so on stderr, and exits: the
    // pod runner restarts it after a back-off.
    await kubectlApply(world.ns, [{
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "crash" },
      spec: {
        terminationGracePeriodSeconds: 1,
        containers: [{ name: "whoami", image: "traefik/whoami", args: ["--no-such-flag"] }],
      },
    } as KubeObject]);
    await waitFor("the container to have restarted", async () => {
      const p = await client.get<
        Pod & { status: { containerStatuses?: { restartCount: number }[] } }
      >(
        PODS,
        { namespace: world.ns, name: "crash" },
      );
      return (p.status.containerStatuses?.[0]?.restartCount ?? 0) >= 1;
    }, { timeoutMs: 20_000, intervalMs: 200 });
    const previous = await waitFor("the previous run's output", async () => {
      const text = await podLogText(client, world.ns, "crash", { previous: true });
      return text.includes("flag provided but not defined: -no-such-flag") ? text : undefined;
    }, { timeoutMs: 10_000, intervalMs: 200 });
    assertMatch(previous, /^Usage of whoami:$/m);
    await kubectl(["delete", "pod", "crash", "-n", world.ns, "--timeout=20s"]);
    // Gone with its Pod.
    const gone = await assertRejects(
      () => podLogText(client, world.ns, "crash", {}),
      KubeApiError,
    );
    assertEquals(gone.status, 404);
  },
);
