/**
 * What the access log costs the proxy (`deno task bench:access-log`): Sluice
 * with one worker in front of the loopback echo backend, driven by wrk with
 * 1 KiB-ish responses, `--access-log=true` and `--access-log=false`
 * alternating in the same run, several rounds, medians. Prints req/s per
 * round and the ratio on/off (the target is ≥ 0.90). Log lines go to a pipe
 * that this script drains, as a container runtime would.
 *
 * Usage: deno run -A --unstable-net tests/bench/access_log_bench.ts [--rounds 3] [--seconds 5] [--connections 32]
 *
 * @module
 */
// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { startEchoBackend } from "../support/echo_backend.ts";
import { writeManifestDir } from "../support/manifest_dir.ts";
import { freePorts, startFlags } from "../support/sluice_process.ts";
import { waitFor } from "../support/wait.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    rounds: { type: "string", default: "3" },
    seconds: { type: "string", default: "5" },
    connections: { type: "string", default: "32" },
  },
});
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
const connections = Number(values.connections);

async function wrk(port: number): Promise<number> {
  const out = await new Deno.Command("wrk", {
    args: [
      "-t1",
      `-c${connections}`,
      `-d${seconds}s`,
      "-H",
      "Host: bench.local",
      `http://127.0.0.1:${port}/bench?q=1`,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  const m = text.match(/Requests\/sec:\s+([\d.]+)/);
  if (!out.success || m === null) throw new Error(`Cannot run wrk: ${text}`);
  if (/Non-2xx/.test(text)) throw new Error(`wrk saw errors: ${text}`);
  return Number(m[1]);
}

/** Sluice as a process whose log lines are drained and only counted (as a container runtime reads them). */
async function startSluice(args: string[]) {
  const [httpPort, httpsPort, healthPort] = freePorts(3) as [number, number, number];
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      ...await startFlags(),
      new URL("../../main.ts", import.meta.url).pathname,
      `--http-port=${httpPort}`,
      `--https-port=${httpsPort}`,
      `--health-port=${healthPort}`,
      ...args,
    ],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let lines = 0;
  const drained = child.stderr.pipeTo(
    new WritableStream({
      write(chunk) {
        for (const b of chunk) if (b === 10) lines++;
      },
    }),
  );
  await waitFor("Sluice to be ready", async () => {
    const r = await fetch(`http://127.0.0.1:${healthPort}/readyz`);
    await r.body?.cancel();
    return r.ok;
  }, { timeoutMs: 30_000 });
  return {
    httpPort,
    lines: () => lines,
    async stop() {
      child.kill("SIGTERM");
      await child.status;
      await drained;
    },
  };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

const backend = await startEchoBackend({ name: "bench" });
const dir = await writeManifestDir([{
  namespace: "bench",
  name: "echo",
  host: "bench.local",
  port: backend.port,
}]);
const results: Record<"on" | "off", number[]> = { on: [], off: [] };
try {
  for (let round = 0; round < rounds; round++) {
    for (const mode of ["on", "off"] as const) {
      const sluice = await startSluice([
        `--manifests=${dir.path}`,
        "--workers=1",
        `--access-log=${mode === "on"}`,
        "--shutdown-delay=0s",
      ]);
      try {
        await wrk(sluice.httpPort); // warm-up, not counted
        const before = sluice.lines();
        const rps = await wrk(sluice.httpPort);
        results[mode].push(rps);
        console.log(
          `round ${round + 1} access log ${mode}: ${rps.toFixed(0)} req/s (${
            sluice.lines() - before
          } log lines during the run)`,
        );
      } finally {
        await sluice.stop();
      }
    }
  }
} finally {
  await backend.close();
  await dir.remove();
}
const on = median(results.on);
const off = median(results.off);
console.log("\n| access log | req/s (median) | ratio |\n|---|---|---|");
console.log(`| off | ${off.toFixed(0)} | 1.00 |`);
console.log(`| on | ${on.toFixed(0)} | ${(on / off).toFixed(2)} |`);
console.log(
  `\nAccess-log cost: ${((1 - on / off) * 100).toFixed(1)}% of throughput (target ≤ 10%).`,
);
