/**
 * The shipped `manifests/` against the real kube-apiserver: every object of
 * the kustomization is accepted by server-side apply and stored as written,
 * and Sluice, run as a process with the arguments of the shipped Deployment
 * and the token of the shipped ServiceAccount (so under exactly the shipped
 * RBAC), becomes ready, routes from the cluster's objects and writes Ingress
 * status from the shipped Service.
 *
 * What this cannot prove: the apiserver here runs no controllers and no
 * kubelet, so the Deployment never starts pods (its probes, securityContext
 * and volumes are checked as stored, not as run), and no load balancer
 * gives the Service an address (status falls back to its cluster IP).
 *
 * @module
 */
import { parse } from "yaml";
import { join } from "node:path";
import type { KubeClient, KubeObject } from "../../lib/k8s/kube_client.ts";
import { apiVersionOf, INGRESSES, type Resource, SERVICES } from "../../lib/k8s/resources.ts";
import { SERVICE_ACCOUNTS } from "../support/core_resources.ts";
import { assert, assertEquals } from "../support/assert.ts";
import { adminClient, freshNamespace, writeKubeconfig } from "../support/kube.ts";
import { apply, MANIFESTS_DIR, readManifest, resourceOf } from "../support/manifests.ts";
import { spawnSluice } from "../support/sluice_process.ts";
import { waitFor } from "../support/wait.ts";
import { HostClient } from "./cluster_fixture.ts";

const DEPLOYMENTS: Resource = {
  group: "apps",
  version: "v1",
  plural: "deployments",
  kind: "Deployment",
  namespaced: true,
};
const PDBS: Resource = {
  group: "policy",
  version: "v1",
  plural: "poddisruptionbudgets",
  kind: "PodDisruptionBudget",
  namespaced: true,
};

function resourceFor(object: KubeObject): Resource {
  for (const r of [DEPLOYMENTS, PDBS]) {
    if (apiVersionOf(r) === object.apiVersion && r.kind === object.kind) return r;
  }
  return resourceOf(object);
}

async function applyObject(client: KubeClient, object: KubeObject): Promise<KubeObject> {
  const r = resourceFor(object);
  if (r === DEPLOYMENTS || r === PDBS) {
    return await client.patch<KubeObject>(
      r,
      {
        namespace: object.metadata?.namespace,
        name: object.metadata?.name,
      },
      object,
      { type: "apply", fieldManager: "sluice-tests", force: true },
    );
  }
  return await apply(client, object);
}

interface Container {
  args: string[];
  env: { name: string }[];
  securityContext: Record<string, unknown>;
  readinessProbe: { httpGet: { path: string; port: string } };
  livenessProbe: { httpGet: { path: string; port: string } };
  ports: { name: string; containerPort: number }[];
}
interface Deployment extends KubeObject {
  spec: {
    replicas: number;
    template: {
      spec: {
        serviceAccountName: string;
        terminationGracePeriodSeconds: number;
        securityContext: Record<string, unknown>;
        affinity: { podAntiAffinity: unknown };
        containers: Container[];
      };
    };
  };
}
interface Service extends KubeObject {
  spec: { type: string; clusterIP: string; ports: { port: number; targetPort: string }[] };
}

