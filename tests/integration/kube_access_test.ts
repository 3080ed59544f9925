import { KubeConfig } from "@kubernetes/client-node";
import { assert, assertEquals, assertRejects } from "../support/assert.ts";
import { loadKubeAccess } from "../../lib/k8s/kube_access.ts";
import { KubeApiError, KubeClient, type KubeObject } from "../../lib/k8s/kube_client.ts";
import { NAMESPACES } from "../../lib/k8s/resources.ts";
import { testKubeconfig } from "../support/kube.ts";

/** The test cluster's server and CA, and the admin's token. */
function testCluster(): { server: string; caData: string; token: string } {
  const kc = new KubeConfig();
  kc.loadFromFile(testKubeconfig());
  const cluster = kc.getCurrentCluster();
  const token = kc.getCurrentUser()?.token;
  if (cluster?.caData === undefined || token === undefined) {
    throw new Error("The test kubeconfig has no certificate-authority-data or no token");
  }
  return { server: cluster.server, caData: cluster.caData, token };
}

/** Writes a kubeconfig for the test cluster whose user is `user`, in a new temporary directory. */
async function kubeconfigWithUser(
  user: (dir: string) => Record<string, unknown>,
): Promise<{ dir: string; path: string }> {
  const { server, caData } = testCluster();
  const dir = await Deno.makeTempDir({ prefix: "kube-access-it-" });
  const path = `${dir}/config`;
  await Deno.writeTextFile(
    path,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "test", cluster: { server, "certificate-authority-data": caData } }],
      users: [{ name: "user", user: user(dir) }],
      contexts: [{ name: "test", context: { cluster: "test", user: "user" } }],
      "current-context": "test",
    }),
  );
  return { dir, path };
}

async function namespaceCount(client: KubeClient): Promise<number> {
  return (await client.listAll<KubeObject>(NAMESPACES)).items.length;
}

Deno.test("loadKubeAccess() with the test kubeconfig lists namespaces over verified TLS", async () => {
  const access = await loadKubeAccess({ kubeconfig: testKubeconfig() });
  try {
    assert(access.server.startsWith("https://"), `server is ${access.server}`);
    assert(await namespaceCount(new KubeClient(access)) > 0);
  } finally {
    access.close();
  }
});

Deno.test("a token file user authenticates with the file's token, and a bad one gets 401 after the refresh interval", async () => {
  const { token } = testCluster();
  const { dir, path } = await kubeconfigWithUser((dir) => ({
    "auth-provider": { name: "tokenFile", config: { tokenFile: `${dir}/token` } },
  }));
  await Deno.writeTextFile(`${dir}/token`, token);
  let now = 0;
  const access = await loadKubeAccess({
    kubeconfig: path,
    tokenFileRefreshMs: 60_000,
    now: () => now,
  });
  try {
    const client = new KubeClient(access);
    assert(await namespaceCount(client) > 0);
    await Deno.writeTextFile(`${dir}/token`, "not-a-valid-token");
    assert(await namespaceCount(client) > 0, "the token read last is used within the interval");
    now += 60_001;
    const error = await assertRejects(() => namespaceCount(client), KubeApiError);
    assertEquals(error.status, 401);
    await Deno.writeTextFile(`${dir}/token`, token);
    now += 60_001;
    assert(await namespaceCount(client) > 0, "a good token again after the next interval");
  } finally {
    access.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an exec plugin user authenticates through the worker kept for it", async () => {
  const { token } = testCluster();
  const credential = JSON.stringify({
    apiVersion: "client.authentication.k8s.io/v1",
    kind: "ExecCredential",
    status: { token },
  });
  const { dir, path } = await kubeconfigWithUser((dir) => ({
    exec: {
      apiVersion: "client.authentication.k8s.io/v1",
      command: "cat",
      args: [`${dir}/credential.json`],
    },
  }));
  await Deno.writeTextFile(`${dir}/credential.json`, credential);
  const access = await loadKubeAccess({ kubeconfig: path });
  try {
    const client = new KubeClient(access);
    assert(await namespaceCount(client) > 0);
    access.close();
    await assertRejects(() => namespaceCount(client), Error, "the Kubernetes access is closed");
  } finally {
    access.close();
    await Deno.remove(dir, { recursive: true });
  }
});
