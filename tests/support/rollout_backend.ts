/**
 * A pod's HTTP server for rollout tests: a small HTTP/1.1 keep-alive server
 * on `Deno.listen` that reports every request it receives as a line on
 * standard output, and on SIGTERM drains the way a well-behaved server
 * (Go's `Server.Shutdown`, Node's `server.close()` plus idle-socket close)
 * does: it stops accepting, closes idle keep-alive connections, finishes the
 * requests in flight (answering them with `Connection: close`), then exits.
 * SIGKILL is the abrupt death.
 *
 * Run inside a test host (see `netns.ts`):
 *
 *   deno run -A tests/support/rollout_backend.ts --hostname 10.244.1.2 --port 8080 --pod web-1
 *
 * Output lines (times are `Date.now()` milliseconds, comparable with the test's clock):
 * - `listening <address>:<port>` once, when it accepts connections;
 * - `request <time> <connection> <method> <bodyLength> <delay>` per request, once its head and
 *   body are in (`delay`: what `?delay=` asked for, 0 without);
 * - `draining <time>` on SIGTERM; `drained <time>` just before it exits.
 *
 * Answers `200` with JSON `{ pod, method, length }`; `?delay=ms` waits before answering.
 * `/_stats` (not reported as a request) answers `{ pod, open, accepted }`: connections open
 * besides the one asking, and accepted in all (the one asking included).
 * Knows nothing about Sluice or Kubernetes.
 *
 * @module
 */

const MAX_HEAD = 16 * 1024;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A parsed output line of the backend. */
export type RolloutBackendEvent =
  | { readonly kind: "listening"; readonly address: string }
  | {
    readonly kind: "request";
    readonly time: number;
    readonly connection: number;
    readonly method: string;
    readonly length: number;
    readonly delay: number;
  }
  | { readonly kind: "draining" | "drained"; readonly time: number };

/** Parses one output line; undefined for anything else. */
export function parseRolloutLine(line: string): RolloutBackendEvent | undefined {
  const words = line.trim().split(" ");
  switch (words[0]) {
    case "listening":
      return { kind: "listening", address: words[1] ?? "" };
    case "request":
      return {
        kind: "request",
        time: Number(words[1]),
        connection: Number(words[2]),
        method: words[3] ?? "",
        length: Number(words[4]),
        delay: Number(words[5] ?? 0),
      };
    case "draining":
    case "drained":
      return { kind: words[0], time: Number(words[1]) };
    default:
      return undefined;
  }
}

/** A rollout backend running in a test host, as seen by the test. */
export interface RolloutBackend {
  readonly pod: string;
  readonly address: string;
  readonly port: number;
  /** Every event so far, in order. */
  readonly events: RolloutBackendEvent[];
  /** Requests received so far. */
  requests(): number;
  /** The time of the last request received, or undefined. */
  lastRequestAt(): number | undefined;
  /** Connections open and accepted in all, not counting the test's own (each asked over a fresh one). */
  stats(): Promise<{ open: number; accepted: number }>;
  /** SIGTERM: the server drains and exits; resolves with its exit code. */
  drain(): Promise<number>;
  /** SIGKILL: the abrupt death; resolves once it is gone. */
  kill(): Promise<number>;
  readonly exited: Promise<number>;
}

/** What {@linkcode startRolloutBackend} needs of a test host (`netns.ts`'s `TestHost`). */
export interface SpawningHost {
  readonly address: string;
  spawn(cmd: readonly string[], options?: { env?: Record<string, string> }): Deno.ChildProcess;
}

/** Starts this module inside `host` on `port` as `pod`, and waits until it listens. */
export async function startRolloutBackend(
  host: SpawningHost,
  options: { port: number; pod: string; timeoutMs?: number },
): Promise<RolloutBackend> {
  const child = host.spawn([
    Deno.execPath(),
    "run",
    "-A",
    new URL(import.meta.url).pathname,
    "--hostname",
    host.address,
    "--port",
    String(options.port),
    "--pod",
    options.pod,
  ], { env: { NO_COLOR: "1" } });
  const events: RolloutBackendEvent[] = [];
  let listening: () => void = () => {};
  const isListening = new Promise<void>((resolve) => listening = resolve);
  const errors = new Response(child.stderr).text();
  const output = (async () => {
    let pending = "";
    for await (const text of child.stdout.pipeThrough(new TextDecoderStream())) {
      pending += text;
      const lines = pending.split("\n");
      pending = lines.pop() ?? "";
      for (const line of lines) {
        const event = parseRolloutLine(line);
        if (event === undefined) continue;
        events.push(event);
        if (event.kind === "listening") listening();
      }
    }
  })();
  const exited = child.status.then(async (s) => {
    await output.catch(() => {});
    await errors.catch(() => "");
    return s.code;
  });
  const timeoutMs = options.timeoutMs ?? 30_000;
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      isListening,
      exited.then(async (code) => {
        throw new Error(
          `The rollout backend "${options.pod}" exited with ${code} before listening: ${await errors}`,
        );
      }),
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`Timed out waiting for the rollout backend "${options.pod}"`)),
          timeoutMs,
        );
      }),
    ]);
  } catch (error) {
    signal(child, "SIGKILL");
    await exited;
    throw error;
  } finally {
    clearTimeout(timer);
  }
  let statsCalls = 0;
  const requestEvents = () => events.filter((e) => e.kind === "request");
  return {
    pod: options.pod,
    address: host.address,
    port: options.port,
    events,
    requests: () => requestEvents().length,
    lastRequestAt() {
      const all = requestEvents();
      return all.length === 0 ? undefined : all[all.length - 1]!.time;
    },
    async stats() {
      using client = Deno.createHttpClient({ poolMaxIdlePerHost: 0 });
      const response = await fetch(`http://${host.address}:${options.port}/_stats`, { client });
      const json = await response.json() as { open: number; accepted: number };
      statsCalls++;
      return { open: json.open, accepted: json.accepted - statsCalls };
    },
    drain() {
      signal(child, "SIGTERM");
      return exited;
    },
    kill() {
      signal(child, "SIGKILL");
      return exited;
    },
    exited,
  };
}

