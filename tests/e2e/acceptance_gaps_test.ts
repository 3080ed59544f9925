/**
 * Acceptance checks of issue 4 that need Sluice as a real process (run from
 * a `--manifests` directory, no cluster): a 1 GiB download and a 1 GiB
 * upload stream through it while its RSS, read from /proc, stays flat; and
 * the HSTS flags (`--hsts-max-age`, `--no-hsts`) and the HTTP→HTTPS 308 as
 * a client sees them; `--max-body-size` and `--trusted-proxy-cidrs`; and
 * clients stalled in their TLS handshake (`--client-first-bytes-timeout`).
 *
 * @module
 */
import { createHash } from "node:crypto";
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";
import { assert, assertEquals } from "../support/assert.ts";
import { startEchoBackend } from "../support/echo_backend.ts";
import { echoSite, writeManifestDir } from "../support/manifest_dir.ts";
import { headerValue, headerValues, RawConnection } from "../support/raw_http.ts";
import { startScriptedBackend } from "../support/scripted_backend.ts";
import { spawnSluice } from "../support/sluice_process.ts";
import { waitFor, within } from "../support/wait.ts";
import { clientHello } from "../support/tls_material.ts";

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

Deno.test("--hsts-max-age sets the HSTS a TLS host gets over HTTPS, --no-hsts removes it, and HTTP gets a 308 keeping the query", async () => {
  const backend = await startEchoBackend({ name: "secure/web" });
  const tls = await generateSelfSignedCertificate({ hostnames: ["secure.test"] });
  const dir = await writeManifestDir([
    { namespace: "secure", name: "web", host: "secure.test", port: backend.port, tls },
  ]);
  /** One HTTPS request to `secure.test` over a raw TLS connection. */
  const overHttps = async (port: number) => {
    const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
    const conn = RawConnection.wrap(
      await Deno.startTls(tcp, { hostname: "secure.test", caCerts: [tls.certPem] }),
    );
    try {
      await conn.send("GET /x HTTP/1.1\r\nHost: secure.test\r\n\r\n");
      return await conn.readResponse();
    } finally {
      conn.close();
    }
  };
  try {
    for (
      const [flags, hsts] of [
        [["--hsts-max-age=60"], ["max-age=60; includeSubDomains"]],
        [["--no-hsts"], []],
      ] as const
    ) {
      const sluice = await spawnSluice([
        `--manifests=${dir.path}`,
        "--workers=1",
        "--shutdown-delay=0s",
        ...flags,
      ]);
      try {
        await sluice.ready();
        const secure = await overHttps(sluice.httpsPort);
        assertEquals(secure.status, 200, flags.join(" "));
        assertEquals(
          headerValues(secure.headers, "strict-transport-security"),
          [...hsts],
          flags[0],
        );
        using conn = await RawConnection.open(sluice.httpPort);
        await conn.send("GET /a/b?c=d%20e&f HTTP/1.1\r\nHost: secure.test\r\n\r\n");
        const redirect = await conn.readResponse();
        assertEquals(redirect.status, 308, flags[0]);
        assertEquals(
          headerValue(redirect.headers, "location"),
          "https://secure.test/a/b?c=d%20e&f",
        );
        assertEquals(headerValues(redirect.headers, "strict-transport-security"), []);
      } finally {
        await sluice.stop("SIGKILL");
      }
    }
  } finally {
    await backend.close();
    await dir.remove();
  }
});

Deno.test("--max-body-size and --trusted-proxy-cidrs reach the data plane of a 2-worker Sluice", async () => {
  const site = await echoSite({ name: "shop/web" });
  const { backend, dir } = site;
  const sluice = await spawnSluice([
    `--manifests=${dir.path}`,
    "--workers=2",
    "--shutdown-delay=0s",
    "--max-body-size=1k",
    "--trusted-proxy-cidrs=127.0.0.0/8",
  ]);
  const ask = async (text: string) => {
    using conn = await RawConnection.open(sluice.httpPort);
    await conn.send(text);
    return await conn.readResponse();
  };
  try {
    await sluice.ready();
    // Several connections, so both workers (reusePort) are likely to answer some.
    for (let i = 0; i < 6; i++) {
      const big = await ask(
        `POST /u HTTP/1.1\r\nHost: shop.test\r\nContent-Length: 2000\r\n\r\n${"x".repeat(2000)}`,
      );
      assertEquals(big.status, 413);
      const fits = await ask(
        `POST /u HTTP/1.1\r\nHost: shop.test\r\nContent-Length: 1000\r\nX-Forwarded-For: 203.0.113.5\r\n` +
          `X-Request-ID: kept-${i}\r\n\r\n${"y".repeat(1000)}`,
      );
      assertEquals(fits.status, 200);
      const seen = JSON.parse(new TextDecoder().decode(fits.body)) as {
        headers: [string, string][];
      };
      assertEquals(headerValues(seen.headers, "x-forwarded-for"), ["203.0.113.5, 127.0.0.1"]);
      assertEquals(headerValues(seen.headers, "x-real-ip"), ["203.0.113.5"]);
      assertEquals(headerValues(seen.headers, "x-request-id"), [`kept-${i}`]);
    }
    assertEquals(backend.requests.filter((r) => r.bodyLength > 1024), []);
  } finally {
    await sluice.stop("SIGKILL");
    await site.close();
  }
});

