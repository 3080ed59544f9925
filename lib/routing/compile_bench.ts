/**
 * Cost of building a snapshot: translation plus compilation of the route and
 * certificate tables, for 100, 1,000 and 10,000 Ingresses (5 paths each),
 * against one `structuredClone` of the same objects in the same run (the cost
 * of merely copying the input once). Target: 10,000 Ingresses under 500 ms.
 *
 *   tools/deno bench -A lib/routing/compile_bench.ts
 *
 * @module
 */

import { translate } from "../translate/translate.ts";
import { buildSnapshot } from "./snapshot_builder.ts";
import { BENCH_OPTIONS, benchCluster } from "./_bench_world.ts";

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
