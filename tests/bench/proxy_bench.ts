// A benchmark script: printing its report is its job.
// deno-lint-ignore-file no-console
/**
 * The proxy benchmark (`deno task bench:proxy`): on loopback, a fast backend
 * (nginx serving a 1 KiB and a 1 MiB file, keep-alive), nginx as a reverse
 * proxy with upstream keep-alive (the baseline), and Sluice with 1 worker and
 * with all workers, measured with wrk bounded in time, alternating targets
 * for several rounds; prints medians of req/s, p50/p99 latency, ratios to
 * nginx, CPU used by the proxy (so req/s per core), and Sluice's RSS.
 *
 * A fifth contender, the floor (`floor_proxy.ts`), is the least a proxy on
 * Sluice's stack can do (`Deno.serve` in front, a bare HTTP/1.1 client on
 * `Deno.connect` behind, one thread, no proxy logic): Sluice's req/s per core
 * against it shows how much of the cost is Sluice's own and how much is the
 * stack's. A sixth, `Deno.serve` alone (`server_alone.ts`: the files answered
 * from memory, no upstream at all), shows what the stack's server costs by
 * itself, so what the floor adds is one pooled backend round trip.
 *
 * Installs nginx and wrk from Debian with apt-get when missing (needs root).
 * Everything runs as the current user from a temporary directory; no system
 * nginx service is used. Options: `--rounds 3 --duration 5 --connections 64`, and
 * `--sizes 1k` (or `1m`, or `tls`: 1 KiB over HTTPS, nginx terminating TLS
 * against Sluice's HTTPS listener) to measure one case while iterating;
 * `--annotations` adds Sluice with 1 worker and one ingress-nginx annotation on its route
 * (CORS, an allowlist, basic auth with its verification cached), priced against the plain route;
 * `--pin` (2 CPUs or more) runs the one-core contenders (nginx, Sluice with
 * 1 worker, the floor, the server alone) on CPU 1 and wrk and the backend on
 * CPU 0 (`taskset`), so that each has a core to itself and the scheduler's
 * placement stops moving the numbers; Sluice with all workers is not pinned.
 *
 * Sluice runs with the runtime flags of `deno task start` (read from
 * deno.json) that matter for speed and memory: `--unstable-no-legacy-abort`
 * (else Deno aborts every request's signal after a successful response, a
 * DOMException per request) and its `--v8-flags` (a small V8 young generation
 * and a slow-growing old one: lower peak RSS, same throughput measured).
 *
 * @module
 */
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";
import { startFlags } from "../support/sluice_process.ts";

const ROOT = new URL("../../", import.meta.url);
const SERVER = new URL("./sluice_bench_server.ts", import.meta.url).pathname;
const FLOOR = new URL("./floor_proxy.ts", import.meta.url).pathname;
const ALONE = new URL("./server_alone.ts", import.meta.url).pathname;
const DENO = Deno.execPath();

function option(name: string, fallback: number): number {
  const index = Deno.args.indexOf(`--${name}`);
  return index >= 0 ? Number(Deno.args[index + 1]) : fallback;
}

const ROUNDS = option("rounds", 3);
/**
 * `--annotations`: also Sluice (1 worker) with an ingress-nginx annotation on its route, to
 * price it against the plain route: [server flag, label, request fields wrk sends].
 */
const ANNOTATIONS: readonly (readonly [string, string, readonly string[]])[] =
  Deno.args.includes("--annotations")
    ? [
      ["cors", "CORS", ["Origin: https://app.example"]],
      ["allowlist", "allowlist", []],
      ["basic-auth", "basic auth (cached)", [`Authorization: Basic ${btoa("bench:bench")}`]],
    ]
    : [];
const FLOOR_NAME = "floor: Deno.serve + Deno.connect, no proxy logic";
const ALONE_NAME = "Deno.serve alone (no upstream)";
const DURATION_S = option("duration", 5);
const CONNECTIONS = option("connections", 64);
const CPUS = navigator.hardwareConcurrency;
/** `--pin`: the one-core proxies on CPU 1, wrk and the backend on CPU 0 (see the module comment). */
const PIN = Deno.args.includes("--pin") && CPUS >= 2;
/** `cmd` and `args` run on CPU `cpu` with `--pin` (taskset execs, so the pid is the command's). */
function pinned(cpu: number, cmd: string, args: string[]): [string, string[]] {
  return PIN ? ["taskset", ["-c", String(cpu), cmd, ...args]] : [cmd, args];
}
const SIZES = Deno.args.includes("--sizes")
  ? Deno.args[Deno.args.indexOf("--sizes") + 1]
  : "1k,1m,tls";
