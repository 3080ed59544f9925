import { KubeConfig } from "@kubernetes/client-node";
import { assert, assertEquals, assertRejects } from "../support/assert.ts";
import { loadKubeAccess } from "../../lib/k8s/kube_access.ts";
import { KubeApiError, KubeClient, type KubeObject } from "../../lib/k8s/kube_client.ts";
import { NAMESPACES } from "../../lib/k8s/resources.ts";
import { testKubeconfig, writeKubeconfig } from "../support/kube.ts";

/** The admin's token in the test kubeconfig. */
function adminToken(): string {
  const kc = new KubeConfig();
  kc.loadFromFile(testKubeconfig());
  const token = kc.getCurrentUser()?.token;
  if (token === undefined) throw new Error("The test kubeconfig has no token");
  return token;
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
  const token = adminToken();
  const { dir, path } = await writeKubeconfig((dir) => ({
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
  const token = adminToken();
  const credential = JSON.stringify({
    apiVersion: "client.authentication.k8s.io/v1",
    kind: "ExecCredential",
    status: { token },
  });
  const { dir, path } = await writeKubeconfig((dir) => ({
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
