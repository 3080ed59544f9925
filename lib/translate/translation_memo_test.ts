/**
 * The safety net of `translation_memo.ts`: over every translation fixture, a
 * translation that reuses a memo from earlier translations of the same store
 * equals one computed from scratch, after each object is edited, deleted or
 * added back.
 */
import { assert, assertEquals } from "../../tests/support/assert.ts";
import {
  editedObject,
  readFixtureObjects,
  webIngressSpec,
} from "../../tests/support/fixture_objects.ts";
import type { IngressClass } from "../k8s/objects.ts";
import { ObjectStore } from "../store/object_store.ts";
import { createCertificateInspector } from "../tls/certificate_inspector.ts";
import { translate } from "./translate.ts";
import type { Translation } from "./translation.ts";
import { createTranslationMemo, type TranslationMemo } from "./translation_memo.ts";

const inspectCertificate = createCertificateInspector();
const fixtures = await readFixtureObjects();

Deno.test("translate() with a memo kept across changes equals translate() from scratch, for every fixture", () => {
  assert(fixtures.length > 50, `only ${fixtures.length} fixtures found`);
  let compared = 0;
  for (const fixture of fixtures) {
    const store = new ObjectStore(fixture.options);
    for (const { kind, object } of fixture.objects) store.upsert(kind, object);
    const memo = createTranslationMemo();
    const check = (label: string) => {
      const options = { ...fixture.options, now: fixture.now, inspectCertificate };
      const fresh: Translation = translate(store.objects(), options);
      assertEquals(translate(store.objects(), { ...options, memo }), fresh, label);
      // A second pass is served from the memo alone.
      assertEquals(translate(store.objects(), { ...options, memo }), fresh, `${label}, again`);
      compared++;
    };
    check(`${fixture.name}: as loaded`);
    for (const { kind, object } of fixture.objects) {
      const label = `${fixture.name}: ${kind} ${object.metadata?.namespace ?? ""}/${
        object.metadata?.name ?? ""
      }`;
      store.upsert(kind, editedObject(kind, object));
      check(`${label} edited`);
      store.delete(kind, object);
      check(`${label} deleted`);
      store.upsert(kind, object);
      check(`${label} restored`);
    }
  }
  assert(compared > 200, `only ${compared} comparisons made`);
});

Deno.test("translate() reuses an unchanged Ingress's route candidates and recomputes a replaced one's", () => {
  const ingress = (host: string) => ({
    metadata: { namespace: "shop", name: "web", resourceVersion: "1" },
    spec: webIngressSpec(host),
  });
  const store = new ObjectStore();
  const ours: IngressClass = {
    metadata: { name: "sluice" },
    spec: { controller: "sluice.dev/ingress-controller" },
  };
  store.upsert("IngressClass", ours);
  const first = ingress("a.test");
  store.upsert("Ingress", first);
  const memo: TranslationMemo = createTranslationMemo();
  const options = { now: 0, inspectCertificate, memo };
  translate(store.objects(), options);
  const stored = store.get("Ingress", "shop/web")!;
  const remembered = memo.routeCandidates.get(stored);
  assert(remembered !== undefined, "the candidates are remembered");
  translate(store.objects(), options);
  assert(memo.routeCandidates.get(stored) === remembered, "and reused, not recomputed");

  store.upsert("Ingress", ingress("b.test"));
  const routes = translate(store.objects(), options).routes.map((r) => r.host);
  assertEquals(routes, ["b.test"]);
});
