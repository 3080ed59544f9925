/**
 * Test support: manifest texts and a temporary directory for the
 * `--manifests` source tests. Not part of Sluice.
 *
 * @module
 */
import { within } from "./wait.ts";
import type { Logger } from "../../lib/log/logging.ts";
import { ObjectStore } from "../../lib/store/object_store.ts";
import { ManifestSource, type ManifestSourceOptions } from "../../lib/sources/manifest_source.ts";

export const SERVICE_A = `kind: Service
metadata: {name: a, namespace: shop}
spec: {ports: [{port: 80}]}
`;
export const SERVICE_B = `kind: Service
metadata: {name: b, namespace: shop}
spec: {ports: [{port: 80}]}
`;

/** Service `shop/s<i>` as a one-document manifest. */
export function service(i: number): string {
  return `kind: Service\nmetadata: {name: s${i}, namespace: shop}\nspec: {ports: [{port: 80}]}\n`;
}

/** Runs `fn` with a fresh temporary directory, removed afterwards. */
export async function withDirectory(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "sluice-manifests-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** `namespace/name` of every Service in the store, sorted. */
export function names(store: ObjectStore): string[] {
  return store.list("Service").map((s) => `${s.metadata?.namespace}/${s.metadata?.name}`).sort();
}

/** A source on `dir` started into a new store, once its first load is done. */
export async function loadedSource(
  dir: string,
  logger: Logger,
  options: Omit<Partial<ManifestSourceOptions>, "directory" | "logger"> = {},
): Promise<{ store: ObjectStore; source: ManifestSource }> {
  const store = new ObjectStore();
  const source = new ManifestSource({ directory: dir, logger, ...options });
  source.start(store);
  await within(5_000, "the first load", source.synced);
  return { store, source };
}
