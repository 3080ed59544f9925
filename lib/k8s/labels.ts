/**
 * Well-known Kubernetes label keys Sluice reads. Constants only: no imports,
 * no I/O, so the pure core (`lib/translate/`, `lib/routing/`) may import it.
 *
 * @module
 */

/** The label on an EndpointSlice that names its Service. */
export const SERVICE_NAME_LABEL = "kubernetes.io/service-name";
