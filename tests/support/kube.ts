/**
 * Test access to the real kube-apiserver started by `deno task test`
 * (`SLUICE_TEST_KUBECONFIG`): clients for the admin and for other identities,
 * and fresh namespaces (a bare apiserver never finishes deleting a
 * namespace, so each test takes a new one).
 *
 * @module
 */
import { KubeConfig } from "@kubernetes/client-node";
import {
  accessFromKubeConfig,
  type KubeAccess,
  loadKubeAccess,
} from "../../lib/k8s/kube_access.ts";
import { KubeClient } from "../../lib/k8s/kube_client.ts";
import { NAMESPACES } from "../../lib/k8s/resources.ts";

/** The kubeconfig of the test cluster; fails the test clearly when there is none. */
export function testKubeconfig(): string {
  const path = Deno.env.get("SLUICE_TEST_KUBECONFIG");
  if (path === undefined || path === "") {
    throw new Error(
      "Cannot reach the test cluster: SLUICE_TEST_KUBECONFIG is not set; run the suite with `tools/deno task test`",
    );
  }
  return path;
}

/** A client acting as the cluster admin. Close it with `access.close()`. */
export async function adminClient(): Promise<{ client: KubeClient; access: KubeAccess }> {
  const access = await loadKubeAccess({ kubeconfig: testKubeconfig() });
  return { client: new KubeClient(access), access };
}

/** A client for the test cluster that authenticates with `token` instead (e.g. a ServiceAccount's). */
export async function clientWithToken(
  token: string,
): Promise<{ client: KubeClient; access: KubeAccess }> {
  const admin = new KubeConfig();
  admin.loadFromFile(testKubeconfig());
  const cluster = admin.getCurrentCluster();
  if (cluster === null) throw new Error("The test kubeconfig has no cluster");
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [cluster],
    users: [{ name: "token-user", token }],
    contexts: [{ name: "token", cluster: cluster.name, user: "token-user" }],
    currentContext: "token",
  });
  const access = await accessFromKubeConfig(kc, "token");
  return { client: new KubeClient(access), access };
}

/** Creates a namespace with a unique name starting with `prefix`. */
export async function freshNamespace(client: KubeClient, prefix: string): Promise<string> {
  const name = `${prefix}-${crypto.randomUUID().slice(0, 8)}`;
  await client.create(NAMESPACES, {}, { apiVersion: "v1", kind: "Namespace", metadata: { name } });
  return name;
}
