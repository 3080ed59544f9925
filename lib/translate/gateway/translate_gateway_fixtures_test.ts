/**
 * Golden fixtures for the Gateway API translation:
 * `tests/fixtures/gateway/<case>.in.yaml` (objects, plus an optional leading
 * `kind: Fixture` document with `options`) → `<case>.out.json` (the whole
 * translation: classes, gateways, routes, issues, statuses).
 *
 * Rewrite the expected files only on purpose, then review them:
 *   UPDATE_FIXTURES=1 tools/deno test -A lib/translate/gateway/translate_gateway_fixtures_test.ts
 *
 * @module
 */

import { parseAllDocuments } from "yaml";
import { assert, assertEquals } from "../../../tests/support/assert.ts";
import type { KubeObject } from "../../k8s/objects.ts";
import { translateGateway } from "./translate_gateway.ts";
import type { GatewayObjects, GatewayTranslateOptions } from "./types.ts";

const FIXTURES = new URL("../../../tests/fixtures/gateway/", import.meta.url);
const UPDATE = Deno.env.get("UPDATE_FIXTURES") === "1";
const NOW = "2030-01-01T00:00:00Z";
const SUPPORTED_FEATURES = ["Gateway", "HTTPRoute", "ReferenceGrant"];

const COLLECTIONS: Record<string, keyof GatewayObjects> = {
  GatewayClass: "gatewayClasses",
  Gateway: "gateways",
  HTTPRoute: "httpRoutes",
  ReferenceGrant: "referenceGrants",
  Service: "services",
  Secret: "secrets",
  Namespace: "namespaces",
};

function readFixture(text: string, name: string) {
  let options: GatewayTranslateOptions = {};
  const objects: Record<string, KubeObject[]> = {};
  for (const document of parseAllDocuments(text)) {
    if (document.errors.length > 0) throw new Error(`${name}: ${document.errors[0]!.message}`);
    const object = document.toJS() as (KubeObject & { options?: GatewayTranslateOptions }) | null;
    if (object === null) continue;
    if (object.kind === "Fixture") {
      options = object.options ?? {};
      continue;
    }
    const collection = COLLECTIONS[object.kind ?? ""];
    if (collection === undefined) throw new Error(`${name}: unknown kind ${object.kind}`);
    (objects[collection] ??= []).push(object);
  }
  return { objects: objects as GatewayObjects, options };
}

const names = [...Deno.readDirSync(FIXTURES)]
  .filter((entry) => entry.isFile && entry.name.endsWith(".in.yaml"))
  .map((entry) => entry.name.slice(0, -".in.yaml".length))
  .sort();

Deno.test("the gateway fixture folder holds at least 25 golden cases", () => {
  assert(names.length >= 25, `only ${names.length} fixtures`);
});

for (const name of names) {
  Deno.test(`gateway fixture ${name}`, async () => {
    const input = await Deno.readTextFile(new URL(`${name}.in.yaml`, FIXTURES));
    const { objects, options } = readFixture(input, name);
    const translation = translateGateway(objects, {
      now: NOW,
      supportedFeatures: SUPPORTED_FEATURES,
      ...options,
    });
    // Plain data, frozen, and the same on a second run.
    assertEquals(structuredClone(translation), translation);
    assert(Object.isFrozen(translation.routes), "routes are frozen");
    assertEquals(
      translateGateway(objects, { now: NOW, supportedFeatures: SUPPORTED_FEATURES, ...options }),
      translation,
    );
    // Input order does not matter.
    const reversed = Object.fromEntries(
      Object.entries(objects).map(([kind, list]) => [kind, [...list].reverse()]),
    ) as GatewayObjects;
    assertEquals(
      translateGateway(reversed, { now: NOW, supportedFeatures: SUPPORTED_FEATURES, ...options }),
      translation,
      "translation of the objects in reverse order",
    );
    const actual = `${JSON.stringify(translation, null, 2)}\n`;
    const outUrl = new URL(`${name}.out.json`, FIXTURES);
    if (UPDATE) {
      await Deno.writeTextFile(outUrl, actual);
      return;
    }
    let expected: string;
    try {
      expected = await Deno.readTextFile(outUrl);
    } catch {
      throw new Error(`Missing ${name}.out.json: run with UPDATE_FIXTURES=1 and review it`);
    }
    assertEquals(JSON.parse(actual), JSON.parse(expected));
  });
}
