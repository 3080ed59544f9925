// A benchmark script: printing its report is its job.
// deno-lint-ignore-file no-console
/**
 * Soak benchmark: drives phases of mixed traffic through Sluice's real
 * worker pool (`lib/workers/worker_pool.ts` with the real entry module
 * `lib/workers/sluice_worker.ts`, its listeners, proxy handler, metrics and
 * access log) in a child process, and after each phase, once the proxy is
 * quiet (active requests and WebSockets at 0 in its metrics), reads the
 * workers' V8 heaps after a full collection (`WorkerPool.heap()`, the child
 * runs with `--v8-flags=--expose-gc`), the process RSS and its open file
 * descriptors. Prints one row per phase and, from the last round (warm),
 * the growth per 10,000 operations of each kind: a kind whose heap or
 * descriptors grow round after round leaks.
 *
 * Usage: `deno run -A --unstable-net tests/bench/soak_bench.ts [--scale 1] [--rounds 2] [--workers 2] [--lanes 16]`
 * (`--scale` multiplies every phase's operation count; `--only <text>` runs the phases whose
 * name includes it; `--ws graceful|vanish` the WebSocket sessions' kind (default both);
 * `--idle-ms` the wait before the last reading, default 15,000. The default run takes about
 * 100 s.)
 *
 * The same file, run with `--serve <input.json>`, is the child: the pool, plus
 * a loopback control server (`GET /stats`, `POST /publish`).
 *
 * @module
 */
import type { ServingCertificate } from "../../lib/routing/snapshot.ts";
import type { Backend, Translation } from "../../lib/translate/translation.ts";
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";
import type { SluiceSnapshotData } from "../../lib/workers/sluice_worker.ts";
import { startWorkerPool } from "../../lib/workers/worker_pool.ts";
import { closedPort, startBackend } from "../support/upstream_backends.ts";
import { SAMPLE_KEY, WsBackend, wsFrame } from "../support/websocket_world.ts";
import { OP_CLOSE, OP_TEXT } from "../../lib/websocket/ws_frame.ts";
import { H2_ERROR, RawH2 } from "../support/raw_h2.ts";

// ---------------------------------------------------------------------------
// Shared
// ---------------------------------------------------------------------------

interface ServeInput {
  readonly workers: number;
  readonly translation: Translation;
  readonly defaultCertificate: ServingCertificate;
  readonly handlerOptions: unknown;
}

/** What the child's `GET /stats` answers. */
interface Stats {
  readonly rss: number;
  readonly fds: number;
  /** Sum of the workers' heapUsed after a full collection. */
  readonly heap: number;
  readonly external: number;
  readonly collected: boolean;
  readonly activeRequests: number;
  readonly activeWebSockets: number;
}

function flag(name: string, fallback: string): string {
  const index = Deno.args.indexOf(`--${name}`);
  return index >= 0 ? Deno.args[index + 1] ?? fallback : fallback;
}

const HOST = "soak.test";

// ---------------------------------------------------------------------------
// Child: the pool and its control server
// ---------------------------------------------------------------------------

function gaugeSum(metrics: unknown[], name: string): number {
  let sum = 0;
  for (const worker of metrics as { name: string; values: { value: number }[] }[][]) {
    for (const metric of worker) {
      if (metric.name === name) { for (const v of metric.values) sum += v.value; }
    }
  }
  return sum;
}

