/**
 * Workloads in the test cluster: Deployments whose Pods really run (on the
 * harness's pod runner, behind the real kube-controller-manager), driven with
 * the real kubectl of the same release (`<harness> kubectl`), and read back
 * over the API.
 *
 * Tests that need running Pods call {@linkcode podsUnavailable} and are
 * ignored, with the reason printed, where the pod runner is off (not root).
 *
 * @module
 */
import { stringify } from "yaml";
import type { KubeClient, KubeObject } from "../../lib/k8s/kube_client.ts";
import type { Resource } from "../../lib/k8s/resources.ts";
import { PODS } from "./core_resources.ts";
import { testKubeconfig } from "./kube.ts";
import { waitFor } from "./wait.ts";

/** apps/v1 Deployments (Sluice itself never reads them). */
export const DEPLOYMENTS: Resource = Object.freeze({
  group: "apps",
  version: "v1",
  plural: "deployments",
  kind: "Deployment",
  namespaced: true,
});

/**
 * Why Pods cannot run in the test cluster (the harness's pod runner is off),
 * or undefined when they can. Prints the reason once, so that a skipped test
 * is never mistaken for a passed one.
 */
export function podsUnavailable(): string | undefined {
  const pods = Deno.env.get("SLUICE_TEST_PODS") ?? "off (SLUICE_TEST_PODS is not set)";
  if (pods === "on") return undefined;
  const reason = `Pods cannot run in the test cluster: the pod runner is ${pods}`;
  if (!printed) {
    printed = true;
    // deno-lint-ignore no-console
    console.log(`SKIPPED (tests that need running Pods): ${reason}`);
  }
  return reason;
}
let printed = false;

/** Runs the test cluster's kubectl; resolves with its output, rejects on a non-zero exit. */
export async function kubectl(
  args: readonly string[],
  options: { stdin?: string; kubeconfig?: string } = {},
): Promise<string> {
  const bin = Deno.env.get("SLUICE_TEST_CLUSTER_BIN");
  if (!bin) {
    throw new Error(
      "SLUICE_TEST_CLUSTER_BIN is not set; run the suite with `tools/deno task test`",
    );
  }
  const child = new Deno.Command(bin, {
    args: ["kubectl", ...args],
    env: { KUBECONFIG: options.kubeconfig ?? testKubeconfig() },
    stdin: options.stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  if (options.stdin !== undefined) {
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(options.stdin));
    await writer.close();
  }
  const out = await child.output();
  const stdout = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    const stderr = new TextDecoder().decode(out.stderr);
    throw new Error(`kubectl ${args.join(" ")}: exit ${out.code}: ${stderr}${stdout}`);
  }
  return stdout;
}

/** `kubectl apply -f -` of `objects` in namespace `ns`. */
export async function kubectlApply(ns: string, objects: readonly KubeObject[]): Promise<string> {
  const yaml = objects.map((o) => stringify(o)).join("---\n");
  return await kubectl(["apply", "--namespace", ns, "-f", "-"], { stdin: yaml });
}

/** Options of {@linkcode whoamiDeployment}. */
export interface WhoamiOptions {
  readonly replicas: number;
  /** Container port; default 8000. */
  readonly port?: number;
  /** Readiness probe period in seconds (HTTP GET /health); default 1. `false`: no probe. */
  readonly readinessPeriodSeconds?: number | false;
  readonly readinessFailureThreshold?: number;
  readonly terminationGracePeriodSeconds?: number;
  /** A `preStop` sleep of this many seconds. */
  readonly preStopSleepSeconds?: number;
  /** Image; default traefik/whoami:v1.10. */
  readonly image?: string;
}

/** A Deployment of `traefik/whoami` labelled `app: <name>`, listening on port `http`. */
export function whoamiDeployment(name: string, options: WhoamiOptions): KubeObject {
  const port = options.port ?? 8000;
  const period = options.readinessPeriodSeconds ?? 1;
  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name },
    spec: {
      replicas: options.replicas,
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: {
          ...(options.terminationGracePeriodSeconds === undefined
            ? {}
            : { terminationGracePeriodSeconds: options.terminationGracePeriodSeconds }),
          containers: [{
            name: "whoami",
            image: options.image ?? "traefik/whoami:v1.10",
            args: ["--port", String(port)],
            ports: [{ name: "http", containerPort: port }],
            ...(period === false ? {} : {
              readinessProbe: {
                httpGet: { path: "/health", port: "http" },
                periodSeconds: period,
                failureThreshold: options.readinessFailureThreshold ?? 1,
              },
            }),
            ...(options.preStopSleepSeconds === undefined ? {} : {
              lifecycle: { preStop: { sleep: { seconds: options.preStopSleepSeconds } } },
            }),
          }],
        },
      },
    },
  } as KubeObject;
}

/** A Service selecting `app: <name>`, port 80 → the Pods' port `http`. */
export function selectorService(name: string): KubeObject {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name },
    spec: {
      selector: { app: name },
      ports: [{ name: "http", port: 80, targetPort: "http", protocol: "TCP" }],
    },
  } as KubeObject;
}

/** A Pod as the tests read it. */
export interface Pod extends KubeObject {
  readonly spec: { readonly nodeName?: string };
  readonly status: {
    readonly phase?: string;
    readonly podIP?: string;
    readonly conditions?: readonly { type: string; status: string }[];
    readonly containerStatuses?: readonly {
      name: string;
      ready: boolean;
      state: { waiting?: { reason?: string; message?: string }; running?: unknown };
    }[];
  };
}

/** Whether condition `type` of a Pod is True. */
export function condition(pod: Pod, type: string): boolean {
  return pod.status.conditions?.some((c) => c.type === type && c.status === "True") ?? false;
}

/** The Pods of Deployment `app` in `ns`. */
export async function podsOf(client: KubeClient, ns: string, app: string): Promise<Pod[]> {
  const list = await client.listAll<Pod>(PODS, { namespace: ns, labelSelector: `app=${app}` });
  return list.items;
}

/** Waits until `app` has exactly `n` Pods, all Ready and none terminating; resolves with them. */
export async function readyPods(
  client: KubeClient,
  ns: string,
  app: string,
  n: number,
  timeoutMs = 60_000,
): Promise<Pod[]> {
  return await waitFor(`${n} ready Pods of "${ns}/${app}"`, async () => {
    const pods = await podsOf(client, ns, app);
    const ok = pods.length === n &&
      pods.every((p) => condition(p, "Ready") && p.metadata?.deletionTimestamp === undefined);
    return ok ? pods : undefined;
  }, { timeoutMs, intervalMs: 100 });
}

/** `kubectl rollout status`, which returns once the Deployment's rollout has completed. */
export async function rolloutStatus(ns: string, name: string, timeout = "120s"): Promise<void> {
  await kubectl(["rollout", "status", `deployment/${name}`, "-n", ns, `--timeout=${timeout}`]);
}
