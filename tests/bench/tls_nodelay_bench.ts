// A benchmark script: printing its report is its job.
// deno-lint-ignore-file no-console
/**
 * What `TCP_NODELAY` on TLS connections (`lib/server/native_socket.ts`) is
 * worth: two HTTPS listeners in one process, the same but for the option,
 * which the bench clears again on the baseline's listening socket. wrk
 * (installed by `deno task bench:proxy`, or `apt-get install wrk`) drives
 * each with 8 keep-alive connections for `seconds`, alternating, `rounds`
 * times; medians of req/s and p50/p99 are printed with their ratios.
 *
 * Paths: `/1k` (1 KiB, one write), `/64k` (64 KiB: several relay writes) and
 * `/stream` (three 100-byte chunks 5 ms apart, as SSE sends them).
 *
 * On loopback the MSS is 64 KiB, so every response written in several
 * pieces waits for a delayed ACK without the option; over a real link
 * (1500-byte MTU) small streamed chunks still do, larger bodies some of the
 * time. Pass `--host` and run wrk from another network namespace to see that.
 *
 * Usage: `deno run -A --unstable-net tests/bench/tls_nodelay_bench.ts [--rounds 3] [--seconds 4] [--host 127.0.0.1]`
 *
 * @module
 */
import { listenHttps } from "../../lib/server/https_listener.ts";
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";
import { stubCertificateTable } from "../support/stub_snapshot.ts";
import { setNoDelayOnListeningSockets } from "../../lib/server/native_socket.ts";

function option(name: string, fallback: string): string {
  const index = Deno.args.indexOf(`--${name}`);
  return index >= 0 ? Deno.args[index + 1] ?? fallback : fallback;
}

const ROUNDS = Number(option("rounds", "3"));
const SECONDS = Number(option("seconds", "4"));
const HOST = option("host", "127.0.0.1");

const KIB = new Uint8Array(1024).fill(97);
const BIG = new Uint8Array(64 * 1024).fill(98);
function handler(req: Request): Response {
  const path = new URL(req.url).pathname;
  if (path === "/64k") return new Response(BIG);
  if (path === "/stream") {
    let sent = 0;
    return new Response(
      new ReadableStream({
        async pull(controller) {
          if (sent > 0) await new Promise((resolve) => setTimeout(resolve, 5));
          controller.enqueue(new Uint8Array(100).fill(99));
          if (++sent === 3) controller.close();
        },
      }),
    );
  }
  return new Response(KIB);
}

interface Sample {
  readonly rps: number;
  readonly p50: number;
  readonly p99: number;
}

function millis(text: string, label: string): number {
  const match = new RegExp(`^\\s*${label}\\s+([\\d.]+)(us|ms|s)`, "m").exec(text);
  if (match === null) throw new Error(`Cannot read ${label} from wrk: ${text}`);
  const value = Number(match[1]);
  return match[2] === "us" ? value / 1000 : match[2] === "s" ? value * 1000 : value;
}

async function wrk(port: number, path: string): Promise<Sample> {
  const output = await new Deno.Command("wrk", {
    args: ["-t1", "-c8", `-d${SECONDS}s`, "--latency", `https://${HOST}:${port}${path}`],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(output.stdout);
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(text);
  if (!output.success || rps === null) throw new Error(`Cannot run wrk: ${text}`);
  return { rps: Number(rps[1]), p50: millis(text, "50%"), p99: millis(text, "99%") };
}

const median = (values: number[]) => values.toSorted((a, b) => a - b)[values.length >> 1]!;

if (import.meta.main) {
  const certificate = await generateSelfSignedCertificate({ hostnames: ["bench.test"] });
  const table = stubCertificateTable([], certificate);
  const options = { hostname: HOST, port: 0, certificates: () => table };
  const withOption = listenHttps(handler, options);
  const without = listenHttps(handler, options);
  const cleared = setNoDelayOnListeningSockets(without.addr.port, false);
  if (!cleared.ok) throw new Error(`Cannot clear TCP_NODELAY on the baseline: ${cleared.reason}`);
  const targets = [["without TCP_NODELAY", without.addr.port], [
    "with TCP_NODELAY",
    withOption.addr.port,
  ]] as const;
  try {
    console.log(
      `wrk -t1 -c8 -d${SECONDS}s over HTTPS to ${HOST}, ${ROUNDS} rounds alternating, medians`,
    );
    console.log("| path | listener | req/s | p50 ms | p99 ms |");
    console.log("|---|---|---|---|---|");
    for (const path of ["/1k", "/64k", "/stream"]) {
      const samples = new Map<string, Sample[]>(targets.map(([name]) => [name, []]));
      for (let round = 0; round < ROUNDS; round++) {
        for (const [name, port] of targets) samples.get(name)!.push(await wrk(port, path));
      }
      const rows = targets.map(([name]) => {
        const list = samples.get(name)!;
        return {
          name,
          rps: median(list.map((s) => s.rps)),
          p50: median(list.map((s) => s.p50)),
          p99: median(list.map((s) => s.p99)),
        };
      });
      const base = rows[0]!;
      for (const row of rows) {
        const ratio = (value: number, of: number) =>
          row === base ? "" : ` (${(value / of).toFixed(2)}×)`;
        console.log(
          `| ${path} | ${row.name} | ${row.rps.toFixed(0)}${ratio(row.rps, base.rps)} | ` +
            `${row.p50.toFixed(2)}${ratio(row.p50, base.p50)} | ${row.p99.toFixed(2)}${
              ratio(row.p99, base.p99)
            } |`,
        );
      }
    }
  } finally {
    await Promise.all([
      withOption.shutdown({ timeoutMs: 2_000 }),
      without.shutdown({ timeoutMs: 2_000 }),
    ]);
  }
}
