// A benchmark script: printing its report is its job.
// deno-lint-ignore-file no-console
/**
 * Measures how the HTTPS listener's memory behaves when clients send many
 * random TLS server names (SNI), each of which Deno's resolver cache would
 * keep forever: the listener rotates its generation every `maxServerNames`
 * names, so RSS should stay flat. Compares with the same connection churn on
 * one name (no cache growth at all), and with rotation effectively off.
 * RSS is read after a forced GC. The server runs with Sluice's own V8 flags
 * (those of `deno task start`: a young generation bounded at 4 MiB per
 * semi-space); with V8's defaults the young generation alone grows by up to
 * ~48 MiB under this allocation pressure, which is not the listener's.
 *
 * Usage: `deno run -A --unstable-net tests/bench/sni_flood_bench.ts [names] [maxServerNames] [run]`
 * (defaults 100000 and 1000; `run` selects the runs whose label contains it). Loopback only; bounded by the number of names.
 * Runs the server and the client as separate processes and reads the
 * server's RSS from /proc.
 *
 * @module
 */
import { listenHttps } from "../../lib/server/https_listener.ts";
import { startFlags } from "../support/sluice_process.ts";
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";
import { stubCertificateTable } from "../support/stub_snapshot.ts";

const SELF = new URL(import.meta.url).pathname;
const [mode = "main", ...args] = Deno.args;

if (mode === "server") await server(Number(args[0]));
else if (mode === "client") {
  await client(Number(args[0]), Number(args[1]), Number(args[2]), args[3] === "fixed");
} else await main(Number(mode === "main" ? 100_000 : mode), Number(args[0] ?? 1000), args[1]);

/** Serves HTTPS with a wildcard default certificate until standard input closes. */
async function server(maxServerNames: number): Promise<void> {
  const cert = await generateSelfSignedCertificate({ hostnames: ["*.flood.test"] });
  const table = stubCertificateTable([], cert);
  const listener = listenHttps(() => new Response("ok"), {
    hostname: "127.0.0.1",
    port: 0,
    certificates: () => table,
    maxServerNames,
  });
  console.log(JSON.stringify({ port: listener.addr.port, ca: cert.certPem }));
  const gc = (globalThis as { gc?: () => void }).gc;
  for await (const _ of Deno.stdin.readable) {
    // Any line: collect garbage (so RSS shows what is retained, not what awaits collection), report.
    gc?.();
    gc?.();
    await new Promise((resolve) => setTimeout(resolve, 200));
    const memory = Deno.memoryUsage();
    console.log(JSON.stringify({
      ...listener.stats,
      heapMiB: Math.round(memory.heapUsed / 104857.6) / 10,
      externalMiB: Math.round(memory.external / 104857.6) / 10,
    }));
  }
  await listener.shutdown({ timeoutMs: 1000 });
}

/**
 * Sends `count` requests over fresh TLS connections with random server names,
 * `concurrency` at a time. `Connection: close` makes the server close first,
 * so the TIME_WAIT sockets are the server's and the client's ephemeral ports
 * do not run out.
 */
async function client(
  port: number,
  count: number,
  concurrency: number,
  fixed: boolean,
): Promise<void> {
  const ca = await new Response(Deno.stdin.readable).text();
  let next = 0;
  let failed = 0;
  let firstError: string | undefined;
  const one = async () => {
    while (next < count) {
      next++;
      const name = fixed ? "fixed.flood.test" : `r${crypto.randomUUID().slice(0, 13)}.flood.test`;
      try {
        const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
        const conn = await Deno.startTls(tcp, { hostname: name, caCerts: [ca] });
        await conn.write(
          new TextEncoder().encode(`GET / HTTP/1.1\r\nHost: ${name}\r\nConnection: close\r\n\r\n`),
        );
        await new Response(conn.readable).arrayBuffer();
      } catch (error) {
        failed++;
        firstError ??= String(error);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, one));
  console.log(JSON.stringify({ failed, firstError }));
}

async function rssMiB(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN);
  return Math.round(kb / 102.4) / 10;
}

