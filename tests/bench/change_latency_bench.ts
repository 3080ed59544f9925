/**
 * Change-to-served latency of Sluice as a real process against a real
 * kube-apiserver (a harness instance of its own), with 10, 1,000 and 10,000
 * Ingresses loaded: the time from a create or update returning to the first
 * request the data plane routes by the new rule, p50/p99 over at least 100
 * changes per size; Sluice's start-to-ready time with that many Ingresses;
 * its resident memory (VmRSS and its peak VmHWM of the process, which
 * covers its worker threads); and the CPU time it spends per change, on its
 * main thread and in all (what a change costs, which a busy machine moves
 * far less than it moves latencies).
 *
 * Every Ingress routes to one Service whose EndpointSlice points at an echo
 * backend in a network namespace (the apiserver refuses loopback endpoint
 * addresses), so "served" means a 200 from the backend through Sluice.
 * Changes alternate between creating a new Ingress with a new host and
 * updating an existing one to a new host; each is polled with short
 * keep-alive HTTP requests until it answers 200. Sluice runs as the
 * controller's ServiceAccount under the shipped RBAC, with the start task's
 * permissions and its default worker count unless `--workers` is given.
 *
 *   deno task bench:latency [--sizes 10,1000,10000] [--changes 120] [--workers N]
 *                           [--publish-status-address 192.0.2.1] [--api ingress|httproute]
 *
 * With `--api httproute` the objects are HTTPRoutes instead (the Gateway API
 * CRDs installed, one GatewayClass of Sluice's and one Gateway listening on
 * port 80, each route with its own hostname): the same changes, the same
 * targets.
 *
 * A script, not a timed test: it prints a table and the targets (p99 under
 * 100 ms at 1,000 Ingresses and under 250 ms at 10,000; RSS under 250 MiB at
 * 10,000). Needs root (network namespaces) and Go (the harness).
 *
 * @module
 */
// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { buildCluster, startCluster } from "../cluster/harness.ts";
import { createTestHost } from "../support/netns.ts";
import type { KubeClient, KubeObject } from "../../lib/k8s/kube_client.ts";
import { GATEWAY_CLASSES, GATEWAYS, HTTP_ROUTES, INGRESSES } from "../../lib/k8s/resources.ts";
import { installGatewayApiCrds } from "../support/gateway_api_crds.ts";
import { webIngressSpec } from "../support/fixture_objects.ts";
import {
  applyIngressClass,
  controllerCredentials,
  HostClient,
  ingress,
  startController,
  webBackend,
} from "../e2e/cluster_fixture.ts";
import { adminClient, freshNamespace } from "../support/kube.ts";

const CLASS = "sluice";
const CONTROLLER = "sluice.dev/ingress-controller";
const TARGET_P99_MS: Record<number, number> = { 1_000: 100, 10_000: 250 };
const TARGET_RSS_MIB: Record<number, number> = { 10_000: 250 };
const CHANGE_DEADLINE_MS = 10_000;
const LOAD_CONCURRENCY = 16;
const WARMUP_CHANGES = 5;

/** One row of the result table. */
interface Row {
  readonly ingresses: number;
  readonly changes: number;
  readonly failed: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
  readonly createP50: number;
  readonly updateP50: number;
  readonly startToReadyMs: number;
  readonly rssReadyMiB: number;
  readonly rssMiB: number;
  readonly hwmMiB: number;
  readonly threads: number;
  readonly loadSeconds: number;
  /** Sluice's CPU time per change: its main thread, and the whole process. */
  readonly cpuMainMs: number;
  readonly cpuAllMs: number;
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const index = Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1);
  return sorted[Math.max(0, index)]!;
}

/** VmRSS, VmHWM (MiB) and Threads of a process, from `/proc/<pid>/status`. */
async function memoryOf(pid: number): Promise<{ rss: number; hwm: number; threads: number }> {
  const text = await Deno.readTextFile(`/proc/${pid}/status`);
  const field = (name: string) => Number(text.match(new RegExp(`^${name}:\\s+(\\d+)`, "m"))?.[1]);
  return {
    rss: field("VmRSS") / 1024,
    hwm: field("VmHWM") / 1024,
    threads: field("Threads"),
  };
}

/**
 * CPU time (user + system, ms) of a process's main thread and of the whole
 * process (its worker threads included), from `/proc/<pid>/task/<pid>/stat`
 * and `/proc/<pid>/stat`: what the changes cost, whatever else the machine runs.
 */
