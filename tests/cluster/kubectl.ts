/**
 * `deno task kubectl …`: the kubectl of the test cluster's Kubernetes
 * release (built into the harness binary), with `KUBECONFIG` from the
 * environment as usual. Builds the harness first if needed.
 *
 * @module
 */
// deno-lint-ignore-file no-console
import { buildCluster } from "./harness.ts";

const bin = await buildCluster({ log: (line) => console.error(line) });
const status = await new Deno.Command(bin, {
  args: ["kubectl", ...Deno.args],
  stdin: "inherit",
  stdout: "inherit",
  stderr: "inherit",
}).spawn().status;
Deno.exit(status.code);