Deno.test("the shipped manifests apply to a real apiserver and Sluice serves under exactly their RBAC", async () => {
  const admin = await adminClient();
  const kustomization = parse(
    await Deno.readTextFile(join(MANIFESTS_DIR, "kustomization.yaml")),
  ) as { resources: string[] };
  const objects: KubeObject[] = [];
  for (const file of kustomization.resources) objects.push(...await readManifest(file));
  let kubeconfigDir: string | undefined;
  try {
    // 1. Every object is accepted by server-side apply and stored.
    const kinds = objects.map((o) => o.kind).sort();
    assertEquals(kinds, [
      "ClusterRole",
      "ClusterRoleBinding",
      "Deployment",
      "IngressClass",
      "Namespace",
      "PodDisruptionBudget",
      "Role",
      "RoleBinding",
      "Service",
      "ServiceAccount",
    ]);
    for (const object of objects) {
      const stored = await applyObject(admin.client, object);
      assertEquals(stored.metadata?.name, object.metadata?.name);
    }

    const deployment = await admin.client.get<Deployment>(DEPLOYMENTS, {
      namespace: "sluice",
      name: "sluice",
    });
    const pod = deployment.spec.template.spec;
    const container = pod.containers[0]!;
    assertEquals(deployment.spec.replicas, 2);
    assertEquals(pod.serviceAccountName, "sluice");
    assert(pod.affinity.podAntiAffinity !== undefined, "anti-affinity");
    assertEquals(pod.securityContext.runAsNonRoot, true);
    assertEquals(pod.securityContext.seccompProfile, { type: "RuntimeDefault" });
    assertEquals(container.securityContext, {
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ["ALL"] },
    });
    assertEquals(container.readinessProbe.httpGet.path, "/readyz");
    assertEquals(container.livenessProbe.httpGet.path, "/healthz");
    assertEquals(
      Object.fromEntries(container.ports.map((p) => [p.name, p.containerPort])),
      { http: 8080, https: 8443, health: 10254 },
    );
    assertEquals(container.env.map((e) => e.name).sort(), ["POD_NAME", "POD_NAMESPACE"]);
    // The grace period covers the shutdown delay and timeout the container is given.
    const seconds = (flag: string) =>
      Number(container.args.find((a) => a.startsWith(`--${flag}=`))?.match(/=(\d+)s$/)?.[1]);
    assert(
      pod.terminationGracePeriodSeconds > seconds("shutdown-delay") + seconds("shutdown-timeout"),
      "terminationGracePeriodSeconds exceeds --shutdown-delay + --shutdown-timeout",
    );
    const service = await admin.client.get<Service>(SERVICES, {
      namespace: "sluice",
      name: "sluice",
    });
    assertEquals(service.spec.type, "LoadBalancer");
    assertEquals(service.spec.ports.map((p) => [p.port, p.targetPort]), [
      [80, "http"],
      [443, "https"],
    ]);
    assert(/^\d+\.\d+\.\d+\.\d+$/.test(service.spec.clusterIP), "a cluster IP");
    await admin.client.get(PDBS, { namespace: "sluice", name: "sluice" });

    // 2. Sluice with the Deployment's arguments and the shipped ServiceAccount's token.
    const request = await admin.client.create<{ status: { token: string } }>(
      SERVICE_ACCOUNTS,
      { namespace: "sluice", name: "sluice", subresource: "token" },
      {
        apiVersion: "authentication.k8s.io/v1",
        kind: "TokenRequest",
        spec: { expirationSeconds: 600 },
      },
    );
    const { dir, path: kubeconfig } = await writeKubeconfig(() => ({
      token: request.status.token,
    }));
    kubeconfigDir = dir;

    const ns = await freshNamespace(admin.client, "shipped");
    await admin.client.create(SERVICES, { namespace: ns }, {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name: "web" },
      spec: { ports: [{ name: "http", port: 80, targetPort: 8080 }] },
    });
    await admin.client.create(INGRESSES, { namespace: ns }, {
      apiVersion: "networking.k8s.io/v1",
      kind: "Ingress",
      metadata: { name: "web" },
      spec: {
        ingressClassName: "sluice",
        rules: [{
          host: `${ns}.test`,
          http: {
            paths: [{
              path: "/",
              pathType: "Prefix",
              backend: { service: { name: "web", port: { name: "http" } } },
            }],
          },
        }],
      },
    });

    const args = container.args.map((a) => a.replace("$(POD_NAMESPACE)", "sluice"));
    const sluice = await spawnSluice([
      ...args,
      `--kubeconfig=${kubeconfig}`,
      `--election-id=sluice-leader-${crypto.randomUUID().slice(0, 8)}`,
      "--workers=1",
      "--shutdown-delay=0s",
    ], { env: { POD_NAME: `sluice-${ns}`, POD_NAMESPACE: "sluice" } });
    try {
      await sluice.ready();
      // A routed host whose Service has no endpoints answers 503; an unknown host 404.
      using http = new HostClient();
      const answer = async (host: string) => (await http.get(sluice.httpPort, host)).status;
      await waitFor("the Ingress to be routed", async () => await answer(`${ns}.test`) === 503);
      assertEquals(await answer("unknown.test"), 404);
      // Leader election in the sluice namespace and the status write both passed RBAC.
      await waitFor("Ingress status from the shipped Service", async () => {
        const ingress = await admin.client.get<KubeObject & { status?: unknown }>(INGRESSES, {
          namespace: ns,
          name: "web",
        });
        return JSON.stringify(ingress.status) ===
          JSON.stringify({ loadBalancer: { ingress: [{ ip: service.spec.clusterIP }] } });
      }, { timeoutMs: 20_000 });
      // A 403 shows as the apiserver's "… is forbidden: …" message, or "HTTP 403" without a
      // body; a bare "403" also matches ports and paths (a server on port 40391 did).
      const denied = sluice.records().filter((r) =>
        /forbidden|\bHTTP 403\b|"(code|status)":403\b/i.test(JSON.stringify(r))
      );
      assertEquals(denied, [], "no request of Sluice was forbidden");
    } finally {
      assertEquals(await sluice.stop(), 0);
    }
  } finally {
    if (kubeconfigDir !== undefined) await Deno.remove(kubeconfigDir, { recursive: true });
    admin.access.close();
  }
});