async function cpuOf(pid: number): Promise<{ main: number; all: number }> {
  const ticks = async (path: string) => {
    const text = await Deno.readTextFile(path);
    // After "pid (comm) ": state is field 3, utime 14 and stime 15.
    const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) * 1000 / CLOCK_TICKS_PER_SECOND;
  };
  return {
    main: await ticks(`/proc/${pid}/task/${pid}/stat`),
    all: await ticks(`/proc/${pid}/stat`),
  };
}

/** `getconf CLK_TCK` on Linux. */
const CLOCK_TICKS_PER_SECOND = 100;

/** The objects changed: Ingresses, or HTTPRoutes on one Gateway (`--api`). */
type Api = "ingress" | "httproute";

/** An object of `api` named `name` routing `host` to the Service `web`. */
function routeObject(api: Api, name: string, host: string): KubeObject {
  if (api === "ingress") {
    return ingress(name, {
      className: CLASS,
      rules: [{ host, paths: [{ path: "/", service: "web" }] }],
    });
  }
  return {
    apiVersion: "gateway.networking.k8s.io/v1",
    kind: "HTTPRoute",
    metadata: { name },
    spec: {
      parentRefs: [{ name: "gateway" }],
      hostnames: [host],
      rules: [{ backendRefs: [{ name: "web", port: 80 }] }],
    },
  };
}

/** The patch that moves object `name` of `api` to `host`. */
function hostPatch(api: Api, host: string): unknown {
  return api === "httproute" ? { spec: { hostnames: [host] } } : { spec: webIngressSpec(host) };
}

/** Creates objects `load-<from>` … `load-<to - 1>`, a few at a time. */
async function loadObjects(api: Api, client: KubeClient, ns: string, from: number, to: number) {
  let next = from;
  const resource = api === "ingress" ? INGRESSES : HTTP_ROUTES;
  const worker = async () => {
    while (next < to) {
      const i = next++;
      await client.create(
        resource,
        { namespace: ns },
        routeObject(api, `load-${i}`, `load-${i}.bench.test`),
      );
    }
  };
  await Promise.all(Array.from({ length: LOAD_CONCURRENCY }, worker));
}

/** The Gateway API setup of `--api httproute`: CRDs, a GatewayClass of ours, a Gateway on port 80. */
async function gatewaySetup(client: KubeClient, ns: string): Promise<void> {
  await installGatewayApiCrds(client);
  await client.create(GATEWAY_CLASSES, {}, {
    apiVersion: "gateway.networking.k8s.io/v1",
    kind: "GatewayClass",
    metadata: { name: CLASS },
    spec: { controllerName: CONTROLLER },
  });
  await client.create(GATEWAYS, { namespace: ns }, {
    apiVersion: "gateway.networking.k8s.io/v1",
    kind: "Gateway",
    metadata: { name: "gateway" },
    spec: { gatewayClassName: CLASS, listeners: [{ name: "http", port: 80, protocol: "HTTP" }] },
  });
}

