/**
 * Snapshot assembly.
 *
 * @module
 */

import { assert, assertEquals } from "../../tests/support/assert.ts";
import { translate } from "../translate/translate.ts";
import { buildSnapshot } from "./snapshot_builder.ts";
import { TEST_OPTIONS, worldOf } from "../../tests/support/route_world.ts";

Deno.test("buildSnapshot() compiles routes and certificates under the given version, frozen", () => {
  const translation = translate(
    worldOf([{ name: "a", rules: [["a.test", [["/", "Prefix", "web"]]]], tlsHosts: ["a.test"] }]),
    TEST_OPTIONS,
  );
  const snapshot = buildSnapshot(translation, {
    version: 7,
    defaultCertificate: { source: "sluice/self-signed", certPem: "c", keyPem: "k" },
  });
  assertEquals(snapshot.version, 7);
  assertEquals(snapshot.routes.lookup("a.test", "/x")?.backend.key, "default/web:80");
  assertEquals(snapshot.routes.lookup("a.test", "/x")?.tls, true);
  assertEquals(snapshot.certificates.resolve("a.test").source, "sluice/self-signed");
  assert(Object.isFrozen(snapshot));
});

Deno.test("buildSnapshot() works on a translation that crossed a structured clone", () => {
  const translation = structuredClone(translate(
    worldOf([{ name: "a", rules: [["a.test", [["/", "Prefix", "web"]]]] }]),
    TEST_OPTIONS,
  ));
  const snapshot = buildSnapshot(translation, {
    version: 1,
    defaultCertificate: { source: "sluice/self-signed", certPem: "c", keyPem: "k" },
  });
  assertEquals(snapshot.routes.lookup("a.test", "/")?.ingress, "default/a");
});
