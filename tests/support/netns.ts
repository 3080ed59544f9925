/**
 * Test hosts with their own non-loopback address: each is a Linux network
 * namespace joined to the root namespace by a veth pair, so a backend
 * process started inside it listens on an address the kube-apiserver accepts
 * in an EndpointSlice (it rejects loopback) and that Sluice, in the root
 * namespace, reaches directly.
 *
 * Addresses come from 10.244.0.0/16, one /30 per host: `.1` is the root side
 * of the veth, `.2` the host's own. Names carry this process's pid
 * (`sluice-<pid>-<n>`, veths `sl<pid>h<n>` / `sl<pid>p<n>`), so concurrent
 * runs do not collide and a later run can sweep what a crashed one left:
 * the first host a process creates removes every `sluice-*` namespace and
 * `sl*` veth whose pid is no longer alive. Hosts are removed on `close()`
 * and, as a last resort, when this process exits normally.
 *
 * With `ipv6: true` a host also gets an IPv6 unique local address from
 * fd51:1ce0::/48, one /64 per host numbered like its IPv4 /30
 * (`fd51:1ce0:0:<n>::2`, `::1` on the root side), added without duplicate
 * address detection so that it is usable at once.
 *
 * Needs root (CAP_NET_ADMIN) and iproute2; fails with a clear message
 * otherwise. Sends traffic to nothing but these addresses.
 *
 * @module
 */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { within } from "./wait.ts";

const ECHO_BACKEND = join(dirname(fileURLToPath(import.meta.url)), "echo_backend.ts");
const PREFIX = "sluice-";
const SUBNETS = 16_384; // /30 subnets in 10.244.0.0/16
const ULA_PREFIX = "fd51:1ce0:0"; // + ":<subnet hex>::/64"

/** The output of a command run inside a test host. */
export interface CommandResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** An echo backend process running inside a test host. */
export interface HostedBackend {
  /** `http://<address>:<port>`. */
  readonly url: string;
  readonly address: string;
  readonly port: number;
  readonly service: string;
  readonly pod: string;
  readonly pid: number;
  /** Stops the process (SIGTERM, then SIGKILL after 2 s) and waits for it. */
  stop(): Promise<void>;
}

