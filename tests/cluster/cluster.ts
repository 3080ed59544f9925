/**
 * `deno task cluster`: builds (or reuses) the test cluster and runs it in
 * the foreground until Ctrl-C, printing how to use it with kubectl and
 * Sluice.
 *
 * @module
 */
// deno-lint-ignore-file no-console
import { buildCluster, IMAGES, startCluster } from "./harness.ts";

const bin = await buildCluster({ log: (line) => console.error(line) });
const cluster = await startCluster(bin);
console.log(`Kubernetes v1.36.3 ready at ${cluster.server}`);
console.log(
  "  etcd, kube-apiserver, kube-controller-manager, and a pod runner in place of a kubelet",
);
console.log(`  Pods: ${cluster.pods}; images they can run: ${Object.keys(IMAGES).join(", ")}`);
console.log("");
console.log("In another terminal:");
console.log(`  export KUBECONFIG=${cluster.kubeconfig}`);
console.log("  tools/deno task kubectl get nodes      # kubectl v1.36.3 (or your own kubectl)");
console.log(
  "  tools/deno task kubectl apply -f manifests/ingress_class.yaml -f examples/cluster/whoami.yaml",
);
console.log("  tools/deno task dev                    # Sluice against this cluster");
console.log("  curl -H 'Host: whoami.localhost' http://127.0.0.1:8080/");
console.log("");
console.log(`Logs: ${cluster.logFile}; Pods' output: ${cluster.workDir}/pods/`);
console.log("Press Ctrl-C to stop.");

const stop = async () => {
  console.error("cluster: stopping");
  await cluster.stop();
  await Deno.remove(cluster.workDir, { recursive: true }).catch(() => {});
  Deno.exit(0);
};
Deno.addSignalListener("SIGINT", stop);
Deno.addSignalListener("SIGTERM", stop);
