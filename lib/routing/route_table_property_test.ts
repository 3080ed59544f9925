/**
 * Seeded property tests: random Ingress sets and random requests; the
 * compiled table must agree with the reference matcher on every request, and
 * translation must not depend on the order objects arrive in. Reproducible:
 * a failure names its seed (`SEED=<n>` reruns just that seed).
 *
 * @module
 */

import { assertEquals } from "../../tests/support/assert.ts";
import { translate } from "../translate/translate.ts";
import type { TranslateOptions } from "../translate/translation.ts";
import { createReferenceMatcher } from "../../tests/support/reference_matcher.ts";
import { compileRouteTable } from "./route_table.ts";
import {
  type IngressSketch,
  type PathSketch,
  TEST_OPTIONS,
  worldOf,
} from "../../tests/support/route_world.ts";
import { seededRandom } from "../../tests/support/seeded_random.ts";

const random = seededRandom;

const RULE_HOSTS = [
  "",
  "shop.example.com",
  "*.example.com",
  "x.example.com",
  "Other.Test",
  "*.test",
];
const RULE_PATHS = ["/", "/a", "/a/", "/a/b", "/ab", "/a/b/c", "/A", "/a/b/", "/b"];
const IMPL_ONLY_PATHS = ["/a//b", "/c//"];
const PATH_TYPES = ["Exact", "Prefix", "ImplementationSpecific"];
const SERVICES = ["s0", "s1", "s2", "missing"];
const REQUEST_HOSTS = [
  "shop.example.com",
  "SHOP.example.com:8080",
  "shop.example.com.",
  "x.example.com",
  "a.example.com",
  "a.b.example.com",
  "example.com",
  "other.test",
  "y.test",
  "[::1]:80",
  "10.1.2.3",
  "",
];
const REQUEST_PATHS = [
  "",
  "/",
  "/a",
  "/a/",
  "/a/b",
  "/a/b/",
  "/a/b/c",
  "/a/b/c/d",
  "/a/bc",
  "/ab",
  "/ab/",
  "/A",
  "/a//b",
  "/a//b/x",
  "/c/",
  "/c//",
  "//",
  "/b?x=1",
  "/a?/a/b",
  "/zzz",
];

function pick<T>(next: () => number, list: readonly T[]): T {
  return list[Math.floor(next() * list.length)]!;
}

function randomWorld(next: () => number): { sketches: IngressSketch[]; options: TranslateOptions } {
  const sketches: IngressSketch[] = [];
  const count = 1 + Math.floor(next() * 6);
  for (let i = 0; i < count; i++) {
    const rules: [string, PathSketch[]][] = [];
    const ruleCount = Math.floor(next() * 3);
    for (let r = 0; r < ruleCount; r++) {
      const paths: PathSketch[] = [];
      const pathCount = 1 + Math.floor(next() * 4);
      for (let p = 0; p < pathCount; p++) {
        const pathType = pick(next, PATH_TYPES);
        const path = pathType === "ImplementationSpecific" && next() < 0.2
          ? pick(next, IMPL_ONLY_PATHS)
          : pick(next, RULE_PATHS);
        paths.push([path, pathType, pick(next, SERVICES)]);
      }
      rules.push([pick(next, RULE_HOSTS), paths]);
    }
    const sketch: {
      -readonly [K in keyof IngressSketch]: IngressSketch[K];
    } = {
      name: `i${i}`,
      namespace: pick(next, ["a", "b"]),
      created: Math.floor(next() * 4),
      rules,
    };
    if (next() < 0.3) sketch.defaultBackend = pick(next, SERVICES);
    if (next() < 0.3) {
      sketch.tlsHosts = [
        pick(next, RULE_HOSTS.filter((h) => h !== "").map((h) => h.toLowerCase())),
      ];
    }
    sketches.push(sketch);
  }
  const options = next() < 0.3
    ? { ...TEST_OPTIONS, defaultBackendService: pick(next, ["a/s0", "b/missing:80", "a/s1:80"]) }
    : TEST_OPTIONS;
  return { sketches, options };
}

const ONLY_SEED = Deno.env.get("SEED");
const SEEDS = ONLY_SEED === undefined
  ? Array.from({ length: 400 }, (_, i) => i + 1)
  : [Number(ONLY_SEED)];

Deno.test("lookup() agrees with the reference matcher on random Ingress sets (400 seeds)", () => {
  for (const seed of SEEDS) {
    const next = random(seed);
    const { sketches, options } = randomWorld(next);
    const translation = translate(worldOf(sketches), options);
    const table = compileRouteTable(translation);
    for (let r = 0; r < 60; r++) {
      const host = pick(next, REQUEST_HOSTS);
      const path = pick(next, REQUEST_PATHS);
      assertEquals(
        table.lookup(host, path),
        createReferenceMatcher(translation).lookup(host, path),
        `seed ${seed}: lookup(${JSON.stringify(host)}, ${JSON.stringify(path)})`,
      );
    }
  }
});

function shuffled<T>(list: readonly T[], next: () => number): T[] {
  const copy = [...list];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [copy[i], copy[j]] = [copy[j]!, copy[i]!];
  }
  return copy;
}

Deno.test("translate() output does not depend on the order objects arrive in (200 seeds)", () => {
  for (const seed of SEEDS.slice(0, 200)) {
    const next = random(seed);
    const { sketches, options } = randomWorld(next);
    const world = worldOf(sketches);
    const reordered = {
      ingresses: shuffled([...world.ingresses!], next),
      ingressClasses: [...world.ingressClasses!],
      services: shuffled([...world.services!], next),
      endpointSlices: shuffled([...world.endpointSlices!], next),
    };
    assertEquals(
      JSON.stringify(translate(reordered, options)),
      JSON.stringify(translate(world, options)),
      `seed ${seed}`,
    );
  }
});
