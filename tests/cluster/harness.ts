/**
 * Builds and runs the test control plane (`tests/cluster/main.go`: embedded
 * etcd + the real kube-apiserver). The binary is cached outside the work
 * tree under a hash of its Go sources and `go version`, so clean clones on
 * the same machine reuse it; Go's own build and module caches make a
 * rebuild after a change fast.
 *
 * @module
 */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));

/** Where built harness binaries are kept between runs. */
export function cacheDir(): string {
  const base = Deno.env.get("XDG_CACHE_HOME") ?? join(Deno.env.get("HOME") ?? "/tmp", ".cache");
  return join(base, "sluice", "cluster");
}

async function run(
  cmd: string,
  args: string[],
  options: Deno.CommandOptions = {},
): Promise<string> {
  const out = await new Deno.Command(cmd, { ...options, args, stdout: "piped", stderr: "piped" })
    .output();
  const stdout = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    const stderr = new TextDecoder().decode(out.stderr);
    throw new Error(`Cannot run "${cmd} ${args.join(" ")}": exit ${out.code}\n${stderr}${stdout}`);
  }
  return stdout;
}

async function sourceHash(): Promise<string> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(HERE)) {
    if (
      entry.isFile &&
      (entry.name.endsWith(".go") || entry.name === "go.mod" || entry.name === "go.sum")
    ) {
      files.push(entry.name);
    }
  }
  files.sort();
  const parts: string[] = [await run("go", ["version"])];
  for (const f of files) parts.push(f, await Deno.readTextFile(join(HERE, f)));
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(parts.join("\0")));
  return Array.from(new Uint8Array(digest).slice(0, 12), (b) => b.toString(16).padStart(2, "0"))
    .join("");
}

/** Returns the path of the harness binary, building it first if the cache has none for these sources. */
export async function buildCluster(
  options: { log?: (line: string) => void } = {},
): Promise<string> {
  const log = options.log ?? (() => {});
  const hash = await sourceHash();
  const bin = join(cacheDir(), `cluster-${hash}`);
  try {
    await Deno.stat(bin);
    log(`cluster: using cached ${bin}`);
    return bin;
  } catch {
    // not built yet
  }
  await Deno.mkdir(cacheDir(), { recursive: true });
  const started = performance.now();
  log("cluster: building the kube-apiserver harness (a cold build takes minutes)");
  const tmp = `${bin}.tmp-${Deno.pid}`;
  await run("go", ["build", "-trimpath", "-ldflags=-s -w", "-o", tmp, "."], {
    cwd: HERE,
    env: { CGO_ENABLED: "0", GOFLAGS: "-mod=readonly", GOTOOLCHAIN: "local" },
  });
  await Deno.rename(tmp, bin);
  const size = (await Deno.stat(bin)).size;
  log(
    `cluster: built ${bin} in ${((performance.now() - started) / 1000).toFixed(1)} s (${
      (size / 2 ** 20).toFixed(1)
    } MiB)`,
  );
  return bin;
}

/** A running control plane. */
export interface RunningCluster {
  readonly kubeconfig: string;
  readonly server: string;
  /** Test-only operations (`POST /compact` compacts etcd). */
  readonly control: string;
  readonly workDir: string;
  /** Where the apiserver's and etcd's output goes. */
  readonly logFile: string;
  stop(): Promise<void>;
}

/**
 * Starts the harness in a new work directory and resolves once it printed its
 * ready line. It stops when `stop()` is called, or when this process exits
 * (its standard input closes).
 */
export async function startCluster(
  bin: string,
  options: { workDir?: string; port?: number; extraArgs?: string[]; readyTimeoutMs?: number } = {},
): Promise<RunningCluster> {
  const workDir = options.workDir ?? await Deno.makeTempDir({ prefix: "sluice-cluster-" });
  const logFile = join(workDir, "cluster.log");
  const args = ["--dir", workDir];
  if (options.port !== undefined) args.push("--port", String(options.port));
  if (options.extraArgs?.length) args.push("--", ...options.extraArgs);
  const child = new Deno.Command(bin, { args, stdin: "piped", stdout: "piped", stderr: "piped" })
    .spawn();
  const log = await Deno.open(logFile, { create: true, write: true, truncate: true });
  const stderrDone = child.stderr.pipeTo(log.writable);

  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  const ready = (async () => {
    while (true) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`The cluster harness exited before it was ready; see ${logFile}`);
      buffered += value;
      const m = buffered.match(/cluster ready: kubeconfig=(\S+) server=(\S+) control=(\S+)/);
      if (m) return { kubeconfig: m[1]!, server: m[2]!, control: m[3]! };
    }
  })();
  const timeoutMs = options.readyTimeoutMs ?? 180_000;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new Error(`The cluster harness was not ready within ${timeoutMs} ms; see ${logFile}`),
        ),
      timeoutMs,
    );
  });
  const stdinWriter = child.stdin.getWriter();
  let stopped: Promise<void> | undefined;
  const stop = () => {
    stopped ??= (async () => {
      await stdinWriter.close().catch(() => {});
      await reader.cancel().catch(() => {});
      await child.status;
      await stderrDone.catch(() => {});
    })();
    return stopped;
  };
  try {
    const { kubeconfig, server, control } = await Promise.race([ready, timeout]);
    return { kubeconfig, server, control, workDir, logFile, stop };
  } catch (e) {
    await stop();
    throw e;
  } finally {
    clearTimeout(timer);
  }
}
