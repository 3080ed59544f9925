/**
 * ReferenceGrant (gateway.networking.k8s.io/v1beta1 and v1): whether an
 * object in one namespace may refer to an object in another.
 *
 * @module
 */

import type { ReferenceGrant } from "./types.ts";

/** The referring side: group, kind and namespace of the object holding the reference. */
export interface ReferenceFrom {
  readonly group: string;
  readonly kind: string;
  readonly namespace: string;
}

/** The referred-to object. */
export interface ReferenceTo {
  readonly group: string;
  readonly kind: string;
  readonly namespace: string;
  readonly name: string;
}

/**
 * Whether the reference is allowed: same namespace, or a ReferenceGrant in the
 * target's namespace lists the source (`from`: group, kind, namespace) and the
 * target (`to`: group, kind, and name when set).
 *
 * Gateway API (ReferenceGrant): "ReferenceGrant … identifies kinds of resources
 * in other namespaces that are trusted to reference the specified kinds of
 * resources in the same namespace as the policy"; `to.name`: "When unspecified,
 * this policy refers to all resources of the specified Group and Kind in the
 * local namespace." The core group is `""`.
 */
export function isReferenceAllowed(
  grants: readonly ReferenceGrant[],
  from: ReferenceFrom,
  to: ReferenceTo,
): boolean {
  if (from.namespace === to.namespace) return true;
  return grants.some((grant) =>
    grant?.metadata?.namespace === to.namespace &&
    Array.isArray(grant.spec?.from) && Array.isArray(grant.spec?.to) &&
    grant.spec.from.some((f) =>
      f !== null && typeof f === "object" && (f.group ?? "") === from.group &&
      f.kind === from.kind && f.namespace === from.namespace
    ) &&
    grant.spec.to.some((t) =>
      t !== null && typeof t === "object" && (t.group ?? "") === to.group &&
      t.kind === to.kind && (t.name === undefined || t.name === "" || t.name === to.name)
    )
  );
}