async function main(names: number, maxServerNames: number, only?: string): Promise<void> {
  const runs: { label: string; names: number; max: number; fixed: boolean }[] = [
    {
      label: `random names, rotation every ${maxServerNames}`,
      names,
      max: maxServerNames,
      fixed: false,
    },
    { label: "one name (connection churn only)", names, max: maxServerNames, fixed: true },
    {
      label: "random names, rotation off",
      names: Math.min(names, 20_000),
      max: 1e9,
      fixed: false,
    },
  ];
  if (only !== undefined) {
    runs.splice(
      0,
      runs.length,
      ...runs.filter((r) => r.label.includes(only)),
    );
  }
  console.log(
    "| run | connections | RSS before | RSS after each fifth (MiB) | growth | V8 heap used / external after | rotations | time | conn/s |",
  );
  console.log("|---|---|---|---|---|---|---|---|---|");
  const v8Flags = (await startFlags()).find((flag) => flag.startsWith("--v8-flags="));
  const serverV8Flags = v8Flags === undefined ? "--v8-flags=--expose-gc" : `${v8Flags},--expose-gc`;
  for (const run of runs) {
    const srv = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "--unstable-net",
        serverV8Flags,
        SELF,
        "server",
        String(run.max),
      ],
      stdin: "piped",
      stdout: "piped",
    }).spawn();
    const lines = srv.stdout.pipeThrough(new TextDecoderStream()).pipeThrough(splitLines());
    const reader = lines.getReader();
    const ready = JSON.parse((await reader.read()).value!) as { port: number; ca: string };
    const writer = srv.stdin.getWriter();
    const flood = async (count: number) => {
      const cli = new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          SELF,
          "client",
          String(ready.port),
          String(count),
          "32",
          run.fixed ? "fixed" : "random",
        ],
        stdin: "piped",
        stdout: "piped",
      }).spawn();
      const w = cli.stdin.getWriter();
      await w.write(new TextEncoder().encode(ready.ca));
      await w.close();
      const out = await cli.output();
      return JSON.parse(new TextDecoder().decode(out.stdout)) as {
        failed: number;
        firstError?: string;
      };
    };
    type Stats = { rotations: number; heapMiB: number; externalMiB: number };
    /** Garbage-collects the server, then reads its counters and RSS. */
    const measure = async (): Promise<{ stats: Stats; rss: number }> => {
      await writer.write(new TextEncoder().encode("stats\n"));
      const stats = JSON.parse((await reader.read()).value!) as Stats;
      return { stats, rss: await rssMiB(srv.pid) };
    };
    // Warm up (code paths, allocator) before the baseline.
    await flood(2_000);
    const before = (await measure()).rss;
    const started = performance.now();
    const samples: number[] = [];
    let failed = 0;
    let firstError: string | undefined;
    const chunk = Math.ceil(run.names / 5);
    let stats: Stats | undefined;
    for (let sent = 0; sent < run.names; sent += chunk) {
      const result = await flood(Math.min(chunk, run.names - sent));
      failed += result.failed;
      firstError ??= result.firstError;
      const measured = await measure();
      samples.push(measured.rss);
      stats = measured.stats;
    }
    const seconds = (performance.now() - started) / 1000;
    const after = samples.at(-1)!;
    await writer.close();
    reader.releaseLock();
    await lines.cancel();
    await srv.status;
    console.log(
      `| ${run.label} | ${run.names} | ${before} MiB | ${samples.join(", ")} | ${
        Math.round((after - before) * 10) / 10
      } MiB | ${stats!.heapMiB} / ${stats!.externalMiB} MiB | ${stats!.rotations} | ${
        seconds.toFixed(1)
      } s | ${Math.round(run.names / seconds)} |${
        failed ? ` (${failed} failed: ${firstError})` : ""
      }`,
    );
  }
}

function splitLines(): TransformStream<string, string> {
  let buffer = "";
  return new TransformStream({
    transform(chunk, controller) {
      buffer += chunk;
      const parts = buffer.split("\n");
      buffer = parts.pop()!;
      for (const part of parts) if (part !== "") controller.enqueue(part);
    },
  });
}