/** A network namespace with one address, reachable from the root namespace. */
export interface TestHost {
  /** The label given at creation. */
  readonly label: string;
  /** The network namespace's name (`sluice-<pid>-<n>`). */
  readonly namespace: string;
  /** The host's own address, e.g. `10.244.3.6`. */
  readonly address: string;
  /** The root namespace's side of the veth, e.g. `10.244.3.5`. */
  readonly gateway: string;
  /** The host's IPv6 address (`fd51:1ce0:0:<n>::2`) when created with `ipv6: true`. */
  readonly address6?: string;
  /** The root namespace's IPv6 side of the veth (`…::1`) when created with `ipv6: true`. */
  readonly gateway6?: string;
  /** Runs `cmd` inside the host and collects its output. */
  run(cmd: readonly string[]): Promise<CommandResult>;
  /** Starts `cmd` inside the host; the caller owns the child (stop it before `close()`, or let `close()` do it). */
  spawn(cmd: readonly string[], options?: { env?: Record<string, string> }): Deno.ChildProcess;
  /**
   * Starts `tests/support/echo_backend.ts` on this host's address (or `hostname`: `address6`,
   * or `"::"` for both families) and waits until it listens.
   */
  startEchoBackend(
    options: { port: number; service: string; pod: string; hostname?: string },
  ): Promise<HostedBackend>;
  /** Stops what runs inside, removes the namespace and its veth. Safe to call twice. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** Options of {@linkcode createTestHost}. */
export interface CreateTestHostOptions {
  /** A label for messages (e.g. the pod it plays). */
  readonly name?: string;
  /** The host's address (`10.244.x.y`, the second of a /30); default: the next free one. */
  readonly address?: string;
  /** Also give the host an IPv6 ULA address (`address6`). Default false. */
  readonly ipv6?: boolean;
}

let sequence = 0;
let swept = false;
const open = new Map<string, { veth: string; children: Set<Deno.ChildProcess> }>();
let exitHookInstalled = false;

async function ip(args: readonly string[]): Promise<CommandResult> {
  let out;
  try {
    out = await new Deno.Command("ip", { args: [...args], stdout: "piped", stderr: "piped" })
      .output();
  } catch (error) {
    throw new Error(
      `Cannot run "ip ${args.join(" ")}": ${
        error instanceof Error ? error.message : String(error)
      }; install iproute2`,
    );
  }
  const decoder = new TextDecoder();
  return {
    code: out.code,
    stdout: decoder.decode(out.stdout),
    stderr: decoder.decode(out.stderr),
  };
}

async function ipOrThrow(args: readonly string[]): Promise<string> {
  const r = await ip(args);
  if (r.code !== 0) {
    throw new Error(`Cannot run "ip ${args.join(" ")}": exit ${r.code}: ${r.stderr.trim()}`);
  }
  return r.stdout;
}

/** Sends `signal` to `child` unless it has already exited. */
function kill(child: Deno.ChildProcess, signal: Deno.Signal): void {
  try {
    child.kill(signal);
  } catch {
    // Already exited.
  }
}

function alive(pid: number): boolean {
  try {
    Deno.statSync(`/proc/${pid}`);
    return true;
  } catch {
    return false;
  }
}

/**
 * Removes the namespaces and veths left by runs that are gone (their pid no
 * longer exists). Returns the namespaces removed. Called once per process by
 * {@linkcode createTestHost}.
 */
export async function sweepStaleHosts(): Promise<string[]> {
  const removed: string[] = [];
  const list = await ip(["netns", "list"]);
  for (const line of list.stdout.split("\n")) {
    const name = line.split(" ")[0] ?? "";
    const m = name.match(/^sluice-(\d+)-\d+$/);
    if (m === null || Number(m[1]) === Deno.pid || alive(Number(m[1]))) continue;
    await killInside(name);
    if ((await ip(["netns", "del", name])).code === 0) removed.push(name);
  }
  const links = await ip(["-o", "link", "show"]);
  for (const line of links.stdout.split("\n")) {
    const m = line.match(/^\d+: (sl(\d+)[hp]\d+)[@:]/);
    if (m === null || Number(m[2]) === Deno.pid || alive(Number(m[2]))) continue;
    await ip(["link", "del", m[1]!]);
  }
  return removed;
}

/** Addresses already used by veths in the root namespace. */
async function usedSubnets(): Promise<Set<number>> {
  const used = new Set<number>();
  const out = await ip(["-4", "-o", "addr", "show"]);
  for (const m of out.stdout.matchAll(/inet 10\.244\.(\d+)\.(\d+)\//g)) {
    used.add(Number(m[1]) * 64 + Math.floor(Number(m[2]) / 4));
  }
  return used;
}

/** `host:port`, an IPv6 address bracketed. */
function hostPort(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

function subnetAddresses(index: number): { gateway: string; address: string } {
  const third = Math.floor(index / 64);
  const base = (index % 64) * 4;
  return { gateway: `10.244.${third}.${base + 1}`, address: `10.244.${third}.${base + 2}` };
}

function parseAddress(address: string): number {
  const m = address.match(/^10\.244\.(\d{1,3})\.(\d{1,3})$/);
  const third = Number(m?.[1]);
  const fourth = Number(m?.[2]);
  if (m === null || third > 255 || fourth > 255 || fourth % 4 !== 2) {
    throw new Error(
      `Cannot use test host address "${address}": expected 10.244.x.y with y = 4k+2 (the second of a /30)`,
    );
  }
  return third * 64 + Math.floor(fourth / 4);
}

async function killInside(namespace: string): Promise<void> {
  // Only processes inside our own test namespace, which this module started.
  const pids = await ip(["netns", "pids", namespace]);
  for (const word of pids.stdout.split(/\s+/)) {
    const pid = Number(word);
    if (!Number.isInteger(pid) || pid <= 0) continue;
    try {
      Deno.kill(pid, "SIGKILL");
    } catch {
      // Already gone.
    }
  }
}

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // Last resort when a test forgot close(): synchronous, on a normal exit.
  globalThis.addEventListener("unload", () => {
    for (const [namespace, { veth, children }] of open) {
      for (const child of children) kill(child, "SIGKILL");
      new Deno.Command("ip", { args: ["netns", "del", namespace], stdout: "null", stderr: "null" })
        .outputSync();
      new Deno.Command("ip", { args: ["link", "del", veth], stdout: "null", stderr: "null" })
        .outputSync();
    }
    open.clear();
  });
}

/**
 * Creates a network namespace with one address (`10.244.x.(4k+2)/30`) and a
 * veth to the root namespace (`.1` on the root side). Fails with a clear
 * message when not run as root.
 */
export async function createTestHost(options: CreateTestHostOptions = {}): Promise<TestHost> {
  if (!swept) {
    swept = true;
    await sweepStaleHosts();
  }
  installExitHook();
  const n = sequence++;
  const namespace = `${PREFIX}${Deno.pid}-${n}`;
  const veth = `sl${Deno.pid}h${n}`;
  const peer = `sl${Deno.pid}p${n}`;
  const added = await ip(["netns", "add", namespace]);
  if (added.code !== 0) {
    const uid = Deno.uid();
    throw new Error(
      `Cannot create network namespace "${namespace}": ${added.stderr.trim()}` +
        (uid !== 0
          ? `; the end-to-end tests need root (CAP_NET_ADMIN) to create test hosts, and run as uid ${uid}`
          : ""),
    );
  }
  const children = new Set<Deno.ChildProcess>();
  const backends = new Set<HostedBackend>();
  open.set(namespace, { veth, children });
  let closed: Promise<void> | undefined;
  const close = () => {
    closed ??= (async () => {
      await Promise.all([...backends].map((b) => b.stop()));
      for (const child of children) {
        kill(child, "SIGKILL");
        await child.status.catch(() => {});
      }
      children.clear();
      await killInside(namespace);
      // Deleting the namespace deletes the veth end inside it, and so the pair.
      await ip(["netns", "del", namespace]);
      await ip(["link", "del", veth]);
      open.delete(namespace);
    })();
    return closed;
  };
  try {
    await ipOrThrow(["link", "add", veth, "type", "veth", "peer", "name", peer]);
    await ipOrThrow(["link", "set", peer, "netns", namespace]);
    let gateway = "";
    let address = "";
    if (options.address !== undefined) {
      ({ gateway, address } = subnetAddresses(parseAddress(options.address)));
      await ipOrThrow(["addr", "add", `${gateway}/30`, "dev", veth]);
    } else {
      // Start from a pid-derived subnet so that concurrent runs rarely race; retry on a clash.
      const used = await usedSubnets();
      let index = (Deno.pid * 7 + n) % SUBNETS;
      for (let tries = 0;; tries++) {
        if (tries >= SUBNETS) throw new Error("Cannot find a free /30 in 10.244.0.0/16");
        index = (index + 1) % SUBNETS;
        if (index === 0 || used.has(index)) continue;
        ({ gateway, address } = subnetAddresses(index));
        const r = await ip(["addr", "add", `${gateway}/30`, "dev", veth]);
        if (r.code === 0) break;
        if (!r.stderr.includes("exists")) {
          throw new Error(`Cannot address veth "${veth}": ${r.stderr.trim()}`);
        }
      }
    }
    await ipOrThrow(["link", "set", veth, "up"]);
    const inside = ["netns", "exec", namespace, "ip"];
    await ipOrThrow([...inside, "addr", "add", `${address}/30`, "dev", peer]);
    await ipOrThrow([...inside, "link", "set", peer, "up"]);
    await ipOrThrow([...inside, "link", "set", "lo", "up"]);
    let v6: { gateway6: string; address6: string } | undefined;
    if (options.ipv6 === true) {
      const subnet = `${ULA_PREFIX}:${parseAddress(address).toString(16)}`;
      v6 = { gateway6: `${subnet}::1`, address6: `${subnet}::2` };
      await ipOrThrow(["-6", "addr", "add", `${v6.gateway6}/64`, "dev", veth, "nodad"]);
      await ipOrThrow([...inside, "-6", "addr", "add", `${v6.address6}/64`, "dev", peer, "nodad"]);
    }

    const spawn = (cmd: readonly string[], spawnOptions: { env?: Record<string, string> } = {}) => {
      const child = new Deno.Command("ip", {
        args: ["netns", "exec", namespace, ...cmd],
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
        ...(spawnOptions.env !== undefined ? { env: spawnOptions.env } : {}),
      }).spawn();
      children.add(child);
      void child.status.then(() => children.delete(child), () => children.delete(child));
      return child;
    };
    const label = options.name ?? namespace;
    return {
      label,
      namespace,
      address,
      gateway,
      ...v6,
      async run(cmd) {
        const child = spawn(cmd);
        const [status, stdout, stderr] = await Promise.all([
          child.status,
          new Response(child.stdout).text(),
          new Response(child.stderr).text(),
        ]);
        return { code: status.code, stdout, stderr };
      },
      spawn,
      async startEchoBackend({ port, service, pod, hostname = address }) {
        const child = spawn([
          Deno.execPath(),
          "run",
          "-A",
          ECHO_BACKEND,
          "--hostname",
          hostname,
          "--port",
          String(port),
          "--service",
          service,
          "--pod",
          pod,
        ], { env: { NO_COLOR: "1" } });
        const errors = new Response(child.stderr).text();
        const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
        let seen = "";
        try {
          await within(
            30_000,
            `the echo backend ${service}/${pod} on ${hostPort(hostname, port)}`,
            (async () => {
              while (!seen.includes("listening on")) {
                const { value, done } = await reader.read();
                if (done) {
                  throw new Error(
                    `The echo backend ${service}/${pod} exited before listening: ${await errors}`,
                  );
                }
                seen += value;
              }
            })(),
          );
        } catch (error) {
          kill(child, "SIGKILL");
          await reader.cancel().catch(() => {});
          await child.status;
          await errors.catch(() => {});
          throw error;
        }
        // Keep draining its output so that the pipe never fills.
        const drained = (async () => {
          while (!(await reader.read()).done) { /* discard */ }
        })().catch(() => {});
        let stopped: Promise<void> | undefined;
        const backend: HostedBackend = {
          url: `http://${hostPort(hostname, port)}`,
          address: hostname,
          port,
          service,
          pod,
          pid: child.pid,
          stop() {
            stopped ??= (async () => {
              kill(child, "SIGTERM");
              const timer = setTimeout(() => kill(child, "SIGKILL"), 2_000);
              await child.status;
              clearTimeout(timer);
              await drained;
              await errors.catch(() => {});
              backends.delete(backend);
            })();
            return stopped;
          },
        };
        backends.add(backend);
        return backend;
      },
      close,
      [Symbol.asyncDispose]: close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}
