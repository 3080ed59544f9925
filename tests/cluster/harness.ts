/**
 * Builds and runs the test cluster (`tests/cluster/`: embedded etcd, the
 * real kube-apiserver and kube-controller-manager, and a pod runner in place
 * of a kubelet), with the programs its Pods can run as images
 * (`tests/cluster/images/`: the Gateway API conformance suite's `echo-basic`,
 * CoreDNS for its base manifests' `coredns` Deployment, and a
 * `traefik/whoami` equivalent). The binaries are cached outside the
 * work tree under a hash of their Go sources and `go version`, so clean
 * clones on the same machine reuse them; Go's own build and module caches
 * make a rebuild after a change fast. A cold build takes about 10 minutes on
 * 2 cores and a few GB of Go caches; progress is logged while it runs.
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

/** The images the pod runner can run: image name → Go package in `images/`'s module. */
export const IMAGES: Readonly<Record<string, string>> = {
  "registry.k8s.io/gateway-api/echo-basic": "sigs.k8s.io/gateway-api/conformance/echo-basic",
  "registry.k8s.io/coredns/coredns": "./coredns",
  "traefik/whoami": "./whoami",
};

async function goFiles(dir: string, prefix = ""): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(join(dir, prefix))) {
    const rel = prefix ? `${prefix}/${entry.name}` : entry.name;
    if (entry.isDirectory) files.push(...await goFiles(dir, rel));
    else if (
      entry.isFile &&
      (entry.name.endsWith(".go") || entry.name === "go.mod" || entry.name === "go.sum")
    ) {
      files.push(rel);
    }
  }
  return files;
}

async function sourceHash(): Promise<string> {
  const files = await goFiles(HERE);
  files.sort();
  const parts: string[] = [await run("go", ["version"])];
  for (const f of files) parts.push(f, await Deno.readTextFile(join(HERE, f)));
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(parts.join("\0")));
  return Array.from(new Uint8Array(digest).slice(0, 12), (b) => b.toString(16).padStart(2, "0"))
    .join("");
}

/** Where the image programs built beside a harness binary are. */
export function imagesDir(bin: string): string {
  return `${bin}-images`;
}

/**
 * `go build -v`, logging every 15 s how many packages it has compiled so far
 * (a cold build of the harness compiles about 2,000).
 */
async function goBuild(
  args: string[],
  cwd: string,
  what: string,
  log: (line: string) => void,
): Promise<void> {
  const child = new Deno.Command("go", {
    args: ["build", "-v", "-trimpath", "-ldflags=-s -w", ...args],
    cwd,
    env: { CGO_ENABLED: "0", GOFLAGS: "-mod=readonly", GOTOOLCHAIN: "local" },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const started = performance.now();
  let packages = 0;
  let tail = "";
  const progress = setInterval(() => {
    log(
      `cluster: building ${what}: ${packages} packages compiled, ${
        ((performance.now() - started) / 1000).toFixed(0)
      } s`,
    );
  }, 15_000);
  try {
    const [status] = await Promise.all([
      child.status,
      child.stdout.pipeTo(new WritableStream()),
      child.stderr.pipeThrough(new TextDecoderStream()).pipeTo(
        new WritableStream({
          write(chunk) {
            packages += chunk.split("\n").filter((l) => l && !l.startsWith("go: ")).length;
            tail = (tail + chunk).slice(-8192);
          },
        }),
      ),
    ]);
    if (!status.success) {
      throw new Error(`Cannot build ${what}: "go build" exited ${status.code}\n${tail}`);
    }
  } finally {
    clearInterval(progress);
  }
}

/**
 * Returns the path of the harness binary, building it (and the image
 * programs, into `imagesDir(bin)`) first if the cache has none for these
 * sources.
 */
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
  log(
    "cluster: building the test cluster (etcd, kube-apiserver, kube-controller-manager, " +
      "pod runner, kubectl): a cold build takes about 10 minutes on 2 cores and a few GB of Go cache",
  );
  const tmp = `${bin}.tmp-${Deno.pid}`;
  const tmpImages = `${imagesDir(bin)}.tmp-${Deno.pid}`;
  await goBuild(["-o", tmp, "."], HERE, "the cluster", log);
  await Deno.mkdir(tmpImages, { recursive: true });
  await goBuild(
    ["-o", tmpImages + "/", ...Object.values(IMAGES)],
    join(HERE, "images"),
    "the images",
    log,
  );
  await Deno.remove(imagesDir(bin), { recursive: true }).catch(() => {});
  await Deno.rename(tmpImages, imagesDir(bin));
  await Deno.rename(tmp, bin);
  const size = (await Deno.stat(bin)).size;
  log(
    `cluster: built ${bin} in ${((performance.now() - started) / 1000).toFixed(1)} s (${
      (size / 2 ** 20).toFixed(1)
    } MiB)`,
  );
  return bin;
}

/** The `--image` flags for the programs built beside `bin`. */
function imageArgs(bin: string): string[] {
  const args: string[] = [];
  for (const [image, pkg] of Object.entries(IMAGES)) {
    const program = join(imagesDir(bin), pkg.split("/").pop()!);
    try {
      Deno.statSync(program);
      args.push("--image", `${image}=${program}`);
    } catch {
      // not built beside this binary
    }
  }
  return args;
}

/** A running control plane. */
export interface RunningCluster {
  readonly kubeconfig: string;
  readonly server: string;
  /** The harness binary (`<bin> kubectl …` is the matching kubectl). */
  readonly bin: string;
  /** "on" when Pods run; otherwise "off" and the reason (not root, turned off). */
  readonly pods: string;
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
  options: {
    workDir?: string;
    port?: number;
    extraArgs?: string[];
    readyTimeoutMs?: number;
    /** false: the apiserver alone, without kube-controller-manager and the pod runner. */
    workloads?: boolean;
  } = {},
): Promise<RunningCluster> {
  const workDir = options.workDir ?? await Deno.makeTempDir({ prefix: "sluice-cluster-" });
  const logFile = join(workDir, "cluster.log");
  const args = ["--dir", workDir];
  if (options.workloads === false) args.push("--controllers=false", "--pod-runner=off");
  else args.push(...imageArgs(bin));
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
      const m = buffered.match(
        /cluster ready: kubeconfig=(\S+) server=(\S+) control=(\S+) pods=(\S+)/,
      );
      if (m) {
        const pods = m[4]!.replaceAll("_", " ");
        return { kubeconfig: m[1]!, server: m[2]!, control: m[3]!, pods };
      }
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
    const { kubeconfig, server, control, pods } = await Promise.race([ready, timeout]);
    return { kubeconfig, server, control, pods, bin, workDir, logFile, stop };
  } catch (e) {
    await stop();
    throw e;
  } finally {
    clearTimeout(timer);
  }
}
