/**
 * Cost of building a snapshot: translation plus compilation of the route and
 * certificate tables, for 100, 1,000 and 10,000 Ingresses (5 paths each),
 * against one `structuredClone` of the same objects in the same run (the cost
 * of merely copying the input once). Target: 10,000 Ingresses under 500 ms.
 * Then 20,000 hosts in one Ingress against 20,000 Ingresses of one host each:
 * the cost must not grow with the number of hosts per Ingress (ratio near 1).
 *
 *   tools/deno bench -A lib/routing/compile_bench.ts
 *
 * @module
 */

import type { Ingress } from "../k8s/objects.ts";
import { translate } from "../translate/translate.ts";
import type { ClusterObjects } from "../translate/translation.ts";
import { buildSnapshot } from "./snapshot_builder.ts";
import { BENCH_OPTIONS, benchCluster } from "../../tests/support/bench_cluster.ts";
import { SLUICE_CLASS } from "../../tests/support/route_world.ts";

const DEFAULT_CERTIFICATE = { source: "sluice/self-signed", certPem: "c", keyPem: "k" };

for (const n of [100, 1_000, 10_000]) {
  const objects = benchCluster(n);
  const materialised = {
    ingresses: [...objects.ingresses!],
    ingressClasses: [...objects.ingressClasses!],
    services: [...objects.services!],
    endpointSlices: [...objects.endpointSlices!],
    secrets: [...objects.secrets!],
  };
  let version = 0;
  Deno.bench({
    name: `translate + compile, ${n} Ingresses`,
    group: `compile ${n}`,
    ...(n === 10_000 ? { n: 20, warmup: 3 } : {}),
    fn: () => {
      const snapshot = buildSnapshot(translate(materialised, BENCH_OPTIONS), {
        version: ++version,
        defaultCertificate: DEFAULT_CERTIFICATE,
      });
      if (snapshot.routes.lookup("h1.example.com", "/api") === undefined) {
        throw new Error("Cannot benchmark: the compiled table does not route h1.example.com");
      }
    },
  });
  Deno.bench({
    name: `structuredClone of the objects, ${n} Ingresses`,
    group: `compile ${n}`,
    baseline: true,
    ...(n === 10_000 ? { n: 20, warmup: 3 } : {}),
    fn: () => {
      structuredClone(materialised);
    },
  });
}

/**
 * `count` hosts, each named by a rule without paths, served by a defaultBackend
 * and listed in a TLS entry: in one Ingress, or in one Ingress each.
 */
function manyHosts(count: number, perIngress: number): ClusterObjects {
  const ingresses: Ingress[] = [];
  for (let first = 0; first < count; first += perIngress) {
    const hosts = Array.from({ length: perIngress }, (_, i) => `h${first + i}.example.com`);
    ingresses.push({
      metadata: {
        namespace: "hosts",
        name: `ing${first}`,
        creationTimestamp: "2024-01-01T00:00:00Z",
      },
      spec: {
        ingressClassName: "sluice",
        rules: hosts.map((host) => ({ host })),
        defaultBackend: { service: { name: "web", port: { number: 80 } } },
        tls: [{ hosts }],
      },
    });
  }
  return { ingresses, ingressClasses: [SLUICE_CLASS] };
}

const HOSTS = 20_000;
for (const [perIngress, baseline] of [[1, true], [HOSTS, false]] as const) {
  const objects = manyHosts(HOSTS, perIngress);
  Deno.bench({
    name: perIngress === 1
      ? `translate + compile, ${HOSTS} Ingresses of 1 host`
      : `translate + compile, 1 Ingress of ${HOSTS} hosts`,
    group: "hosts per Ingress",
    baseline,
    n: 10,
    warmup: 2,
    fn: () => {
      buildSnapshot(translate(objects, BENCH_OPTIONS), {
        version: 1,
        defaultCertificate: DEFAULT_CERTIFICATE,
      });
    },
  });
}
