/**
 * The controller's identity in the test cluster: ServiceAccount `sluice` in a
 * test namespace, bound only to the roles shipped in `manifests/`, and a
 * client that authenticates with its token (TokenRequest API).
 *
 * @module
 */
import type { KubeAccess } from "../../lib/k8s/kube_access.ts";
import type { KubeClient } from "../../lib/k8s/kube_client.ts";
import { SERVICE_ACCOUNTS } from "./core_resources.ts";
import { CLUSTER_ROLE_BINDINGS } from "./rbac_resources.ts";
import { assert } from "./assert.ts";
import { clientWithToken } from "./kube.ts";
import { apply, readManifest } from "./manifests.ts";

/** A client acting as the controller's ServiceAccount in `ns`; `cleanup()` removes the cluster-wide binding. */
export interface ControllerIdentity {
  readonly client: KubeClient;
  readonly access: KubeAccess;
  readonly token: string;
  cleanup(): Promise<void>;
}

/** A token of the controller's ServiceAccount; `cleanup()` removes the cluster-wide binding. */
export interface ControllerToken {
  readonly token: string;
  cleanup(): Promise<void>;
}

/**
 * Creates ServiceAccount `sluice` in `ns`, applies the ClusterRole and Role exactly as shipped,
 * binds them to it (the Role and its binding in `ns`, so the Lease lives there), and issues a token.
 */
export async function controllerToken(
  admin: KubeClient,
  ns: string,
  options: { expirationSeconds?: number } = {},
): Promise<ControllerToken> {
  await admin.create(SERVICE_ACCOUNTS, { namespace: ns }, {
    apiVersion: "v1",
    kind: "ServiceAccount",
    metadata: { name: "sluice" },
  });
  const [clusterRole] = await readManifest("cluster_role.yaml");
  const [role] = await readManifest("role.yaml");
  const [roleBinding] = await readManifest("role_binding.yaml");
  assert(clusterRole !== undefined && role !== undefined && roleBinding !== undefined);
  await apply(admin, clusterRole);
  const bindingName = `sluice-${ns}`;
  await admin.create(CLUSTER_ROLE_BINDINGS, {}, {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "ClusterRoleBinding",
    metadata: { name: bindingName },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "sluice" },
    subjects: [{ kind: "ServiceAccount", name: "sluice", namespace: ns }],
  });
  await apply(admin, role, { namespace: ns });
  await apply(admin, {
    ...roleBinding,
    subjects: [{ kind: "ServiceAccount", name: "sluice", namespace: ns }],
  }, { namespace: ns });
  const request = await admin.create<{ status: { token: string } }>(
    SERVICE_ACCOUNTS,
    { namespace: ns, name: "sluice", subresource: "token" },
    {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenRequest",
      spec: { expirationSeconds: options.expirationSeconds ?? 600 },
    },
  );
  assert(request.status.token.length > 100, "a signed ServiceAccount token");
  return {
    token: request.status.token,
    async cleanup() {
      await admin.delete(CLUSTER_ROLE_BINDINGS, { name: bindingName }).catch(() => {});
    },
  };
}

/** {@linkcode controllerToken}, and a client that authenticates with it. */
export async function controllerIdentity(
  admin: KubeClient,
  ns: string,
): Promise<ControllerIdentity> {
  const granted = await controllerToken(admin, ns);
  const { client, access } = await clientWithToken(granted.token);
  return {
    client,
    access,
    token: granted.token,
    async cleanup() {
      access.close();
      await granted.cleanup();
    },
  };
}
