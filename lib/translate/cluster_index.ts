/**
 * Indexes of the objects a translation looks up by name: Services, their
 * EndpointSlices and Secrets, each keyed `namespace/name`, built once per
 * translation so every lookup is a map read.
 *
 * Knows object names and the EndpointSlice→Service label; nothing about
 * routing.
 *
 * @module
 */

import type { EndpointSlice, KubeObject, Secret, Service } from "../k8s/objects.ts";
import { SERVICE_NAME_LABEL } from "../k8s/labels.ts";
import type { ClusterObjects } from "./translation.ts";

/** Objects by `namespace/name`; EndpointSlices by the `namespace/name` of their Service. */
export interface ClusterIndex {
  readonly services: ReadonlyMap<string, Service>;
  readonly endpointSlices: ReadonlyMap<string, readonly EndpointSlice[]>;
  readonly secrets: ReadonlyMap<string, Secret>;
}

/** `namespace/name` of a namespaced object, or `undefined` when either is missing. */
export function objectKey(object: KubeObject | undefined | null): string | undefined {
  const namespace = object?.metadata?.namespace;
  const name = object?.metadata?.name;
  if (typeof namespace !== "string" || namespace === "") return undefined;
  if (typeof name !== "string" || name === "") return undefined;
  return `${namespace}/${name}`;
}

/** Builds the indexes. Objects without namespace or name are skipped. */
export function indexCluster(objects: ClusterObjects): ClusterIndex {
  const services = new Map<string, Service>();
  for (const service of objects.services ?? []) {
    const key = objectKey(service);
    if (key !== undefined) services.set(key, service);
  }
  const secrets = new Map<string, Secret>();
  for (const secret of objects.secrets ?? []) {
    const key = objectKey(secret);
    if (key !== undefined) secrets.set(key, secret);
  }
  const endpointSlices = new Map<string, EndpointSlice[]>();
  for (const slice of objects.endpointSlices ?? []) {
    const namespace = slice?.metadata?.namespace;
    const service = slice?.metadata?.labels?.[SERVICE_NAME_LABEL];
    if (typeof namespace !== "string" || namespace === "") continue;
    if (typeof service !== "string" || service === "") continue;
    const key = `${namespace}/${service}`;
    const list = endpointSlices.get(key);
    if (list === undefined) endpointSlices.set(key, [slice]);
    else list.push(slice);
  }
  return { services, endpointSlices, secrets };
}
