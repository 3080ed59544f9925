/**
 * The safety net of `matters.ts`: over every translation fixture
 * (`tests/fixtures/*.in.yaml`), whenever the store says that adding,
 * deleting or editing an object does not matter, translating before and
 * after must give the same result. A wrong "does not matter" would leave a
 * stale snapshot serving; this is where it shows.
 */
import { parseAllDocuments } from "yaml";
import { assert, assertEquals } from "../../tests/support/assert.ts";
import type { KubeObject } from "../k8s/objects.ts";
import { createCertificateInspector } from "../tls/certificate_inspector.ts";
import { translate } from "../translate/translate.ts";
import type { TranslateOptions } from "../translate/translation.ts";
import { type Kind, KINDS } from "./matters.ts";
import { ObjectStore } from "./object_store.ts";

const FIXTURES = new URL("../../tests/fixtures/", import.meta.url);
const inspectCertificate = createCertificateInspector();

interface Fixture {
  readonly name: string;
  readonly options: Omit<TranslateOptions, "now" | "inspectCertificate">;
  readonly now: number;
  readonly objects: { kind: Kind; object: KubeObject }[];
}

async function readFixtures(): Promise<Fixture[]> {
  const fixtures: Fixture[] = [];
  for await (const entry of Deno.readDir(FIXTURES)) {
    if (!entry.name.endsWith(".in.yaml")) continue;
    const text = await Deno.readTextFile(new URL(entry.name, FIXTURES));
    let options = {};
    let now = Date.parse("2030-01-01T00:00:00Z");
    const objects: Fixture["objects"] = [];
    for (const document of parseAllDocuments(text)) {
      const object = document.toJS() as (KubeObject & Record<string, unknown>) | null;
      if (object === null) continue;
      if (object.kind === "Fixture") {
        options = (object.options ?? {}) as Fixture["options"];
        if (typeof object.now === "string") now = Date.parse(object.now);
      } else if (KINDS.includes(object.kind as Kind)) {
        objects.push({ kind: object.kind as Kind, object });
      }
    }
    fixtures.push({ name: entry.name, options, now, objects });
  }
  return fixtures.sort((a, b) => a.name < b.name ? -1 : 1);
}

function storeOf(fixture: Fixture, objects: Fixture["objects"]): ObjectStore {
  const store = new ObjectStore(fixture.options);
  for (const { kind, object } of objects) store.upsert(kind, object);
  return store;
}

function translateStore(fixture: Fixture, store: ObjectStore) {
  return translate(store.objects(), { ...fixture.options, now: fixture.now, inspectCertificate });
}

/** An edit of an object that changes something translation might read. */
function edited(kind: Kind, object: KubeObject): KubeObject {
  const copy = structuredClone(object) as KubeObject & Record<string, unknown>;
  switch (kind) {
    case "Secret":
      copy.data = { "tls.crt": "Z2FyYmFnZQ==", "tls.key": "Z2FyYmFnZQ==" };
      break;
    case "Service":
      copy.spec = { ports: [{ name: "other", port: 9999, targetPort: 9999 }] };
      break;
    case "EndpointSlice":
      copy.endpoints = [{ addresses: ["10.99.99.99"], conditions: { ready: true } }];
      break;
    case "Ingress":
      copy.spec = { ...(copy.spec as object), rules: [{ host: "edited.test" }] };
      break;
    case "IngressClass":
      copy.spec = { controller: "example.com/other" };
      break;
  }
  return copy;
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
