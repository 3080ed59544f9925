/**
 * `deno task test`: the whole suite, as CI runs it. Checks formatting, lint
 * and types, builds (or reuses) the kube-apiserver harness, starts it once,
 * runs every test with `SLUICE_TEST_KUBECONFIG` pointing at it, stops it,
 * and ends with a line `N passed, N failed`.
 *
 * @module
 */
// deno-lint-ignore-file no-console
import { buildCluster, startCluster } from "./cluster/harness.ts";

const deno = Deno.execPath();
const started = performance.now();
const elapsed = () => `${((performance.now() - started) / 1000).toFixed(1)} s`;

async function step(name: string, args: string[]): Promise<void> {
  console.log(`\n== ${name}: deno ${args.join(" ")}`);
  const status = await new Deno.Command(deno, { args, stdout: "inherit", stderr: "inherit" })
    .spawn()
    .status;
  if (!status.success) {
    console.log(`\n${name} failed (exit ${status.code}) after ${elapsed()}`);
    console.log("0 passed, 1 failed");
    Deno.exit(1);
  }
}

// SLUICE_TEST_SKIP_STATIC=1 skips the static checks, for quick local reruns of some tests.
if (Deno.env.get("SLUICE_TEST_SKIP_STATIC") !== "1") {
  await step("format", ["fmt", "--check"]);
  await step("lint", ["lint"]);
  await step("type check", ["task", "check"]);
}

// SLUICE_TEST_SKIP_GO=1 skips the test cluster's own Go tests, for quick local reruns.
if (Deno.env.get("SLUICE_TEST_SKIP_GO") !== "1") {
  console.log("\n== test cluster's own tests: go test ./... in tests/cluster");
  const go = await new Deno.Command("go", {
    args: ["test", "-trimpath", "-vet=off", "-count=1", "./..."],
    cwd: new URL("./cluster/", import.meta.url).pathname,
    env: { CGO_ENABLED: "0", GOFLAGS: "-mod=readonly", GOTOOLCHAIN: "local" },
    stdout: "inherit",
    stderr: "inherit",
  }).spawn().status;
  if (!go.success) {
    console.log(`\ngo test failed (exit ${go.code}) after ${elapsed()}`);
    console.log("0 passed, 1 failed");
    Deno.exit(1);
  }
}

console.log("\n== test cluster (etcd, kube-apiserver, kube-controller-manager, pod runner)");
const bin = await buildCluster({ log: (line) => console.log(line) });
const cluster = await startCluster(bin);
console.log(
  `cluster: ready at ${cluster.server} after ${elapsed()}; Pods: ${cluster.pods} (logs: ${cluster.logFile})`,
);

const extra = Deno.args;
console.log(
  `\n== tests: deno test -A --unstable-net --unstable-no-legacy-abort ${extra.join(" ")}`,
);
const child = new Deno.Command(deno, {
  args: ["test", "-A", "--unstable-net", "--unstable-no-legacy-abort", ...extra],
  env: {
    SLUICE_TEST_KUBECONFIG: cluster.kubeconfig,
    SLUICE_TEST_CLUSTER_CONTROL: cluster.control,
    SLUICE_TEST_CLUSTER_BIN: cluster.bin,
    SLUICE_TEST_PODS: cluster.pods,
    NO_COLOR: "1",
  },
  stdout: "piped",
  stderr: "inherit",
}).spawn();

let summary = { passed: 0, failed: 0, seen: false };
const decoder = new TextDecoder();
let tail = "";
for await (const chunk of child.stdout) {
  await Deno.stdout.write(chunk);
  tail = (tail + decoder.decode(chunk, { stream: true })).slice(-4096);
}
const status = await child.status;
for (const line of tail.split("\n")) {
  const m = line.match(/^(?:ok|FAILED) \| (\d+) passed(?: \(\d+ steps?\))? \| (\d+) failed/);
  if (m) summary = { passed: Number(m[1]), failed: Number(m[2]), seen: true };
}
await cluster.stop();
await Deno.remove(cluster.workDir, { recursive: true }).catch(() => {});

console.log(`\nFinished in ${elapsed()}.`);
if (!summary.seen) summary.failed = Math.max(summary.failed, status.success ? 0 : 1);
if (!status.success && summary.failed === 0) summary.failed = 1;
console.log(`${summary.passed} passed, ${summary.failed} failed`);
Deno.exit(status.success ? 0 : 1);
