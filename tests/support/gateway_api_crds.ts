/**
 * The Gateway API CRDs on the test cluster: installs the four kinds Sluice
 * reads (from `tests/fixtures/gateway-api-crds/`, v1.6.3 standard channel)
 * and waits until they are served, or removes them and waits until they are
 * gone. The test cluster starts without them; a test that installs them
 * removes them when it ends, so tests that rely on their absence hold.
 *
 * @module
 */
import { parse } from "yaml";
import { KubeApiError, type KubeClient } from "../../lib/k8s/kube_client.ts";
import { HTTP_ROUTES, type Resource } from "../../lib/k8s/resources.ts";
import { waitFor } from "./wait.ts";

export const CUSTOM_RESOURCE_DEFINITIONS: Resource = Object.freeze({
  group: "apiextensions.k8s.io",
  version: "v1",
  plural: "customresourcedefinitions",
  kind: "CustomResourceDefinition",
  namespaced: false,
});

/** The plurals of the kinds installed. */
export const GATEWAY_API_PLURALS = ["gatewayclasses", "gateways", "httproutes", "referencegrants"];

const DIR = new URL("../fixtures/gateway-api-crds/", import.meta.url);

async function served(client: KubeClient): Promise<boolean> {
  try {
    await client.list(HTTP_ROUTES, { limit: 1 });
    return true;
  } catch (error) {
    if (error instanceof KubeApiError && error.isNotFound) return false;
    throw error;
  }
}

/** Creates the CRDs (an existing one is kept) and waits until HTTPRoutes can be listed. */
export async function installGatewayApiCrds(client: KubeClient): Promise<void> {
  for (const plural of GATEWAY_API_PLURALS) {
    const text = await Deno.readTextFile(new URL(`gateway.networking.k8s.io_${plural}.yaml`, DIR));
    try {
      await client.create(CUSTOM_RESOURCE_DEFINITIONS, {}, parse(text));
    } catch (error) {
      if (!(error instanceof KubeApiError && error.isConflict)) throw error;
    }
  }
  await waitFor("the Gateway API CRDs to be served", () => served(client), { timeoutMs: 30_000 });
}

/** Deletes the CRDs (absent ones are fine) and waits until HTTPRoutes are no longer served. */
export async function removeGatewayApiCrds(client: KubeClient): Promise<void> {
  for (const plural of GATEWAY_API_PLURALS) {
    try {
      await client.delete(CUSTOM_RESOURCE_DEFINITIONS, {
        name: `${plural}.gateway.networking.k8s.io`,
      });
    } catch (error) {
      if (!(error instanceof KubeApiError && error.isNotFound)) throw error;
    }
  }
  await waitFor("the Gateway API CRDs to be gone", async () => !(await served(client)), {
    timeoutMs: 30_000,
  });
}