function signal(child: Deno.ChildProcess, name: Deno.Signal): void {
  try {
    child.kill(name);
  } catch {
    // Already exited.
  }
}

interface Conn {
  readonly id: number;
  readonly socket: Deno.Conn;
  /** True between requests (waiting for the next head with nothing buffered). */
  idle: boolean;
}

function say(line: string): void {
  Deno.stdout.writeSync(encoder.encode(line + "\n"));
}

async function serveConnection(
  conn: Conn,
  state: { draining: boolean; pod: string; open: Set<Conn>; accepted: number },
): Promise<void> {
  const buf = new Uint8Array(MAX_HEAD);
  let start = 0;
  let end = 0;
  const fill = async (): Promise<boolean> => {
    if (start === end) start = end = 0;
    if (end === buf.length) throw new Error("Cannot read request: head too large");
    const n = await conn.socket.read(buf.subarray(end)).catch(() => null);
    if (n === null) return false;
    end += n;
    return true;
  };
  try {
    for (;;) {
      conn.idle = start === end;
      if (conn.idle && state.draining) return;
      let headEnd = -1;
      while ((headEnd = decoder.decode(buf.subarray(start, end)).indexOf("\r\n\r\n")) === -1) {
        if (!(await fill())) return;
        conn.idle = false;
      }
      conn.idle = false;
      const head = decoder.decode(buf.subarray(start, start + headEnd));
      start += headEnd + 4;
      const [requestLine = "", ...fields] = head.split("\r\n");
      const [method = "", target = "/"] = requestLine.split(" ");
      let length = 0;
      for (const field of fields) {
        const colon = field.indexOf(":");
        if (field.slice(0, colon).trim().toLowerCase() === "content-length") {
          length = Number(field.slice(colon + 1).trim());
        }
      }
      let remaining = length;
      while (remaining > 0) {
        if (start === end && !(await fill())) return;
        const take = Math.min(remaining, end - start);
        start += take;
        remaining -= take;
      }
      const url = new URL(target, "http://backend.invalid");
      const stats = url.pathname === "/_stats";
      // The test's own questions are not traffic: not reported.
      const delay = Number(url.searchParams.get("delay")) || 0;
      if (!stats) say(`request ${Date.now()} ${conn.id} ${method} ${length} ${delay}`);
      if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
      const body = JSON.stringify(
        stats
          ? { pod: state.pod, open: state.open.size - 1, accepted: state.accepted }
          : { pod: state.pod, method, length },
      );
      const closing = state.draining;
      const response = `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${
        encoder.encode(body).length
      }\r\n${closing ? "connection: close\r\n" : ""}\r\n${body}`;
      const bytes = encoder.encode(response);
      let written = 0;
      while (written < bytes.length) written += await conn.socket.write(bytes.subarray(written));
      if (closing) return;
    }
  } catch {
    // The peer went away.
  } finally {
    try {
      conn.socket.close();
    } catch {
      // Closed by the drain.
    }
    state.open.delete(conn);
  }
}

async function main(): Promise<void> {
  const args = new Map<string, string>();
  for (let i = 0; i + 1 < Deno.args.length; i += 2) {
    args.set(String(Deno.args[i]).replace(/^--/, ""), String(Deno.args[i + 1]));
  }
  const hostname = args.get("hostname") ?? "127.0.0.1";
  const port = Number(args.get("port") ?? 0);
  const state = {
    draining: false,
    pod: args.get("pod") ?? "pod",
    open: new Set<Conn>(),
    accepted: 0,
  };
  const listener = Deno.listen({ hostname, port });
  const tasks = new Set<Promise<void>>();
  let drained: () => void = () => {};
  const allClosed = new Promise<void>((resolve) => drained = resolve);
  Deno.addSignalListener("SIGTERM", () => {
    if (state.draining) return;
    state.draining = true;
    say(`draining ${Date.now()}`);
    listener.close();
    // Idle keep-alive connections are closed now; busy ones after their response.
    for (const conn of state.open) {
      if (!conn.idle) continue;
      try {
        conn.socket.close();
      } catch {
        // Already closed.
      }
    }
    void Promise.allSettled([...tasks]).then(() => drained());
  });
  say(`listening ${hostname}:${(listener.addr as Deno.NetAddr).port}`);
  let ids = 0;
  for (;;) {
    let socket: Deno.Conn;
    try {
      socket = await listener.accept();
    } catch {
      break;
    }
    const conn: Conn = { id: ++ids, socket, idle: true };
    state.accepted = ids;
    state.open.add(conn);
    const task = serveConnection(conn, state);
    tasks.add(task);
    void task.finally(() => tasks.delete(task));
  }
  await allClosed;
  say(`drained ${Date.now()}`);
  Deno.exit(0);
}

if (import.meta.main) await main();