/** Polls `host` until it answers 200 from the backend; returns ms since `since`, or NaN after the deadline. */
async function servedAfter(
  http: HostClient,
  port: number,
  host: string,
  since: number,
): Promise<number> {
  while (performance.now() - since < CHANGE_DEADLINE_MS) {
    try {
      const answer = await http.get(port, host, "/", 2_000);
      if (answer.status === 200 && answer.pod !== undefined) return performance.now() - since;
    } catch {
      // A refused or reset connection: try again.
    }
  }
  return NaN;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      sizes: { type: "string", default: "10,1000,10000" },
      changes: { type: "string", default: "120" },
      workers: { type: "string" },
      "publish-status-address": { type: "string" },
      "sluice-arg": { type: "string", multiple: true, default: [] },
      api: { type: "string", default: "ingress" },
    },
    strict: true,
  });
  const sizes = values.sizes.split(",").map(Number).sort((a, b) => a - b);
  const changes = Number(values.changes);
  if (values.api !== "ingress" && values.api !== "httproute") {
    throw new Error(`Invalid --api "${values.api}": ingress or httproute`);
  }
  const api: Api = values.api;
  const resource = api === "ingress" ? INGRESSES : HTTP_ROUTES;
  const noun = api === "ingress" ? "Ingresses" : "HTTPRoutes";
  if (sizes.some((n) => !(n >= 1)) || !(changes >= 2)) {
    throw new Error(`Invalid --sizes "${values.sizes}" or --changes "${values.changes}"`);
  }
  const workers = values.workers === undefined ? "default" : Number(values.workers);
  const extraArgs = [
    ...(values["publish-status-address"] !== undefined
      ? [`--publish-status-address=${values["publish-status-address"]}`]
      : []),
    ...values["sluice-arg"],
  ];

  const started = performance.now();
  console.log("bench: starting a kube-apiserver of its own");
  const cluster = await startCluster(await buildCluster({ log: (l) => console.log(l) }), {
    workloads: false,
  });
  const admin = await adminClient(cluster.kubeconfig);
  await using host = await createTestHost({ name: "bench-backend" });
  using http = new HostClient();
  const rows: Row[] = [];
  try {
    const ns = await freshNamespace(admin.client, "bench");
    await applyIngressClass(admin.client, CLASS, CONTROLLER);
    if (api === "httproute") await gatewaySetup(admin.client, ns);
    const credentials = await controllerCredentials(admin.client, {
      adminKubeconfig: cluster.kubeconfig,
      namespace: ns,
    });
    await webBackend(admin.client, { namespace: ns }, host);

    let loaded = 0;
    let created = 0;
    for (const size of sizes) {
      const loadStarted = performance.now();
      const missing = size - loaded - created;
      if (missing > 0) {
        console.log(`bench: loading ${missing} ${noun} (to ${size})`);
        await loadObjects(api, admin.client, ns, loaded, loaded + missing);
        loaded += missing;
      }
      const loadSeconds = (performance.now() - loadStarted) / 1000;

      const spawned = performance.now();
      const sluice = await startController({
        credentials,
        controllerName: CONTROLLER,
        electionNamespace: ns,
        podName: `bench-${size}`,
        workers,
        extraArgs,
      });
      try {
        let startToReadyMs = NaN;
        while (performance.now() - spawned < 120_000) {
          try {
            const r = await fetch(`http://127.0.0.1:${sluice.healthPort}/readyz`);
            await r.body?.cancel();
            if (r.status === 200) {
              startToReadyMs = performance.now() - spawned;
              break;
            }
          } catch {
            // Not listening yet.
          }
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        if (Number.isNaN(startToReadyMs)) {
          throw new Error(
            `Sluice was not ready within 120 s:\n${sluice.logs.slice(-20).join("\n")}`,
          );
        }
        const sanity = await http.get(sluice.httpPort, `load-${loaded - 1}.bench.test`);
        if (sanity.status !== 200) throw new Error(`A loaded object answers ${sanity.status}`);
        const ready = await memoryOf(sluice.pid);

        const latencies: { kind: "create" | "update"; ms: number }[] = [];
        /** Wall-clock time each change returned, to line up with Sluice's log timestamps. */
        const returnedAt: number[] = [];
        let failed = 0;
        let cpuBefore = await cpuOf(sluice.pid);
        for (let k = 0; k < WARMUP_CHANGES + changes; k++) {
          const kind = k % 2 === 0 ? "create" : "update";
          const newHost = `${kind}-${size}-${k}.bench.test`;
          let since: number;
          if (kind === "create") {
            await admin.client.create(
              resource,
              { namespace: ns },
              routeObject(api, `change-${size}-${k}`, newHost),
            );
            since = performance.now();
            returnedAt.push(Date.now());
            created++;
          } else {
            const name = `load-${(k * 7919) % loaded}`;
            await admin.client.patch(resource, { namespace: ns, name }, hostPatch(api, newHost), {
              type: "merge",
            });
            since = performance.now();
            returnedAt.push(Date.now());
          }
          const ms = await servedAfter(http, sluice.httpPort, newHost, since);
          if (k === WARMUP_CHANGES - 1) cpuBefore = await cpuOf(sluice.pid);
          if (k < WARMUP_CHANGES) continue;
          if (Number.isNaN(ms)) failed++;
          else latencies.push({ kind, ms });
        }
        const cpuAfter = await cpuOf(sluice.pid);
        const memory = await memoryOf(sluice.pid);
        // With --sluice-arg=--log-level=debug: the controller's own view (rebuild start to
        // every worker serving the new snapshot).
        const records = sluice.records()
          .filter((r) => String(r.message ?? "").startsWith("Published "));
        const stat = (field: string) => {
          const values = records.map((r) => Number(r[field])).sort((a, b) => a - b);
          return `p50 ${percentile(values, 50).toFixed(1)} ms, p99 ${
            percentile(values, 99).toFixed(1)
          } ms`;
        };
        if (records.length > 0) {
          // One publish per change after the first one: the rebuild began at its log
          // timestamp minus its duration, which lines up with when the change returned.
          const perChange = records.slice(-returnedAt.length);
          const waits = records.length === returnedAt.length + 1
            ? perChange.map((r, i) =>
              Date.parse(String(r["@timestamp"])) - Number(r.ms) - returnedAt[i]!
            ).slice(WARMUP_CHANGES).sort((a, b) => a - b)
            : [];
          console.log(
            `bench: ${size} ${noun}, ${records.length} publishes: ${
              waits.length > 0
                ? `change returned to rebuild start p50 ${
                  percentile(waits, 50).toFixed(0)
                } ms, p99 ${percentile(waits, 99).toFixed(0)} ms (log clock, ±1 ms); `
                : ""
            }rebuild to every worker serving ${stat("ms")}; translate ${
              stat("translateMs")
            }; post and compile in workers ${stat("publishMs")}`,
          );
        }
        const sorted = latencies.map((l) => l.ms).sort((a, b) => a - b);
        const median = (kind: string) =>
          percentile(
            latencies.filter((l) => l.kind === kind).map((l) => l.ms).sort((a, b) => a - b),
            50,
          );
        const row: Row = {
          ingresses: size,
          changes: latencies.length,
          failed,
          p50: percentile(sorted, 50),
          p90: percentile(sorted, 90),
          p99: percentile(sorted, 99),
          max: sorted.at(-1) ?? NaN,
          createP50: median("create"),
          updateP50: median("update"),
          startToReadyMs,
          rssReadyMiB: ready.rss,
          rssMiB: memory.rss,
          hwmMiB: memory.hwm,
          threads: memory.threads,
          loadSeconds,
          cpuMainMs: (cpuAfter.main - cpuBefore.main) / changes,
          cpuAllMs: (cpuAfter.all - cpuBefore.all) / changes,
        };
        rows.push(row);
        console.log(
          `bench: ${size} ${noun}: p50 ${row.p50.toFixed(1)} ms, p99 ${row.p99.toFixed(1)} ms, ` +
            `ready in ${(startToReadyMs / 1000).toFixed(2)} s, RSS ${row.rssMiB.toFixed(0)} MiB, ` +
            `CPU per change ${row.cpuMainMs.toFixed(1)} ms main thread, ${
              row.cpuAllMs.toFixed(1)
            } ms in all`,
        );
      } finally {
        await sluice.stop();
      }
    }
    await credentials.cleanup();
  } finally {
    admin.access.close();
    await cluster.stop();
    await Deno.remove(cluster.workDir, { recursive: true }).catch(() => {});
  }

  const f = (n: number, digits = 1) => Number.isNaN(n) ? "–" : n.toFixed(digits);
  const lines = [
    "",
    `Change-to-served latency (Deno ${Deno.version.deno}, ${navigator.hardwareConcurrency} CPUs, ` +
    `load average ${Deno.loadavg().map((l) => l.toFixed(2)).join(" ")}, ` +
    `workers ${values.workers ?? `default (${navigator.hardwareConcurrency})`}${
      values["publish-status-address"] ? ", publishing status" : ""
    }; ${changes} changes per size after ${WARMUP_CHANGES} warm-up):`,
    "",
    `| ${noun} | changes (failed) | p50 ms | p90 ms | p99 ms | max ms | create p50 | update p50 | start→ready s | RSS ready MiB | RSS after MiB | peak MiB | threads | CPU ms/change main (all) | target |`,
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
  ];
  let allMet = true;
  for (const r of rows) {
    const targets: string[] = [];
    const p99Target = TARGET_P99_MS[r.ingresses];
    if (p99Target !== undefined) {
      const met = r.p99 < p99Target && r.failed === 0;
      allMet &&= met;
      targets.push(`p99 < ${p99Target} ms ${met ? "met" : "MISSED"}`);
    }
    const rssTarget = TARGET_RSS_MIB[r.ingresses];
    if (rssTarget !== undefined) {
      const met = r.hwmMiB < rssTarget;
      allMet &&= met;
      targets.push(`peak RSS < ${rssTarget} MiB ${met ? "met" : "MISSED"}`);
    }
    lines.push(
      `| ${r.ingresses.toLocaleString("en")} | ${r.changes} (${r.failed}) | ${f(r.p50)} | ${
        f(r.p90)
      } | ${f(r.p99)} | ${f(r.max)} | ${f(r.createP50)} | ${f(r.updateP50)} | ${
        f(r.startToReadyMs / 1000, 2)
      } | ${f(r.rssReadyMiB, 0)} | ${f(r.rssMiB, 0)} | ${f(r.hwmMiB, 0)} | ${r.threads} | ${
        f(r.cpuMainMs)
      } (${f(r.cpuAllMs)}) | ${targets.join("; ") || "–"} |`,
    );
  }
  lines.push(
    "",
    `Anchors (issue 5): ingress-nginx 1.2–2.8 s, Traefik ~2 s, Kong ~3 s. ` +
      `Total bench time ${((performance.now() - started) / 1000).toFixed(0)} s.`,
    allMet ? "Every target met." : "Some targets MISSED.",
  );
  console.log(lines.join("\n"));
}

if (import.meta.main) await main();
