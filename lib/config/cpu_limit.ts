/**
 * How many CPUs this process may use: the machine's count, lowered by a
 * cgroup CPU quota (a Kubernetes CPU limit). `navigator.hardwareConcurrency`
 * reports the node's CPUs, so without this a pod limited to 1 CPU on a 64-CPU
 * node would start 64 serving workers, each a Web Worker with its own heap.
 * The default of `--workers`.
 *
 * @module
 */

/** Files read, relative to the cgroup mount (v2 first, then v1). */
const CGROUP_V2_MAX = "/sys/fs/cgroup/cpu.max";
const CGROUP_V1_QUOTA = "/sys/fs/cgroup/cpu/cpu.cfs_quota_us";
const CGROUP_V1_PERIOD = "/sys/fs/cgroup/cpu/cpu.cfs_period_us";

/**
 * CPUs allowed by a cgroup quota, rounded up, or undefined when there is none.
 *
 * `cpuMax` is cgroup v2's `cpu.max` ("max 100000", or "150000 100000" for
 * 1.5 CPUs); `quota` and `period` are cgroup v1's `cpu.cfs_quota_us` (-1: no
 * limit) and `cpu.cfs_period_us`.
 */
export function cpusFromCgroup(
  files: {
    readonly cpuMax?: string | undefined;
    readonly quota?: string | undefined;
    readonly period?: string | undefined;
  },
): number | undefined {
  let quota: number;
  let period: number;
  if (files.cpuMax !== undefined) {
    const [q, p] = files.cpuMax.trim().split(/\s+/);
    if (q === undefined || q === "max") return undefined;
    quota = Number(q);
    period = Number(p ?? "100000");
  } else if (files.quota !== undefined && files.period !== undefined) {
    quota = Number(files.quota.trim());
    period = Number(files.period.trim());
  } else {
    return undefined;
  }
  if (!(quota > 0) || !(period > 0)) return undefined;
  return Math.max(1, Math.ceil(quota / period));
}

/** The machine's CPUs, lowered by this process's cgroup quota if any (files unreadable: ignored). */
export function availableCpus(hardware: number = navigator.hardwareConcurrency): number {
  const read = (path: string) => {
    try {
      return Deno.readTextFileSync(path);
    } catch {
      return undefined;
    }
  };
  const cpuMax = read(CGROUP_V2_MAX);
  const limit = cpusFromCgroup(
    cpuMax !== undefined
      ? { cpuMax }
      : { quota: read(CGROUP_V1_QUOTA), period: read(CGROUP_V1_PERIOD) },
  );
  return limit === undefined ? hardware : Math.min(hardware, limit);
}
