/**
 * Test access to the real kube-apiserver started by `deno task test`
 * (`SLUICE_TEST_KUBECONFIG`) or another harness cluster: clients for the
 * admin and for other identities, kubeconfig files for other identities, and
 * fresh namespaces (a bare apiserver never finishes deleting a
 * namespace, so each test takes a new one).
 *
 * @module
 */
import { KubeConfig } from "@kubernetes/client-node";
import { stringify } from "yaml";
import { join } from "node:path";
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

/**
 * A client acting as the cluster admin of `kubeconfig` (default: the test
 * cluster's). Close it with `access.close()`.
 */
export async function adminClient(
  kubeconfig: string = testKubeconfig(),
): Promise<{ client: KubeClient; access: KubeAccess }> {
  const access = await loadKubeAccess({ kubeconfig });
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

/**
 * Writes a kubeconfig file into a new temporary directory (`dir`, which the
 * caller removes): the cluster of `options.kubeconfig` (default: the test
 * cluster's), reached as `user(dir)` (a kubeconfig `user` entry, e.g.
 * `{ token }`) and nothing else, in `options.namespace` if given.
 */
export async function writeKubeconfig(
  user: (dir: string) => Record<string, unknown>,
  options: { kubeconfig?: string; namespace?: string } = {},
): Promise<{ dir: string; path: string }> {
  const source = options.kubeconfig ?? testKubeconfig();
  const admin = new KubeConfig();
  admin.loadFromFile(source);
  const cluster = admin.getCurrentCluster();
  if (cluster === null) throw new Error(`The kubeconfig "${source}" has no cluster`);
  const caData = cluster.caData ??
    (cluster.caFile ? btoa(await Deno.readTextFile(cluster.caFile)) : undefined);
  const dir = await Deno.makeTempDir({ prefix: "sluice-test-kubeconfig-" });
  const path = join(dir, "kubeconfig");
  await Deno.writeTextFile(
    path,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{
        name: "test",
        cluster: {
          server: cluster.server,
          ...(caData !== undefined ? { "certificate-authority-data": caData } : {}),
        },
      }],
      users: [{ name: "user", user: user(dir) }],
      contexts: [{
        name: "test",
        context: {
          cluster: "test",
          user: "user",
          ...(options.namespace !== undefined ? { namespace: options.namespace } : {}),
        },
      }],
      "current-context": "test",
    }),
    { mode: 0o600 },
  );
  return { dir, path };
}

/** Creates a namespace with a unique name starting with `prefix`. */
export async function freshNamespace(client: KubeClient, prefix: string): Promise<string> {
  const name = `${prefix}-${crypto.randomUUID().slice(0, 8)}`;
  await client.create(NAMESPACES, {}, { apiVersion: "v1", kind: "Namespace", metadata: { name } });
  return name;
}
