// A script: printing its progress is its job.
// deno-lint-ignore-file no-console
/**
 * `deno task conformance`: the Gateway API conformance suite
 * (`sigs.k8s.io/gateway-api/conformance` v1.6.3, unmodified, run by the Go
 * test in this folder) against Sluice.
 *
 * 1. Starts the test cluster with its pod runner (the suite's base
 *    manifests run their Deployments as Pods).
 * 2. Applies the standard-channel CRDs of the module the Go test builds
 *    against (v1.6.3).
 * 3. Runs Sluice as a process, as the controller's ServiceAccount under the
 *    shipped RBAC, on ports 80 and 443 of `--address` (default 127.0.0.1)
 *    and of 32 Gateway addresses (`--gateway-addresses`, 127.0.10.1 to
 *    127.0.10.32: each Gateway gets one of its own, shown in its
 *    `status.addresses`, where the suite sends its requests), with a
 *    GatewayClass `sluice` of its controller name.
 * 4. Runs the suite (profile GATEWAY-HTTP, features inferred from the
 *    GatewayClass's `supportedFeatures`) and writes its report to
 *    `docs/conformance/report.yaml` (`--report`).
 *
 * With `--check` (what CI runs) the report goes to a temporary file and is
 * compared with the checked-in one: the run fails when a test fails that
 * passes there, or when fewer tests or features pass; the known failures
 * the checked-in report lists (and the README explains) are printed, not
 * failed on. Without `--check` the suite's own exit status is returned.
 *
 *   deno task conformance [--check] [--address 127.0.0.1] [--report docs/conformance/report.yaml]
 *                         [--run HTTPRouteMultipleGateways[,HTTPRouteRequestMirror]] [--timeout 80m]
 *
 * Needs root (ports 80 and 443, network namespaces) and Go.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { parse } from "yaml";
import { buildCluster, startCluster } from "../cluster/harness.ts";
import { KubeApiError, type KubeClient } from "../../lib/k8s/kube_client.ts";
import { GATEWAY_CLASSES } from "../../lib/k8s/resources.ts";
import { controllerCredentials } from "../e2e/cluster_fixture.ts";
import { CUSTOM_RESOURCE_DEFINITIONS } from "../support/gateway_api_crds.ts";
import { adminClient, freshNamespace } from "../support/kube.ts";
import { spawnSluice } from "../support/sluice_process.ts";

const HERE = new URL("./", import.meta.url).pathname;
const ROOT = new URL("../../", import.meta.url).pathname;
const CONTROLLER = "sluice.dev/gateway-conformance";
const GO_ENV = { CGO_ENABLED: "0", GOFLAGS: "-mod=readonly", GOTOOLCHAIN: "local" };

/** The directory of a module the Go test depends on (downloaded if needed). */
async function moduleDir(module: string): Promise<string> {
  const out = await new Deno.Command("go", {
    args: ["list", "-m", "-f", "{{.Dir}}", module],
    cwd: HERE,
    env: GO_ENV,
    stderr: "inherit",
  }).output();
  const dir = new TextDecoder().decode(out.stdout).trim();
  if (!out.success || dir === "") throw new Error(`Cannot find module ${module}`);
  return dir;
}

/** Applies the standard-channel CRDs of the gateway-api module (an existing one is kept). */
async function applyCrds(client: KubeClient): Promise<number> {
  const dir = `${await moduleDir("sigs.k8s.io/gateway-api")}/config/crd/standard`;
  let applied = 0;
  for await (const entry of Deno.readDir(dir)) {
    if (!entry.name.endsWith(".yaml") || entry.name.includes("_vap_")) continue;
    const crd = parse(await Deno.readTextFile(`${dir}/${entry.name}`));
    try {
      await client.create(CUSTOM_RESOURCE_DEFINITIONS, {}, crd);
      applied++;
    } catch (error) {
      if (!(error instanceof KubeApiError && error.isConflict)) throw error;
    }
  }
  return applied;
}

/**
 * One address per Gateway: the suite's tests have up to 8 Gateways of their own besides its
 * 4 base ones, and Gateways of earlier tests may still be going away.
 */
const GATEWAY_ADDRESSES = Array.from({ length: 32 }, (_, i) => `127.0.10.${i + 1}`);

/**
 * The `go test -run` pattern of `--run`: the suite's test names (comma-separated), each whole,
 * under the Go test that runs them; a value with a `/` or starting with `Test` is Go's already.
 */
