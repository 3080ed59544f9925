/**
 * Runs Sluice as a real process for end-to-end tests: `deno run` with
 * exactly the permission set and unstable flags of `deno task start` (so
 * with what the compiled binary is given), on free loopback ports, with its
 * log lines captured.
 *
 * @module
 */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { waitFor } from "./wait.ts";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The flags `deno task start` passes to `deno run` before `main.ts`. */
export async function startFlags(): Promise<string[]> {
  const denoJson = JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json"))) as {
    tasks: Record<string, string>;
  };
  const words = denoJson.tasks.start!.split(/\s+/);
  const run = words.indexOf("run");
  const main = words.indexOf("main.ts");
  if (words[0] !== "deno" || run !== 1 || main === -1) {
    throw new Error(`Cannot read the start task: "${denoJson.tasks.start}"`);
  }
  return words.slice(run + 1, main);
}

/** A free TCP port on loopback (bound, then released). */
export function freePort(): number {
  return freePorts(1)[0]!;
}

/**
 * `n` distinct free TCP ports on loopback: all are held until every one is
 * chosen (ports taken one at a time can repeat: the kernel may hand a just
 * released port out again, and Sluice then refused "port P for both
 * --https-port and --health-port").
 */
export function freePorts(n: number): number[] {
  const listeners = Array.from(
    { length: n },
    () => Deno.listen({ hostname: "127.0.0.1", port: 0 }),
  );
  const ports = listeners.map((l) => (l.addr as Deno.NetAddr).port);
  for (const l of listeners) l.close();
  return ports;
}

/** Appends the lines of `stream` to `lines` as they arrive; resolves when it ends. */
export async function collectLines(
  stream: ReadableStream<Uint8Array>,
  lines: string[],
): Promise<void> {
  let pending = "";
  for await (const text of stream.pipeThrough(new TextDecoderStream())) {
    pending += text;
    const parts = pending.split("\n");
    pending = parts.pop() ?? "";
    lines.push(...parts);
  }
  if (pending !== "") lines.push(pending);
}

/** A running Sluice process; disposing it kills it (SIGKILL) and waits for the exit. */
export interface SluiceProcess extends AsyncDisposable {
  readonly httpPort: number;
  readonly httpsPort: number;
  readonly healthPort: number;
  readonly pid: number;
  /** Every line written to standard error so far (JSON log lines, mostly). */
  readonly logs: string[];
  /** Parsed JSON log records so far. */
  records(): Record<string, unknown>[];
  /** Waits for `/readyz` to answer 200. */
  ready(timeoutMs?: number): Promise<void>;
  /** Sends a signal (default SIGTERM) and resolves with the exit code. */
  stop(signal?: Deno.Signal): Promise<number>;
  /** Resolves with the exit code when the process exits by itself. */
  readonly exited: Promise<number>;
}

/** Options of {@linkcode spawnSluice}. */
export interface SpawnSluiceOptions {
  /** Extra environment variables. */
  readonly env?: Record<string, string>;
  /** Where the process runs. Default: the repository root. */
  readonly cwd?: string;
}

/** Starts `main.ts` with `args` plus free `--http-port`, `--https-port`, `--health-port` on 127.0.0.1. */
export async function spawnSluice(
  args: string[],
  options: SpawnSluiceOptions = {},
): Promise<SluiceProcess> {
  const [httpPort, httpsPort, healthPort] = freePorts(3) as [number, number, number];
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      ...await startFlags(),
      join(ROOT, "main.ts"),
      `--http-port=${httpPort}`,
      `--https-port=${httpsPort}`,
      `--health-port=${healthPort}`,
      ...args,
    ],
    cwd: options.cwd ?? ROOT,
    env: { NO_COLOR: "1", ...options.env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const logs: string[] = [];
  const streams = Promise.all([collectLines(child.stdout, logs), collectLines(child.stderr, logs)]);
  const exited = child.status.then(async (s) => {
    await streams;
    return s.code;
  });
  const sluice: SluiceProcess = {
    httpPort,
    httpsPort,
    healthPort,
    pid: child.pid,
    logs,
    exited,
    records() {
      const out: Record<string, unknown>[] = [];
      for (const line of logs) {
        if (!line.startsWith("{")) continue;
        try {
          out.push(JSON.parse(line));
        } catch {
          // a line cut by the process exiting
        }
      }
      return out;
    },
    async ready(timeoutMs = 30_000) {
      let done = false;
      void exited.then(() => done = true);
      await waitFor("Sluice's /readyz to answer 200", async () => {
        if (done) throw new Error(`Sluice exited early:\n${logs.slice(-20).join("\n")}`);
        const r = await fetch(`http://127.0.0.1:${healthPort}/readyz`);
        await r.body?.cancel();
        return r.status === 200;
      }, { timeoutMs });
    },
    async stop(signal: Deno.Signal = "SIGTERM") {
      try {
        child.kill(signal);
      } catch {
        // already exited
      }
      return await exited;
    },
    async [Symbol.asyncDispose]() {
      await sluice.stop("SIGKILL");
    },
  };
  return sluice;
}