/** `sluice_client_timeouts_total` from `/metrics`, by `listener/reason`. */
async function clientTimeouts(healthPort: number): Promise<Record<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${healthPort}/metrics`)).text();
  const counts: Record<string, number> = {};
  for (const match of text.matchAll(/^sluice_client_timeouts_total\{(.*)\} (\d+)$/gm)) {
    const labels = Object.fromEntries(
      [...match[1]!.matchAll(/(\w+)="([^"]*)"/g)].map(([, name, value]) => [name, value]),
    );
    counts[`${labels.listener}/${labels.reason}`] = Number(match[2]);
  }
  return counts;
}

/** How many descriptors `pid` holds. */
function descriptors(pid: number): number {
  return [...Deno.readDirSync(`/proc/${pid}/fd`)].length;
}

// Was a limitation: Deno 2.9.6 does not close a TLS connection whose handshake is pending, so a
// client could hold any number of Sluice's descriptors by connecting to the HTTPS port and sending
// nothing. Sluice now shuts such sockets down through FFI, which this checks with exactly the
// binary's permissions.
Deno.test("--client-first-bytes-timeout: clients stalled in their TLS handshake are disconnected and Sluice's descriptors go back", async () => {
  const dir = await writeManifestDir([]);
  const sluice = await spawnSluice([
    `--manifests=${dir.path}`,
    "--workers=2",
    "--shutdown-delay=0s",
    "--client-first-bytes-timeout=500ms",
  ]);
  const conns: Deno.Conn[] = [];
  try {
    await sluice.ready();
    const before = descriptors(sluice.pid);
    for (let i = 0; i < 100; i++) {
      conns.push(await Deno.connect({ hostname: "127.0.0.1", port: sluice.httpsPort }));
    }
    // One sends a whole ClientHello and then nothing: the server's flight comes, then the end.
    await conns[0]!.write(clientHello({ serverName: "stalled.test" }));
    await waitFor("Sluice to accept them", () => descriptors(sluice.pid) >= before + 100);
    const buffer = new Uint8Array(16 * 1024);
    const ends = await within(
      20_000,
      "every stalled client's end",
      Promise.all(conns.map(async (conn) => {
        try {
          while ((await conn.read(buffer)) !== null) { /* the server's flight, for the one */ }
        } catch {
          // A reset ends it too.
        }
        return true;
      })),
    );
    assertEquals(ends.length, 100);
    await waitFor("Sluice's descriptors to go back", () => descriptors(sluice.pid) <= before + 2);
    assertEquals(
      await clientTimeouts(sluice.healthPort),
      {
        "https/tls-handshake": 100,
        "http/first-bytes": 0,
        "http/idle": 0,
        "http/head": 0,
        "http/send": 0,
      },
      "counted in /metrics, both workers summed",
    );
    assertEquals(
      sluice.logs.filter((line) => line.includes("keep their socket")),
      [],
      "shutting the sockets down works with the binary's permissions",
    );
  } finally {
    for (const conn of conns) conn.close();
    await sluice.stop("SIGKILL");
    await dir.remove();
  }
});

// Was a limitation: Deno.serve closes no plain-HTTP connection on its own, so without
// --http-client-timeouts (a relay, slower) a client could hold any number of silent or idle
// connections. The main thread's connection reaper now closes them, through FFI, with the binary's
// permissions; what the workers report keeps busy connections open however quiet they are.
Deno.test("plain HTTP: silent and idle connections are closed at the client timeouts; a quiet stream and a quiet WebSocket are not", async () => {
  const backend = await startEchoBackend({ name: "shop/web" });
  const dir = await writeManifestDir([
    { namespace: "shop", name: "web", host: "localhost", port: backend.port },
  ]);
  const sluice = await spawnSluice([
    `--manifests=${dir.path}`,
    "--workers=2",
    "--shutdown-delay=0s",
    "--client-first-bytes-timeout=500ms",
    "--client-idle-timeout=1s",
  ]);
  let ws: WebSocket | undefined;
  try {
    await sluice.ready();
    ws = new WebSocket(`ws://localhost:${sluice.httpPort}/ws`);
    using stream = await RawConnection.open(sluice.httpPort);
    await within(5_000, "the WebSocket to open", new Promise((resolve) => ws!.onopen = resolve));
    // Two events 4 s apart: in between, a response in flight with no byte either way.
    await stream.send("GET /sse?n=2&interval=4000 HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assertEquals((await stream.readResponse({ head: true })).status, 200);
    using silent = await RawConnection.open(sluice.httpPort);
    assert(await silent.closedByPeer(10_000), "a connection that sent nothing was closed");
    using idle = await RawConnection.open(sluice.httpPort);
    await idle.send("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assertEquals((await idle.readResponse()).status, 200);
    assert(await idle.closedByPeer(10_000), "an idle keep-alive connection was closed");
    assertEquals(await clientTimeouts(sluice.healthPort), {
      "http/first-bytes": 1,
      "http/idle": 1,
      "http/head": 0,
      "http/send": 0,
    });
    // By now the WebSocket has been quiet for longer than both timeouts.
    const echoed = new Promise((resolve) => ws!.onmessage = (event) => resolve(event.data));
    ws.send("still here");
    assertEquals(await within(5_000, "the echo", echoed), "still here");
    const events = new TextDecoder().decode(await stream.readToEnd(10_000));
    assertEquals(events.match(/^data: /gm)?.length, 2, events);
    assertEquals(sluice.logs.filter((line) => line.includes("get no client timeouts")), []);
  } finally {
    ws?.close();
    await sluice.stop("SIGKILL");
    await backend.close();
    await dir.remove();
  }
});