export function goTestPattern(run: string): string {
  if (run.includes("/") || run.startsWith("Test")) return run;
  const names = run.split(",").map((n) => n.trim()).filter((n) => /^[A-Za-z0-9]+$/.test(n));
  return `TestGatewayAPIConformance/^(${names.join("|")})$`;
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      address: { type: "string", default: "127.0.0.1" },
      report: { type: "string", default: `${ROOT}docs/conformance/report.yaml` },
      run: { type: "string" },
      timeout: { type: "string", default: "80m" },
      check: { type: "boolean", default: false },
    },
    strict: true,
  });
  const checkedIn = values.report;
  const report = values.check ? `${await Deno.makeTempDir()}/report.yaml` : values.report;
  const started = performance.now();
  const seconds = () => ((performance.now() - started) / 1000).toFixed(0);
  console.log("conformance: building the Go test (first time: a few minutes)");
  const build = await new Deno.Command("go", {
    args: ["test", "-trimpath", "-count=1", "-run", "^$", "./..."],
    cwd: HERE,
    env: GO_ENV,
  }).spawn().status;
  if (!build.success) throw new Error("Cannot build the conformance test");

  const cluster = await startCluster(await buildCluster({ log: (l) => console.log(l) }));
  console.log(`conformance: cluster at ${cluster.server}, pods ${cluster.pods}`);
  if (!cluster.pods.startsWith("on")) throw new Error(`Pods do not run: ${cluster.pods}`);
  const admin = await adminClient(cluster.kubeconfig);
  let sluice: Awaited<ReturnType<typeof spawnSluice>> | undefined;
  try {
    console.log(`conformance: ${await applyCrds(admin.client)} Gateway API CRDs applied`);
    const ns = await freshNamespace(admin.client, "sluice");
    const credentials = await controllerCredentials(admin.client, {
      adminKubeconfig: cluster.kubeconfig,
      namespace: ns,
    });
    await admin.client.create(GATEWAY_CLASSES, {}, {
      apiVersion: "gateway.networking.k8s.io/v1",
      kind: "GatewayClass",
      metadata: { name: "sluice" },
      spec: { controllerName: CONTROLLER },
    });
    sluice = await spawnSluice([
      `--kubeconfig=${credentials.kubeconfig}`,
      `--controller-name=${CONTROLLER}`,
      `--election-namespace=${ns}`,
      `--bind-address=${values.address}`,
      "--http-port=80",
      "--https-port=443",
      `--publish-status-address=${values.address}`,
      `--gateway-addresses=${GATEWAY_ADDRESSES.join(",")}`,
      "--workers=1",
      "--shutdown-delay=0s",
      "--access-log=false",
    ], { env: { POD_NAME: "sluice-conformance-0" } });
    await sluice.ready();
    console.log(`conformance: Sluice ready on ${values.address}:80 and :443 after ${seconds()} s`);

    await Deno.mkdir(new URL(".", `file://${report}`), { recursive: true });
    const suite = await new Deno.Command("go", {
      args: [
        "test",
        "-trimpath",
        "-count=1",
        `-timeout=${values.timeout}`,
        "-v",
        ...(values.run === undefined ? [] : ["-run", goTestPattern(values.run)]),
        "./...",
        "-args",
        `--report-output=${report}`,
      ],
      cwd: HERE,
      env: { ...GO_ENV, KUBECONFIG: cluster.kubeconfig },
    }).spawn().status;
    console.log(
      `conformance: the suite exited ${suite.code} after ${seconds()} s; report: ${report}`,
    );
    if (!values.check) return suite.code;
    const problems = compareReports(
      parse(await Deno.readTextFile(checkedIn)),
      parse(await Deno.readTextFile(report)),
    );
    for (const line of problems.known) console.log(`conformance: known failure: ${line}`);
    for (const line of problems.regressions) console.log(`conformance: REGRESSION: ${line}`);
    return problems.regressions.length === 0 ? 0 : 1;
  } finally {
    if (sluice !== undefined) {
      await sluice.stop();
      const errors = sluice.records().filter((r) => r.level === "ERROR" || r.level === "FATAL");
      console.log(`conformance: Sluice logged ${errors.length} errors`);
      for (const e of errors.slice(0, 20)) console.log(JSON.stringify(e));
    }
    admin.access.close();
    await cluster.stop();
  }
}

interface ReportStatistics {
  Passed?: number;
  Failed?: number;
  Skipped?: number;
}

interface ProfileReport {
  name: string;
  core?: { failedTests?: string[]; statistics?: ReportStatistics };
  extended?: {
    failedTests?: string[];
    statistics?: ReportStatistics;
    supportedFeatures?: string[];
  };
}

/**
 * What a new report says against the checked-in one: `regressions` (a test
 * failing that does not fail there, fewer passing tests, a feature no longer
 * claimed) and the `known` failures both list.
 */
export function compareReports(
  checkedIn: { profiles?: ProfileReport[] },
  fresh: { profiles?: ProfileReport[] },
): { regressions: string[]; known: string[] } {
  const regressions: string[] = [];
  const known: string[] = [];
  for (const before of checkedIn.profiles ?? []) {
    const after = fresh.profiles?.find((p) => p.name === before.name);
    if (after === undefined) {
      regressions.push(`profile ${before.name} did not run`);
      continue;
    }
    for (const part of ["core", "extended"] as const) {
      const allowed = new Set(before[part]?.failedTests ?? []);
      for (const test of after[part]?.failedTests ?? []) {
        (allowed.has(test) ? known : regressions).push(`${before.name} ${part}: ${test}`);
      }
      const passedBefore = before[part]?.statistics?.Passed ?? 0;
      const passedAfter = after[part]?.statistics?.Passed ?? 0;
      if (passedAfter < passedBefore) {
        regressions.push(`${before.name} ${part}: ${passedAfter} passed, ${passedBefore} before`);
      }
    }
    const claimed = new Set(after.extended?.supportedFeatures ?? []);
    for (const feature of before.extended?.supportedFeatures ?? []) {
      if (!claimed.has(feature)) regressions.push(`${before.name}: ${feature} no longer claimed`);
    }
  }
  return { regressions, known };
}

if (import.meta.main) Deno.exit(await main());
