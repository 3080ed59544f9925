/**
 * Large streams through a real Sluice process: a 1 GiB download and a 1 GiB
 * upload stream through with its resident memory flat (measured).
 *
 * @module
 */
import { createHash } from "node:crypto";
import { startScriptedBackend } from "../support/scripted_backend.ts";
import { writeManifestDir } from "../support/manifest_dir.ts";
import { spawnSluice } from "../support/sluice_process.ts";
import { within } from "../support/wait.ts";
import { assert, assertEquals } from "../support/assert.ts";
import { RawConnection } from "../support/raw_http.ts";

const GIB = 1024 * 1024 * 1024;
const BLOCK = 1024 * 1024;

function blockOf(seed: number): Uint8Array {
  return Uint8Array.from({ length: BLOCK }, (_, i) => (i * 31 + seed * 7 + (i >> 12)) & 0xff);
}

function rssMiB(pid: number): number {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) / 1024;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let at = 0;
  while (at < bytes.length) at += await conn.write(bytes.subarray(at));
}

/** Samples `pid`'s RSS every 100 ms until `stop()`; returns the samples. */
function sampleRss(pid: number): { samples: number[]; stop(): void } {
  const samples: number[] = [];
  const timer = setInterval(() => samples.push(rssMiB(pid)), 100);
  return { samples, stop: () => clearInterval(timer) };
}

Deno.test("a 1 GiB download and a 1 GiB upload stream through Sluice with its RSS flat (measured)", async () => {
  const blocks = [blockOf(1), blockOf(2), blockOf(3)];
  /** SHA-256 of `n` bytes made of the blocks in turn. */
  const expected = (n: number) => {
    const hash = createHash("sha256");
    for (let i = 0; i * BLOCK < n; i++) hash.update(blocks[i % 3]!.subarray(0, n - i * BLOCK));
    return hash.digest("hex");
  };
  const backend = startScriptedBackend(async (conn) => {
    for (;;) {
      const head = await conn.readHead();
      if (head === null) return;
      const [method, target] = head.split(" ");
      const size = Number(/[?&]n=(\d+)/.exec(target ?? "")?.[1] ?? 0);
      if (method === "GET") {
        await conn.write(
          `HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: ${size}\r\n\r\n`,
        );
        for (let i = 0; i * BLOCK < size; i++) {
          await conn.write(blocks[i % 3]!.subarray(0, size - i * BLOCK));
        }
      } else {
        const length = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
        const hash = createHash("sha256");
        const got = await conn.readLength(length, (data) => hash.update(data));
        const body = `${got} ${hash.digest("hex")}`;
        await conn.write(`HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
      }
    }
  }, { noDelay: true });
  const dir = await writeManifestDir([
    { namespace: "shop", name: "big", host: "big.test", port: backend.port },
  ]);
  const sluice = await spawnSluice([
    `--manifests=${dir.path}`,
    "--workers=1",
    "--access-log=false",
    "--shutdown-delay=0s",
  ]);

  const download = async (size: number) => {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: sluice.httpPort });
    try {
      await writeAll(
        conn,
        new TextEncoder().encode(`GET /d?n=${size} HTTP/1.1\r\nHost: big.test\r\n\r\n`),
      );
      const buffer = new Uint8Array(BLOCK);
      const hash = createHash("sha256");
      let head = "";
      let got = 0;
      await within(
        300_000,
        `a ${size}-byte download`,
        (async () => {
          while (head === "" || got < size) {
            const n = await conn.read(buffer);
            if (n === null) throw new Error(`Cannot read the body: closed after ${got} bytes`);
            let body = buffer.subarray(0, n);
            if (head === "") {
              const text = String.fromCharCode(...buffer.subarray(0, Math.min(n, 2048)));
              const end = text.indexOf("\r\n\r\n");
              if (end === -1) throw new Error("Cannot find the response head in the first read");
              head = text.slice(0, end);
              body = body.subarray(end + 4);
            }
            hash.update(body);
            got += body.length;
          }
        })(),
      );
      assert(head.startsWith("HTTP/1.1 200"), head);
      assertEquals([got, hash.digest("hex")], [size, expected(size)]);
    } finally {
      conn.close();
    }
  };
  const upload = async (size: number) => {
    using conn = await RawConnection.open(sluice.httpPort);
    // Bounded like the download: a Sluice that stops reading would hold `send` for good.
    const response = await within(
      300_000,
      `a ${size}-byte upload`,
      (async () => {
        await conn.send(
          `PUT /u HTTP/1.1\r\nHost: big.test\r\nContent-Length: ${size}\r\n\r\n`,
        );
        for (let i = 0; i * BLOCK < size; i++) {
          await conn.send(blocks[i % 3]!.subarray(0, size - i * BLOCK));
        }
        return await conn.readResponse({ timeoutMs: 300_000 });
      })(),
    );
    assertEquals(response.status, 200);
    assertEquals(new TextDecoder().decode(response.body), `${size} ${expected(size)}`);
  };

  const report: string[] = [];
  try {
    await sluice.ready();
    // Warm up (JIT, pools, V8's heap sizing), then take the baseline.
    await download(64 * BLOCK);
    await upload(64 * BLOCK);
    const baseline = rssMiB(sluice.pid);
    for (const [what, run] of [["download", download], ["upload", upload]] as const) {
      const sampler = sampleRss(sluice.pid);
      const started = performance.now();
      try {
        await run(GIB);
      } finally {
        sampler.stop();
      }
      const seconds = (performance.now() - started) / 1000;
      const { samples } = sampler;
      assert(samples.length >= 5, `only ${samples.length} RSS samples`);
      const peak = Math.max(...samples);
      // Flat: the peak stays near the baseline, and the last quarter is not above the first.
      const quarter = Math.max(1, Math.floor(samples.length / 4));
      const firstQuarter = Math.max(...samples.slice(0, quarter));
      const lastQuarter = Math.max(...samples.slice(-quarter));
      report.push(
        `${what} 1 GiB in ${seconds.toFixed(1)} s: RSS baseline ${baseline.toFixed(0)} MiB, ` +
          `peak ${peak.toFixed(0)} MiB (+${(peak - baseline).toFixed(0)}), first quarter max ` +
          `${firstQuarter.toFixed(0)}, last quarter max ${lastQuarter.toFixed(0)}`,
      );
      assert(
        peak - baseline < 96,
        `${what}: RSS grew from ${baseline.toFixed(0)} to ${peak.toFixed(0)} MiB`,
      );
      assert(
        lastQuarter - firstQuarter < 48,
        `${what}: RSS kept growing (${firstQuarter.toFixed(0)} → ${lastQuarter.toFixed(0)} MiB)`,
      );
    }
  } finally {
    await sluice.stop("SIGKILL");
    await backend.close();
    await dir.remove();
  }
  // deno-lint-ignore no-console
  console.log(report.join("\n"));
});
