/**
 * The safety net of `matters.ts`: over every translation fixture
 * (`tests/fixtures/*.in.yaml`, and the Gateway API ones in
 * `tests/fixtures/gateway/`, translated with `gatewayApi`), whenever the
 * store says that adding, deleting or editing an object does not matter,
 * translating before and after must give the same result. A wrong "does not
 * matter" would leave a stale snapshot serving; this is where it shows.
 */
import { parseAllDocuments } from "yaml";
import { assert, assertEquals } from "../../tests/support/assert.ts";
import type { KubeObject } from "../k8s/objects.ts";
import type { GatewayTranslateOptions } from "../translate/gateway/types.ts";
import { type Kind, KINDS } from "./matters.ts";
import {
  editedObject as edited,
  type FixtureObjects as Fixture,
  readFixtureObjects as readFixtures,
} from "../../tests/support/fixture_objects.ts";
import { createCertificateInspector } from "../tls/certificate_inspector.ts";
import { translate } from "../translate/translate.ts";
import { ObjectStore } from "./object_store.ts";

const inspectCertificate = createCertificateInspector();

function storeOf(fixture: Fixture, objects: Fixture["objects"]): ObjectStore {
  const store = new ObjectStore(fixture.options);
  for (const { kind, object } of objects) store.upsert(kind, object);
  return store;
}

function translateStore(fixture: Fixture, store: ObjectStore) {
  return translate(store.objects(), { ...fixture.options, now: fixture.now, inspectCertificate });
}

const fixtures = await readFixtures();

Deno.test("ObjectStore: no change it calls irrelevant alters any fixture's translation", () => {
  assert(fixtures.length > 50, `only ${fixtures.length} fixtures found`);
  let skipped = 0;
  for (const fixture of fixtures) {
    fixture.objects.forEach(({ kind, object }, i) => {
      const others = fixture.objects.filter((_, j) => j !== i);
      const label = `${fixture.name}: ${kind} ${object.metadata?.namespace ?? ""}/${
        object.metadata?.name ?? ""
      }`;

      // Deleting it.
      const full = storeOf(fixture, fixture.objects);
      const before = translateStore(fixture, full);
      const deletion = full.delete(kind, object);
      if (!deletion.matters) {
        skipped++;
        assertEquals(
          translateStore(fixture, full),
          before,
          `${label}: deleted (${deletion.reason})`,
        );
      }

      // Adding it.
      const partial = storeOf(fixture, others);
      const without = translateStore(fixture, partial);
      const addition = partial.upsert(kind, object);
      if (!addition.matters) {
        skipped++;
        assertEquals(
          translateStore(fixture, partial),
          without,
          `${label}: added (${addition.reason})`,
        );
      }

      // Editing it.
      const store = storeOf(fixture, fixture.objects);
      const edit = store.upsert(kind, edited(kind, object));
      if (!edit.matters) {
        skipped++;
        assertEquals(translateStore(fixture, store), before, `${label}: edited (${edit.reason})`);
      }
    });
  }
  // The check must have had something to check.
  assert(skipped > 20, `only ${skipped} irrelevant changes were exercised`);
});

const GATEWAY_FIXTURES = new URL("../../tests/fixtures/gateway/", import.meta.url);

/** The Gateway API fixtures, as {@linkcode Fixture}s translated with `gatewayApi`. */
async function readGatewayFixtures(): Promise<Fixture[]> {
  const fixtures: Fixture[] = [];
  for await (const entry of Deno.readDir(GATEWAY_FIXTURES)) {
    if (!entry.name.endsWith(".in.yaml")) continue;
    const text = await Deno.readTextFile(new URL(entry.name, GATEWAY_FIXTURES));
    let options: GatewayTranslateOptions = {};
    const objects: Fixture["objects"] = [];
    for (const document of parseAllDocuments(text)) {
      const object = document.toJS() as
        | (KubeObject & { kind?: string; options?: GatewayTranslateOptions })
        | null;
      if (object === null) continue;
      if (object.kind === "Fixture") options = object.options ?? {};
      else if (KINDS.includes(object.kind as Kind)) {
        objects.push({ kind: object.kind as Kind, object });
      }
    }
    fixtures.push({
      name: `gateway/${entry.name}`,
      options: {
        gatewayApi: true,
        ...(options.controllerName !== undefined ? { controllerName: options.controllerName } : {}),
        ...(options.supportedFeatures !== undefined
          ? { gatewaySupportedFeatures: options.supportedFeatures }
          : {}),
      },
      now: Date.parse("2030-01-01T00:00:00Z"),
      objects,
    });
  }
  return fixtures.sort((a, b) => a.name < b.name ? -1 : 1);
}

/** An edit the store should call irrelevant: a status for Gateway API kinds, an annotation for a Namespace. */
function quietEdit(kind: Kind, object: KubeObject): KubeObject | undefined {
  switch (kind) {
    case "GatewayClass":
    case "Gateway":
    case "HTTPRoute":
    case "ReferenceGrant":
      return {
        ...object,
        status: { conditions: [{ type: "Accepted", status: "Unknown" }] },
      } as KubeObject;
    case "Namespace":
      return { ...object, metadata: { ...object.metadata, annotations: { edited: "yes" } } };
    default:
      return undefined;
  }
}

const gatewayFixtures = await readGatewayFixtures();

Deno.test("ObjectStore: no change it calls irrelevant alters any Gateway API fixture's translation", () => {
  assert(gatewayFixtures.length >= 25, `only ${gatewayFixtures.length} fixtures found`);
  let skipped = 0;
  for (const fixture of gatewayFixtures) {
    const full = storeOf(fixture, fixture.objects);
    const before = translateStore(fixture, full);
    // The fixtures route something: the safety net is not comparing empty translations.
    assert(before.gateway !== undefined, `${fixture.name}: no gateway translation`);
    fixture.objects.forEach(({ kind, object }, i) => {
      const others = fixture.objects.filter((_, j) => j !== i);
      const label = `${fixture.name}: ${kind} ${object.metadata?.namespace ?? ""}/${
        object.metadata?.name ?? ""
      }`;
      const check = (
        store: ObjectStore,
        verdict: { matters: boolean; reason: string },
        expected: unknown,
        what: string,
      ) => {
        if (verdict.matters) return;
        skipped++;
        assertEquals(
          translateStore(fixture, store),
          expected,
          `${label}: ${what} (${verdict.reason})`,
        );
      };

      const deleting = storeOf(fixture, fixture.objects);
      check(deleting, deleting.delete(kind, object), before, "deleted");

      const adding = storeOf(fixture, others);
      const without = translateStore(fixture, adding);
      check(adding, adding.upsert(kind, object), without, "added");

      for (const edit of [edited(kind, object), quietEdit(kind, object)]) {
        if (edit === undefined) continue;
        const editing = storeOf(fixture, fixture.objects);
        check(editing, editing.upsert(kind, edit), before, "edited");
      }
    });
  }
  assert(skipped > 50, `only ${skipped} irrelevant changes were exercised`);
});
