/**
 * `deno task cluster`: builds (or reuses) the test control plane and runs it
 * in the foreground until Ctrl-C. Prints the kubeconfig to use, e.g.
 * `KUBECONFIG=… deno task dev`.
 *
 * @module
 */
// deno-lint-ignore-file no-console
import { buildCluster, startCluster } from "./harness.ts";

const bin = await buildCluster({ log: (line) => console.error(line) });
const cluster = await startCluster(bin);
console.log(`Kubernetes API server ready at ${cluster.server}`);
console.log(`  export KUBECONFIG=${cluster.kubeconfig}`);
console.log(`  logs: ${cluster.logFile}`);
console.log(`  test control: ${cluster.control}`);
console.log("Press Ctrl-C to stop.");

const stop = async () => {
  console.error("cluster: stopping");
  await cluster.stop();
  await Deno.remove(cluster.workDir, { recursive: true }).catch(() => {});
  Deno.exit(0);
};
Deno.addSignalListener("SIGINT", stop);
Deno.addSignalListener("SIGTERM", stop);