async function serve(inputPath: string): Promise<void> {
  const input = JSON.parse(await Deno.readTextFile(inputPath)) as ServeInput;
  let version = 1;
  const data = (translation: Translation): SluiceSnapshotData => ({
    translation,
    defaultCertificate: input.defaultCertificate,
  });
  const pool = await startWorkerPool<SluiceSnapshotData>({
    count: input.workers,
    module: new URL("../../lib/workers/sluice_worker.ts", import.meta.url),
    config: {
      hostname: "127.0.0.1",
      httpPort: 0,
      httpsPort: 0,
      handlerOptions: input.handlerOptions,
    },
    snapshot: { version, data: data(input.translation) },
  });
  const gc = (globalThis as { gc?: () => void }).gc;
  const stats = async (): Promise<Stats> => {
    gc?.();
    const heaps = await pool.heap();
    const metrics = await pool.collect();
    const status = await Deno.readTextFile("/proc/self/status");
    const rss = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) * 1024;
    let fds = 0;
    for await (const _ of Deno.readDir("/proc/self/fd")) fds++;
    return {
      rss,
      fds,
      heap: heaps.reduce((sum, h) => sum + h.heapUsed, 0),
      external: heaps.reduce((sum, h) => sum + h.external, 0),
      collected: heaps.every((h) => h.collected),
      activeRequests: gaugeSum(metrics, "sluice_active_requests"),
      activeWebSockets: gaugeSum(metrics, "sluice_active_websockets"),
    };
  };
  const control = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const path = new URL(req.url).pathname;
    if (path === "/stats") return Response.json(await stats());
    if (path === "/publish") {
      // A preview Ingress per swap: a new host and a new backend key, the old ones gone.
      version++;
      const swap = `swap-${version}`;
      const base = input.translation;
      const okBackend = base.backends.find((b) => b.key === "soak/ok:80")!;
      const translation: Translation = {
        ...base,
        routes: [...base.routes, {
          host: `${swap}.test`,
          path: "/",
          pathType: "Prefix",
          ingress: `soak/${swap}`,
          backend: `soak/${swap}:80`,
        }],
        backends: [...base.backends, {
          ...okBackend,
          key: `soak/${swap}:80`,
          service: `soak/${swap}`,
        }],
      };
      const result = await pool.publish(version, data(translation));
      return Response.json({ version, host: `${swap}.test`, rejected: result.rejected.length });
    }
    return new Response("not found", { status: 404 });
  });
  console.error(JSON.stringify({
    ready: true,
    http: pool.httpPort,
    https: pool.httpsPort,
    control: control.addr.port,
    gc: gc !== undefined,
  }));
  const stop = Promise.withResolvers<void>();
  Deno.addSignalListener("SIGTERM", stop.resolve);
  await stop.promise;
  await control.shutdown();
  await pool.shutdown({ timeoutMs: 2_000 });
  Deno.exit(0);
}

// ---------------------------------------------------------------------------
// Parent: backends
// ---------------------------------------------------------------------------

const KIB = "x".repeat(1024);