/** Runtime flags shared with `deno task start` (see the module comment). */
const SLUICE_FLAGS = (await startFlags()).filter((flag) =>
  flag.startsWith("--unstable-") || flag.startsWith("--v8-flags=")
);

interface Target {
  readonly name: string;
  readonly port: number;
  /** Default `http`. */
  readonly scheme?: "http" | "https";
  /** Processes whose CPU time counts as the proxy's (none for direct). */
  readonly pids: () => Promise<number[]>;
  /** Request fields wrk sends (`-H`). */
  readonly headers?: readonly string[];
}

interface Sample {
  readonly rps: number;
  readonly p50: number;
  readonly p99: number;
  readonly cores: number;
}

async function run(cmd: string, args: string[], quiet = false): Promise<string> {
  const out = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped" }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (!out.success && !quiet) throw new Error(`Cannot run "${cmd} ${args.join(" ")}": ${text}`);
  return text;
}

async function has(binary: string): Promise<boolean> {
  return (await new Deno.Command("sh", { args: ["-c", `command -v ${binary}`] }).output()).success;
}

async function ensureTools(): Promise<void> {
  const missing = [];
  if (!(await has("nginx"))) missing.push("nginx-light");
  if (!(await has("wrk"))) missing.push("wrk");
  if (missing.length === 0) return;
  console.error(`Installing ${missing.join(", ")} with apt-get…`);
  await run("apt-get", ["update", "-qq"]);
  await run("apt-get", ["install", "-y", "-qq", "--no-install-recommends", ...missing]);
}

/** `n` distinct free loopback ports (held open together while chosen). */
function freePorts(n: number): number[] {
  const listeners = Array.from(
    { length: n },
    () => Deno.listen({ hostname: "127.0.0.1", port: 0 }),
  );
  const ports = listeners.map((l) => l.addr.port);
  for (const listener of listeners) listener.close();
  return ports;
}

async function waitForPort(port: number, what: string): Promise<void> {
  const deadline = performance.now() + 20_000;
  while (performance.now() < deadline) {
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port })).close();
      return;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  throw new Error(`Timed out waiting for ${what} on port ${port}`);
}

function nginxConfig(dir: string, body: string): string {
  return `worker_processes 1;
daemon off;
pid ${dir}/nginx-$NAME.pid;
error_log ${dir}/error-$NAME.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/tmp/body;
  proxy_temp_path ${dir}/tmp/proxy;
  fastcgi_temp_path ${dir}/tmp/fastcgi;
  uwsgi_temp_path ${dir}/tmp/uwsgi;
  scgi_temp_path ${dir}/tmp/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 60s;
${body}
}
`;
}

async function startNginx(
  dir: string,
  name: string,
  body: string,
  cpu: number,
): Promise<Deno.ChildProcess> {
  const path = `${dir}/${name}.conf`;
  await Deno.writeTextFile(path, nginxConfig(dir, body).replaceAll("$NAME", name));
  const [cmd, args] = pinned(cpu, "nginx", [
    "-p",
    dir,
    "-e",
    `${dir}/error-${name}.log`,
    "-c",
    path,
  ]);
  return new Deno.Command(cmd, {
    args,
    stdout: "null",
    stderr: "inherit",
  }).spawn();
}

async function childPids(pid: number): Promise<number[]> {
  const text = await run("pgrep", ["-P", String(pid)], true);
  return [pid, ...text.split("\n").filter((l) => l.trim() !== "").map(Number)];
}

/** User + system CPU seconds of the processes (all their threads). */
async function cpuSeconds(pids: number[]): Promise<number> {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      // Gone.
    }
  }
  return ticks / 100;
}

interface Memory {
  /** Resident set, MiB. */
  readonly rss: number;
  /** Of which anonymous memory (heaps, buffers), MiB; the rest is file-backed (the binary's code). */
  readonly anon: number;
}

async function memory(pid: number): Promise<Memory> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const kib = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? NaN);
  return { rss: kib("VmRSS") / 1024, anon: kib("RssAnon") / 1024 };
}

/** The larger of each field. */
function peak(a: Memory | undefined, b: Memory): Memory {
  return a === undefined ? b : { rss: Math.max(a.rss, b.rss), anon: Math.max(a.anon, b.anon) };
}

