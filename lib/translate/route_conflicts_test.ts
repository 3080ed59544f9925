/**
 * Conflicting routes (`route_conflicts.ts`): one of many identical paths kept and
 * the rest reported, a live host's path never taken by a later Ingress of another
 * namespace, and the first of two cached copies of one Ingress kept; each run
 * beside a good cluster whose route must stay intact.
 *
 * @module
 */
import {
  badIngress,
  issuesOf,
  onePath,
  PREFIX,
  routesOf,
  runBesideGood,
  SVC,
} from "../../tests/support/good_cluster.ts";
import { assertEquals } from "../../tests/support/assert.ts";

Deno.test("translate() keeps one of 10,000 identical paths of one Ingress and reports the rest", () => {
  const paths = Array.from({ length: 10_000 }, () => PREFIX(SVC({ number: 80 }), "/same"));
  const translation = runBesideGood({
    ingresses: [badIngress("dup", { rules: [{ host: "dup.test", http: { paths } }] })],
  });
  assertEquals(routesOf(translation, "bad/dup").map((r) => r.path), ["/same"]);
  const conflicts = issuesOf(translation, "bad", "dup").filter((i) =>
    i.message.includes("of the same Ingress comes first")
  );
  assertEquals(conflicts.length, 9_999);
});

Deno.test("translate() never lets a later Ingress in another namespace take a live host's path", () => {
  const claim = (namespace: string, name: string, created: string | undefined) => ({
    metadata: {
      namespace,
      name,
      ...(created === undefined ? {} : { creationTimestamp: created }),
    },
    spec: { ingressClassName: "sluice", ...onePath(PREFIX(SVC({ number: 80 }))) },
  });
  const translation = runBesideGood({
    ingresses: [
      claim("zz", "late", "2025-01-01T00:00:00Z"),
      claim("aa", "undated", undefined),
      claim("aa", "garbled", "yesterday"),
      claim("mm", "first", "2021-01-01T00:00:00Z"),
    ],
  });
  assertEquals(
    translation.routes.filter((r) => r.host === "bad.test").map((r) => r.ingress),
    ["mm/first"],
  );
  const losers = translation.issues.filter((i) => i.message.includes('Ingress "mm/first"'));
  assertEquals(losers.map((i) => `${i.namespace}/${i.name}`).sort(), [
    "aa/garbled",
    "aa/undated",
    "zz/late",
  ]);
});

Deno.test("translate() keeps the first of two cached copies of one Ingress", () => {
  const first = badIngress("twin", onePath(PREFIX(SVC({ number: 80 }), "/first")));
  const second = badIngress("twin", onePath(PREFIX(SVC({ number: 80 }), "/second")));
  const translation = runBesideGood({ ingresses: [first, second] });
  assertEquals(routesOf(translation, "bad/twin").map((r) => r.path), ["/first"]);
});