function okResponse(body: string): string {
  return `HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
}

async function readRequestBody(
  conn: { readLength: (n: number, f: () => void) => Promise<number> },
  head: string,
) {
  const length = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (length !== null) await conn.readLength(Number(length[1]), () => {});
}

function startBackends() {
  // Keep-alive, 1 KiB answers.
  const ok = startBackend(async (conn) => {
    for (;;) {
      const head = await conn.readHead();
      if (head === null) return;
      await readRequestBody(conn, head);
      await conn.write(okResponse(KIB));
    }
  });
  // Never answers (the proxy's read timeout answers 504); waits for the proxy to close.
  const slow = startBackend(async (conn) => {
    while (await conn.readSome() !== null) { /* hold */ }
  });
  // Closes right after the request head: the proxy answers 502.
  const reset = startBackend(async (conn) => {
    await conn.readHead();
  });
  // Announces 64 KiB, sends 1 KiB, closes: the client's response is cut.
  const trunc = startBackend(async (conn) => {
    if (await conn.readHead() === null) return;
    await conn.write(`HTTP/1.1 200 OK\r\nContent-Length: 65536\r\n\r\n${KIB}`);
  });
  // Streams 16 MiB: clients abort mid-response.
  const stream = startBackend(async (conn) => {
    if (await conn.readHead() === null) return;
    await conn.write(`HTTP/1.1 200 OK\r\nContent-Length: ${16 * 1024 * 1024}\r\n\r\n`);
    const chunk = new Uint8Array(16 * 1024).fill(120);
    for (let i = 0; i < 1024; i++) await conn.write(chunk);
  });
  // WebSocket echo.
  const ws = new WsBackend(async (conn) => {
    await conn.accept();
    for (;;) {
      const frame = await conn.nextFrame(60_000);
      if (frame === null) return;
      if (frame.opcode === OP_CLOSE) {
        await conn.write(wsFrame(OP_CLOSE, frame.payload));
        return;
      }
      await conn.write(wsFrame(frame.opcode, frame.payload));
    }
  });
  const refused = closedPort();
  return {
    backends: { ok, slow, reset, trunc, stream, ws },
    ports: {
      ok: ok.port,
      slow: slow.port,
      reset: reset.port,
      trunc: trunc.port,
      stream: stream.port,
      ws: ws.port,
      refused,
    },
    async close() {
      await Promise.all([
        ok.close(),
        slow.close(),
        reset.close(),
        trunc.close(),
        stream.close(),
        ws.close(),
      ]);
    },
  };
}

function translationFor(ports: Record<string, number>): Translation {
  const names = ["ok", "slow", "reset", "trunc", "stream", "ws", "refused"];
  const backends: Backend[] = names.map((name) => ({
    key: `soak/${name}:80`,
    service: `soak/${name}`,
    endpoints: [{ address: "127.0.0.1", port: ports[name]! }],
  }));
  return {
    routes: [
      ...names.map((name) => ({
        host: HOST,
        path: `/${name}`,
        pathType: "Prefix" as const,
        ingress: "soak/soak",
        backend: `soak/${name}:80`,
      })),
      // WebSocket's constructor sends the URL's host: a rule without host serves it.
      { host: "", path: "/ws", pathType: "Prefix", ingress: "soak/ws", backend: "soak/ws:80" },
    ],
    backends,
    tlsHosts: [],
    certificates: [],
    issues: [],
  };
}

// ---------------------------------------------------------------------------
// Parent: clients
// ---------------------------------------------------------------------------

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function indexOfCrlfCrlf(bytes: Uint8Array, from = 0): number {
  for (let i = Math.max(0, from); i + 3 < bytes.length; i++) {
    if (bytes[i] === 13 && bytes[i + 1] === 10 && bytes[i + 2] === 13 && bytes[i + 3] === 10) {
      return i;
    }
  }
  return -1;
}

/** A minimal HTTP/1.1 client on one connection (Content-Length framing, which Sluice's answers here use). */
class H1 {
  #conn: Deno.Conn;
  #buf = new Uint8Array(0);
  closed = false;
  constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  static async open(port: number): Promise<H1> {
    return new H1(await Deno.connect({ hostname: "127.0.0.1", port }));
  }

  static async openTls(port: number, caCert: string): Promise<H1> {
    const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
    const tls = await Deno.startTls(tcp, {
      hostname: HOST,
      caCerts: [caCert],
      alpnProtocols: ["http/1.1"],
    });
    await tls.handshake();
    return new H1(tls);
  }

  async #fill(): Promise<boolean> {
    const chunk = new Uint8Array(64 * 1024);
    let n: number | null;
    try {
      n = await this.#conn.read(chunk);
    } catch {
      n = null;
    }
    if (n === null) {
      this.closed = true;
      return false;
    }
    const next = new Uint8Array(this.#buf.length + n);
    next.set(this.#buf);
    next.set(chunk.subarray(0, n), this.#buf.length);
    this.#buf = next;
    return true;
  }

  /** Sends `head` (+ `body`), reads the answer; status 0 when the connection ended first. */
  async request(head: string, body = "", readBody = true): Promise<number> {
    await this.#conn.write(encoder.encode(head + body));
    let end: number;
    while ((end = indexOfCrlfCrlf(this.#buf)) < 0) if (!await this.#fill()) return 0;
    const text = decoder.decode(this.#buf.subarray(0, end));
    const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
    if (/\r\nconnection:\s*close/i.test(text)) this.closed = true;
    this.#buf = this.#buf.subarray(end + 4);
    if (!readBody) return status;
    const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(text)?.[1] ?? 0);
    while (this.#buf.length < length) if (!await this.#fill()) return status;
    this.#buf = this.#buf.subarray(length);
    return status;
  }

  async writeRaw(bytes: Uint8Array): Promise<void> {
    await this.#conn.write(bytes);
  }

  /** Reads until at least `n` bytes are buffered (or to EOF). */
  async readAtLeast(n: number): Promise<void> {
    while (this.#buf.length < n) if (!await this.#fill()) return;
  }

  close(): void {
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }
}

function get(path: string, options: { host?: string; close?: boolean } = {}): string {
  return `GET ${path} HTTP/1.1\r\nHost: ${options.host ?? HOST}\r\n${
    options.close === true ? "Connection: close\r\n" : ""
  }\r\n`;
}

/** Runs `op(i)` for i in [0, n) on `lanes` concurrent loops; counts statuses. */
async function lanesRun(
  n: number,
  lanes: number,
  op: (i: number, lane: number) => Promise<string>,
): Promise<Map<string, number>> {
  const outcomes = new Map<string, number>();
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(lanes, n) }, async (_, lane) => {
    while (next < n) {
      const i = next++;
      let outcome: string;
      try {
        outcome = await op(i, lane);
      } catch (error) {
        outcome = `error ${(error as Error).message.slice(0, 40)}`;
      }
      outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
    }
  }));
  return outcomes;
}

interface World {
  readonly http: number;
  readonly https: number;
  readonly control: number;
  readonly caCert: string;
  readonly lanes: number;
}

/** Keep-alive connection per lane, reopened when Sluice closes it. */
function keepAlive(world: World, port = world.http) {
  const conns: (H1 | undefined)[] = [];
  return {
    async send(lane: number, head: string, body = ""): Promise<number> {
      let conn = conns[lane];
      if (conn === undefined || conn.closed) {
        conn?.close();
        conn = await H1.open(port);
        conns[lane] = conn;
      }
      const status = await conn.request(head, body);
      return status;
    },
    close() {
      for (const conn of conns) conn?.close();
    },
  };
}

async function oneShot(port: number, head: string): Promise<number> {
  const conn = await H1.open(port);
  try {
    return await conn.request(head);
  } finally {
    conn.close();
  }
}

interface Phase {
  readonly name: string;
  readonly ops: number;
  run(world: World, n: number): Promise<Map<string, number>>;
}

const PHASES: readonly Phase[] = [
  {
    name: "keep-alive GET/POST",
    ops: 8_000,
    async run(world, n) {
      const pool = keepAlive(world);
      try {
        return await lanesRun(n, world.lanes, async (i, lane) =>
          String(
            i % 2 === 0 ? await pool.send(lane, get("/ok")) : await pool.send(
              lane,
              `POST /ok HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: ${KIB.length}\r\n\r\n`,
              KIB,
            ),
          ));
      } finally {
        pool.close();
      }
    },
  },
  {
    name: "new connection per GET",
    ops: 3_000,
    run: (world, n) =>
      lanesRun(
        n,
        world.lanes,
        async () => String(await oneShot(world.http, get("/ok", { close: true }))),
      ),
  },
  {
    name: "404 (no route)",
    ops: 5_000,
    async run(world, n) {
      const pool = keepAlive(world);
      try {
        return await lanesRun(
          n,
          world.lanes,
          async (i, lane) => String(await pool.send(lane, get(`/nowhere/${i}`))),
        );
      } finally {
        pool.close();
      }
    },
  },
  {
    name: "client aborts mid-response",
    ops: 1_000,
    run: (world, n) =>
      lanesRun(n, world.lanes, async () => {
        const conn = await H1.open(world.http);
        try {
          const status = await conn.request(get("/stream"), "", false);
          await conn.readAtLeast(32 * 1024);
          return `${status} aborted`;
        } finally {
          conn.close();
        }
      }),
  },
  {
    name: "502 (reset, refused, cut body)",
    ops: 1_500,
    run: (world, n) =>
      lanesRun(n, world.lanes, async (i) => {
        const path = ["/reset", "/refused", "/trunc"][i % 3]!;
        return `${path} ${await oneShot(world.http, get(path))}`;
      }),
  },
  {
    name: "504 (read timeout)",
    ops: 400,
    run: (world, n) =>
      lanesRun(
        n,
        Math.max(world.lanes, 32),
        async () => String(await oneShot(world.http, get("/slow"))),
      ),
  },
  {
    name: "WebSocket sessions",
    ops: 1_500,
    run: (world, n) =>
      lanesRun(n, world.lanes, async (i) => {
        const kind = flag("ws", "both");
        if (kind === "graceful" || (kind === "both" && i % 2 === 0)) {
          // A browser: open, one echo, close handshake.
          const ws = new WebSocket(`ws://127.0.0.1:${world.http}/ws`);
          const closed = new Promise<CloseEvent>((resolve) => ws.onclose = resolve);
          ws.onerror = () => {};
          const echoed = new Promise<void>((resolve) => ws.onmessage = () => resolve());
          await new Promise<void>((resolve, reject) => {
            ws.onopen = () => resolve();
            closed.then(() => reject(new Error("closed before open")));
          });
          ws.send("hello");
          await echoed;
          ws.close(1000);
          return `closed ${(await closed).code}`;
        }
        // A client that vanishes: raw upgrade, one echo, TCP closed without a close frame.
        const conn = await H1.open(world.http);
        try {
          const status = await conn.request(
            `GET /ws HTTP/1.1\r\nHost: ${HOST}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
              `Sec-WebSocket-Key: ${SAMPLE_KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
            "",
            false,
          );
          await conn.writeRaw(wsFrame(OP_TEXT, "hello", { mask: true }));
          await conn.readAtLeast(7);
          return `vanished ${status}`;
        } finally {
          conn.close();
        }
      }),
  },
  {
    name: "HTTPS new connection per GET",
    ops: 1_000,
    run: (world, n) =>
      lanesRun(n, world.lanes, async () => {
        const conn = await H1.openTls(world.https, world.caCert);
        try {
          return `tls ${await conn.request(get("/ok", { close: true }))}`;
        } finally {
          conn.close();
        }
      }),
  },
  {
    name: "TLS handshakes, random SNI",
    ops: 1_000,
    run: (world, n) =>
      lanesRun(n, world.lanes, async (i) => {
        const tcp = await Deno.connect({ hostname: "127.0.0.1", port: world.https });
        const tls = await Deno.startTls(tcp, {
          hostname: `r${i}-${crypto.randomUUID().slice(0, 8)}.test`,
          caCerts: [world.caCert],
        });
        try {
          await tls.handshake();
          return "handshake";
        } catch (error) {
          return `refused ${(error as Error).name}`;
        } finally {
          tls.close();
        }
      }),
  },
  {
    name: "h2 streams (1 in 4 reset)",
    ops: 3_000,
    async run(world, n) {
      const conns: (RawH2 & { used?: number })[] = [];
      try {
        return await lanesRun(n, Math.min(world.lanes, 8), async (i, lane) => {
          let h2 = conns[lane];
          if (h2 === undefined || h2.closed || (h2.used ?? 0) >= 100) {
            await h2?.close();
            h2 = await RawH2.open({
              port: world.https,
              tls: { serverName: HOST, caCerts: [world.caCert] },
            });
            conns[lane] = h2;
          }
          h2.used = (h2.used ?? 0) + 1;
          const reset = i % 4 === 3;
          const id = await h2.request([
            [":method", "GET"],
            [":scheme", "https"],
            [":authority", HOST],
            [":path", reset ? "/stream" : "/ok"],
          ]);
          if (reset) {
            await h2.until(id, "the first DATA", (s) => s.data.length > 0);
            await h2.reset(id, H2_ERROR.CANCEL);
            return "reset";
          }
          const stream = await h2.finished(id);
          return `h2 ${stream.heads[0]?.find(([k]) => k === ":status")?.[1]}`;
        });
      } finally {
        for (const h2 of conns) await h2?.close();
      }
    },
  },
  {
    name: "snapshot swaps (+1 GET each)",
    ops: 200,
    run: (world, n) =>
      lanesRun(n, 1, async () => {
        const published = await (await fetch(`http://127.0.0.1:${world.control}/publish`, {
          method: "POST",
        })).json() as { host: string; rejected: number };
        const status = await oneShot(world.http, get("/", { host: published.host, close: true }));
        return `swap ${published.rejected === 0 ? "applied" : "rejected"} ${status}`;
      }),
  },
];

