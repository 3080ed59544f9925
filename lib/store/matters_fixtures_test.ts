/**
 * The safety net of `matters.ts`: over every translation fixture
 * (`tests/fixtures/*.in.yaml`), whenever the store says that adding,
 * deleting or editing an object does not matter, translating before and
 * after must give the same result. A wrong "does not matter" would leave a
 * stale snapshot serving; this is where it shows.
 */
import { assert, assertEquals } from "../../tests/support/assert.ts";
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
