/**
 * The RBAC resources the tests create, read and apply (Sluice itself never
 * touches them; its RBAC comes from `manifests/`): ClusterRoles, Roles and
 * their bindings, as {@linkcode Resource}s for `KubeClient`.
 *
 * @module
 */
import type { Resource } from "../../lib/k8s/resources.ts";

function rbac(plural: string, kind: string, namespaced: boolean): Resource {
  return Object.freeze({
    group: "rbac.authorization.k8s.io",
    version: "v1",
    plural,
    kind,
    namespaced,
  });
}

export const CLUSTER_ROLES: Resource = rbac("clusterroles", "ClusterRole", false);
export const CLUSTER_ROLE_BINDINGS: Resource = rbac(
  "clusterrolebindings",
  "ClusterRoleBinding",
  false,
);
export const ROLES: Resource = rbac("roles", "Role", true);
export const ROLE_BINDINGS: Resource = rbac("rolebindings", "RoleBinding", true);