async function stats(world: Pick<World, "control">): Promise<Stats> {
  const response = await fetch(`http://127.0.0.1:${world.control}/stats`);
  return await response.json() as Stats;
}

/** Waits for the proxy to be quiet (nothing in flight), then for the descriptors to settle. */
async function quiet(world: World, timeoutMs = 30_000): Promise<Stats> {
  const deadline = performance.now() + timeoutMs;
  let last = await stats(world);
  while (last.activeRequests > 0 || last.activeWebSockets > 0) {
    if (performance.now() > deadline) {
      throw new Error(
        `Cannot measure: the proxy is not quiet after ${timeoutMs} ms (${JSON.stringify(last)})`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
    last = await stats(world);
  }
  // Connections closing behind the answers: until two reads in a row agree on the fds.
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    const next = await stats(world);
    if (next.fds === last.fds || performance.now() > deadline) return next;
    last = next;
  }
}

async function main(): Promise<void> {
  const scale = Number(flag("scale", "1"));
  const rounds = Number(flag("rounds", "2"));
  const workers = Number(flag("workers", "2"));
  const lanes = Number(flag("lanes", "16"));
  const only = flag("only", "");
  const world0 = startBackends();
  const certificate = await generateSelfSignedCertificate({ hostnames: [HOST] });
  const input: ServeInput = {
    workers,
    translation: translationFor(world0.ports),
    defaultCertificate: certificate,
    handlerOptions: { readTimeoutMs: 300, webSocketIdleTimeoutMs: 60_000, accessLog: true },
  };
  const inputPath = await Deno.makeTempFile({ prefix: "sluice-soak-", suffix: ".json" });
  await Deno.writeTextFile(inputPath, JSON.stringify(input));
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--unstable-net",
      "--unstable-no-legacy-abort",
      "--v8-flags=--expose-gc,--max-semi-space-size=4,--heap-growing-percent=20,--no-allocation-site-pretenuring",
      new URL(import.meta.url).pathname,
      "--serve",
      inputPath,
    ],
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const lines = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let pending = "";
  let ready: { http: number; https: number; control: number; gc: boolean } | undefined;
  const tail: string[] = [];
  while (ready === undefined) {
    const { value, done } = await lines.read();
    if (done) throw new Error(`Cannot start the soak server: it exited (${tail.join("")})`);
    pending += value;
    for (let nl; (nl = pending.indexOf("\n")) >= 0;) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      if (line.startsWith('{"ready"')) ready = JSON.parse(line);
      else tail.push(line + "\n");
    }
  }
  // Keep draining (warnings), keeping the last lines for the report.
  const draining = (async () => {
    for (;;) {
      const { value, done } = await lines.read();
      if (done) return;
      tail.push(value);
      if (tail.length > 50) tail.shift();
    }
  })();
  const world: World = { ...ready, caCert: certificate.certPem, lanes };
  console.log(
    `Sluice soak: ${workers} workers, ${lanes} lanes, scale ${scale}, ${rounds} rounds, gc ${
      ready.gc ? "forced" : "NOT exposed"
    }`,
  );
  const mib = (n: number) => (n / 1024 / 1024).toFixed(1);
  const kib = (n: number) => (n / 1024).toFixed(0);
  const start = await quiet(world);
  console.log(
    `start: heap ${mib(start.heap)} MiB, external ${mib(start.external)} MiB, rss ${
      mib(start.rss)
    } MiB, fds ${start.fds}`,
  );
  console.log(
    "| round | phase | ops | s | heap MiB | Δheap KiB | Δext KiB | rss MiB | Δrss KiB | fds | Δfds | outcomes |",
  );
  console.log("|---|---|---|---|---|---|---|---|---|---|---|---|");
  const growth = new Map<
    string,
    { ops: number; heap: number; rss: number; fds: number; ext: number }
  >();
  let before = start;
  const began = performance.now();
  for (let round = 1; round <= rounds; round++) {
    for (const phase of PHASES) {
      if (only !== "" && !phase.name.includes(only)) continue;
      const n = Math.max(1, Math.round(phase.ops * scale));
      const t0 = performance.now();
      const outcomes = await phase.run(world, n);
      const seconds = (performance.now() - t0) / 1000;
      const after = await quiet(world);
      const d = {
        heap: after.heap - before.heap,
        ext: after.external - before.external,
        rss: after.rss - before.rss,
        fds: after.fds - before.fds,
      };
      const shown = [...outcomes].sort((a, b) => b[1] - a[1]).slice(0, 4).map(([k, v]) =>
        `${k}×${v}`
      )
        .join(", ");
      console.log(
        `| ${round} | ${phase.name} | ${n} | ${seconds.toFixed(1)} | ${mib(after.heap)} | ${
          kib(d.heap)
        } | ${kib(d.ext)} | ${mib(after.rss)} | ${
          kib(d.rss)
        } | ${after.fds} | ${d.fds} | ${shown} |`,
      );
      if (round === rounds) growth.set(phase.name, { ops: n, ...d });
      before = after;
    }
  }
  console.log(`\nGrowth per 10,000 operations, round ${rounds} (warm):`);
  console.log("| phase | heap KiB | external KiB | rss KiB | fds |");
  console.log("|---|---|---|---|---|");
  for (const [name, g] of growth) {
    const per = 10_000 / g.ops;
    console.log(
      `| ${name} | ${kib(g.heap * per)} | ${kib(g.ext * per)} | ${kib(g.rss * per)} | ${
        (g.fds * per).toFixed(0)
      } |`,
    );
  }
  // Deno frees some things on timers of its own (a server WebSocket whose client vanished: 5 to
  // 15 s later): what is still there after an idle wait is what stays.
  const idleMs = Number(flag("idle-ms", "15000"));
  await new Promise((resolve) => setTimeout(resolve, idleMs));
  const end = await quiet(world);
  console.log(
    `\nafter ${idleMs / 1000} s idle: heap ${mib(end.heap)} MiB (${
      kib(end.heap - start.heap)
    } KiB over start), external ${kib(end.external - start.external)} KiB over start, rss ${
      mib(end.rss)
    } MiB, fds ${end.fds} (start ${start.fds})`,
  );
  console.log(`total ${((performance.now() - began) / 1000).toFixed(0)} s`);
  child.kill("SIGTERM");
  await child.status;
  await draining.catch(() => {});
  await Deno.remove(inputPath).catch(() => {});
  await world0.close();
}

if (import.meta.main) {
  const serveIndex = Deno.args.indexOf("--serve");
  if (serveIndex >= 0) await serve(Deno.args[serveIndex + 1]!);
  else await main();
}