function describe(m: Memory | undefined, workers = 1): string {
  if (m === undefined) return "?";
  const perWorker = workers > 1 ? `, ${(m.rss / workers).toFixed(0)} MiB per worker` : "";
  return `${m.rss.toFixed(0)} MiB (anonymous ${m.anon.toFixed(0)} MiB${perWorker})`;
}

function parseLatency(text: string, percentile: string): number {
  const match = new RegExp(`^\\s*${percentile}%\\s+([\\d.]+)(us|ms|s)`, "m").exec(text);
  if (match === null) return NaN;
  const value = Number(match[1]);
  return match[2] === "us" ? value / 1000 : match[2] === "s" ? value * 1000 : value;
}

/**
 * Runs wrk against `target`; meanwhile calls `sample` every 250 ms (memory is read
 * under load, not after it).
 */
async function wrk(target: Target, path: string, sample: () => Promise<void>): Promise<Sample> {
  const pids = await target.pids();
  const cpuBefore = await cpuSeconds(pids);
  const started = performance.now();
  let running = true;
  const sampling = (async () => {
    while (running) {
      await sample();
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  })();
  let text: string;
  try {
    text = await run(...pinned(0, "wrk", [
      "-t1",
      `-c${CONNECTIONS}`,
      `-d${DURATION_S}s`,
      "--latency",
      ...(target.headers ?? []).flatMap((h) => ["-H", h]),
      `${target.scheme ?? "http"}://127.0.0.1:${target.port}${path}`,
    ]));
  } catch (error) {
    running = false;
    // wrk's failure is the one to report (a sample may fail too, its process gone).
    sampling.catch(() => {});
    throw error;
  }
  running = false;
  // Wall and CPU time end with wrk, not with the last sample's pause (up to 250 ms).
  const wall = (performance.now() - started) / 1000;
  const cores = pids.length === 0 ? 0 : (await cpuSeconds(pids) - cpuBefore) / wall;
  await sampling;
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1] ?? NaN);
  const errors = /Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)/.exec(text);
  if (errors !== null) console.error(`${target.name} ${path}: ${errors[0]}`);
  return { rps, p50: parseLatency(text, "50"), p99: parseLatency(text, "99"), cores };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

