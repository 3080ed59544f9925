/**
 * Reads the deployable manifests in `manifests/` for tests, and applies them
 * to the test cluster with server-side apply.
 *
 * @module
 */
import { parseAllDocuments } from "yaml";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { KubeClient, KubeObject } from "../../lib/k8s/kube_client.ts";
import type { Resource } from "../../lib/k8s/resources.ts";
import * as resources from "../../lib/k8s/resources.ts";
import * as coreResources from "./core_resources.ts";
import * as rbacResources from "./rbac_resources.ts";

/** The repository's `manifests/` folder. */
export const MANIFESTS_DIR = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "manifests");

/** Every object of one manifest file (`cluster_role.yaml`, …). */
export async function readManifest(file: string): Promise<KubeObject[]> {
  const text = await Deno.readTextFile(join(MANIFESTS_DIR, file));
  return parseAllDocuments(text).map((doc) => {
    if (doc.errors.length > 0) throw new Error(`Cannot parse "${file}": ${doc.errors[0]?.message}`);
    return doc.toJS() as KubeObject;
  }).filter((o) => o !== null);
}

const KNOWN: readonly Resource[] = [
  ...Object.values(resources),
  ...Object.values(coreResources),
  ...Object.values(rbacResources),
]
  .filter((v): v is Resource => typeof v === "object" && v !== null && "plural" in v);

/** The resource of an object, by `apiVersion` and `kind`. */
export function resourceOf(object: KubeObject): Resource {
  const r = KNOWN.find((k) =>
    resources.apiVersionOf(k) === object.apiVersion && k.kind === object.kind
  );
  if (r === undefined) throw new Error(`No resource known for ${object.apiVersion} ${object.kind}`);
  return r;
}

/** Server-side applies `object` (as field manager `sluice-tests`), in `namespace` if it is namespaced. */
export async function apply<T = KubeObject>(
  client: KubeClient,
  object: KubeObject,
  options: { namespace?: string } = {},
): Promise<T> {
  const r = resourceOf(object);
  const namespace = r.namespaced ? options.namespace ?? object.metadata?.namespace : undefined;
  const body = r.namespaced && namespace !== undefined
    ? { ...object, metadata: { ...object.metadata, namespace } }
    : object;
  return await client.patch<T>(r, { namespace, name: object.metadata?.name }, body, {
    type: "apply",
    fieldManager: "sluice-tests",
    force: true,
  });
}
