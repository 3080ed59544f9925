/**
 * Bench support: synthetic clusters and requests for the lookup
 * and compile benchmarks. `n` Ingresses, 5 paths each, one host each (a
 * quarter of them wildcards), Exact and Prefix paths, Services spread over 100
 * namespaces; requests mixing exact hits, wildcard hits, misses and deep paths.
 *
 * @module
 */

import type { ClusterObjects, TranslateOptions } from "../../lib/translate/translation.ts";
import { type IngressSketch, TEST_OPTIONS, worldOf } from "./route_world.ts";

/** Options for benchmark translations. */
export const BENCH_OPTIONS: TranslateOptions = TEST_OPTIONS;

function hostOf(i: number): string {
  return i % 4 === 0 ? `*.w${i}.example.com` : `h${i}.example.com`;
}

/** A cluster of `n` Ingresses with 5 paths each. */
export function benchCluster(n: number): ClusterObjects {
  const sketches: IngressSketch[] = [];
  for (let i = 0; i < n; i++) {
    const service = `svc${i % 5}`;
    sketches.push({
      name: `ing${i}`,
      namespace: `ns${i % 100}`,
      created: i,
      rules: [[hostOf(i), [
        ["/", "Prefix", service],
        ["/api", "Prefix", service],
        [`/api/v${i % 3}`, "Prefix", service],
        ["/static/app.js", "Exact", service],
        ["/health", "Exact", service],
      ]]],
    });
  }
  return worldOf(sketches);
}

/** 1,024 requests against a cluster of `n`, reproducible. */
export function benchRequests(n: number): [host: string, path: string][] {
  const paths = [
    "/",
    "/api/v1/users/123",
    "/api/v2",
    "/static/app.js",
    "/health",
    "/healthz",
    "/a/b/c/d/e/f",
  ];
  const requests: [string, string][] = [];
  let state = 12345;
  const next = () => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return state;
  };
  for (let r = 0; r < 1024; r++) {
    const i = next() % n;
    const kind = r % 8;
    const host = kind === 7
      ? `unknown${i}.test`
      : i % 4 === 0
      ? `a${r}.w${i}.example.com`
      : kind === 6
      ? `H${i}.Example.com:443`
      : `h${i}.example.com`;
    requests.push([host, paths[next() % paths.length]!]);
  }
  return requests;
}
