/**
 * The shared routing case table, run against the compiled table and the reference
 * matcher, plus properties of compiled tables.
 *
 * @module
 */

import { assert, assertEquals, assertStrictEquals } from "../../tests/support/assert.ts";
import { translate } from "../translate/translate.ts";
import type { Translation } from "../translate/translation.ts";
import { createReferenceMatcher } from "../../tests/support/reference_matcher.ts";
import { compileRouteTable } from "./route_table.ts";
import type { Match } from "./snapshot.ts";
import { expectedOf, ROUTE_CASES } from "../../tests/support/route_cases.ts";
import { TEST_OPTIONS, worldOf } from "../../tests/support/route_world.ts";

type Matcher = (translation: Translation) => (host: string, path: string) => Match | undefined;

const ENGINES: Record<string, Matcher> = {
  "compiled table": (translation) => compileRouteTable(translation).lookup,
  "reference matcher": (translation) => createReferenceMatcher(translation).lookup,
};

function outcome(match: Match | undefined): string {
  if (match === undefined) return "404";
  return `${match.backend.endpoints.length === 0 ? "503 " : ""}${match.backend.key}`;
}

for (const [engine, matcherOf] of Object.entries(ENGINES)) {
  Deno.test(`${engine}: every shared routing case gives the expected backend or status`, async (t) => {
    for (const routeCase of ROUTE_CASES) {
      await t.step(routeCase.name, () => {
        const options = routeCase.defaultBackendService === undefined
          ? TEST_OPTIONS
          : { ...TEST_OPTIONS, defaultBackendService: routeCase.defaultBackendService };
        const lookup = matcherOf(translate(worldOf(routeCase.ingresses), options));
        for (const [host, path, expected, tls] of routeCase.requests) {
          const want = expectedOf(expected);
          const match = lookup(host, path);
          const shown = `${JSON.stringify(host)} ${JSON.stringify(path)}`;
          assertEquals(
            outcome(match),
            want === undefined ? "404" : `${want.status === 503 ? "503 " : ""}${want.key}`,
            shown,
          );
          if (tls !== undefined) assertEquals(match?.tls, tls, `tls of ${shown}`);
        }
      });
    }
  });
}

Deno.test("compiled table and reference matcher return equal Match objects on the shared cases", () => {
  for (const routeCase of ROUTE_CASES) {
    const options = routeCase.defaultBackendService === undefined
      ? TEST_OPTIONS
      : { ...TEST_OPTIONS, defaultBackendService: routeCase.defaultBackendService };
    const translation = translate(worldOf(routeCase.ingresses), options);
    const table = compileRouteTable(translation);
    for (const [host, path] of routeCase.requests) {
      assertEquals(
        table.lookup(host, path),
        createReferenceMatcher(translation).lookup(host, path),
        `${routeCase.name}: ${host} ${path}`,
      );
    }
  }
});

Deno.test("lookup() returns the match with the rule's host, path and pathType as written", () => {
  const translation = translate(
    worldOf([{
      name: "a",
      namespace: "shop",
      rules: [["*.Example.com", [["/api/", "Prefix", "api"]]]],
    }]),
    TEST_OPTIONS,
  );
  const match = compileRouteTable(translation).lookup("x.example.com", "/api/v1");
  assertEquals(match, {
    ingress: "shop/a",
    host: "*.example.com",
    path: "/api/",
    pathType: "Prefix",
    backend: {
      key: "shop/api:80",
      service: "shop/api",
      endpoints: [{ address: "10.0.0.1", port: 8080 }],
    },
    tls: false,
  });
});

Deno.test("lookup() answers from frozen, precomputed matches", () => {
  const translation = translate(
    worldOf([{ name: "a", rules: [["a.test", [["/", "Prefix", "web"]]]] }]),
    TEST_OPTIONS,
  );
  const table = compileRouteTable(translation);
  const first = table.lookup("a.test", "/x")!;
  assertStrictEquals(table.lookup("A.TEST", "/y"), first);
  assert(Object.isFrozen(first) && Object.isFrozen(first.backend));
  assert(Object.isFrozen(first.backend.endpoints) && Object.isFrozen(first.backend.endpoints[0]));
  assert(Object.isFrozen(table));
});

Deno.test("compileRouteTable() does not modify the translation it reads", () => {
  const translation = translate(
    worldOf([{ name: "a", rules: [["a.test", [["/", "Prefix", "web"]]]] }]),
    TEST_OPTIONS,
  );
  const before = structuredClone(translation);
  compileRouteTable(translation).lookup("a.test", "/");
  assertEquals(translation, before);
  assert(!Object.isFrozen(translation.backends[0]));
});

Deno.test("lookup() answers 503 for a route whose backend is not in the translation", () => {
  const table = compileRouteTable({
    routes: [{ host: "", path: "/", pathType: "Prefix", ingress: "a/b", backend: "a/ghost:80" }],
    backends: [],
    tlsHosts: [],
  });
  const match = table.lookup("x", "/");
  assertEquals(match?.backend.endpoints, []);
  assertEquals(
    match?.backend.unavailable,
    'Cannot route to backend "a/ghost:80": it is not in the translation',
  );
});

Deno.test("lookup() scans at most the length of the longest prefix for a very long path", () => {
  const translation = translate(
    worldOf([{ name: "a", rules: [["a.test", [["/a", "Prefix", "a"]]]] }]),
    TEST_OPTIONS,
  );
  const table = compileRouteTable(translation);
  const long = "/a" + "/x".repeat(50_000);
  assertEquals(table.lookup("a.test", long)?.path, "/a");
  assertEquals(table.lookup("a.test", "/b" + "/x".repeat(50_000)), undefined);
});
