/**
 * Core resources the tests read and write and Sluice never touches: Pods
 * (the pod runner's workloads) and ServiceAccounts (the controller's
 * identity, its tokens), as {@linkcode Resource}s for `KubeClient`. Sluice's
 * own resources are in `lib/k8s/resources.ts`.
 *
 * @module
 */
import type { Resource } from "../../lib/k8s/resources.ts";

function core(plural: string, kind: string): Resource {
  return Object.freeze({ group: "", version: "v1", plural, kind, namespaced: true });
}

export const PODS: Resource = core("pods", "Pod");
export const SERVICE_ACCOUNTS: Resource = core("serviceaccounts", "ServiceAccount");
