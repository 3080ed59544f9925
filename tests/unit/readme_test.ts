/**
 * The README documents every flag and every metric: both lists are read
 * from the code (`FLAGS`, the metrics registries), so adding one without
 * documenting it fails here.
 */
import { assert } from "../support/assert.ts";
import { envName, FLAGS } from "../../lib/config/config.ts";
import { ControlPlaneMetrics } from "../../lib/metrics/control_plane_metrics.ts";
import { DataPlaneMetrics } from "../../lib/metrics/data_plane_metrics.ts";

const readme = await Deno.readTextFile(new URL("../../README.md", import.meta.url));

Deno.test("the README lists every flag with its environment variable", () => {
  const missing = FLAGS.filter((f) =>
    !readme.includes(`\`--${f.name}\``) || !readme.includes(`\`${envName(f.name)}\``)
  ).map((f) => f.name);
  assert(missing.length === 0, `README lacks flags: ${missing.join(", ")}`);
});

Deno.test("the README lists every metric Sluice exposes", async () => {
  const names = [
    ...await new DataPlaneMetrics().registry.getMetricsAsJSON(),
    ...await new ControlPlaneMetrics().registry.getMetricsAsJSON(),
  ].map((m) => m.name);
  assert(names.length >= 15, `${names.length} metrics found`);
  const missing = names.filter((name) => !readme.includes(`\`${name}\``));
  assert(missing.length === 0, `README lacks metrics: ${missing.join(", ")}`);
});
