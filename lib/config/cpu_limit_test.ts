import { assertEquals } from "../../tests/support/assert.ts";
import { availableCpus, cpusFromCgroup } from "./cpu_limit.ts";

Deno.test("cpusFromCgroup() reads cgroup v2 and v1 quotas, rounding up, and no limit as undefined", () => {
  const cases: [Parameters<typeof cpusFromCgroup>[0], number | undefined][] = [
    [{ cpuMax: "max 100000\n" }, undefined],
    [{ cpuMax: "100000 100000\n" }, 1],
    [{ cpuMax: "150000 100000" }, 2],
    [{ cpuMax: "50000 100000" }, 1],
    [{ cpuMax: "400000 100000" }, 4],
    [{ cpuMax: "" }, undefined],
    [{ cpuMax: "garbage" }, undefined],
    [{ quota: "-1\n", period: "100000\n" }, undefined],
    [{ quota: "200000\n", period: "100000\n" }, 2],
    [{ quota: "250000", period: "100000" }, 3],
    [{ quota: "200000" }, undefined],
    [{}, undefined],
  ];
  for (const [files, want] of cases) {
    assertEquals(cpusFromCgroup(files), want, JSON.stringify(files));
  }
});

Deno.test("availableCpus() never exceeds the machine's CPUs and is at least 1", () => {
  const cpus = availableCpus(navigator.hardwareConcurrency);
  assertEquals(cpus >= 1 && cpus <= navigator.hardwareConcurrency, true, String(cpus));
  assertEquals(availableCpus(1), 1);
});
