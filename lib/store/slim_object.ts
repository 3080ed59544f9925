/**
 * Drops what the API server keeps for its own bookkeeping and no
 * translation reads, before an object is stored: `metadata.managedFields`
 * (server-side apply's field ownership, often larger than the spec) and
 * kubectl's `last-applied-configuration` annotation (a second copy of the
 * whole object as a string). At 10,000 Ingresses these are megabytes of
 * heap kept for nothing; client-go users strip them the same way with an
 * informer transform.
 *
 * Pure: returns the object itself when there is nothing to drop, else a
 * copy; never changes its input. Knows nothing of kinds or of the store.
 *
 * @module
 */
import type { KubeObject, ObjectMeta } from "../k8s/objects.ts";

/** kubectl's copy of the last applied object, as an annotation. */
export const LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration";

/** `object` without `metadata.managedFields` and without the last-applied annotation. */
export function slimObject<T extends KubeObject>(object: T): T {
  const metadata = object.metadata as (ObjectMeta & { managedFields?: unknown }) | undefined;
  if (metadata === null || typeof metadata !== "object") return object;
  const annotations = metadata.annotations;
  const hasLastApplied = annotations !== null && typeof annotations === "object" &&
    Object.hasOwn(annotations, LAST_APPLIED_ANNOTATION);
  if (!Object.hasOwn(metadata, "managedFields") && !hasLastApplied) return object;
  const { managedFields: _managedFields, ...kept } = metadata;
  if (hasLastApplied) {
    const { [LAST_APPLIED_ANNOTATION]: _lastApplied, ...others } = annotations!;
    kept.annotations = others;
  }
  return { ...object, metadata: kept };
}