async function main(): Promise<void> {
  await ensureTools();
  const dir = await Deno.makeTempDir({ prefix: "sluice-bench-" });
  const children: Deno.ChildProcess[] = [];
  try {
    await Deno.chmod(dir, 0o755);
    await Deno.mkdir(`${dir}/tmp`);
    await Deno.mkdir(`${dir}/www`);
    await Deno.writeFile(`${dir}/www/1k.bin`, new Uint8Array(1024).fill(97));
    await Deno.writeFile(`${dir}/www/1m.bin`, new Uint8Array(1024 * 1024).fill(98));
    for (const file of ["www", "www/1k.bin", "www/1m.bin"]) {
      await Deno.chmod(`${dir}/${file}`, 0o755);
    }

    const [
      backendPort = 0,
      nginxPort = 0,
      sluice1Port = 0,
      sluiceNPort = 0,
      nginxTlsPort = 0,
      sluice1TlsPort = 0,
      sluiceNTlsPort = 0,
      floorPort = 0,
      alonePort = 0,
    ] = freePorts(9);
    const annotationPorts = ANNOTATIONS.map(() => freePorts(2) as [number, number]);
    const certificate = await generateSelfSignedCertificate({ hostnames: ["bench.test"] });
    await Deno.writeTextFile(`${dir}/tls.crt`, certificate.certPem);
    await Deno.writeTextFile(`${dir}/tls.key`, certificate.keyPem);
    const backend = await startNginx(
      dir,
      "backend",
      `
  server { listen 127.0.0.1:${backendPort}; root ${dir}/www; }`,
      0,
    );
    children.push(backend);
    const nginx = await startNginx(
      dir,
      "proxy",
      `
  upstream backend { server 127.0.0.1:${backendPort}; keepalive 64; }
  server {
    listen 127.0.0.1:${nginxPort};
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering on;
    }
  }
  server {
    listen 127.0.0.1:${nginxTlsPort} ssl;
    ssl_certificate ${dir}/tls.crt;
    ssl_certificate_key ${dir}/tls.key;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering on;
    }
  }`,
      1,
    );
    children.push(nginx);
    const sluice = (port: number, tlsPort: number, workers: number, extra: string[] = []) => {
      const denoArgs = [
        "run",
        "-A",
        "--unstable-net",
        ...SLUICE_FLAGS,
        SERVER,
        "--port",
        String(port),
        "--workers",
        String(workers),
        "--backend",
        `127.0.0.1:${backendPort}`,
        "--https-port",
        String(tlsPort),
        ...extra,
      ];
      // All workers run where the scheduler puts them.
      const [cmd, args] = workers === 1 ? pinned(1, DENO, denoArgs) : [DENO, denoArgs];
      return new Deno.Command(cmd, {
        args,
        cwd: ROOT,
        stdout: "piped",
        stderr: "inherit",
      }).spawn();
    };
    const sluice1 = sluice(sluice1Port, sluice1TlsPort, 1);
    const sluiceN = sluice(sluiceNPort, sluiceNTlsPort, CPUS);
    // One more 1-worker Sluice per annotation measured (`--annotations`).
    const annotated = ANNOTATIONS.map(([flag], i) =>
      sluice(annotationPorts[i]![0], annotationPorts[i]![1], 1, ["--annotations", flag])
    );
    children.push(...annotated);
    // The one-thread contenders (pinned to CPU 1 with --pin), each printing a ready line.
    const oneCore = (permissions: string[], script: string, args: string[]) => {
      const [cmd, cmdArgs] = pinned(1, DENO, [
        "run",
        ...permissions,
        ...SLUICE_FLAGS,
        script,
        ...args,
      ]);
      return new Deno.Command(cmd, {
        args: cmdArgs,
        cwd: ROOT,
        stdout: "piped",
        stderr: "inherit",
      }).spawn();
    };
    const floor = oneCore(["--allow-net"], FLOOR, [
      "--port",
      String(floorPort),
      "--backend",
      `127.0.0.1:${backendPort}`,
    ]);
    const alone = oneCore(["--allow-net", "--allow-read"], ALONE, [
      "--port",
      String(alonePort),
      "--root",
      `${dir}/www`,
    ]);
    children.push(sluice1, sluiceN, floor, alone);
    const readyLine = async (child: Deno.ChildProcess) => {
      const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
      const { value } = await reader.read();
      reader.releaseLock();
      return JSON.parse(value!.split("\n")[0]!) as { handler: string; pid: number };
    };
    const [ready1, readyN, readyFloor, readyAlone] = await Promise.all([
      readyLine(sluice1),
      readyLine(sluiceN),
      readyLine(floor),
      readyLine(alone),
    ]);
    const readyAnnotated = await Promise.all(annotated.map(readyLine));
    for (const [port, what] of [[backendPort, "the backend"], [nginxPort, "nginx"]] as const) {
      await waitForPort(port, what);
    }
    console.log(`Sluice handler: ${ready1.handler}`);
    console.log(
      `wrk -t1 -c${CONNECTIONS} -d${DURATION_S}s, ${ROUNDS} rounds alternating, medians; ${CPUS} CPUs${
        PIN ? "; pinned: wrk and the backend on CPU 0, the one-core proxies on CPU 1" : ""
      }`,
    );

    const targets: Target[] = [
      { name: "direct (nginx backend)", port: backendPort, pids: () => Promise.resolve([]) },
      { name: "nginx proxy, 1 worker", port: nginxPort, pids: () => childPids(nginx.pid) },
      { name: "Sluice, 1 worker", port: sluice1Port, pids: () => Promise.resolve([ready1.pid]) },
      {
        name: `Sluice, ${CPUS} workers`,
        port: sluiceNPort,
        pids: () => Promise.resolve([readyN.pid]),
      },
      {
        name: FLOOR_NAME,
        port: floorPort,
        pids: () => Promise.resolve([readyFloor.pid]),
      },
      {
        name: ALONE_NAME,
        port: alonePort,
        pids: () => Promise.resolve([readyAlone.pid]),
      },
      ...ANNOTATIONS.map(([, label, headers], i) => ({
        name: `Sluice, 1 worker, ${label}`,
        port: annotationPorts[i]![0],
        pids: () => Promise.resolve([readyAnnotated[i]!.pid]),
        headers,
      })),
    ];
    // Over HTTPS (keep-alive, so mostly the cost of TLS records, not of handshakes): nginx
    // terminating TLS against Sluice's TLS relay.
    const tlsTargets: Target[] = [
      {
        name: "nginx proxy, 1 worker",
        port: nginxTlsPort,
        scheme: "https",
        pids: () => childPids(nginx.pid),
      },
      {
        name: "Sluice, 1 worker",
        port: sluice1TlsPort,
        scheme: "https",
        pids: () => Promise.resolve([ready1.pid]),
      },
      {
        name: `Sluice, ${CPUS} workers`,
        port: sluiceNTlsPort,
        scheme: "https",
        pids: () => Promise.resolve([readyN.pid]),
      },
    ];
    const processes = [
      ["Sluice, 1 worker", ready1.pid, 1],
      [`Sluice, ${CPUS} workers`, readyN.pid, CPUS],
      ["the floor", readyFloor.pid, 1],
    ] as const;
    const idle = new Map<string, Memory>();
    for (const [name, pid] of processes) idle.set(name, await memory(pid));
    const sizes = ([
      ["1 KiB", "/1k.bin", "1k", targets],
      ["1 MiB", "/1m.bin", "1m", targets],
      ["1 KiB over HTTPS", "/1k.bin", "tls", tlsTargets],
    ] as const).filter(([, , key]) => SIZES?.split(",").includes(key));
    for (const [label, path, , caseTargets] of sizes) {
      const samples = new Map<string, Sample[]>(caseTargets.map((t) => [t.name, []]));
      // Peak memory of each process while it was the one under load.
      const loaded = new Map<string, Memory>();
      for (let round = 0; round < ROUNDS; round++) {
        for (const target of caseTargets) {
          const pids = await target.pids();
          const sample = async () => {
            for (const [name, pid] of processes) {
              if (pids.includes(pid)) loaded.set(name, peak(loaded.get(name), await memory(pid)));
            }
          };
          samples.get(target.name)!.push(await wrk(target, path, sample));
        }
      }
      const med = (name: string, key: keyof Sample) =>
        median(samples.get(name)!.map((s) => s[key]));
      const base = caseTargets.find((t) => t.name.startsWith("nginx proxy"))!.name;
      console.log(`\n${label} responses`);
      console.log(
        "| target | req/s | vs nginx | p50 ms | p99 ms | p99 vs nginx | proxy CPU (cores) | req/s per proxy core |",
      );
      console.log("|---|---|---|---|---|---|---|---|");
      for (const target of caseTargets) {
        const rps = med(target.name, "rps");
        const cores = med(target.name, "cores");
        const p99 = med(target.name, "p99");
        console.log(
          `| ${target.name} | ${Math.round(rps)} | ${(rps / med(base, "rps")).toFixed(2)}× | ${
            med(target.name, "p50").toFixed(2)
          } | ${p99.toFixed(2)} | ${(p99 / med(base, "p99")).toFixed(2)}× | ${
            cores === 0 ? "—" : cores.toFixed(2)
          } | ${cores === 0 ? "—" : Math.round(rps / cores)} |`,
        );
      }
      if (caseTargets.some((t) => t.name === FLOOR_NAME)) {
        const perCore = (name: string) => med(name, "rps") / med(name, "cores");
        console.log(
          `\nSluice, 1 worker, req/s per core vs the floor: ${
            (perCore("Sluice, 1 worker") / perCore(FLOOR_NAME)).toFixed(2)
          }×; the floor vs nginx: ${
            (perCore(FLOOR_NAME) / perCore(base)).toFixed(2)
          }×; Deno.serve alone vs nginx: ${(perCore(ALONE_NAME) / perCore(base)).toFixed(2)}×`,
        );
      }
      if (ANNOTATIONS.length > 0 && caseTargets === targets) {
        const perCore = (name: string) => med(name, "rps") / med(name, "cores");
        console.log(
          `\nCost of ingress-nginx annotations, req/s per core vs the plain route (Sluice, 1 worker): ${
            ANNOTATIONS.map(([, label]) =>
              `${label} ${
                (perCore(`Sluice, 1 worker, ${label}`) / perCore("Sluice, 1 worker")).toFixed(2)
              }×`
            ).join(", ")
          }`,
        );
      }
      console.log(
        `\nPeak memory under this load: ${
          processes.filter(([name]) => loaded.has(name))
            .map(([name, , workers]) => `${name} ${describe(loaded.get(name), workers)}`)
            .join("; ")
        }`,
      );
    }
    console.log(
      `\nMemory idle, before any load: ${
        processes.map(([name, , workers]) => `${name} ${describe(idle.get(name), workers)}`)
          .join("; ")
      }`,
    );
  } finally {
    for (const child of children) {
      try {
        child.kill("SIGTERM");
      } catch {
        // Already gone.
      }
      await child.status;
    }
    await Deno.remove(dir, { recursive: true });
  }
}

if (import.meta.main) await main();
