/**
 * How routing snapshots reach the serving workers: bursts of publications
 * coalesced, poisoned snapshots, workers lost mid-publish, data that cannot be
 * posted, versions that are not newer, swaps under traffic, a 10,000-Ingress
 * snapshot, and a publish in flight at shutdown. Real workers, real sockets; the probe worker
 * (`tests/support/snapshot_probe_worker.ts`) for the protocol, `sluice_worker.ts` with
 * echo backends for the data plane.
 *
 * @module
 */
import { assert, assertBetween, assertEquals, assertRejects } from "../../tests/support/assert.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import { startEchoBackend } from "../../tests/support/echo_backend.ts";
import { BENCH_OPTIONS, benchCluster } from "../../tests/support/bench_cluster.ts";
import { translate } from "../translate/translate.ts";
import type { ProbeSnapshotData } from "../../tests/support/snapshot_probe_worker.ts";
import type { TrafficAnswer, TrafficOrder } from "../../tests/support/traffic_worker.ts";
import { compileSluiceSnapshot, type SluiceSnapshotData } from "./sluice_worker.ts";
import { httpsGet, tlsHandshake } from "../../tests/support/tls_client.ts";
import { type PublishResult, startWorkerPool, type WorkerPool } from "./worker_pool.ts";
import {
  certNew,
  certOld,
  probe,
  probeBodies,
  probeGet,
  probeStats,
  withProbePool,
} from "../../tests/support/probe_pool.ts";

// Was a bug: every publication of a burst was cloned into every worker and compiled there in
// turn (1,001 compiles per worker for 1,000 publications): the last one waited for all of them.
Deno.test("a burst of 1,000 publications is coalesced: every worker ends on the last one, compiled once, and every publish() resolves", async () => {
  await withProbePool(2, async (pool, port) => {
    const results: Promise<PublishResult>[] = [];
    for (let v = 2; v <= 1_001; v++) results.push(pool.publish(v, probe(`b${v}`)));
    const settled = await within(15_000, "every publish() to resolve", Promise.all(results));
    assertEquals(settled.filter((r) => r.rejected.length > 0), []);
    assertEquals((await probeStats(pool)).map((s) => s.version), [1_001, 1_001]);
    const served = await probeBodies(port, 20);
    assertEquals(served.filter((b) => !b.startsWith("v1001 b1001 ")), []);
    // Coalesced: the start snapshot, the first of the burst (if the worker was idle), the last.
    for (const { compiles } of await probeStats(pool)) assertBetween(compiles, 2, 3, "compiles");
  });
});

Deno.test("a burst of 200 certificate changes over HTTPS ends with every worker's handshakes on the last certificate", async () => {
  await withProbePool(2, async (pool) => {
    const httpsPort = pool.httpsPort!;
    const results: Promise<PublishResult>[] = [];
    for (let v = 2; v <= 201; v++) {
      const cert = v % 2 === 0 ? certNew : certOld;
      results.push(
        pool.publish(
          v,
          probe(`b${v}`, { certificates: [{ hosts: ["a.test"], certificate: cert }] }),
        ),
      );
    }
    await within(15_000, "every publish() to resolve", Promise.all(results));
    assertEquals((await probeStats(pool)).map((s) => s.version), [201, 201]);
    // v201 is odd: the old certificate again. Only it verifies; 20 fresh handshakes reach both workers.
    const workers = new Set<string>();
    for (let i = 0; i < 20; i++) {
      const answer = await httpsGet(httpsPort, "/", {
        serverName: "a.test",
        caCerts: [certOld.certPem],
      });
      assert(answer.body.startsWith("v201 b201 "), answer.body);
      workers.add(answer.body.split(" ").at(-1)!);
    }
    assertEquals(workers, new Set(["worker=0", "worker=1"]));
    for (let i = 0; i < 10; i++) {
      await assertRejects(() =>
        tlsHandshake(httpsPort, { serverName: "a.test", caCerts: [certNew.certPem] })
      );
    }
  }, { config: { httpsPort: 0 } });
});

Deno.test("a poisoned snapshot superseded inside a burst is never compiled, and one that ends a burst is rejected by every worker", async () => {
  await withProbePool(2, async (pool, port) => {
    const bodiesNow = async () =>
      new Set((await probeBodies(port, 10)).map((b) => b.split(" ")[0]));
    // Posted at once to idle workers: v2. Then only the newest is posted: v4; v3 is superseded.
    const first = await within(
      10_000,
      "the first burst",
      Promise.all([
        pool.publish(2, probe("two")),
        pool.publish(3, probe("three", { poison: "throw" })),
        pool.publish(4, probe("four")),
      ]),
    );
    assertEquals(first, [{ rejected: [] }, { rejected: [] }, { rejected: [] }]);
    // At most the start snapshot, v2 (if the worker was idle) and v4.
    for (const { compiles } of await probeStats(pool)) assertBetween(compiles, 2, 3, "compiles");
    assertEquals(await bodiesNow(), new Set(["v4"]));

    // A burst that ends with a bad one: v5 is posted, v6 superseded by v7, which every worker
    // rejects. v6 never reached them, so it is reported rejected too, and v5 keeps serving.
    const [five, six, seven] = await within(
      10_000,
      "the second burst",
      Promise.all([
        pool.publish(5, probe("five")),
        pool.publish(6, probe("six")),
        pool.publish(7, probe("seven", { poison: "throw" })),
      ]),
    );
    assertEquals(five, { rejected: [] });
    assertEquals(six.rejected.map((r) => r.worker).sort(), [0, 1]);
    assertEquals(seven.rejected.map((r) => r.worker).sort(), [0, 1]);
    assert(seven.rejected[0]!.message.includes("poisoned on purpose"), seven.rejected[0]!.message);
    assertEquals(pool.size, 2);
    assertEquals(await bodiesNow(), new Set(["v5"]));
    assertEquals((await probeStats(pool)).map((s) => s.version), [5, 5]);

    // The next good one is served.
    assertEquals(await pool.publish(8, probe("eight")), { rejected: [] });
    assertEquals(await bodiesNow(), new Set(["v8"]));
  });
});

Deno.test("a snapshot poisoned in one worker only is reported for that worker; the other serves it", async () => {
  await withProbePool(2, async (pool, port) => {
    const result = await pool.publish(2, probe("two", { poison: "throw", poisonWorkers: [1] }));
    assertEquals(result.rejected.map((r) => r.worker), [1]);
    const served = new Set(
      (await probeBodies(port, 30)).map((b) =>
        b.split(" ").slice(0, 2).join(" ") + " " + b.split(" ").at(-1)
      ),
    );
    assertEquals(served, new Set(["v2 two worker=0", "v1 start worker=1"]));
  });
});

Deno.test("a worker whose compile hangs is lost by the heartbeat, publish() still resolves, and the other worker serves the new snapshot", async () => {
  await withProbePool(2, async (pool, port) => {
    const result = await within(
      10_000,
      "publish() to resolve although worker 1 hangs",
      pool.publish(2, probe("two", { poison: "spin", poisonWorkers: [1], spinMs: 4_000 })),
    );
    assertEquals(result, { rejected: [] });
    assertEquals(pool.size, 1);
    assertEquals((await probeStats(pool)).map((s) => [s.worker, s.version]), [[0, 2]]);
    // Deno 2.9.6 cannot terminate a worker inside a busy loop: the lost worker keeps its
    // listening socket until its loop ends, and the kernel still hands it new connections,
    // which get no answer. (See the report: readiness should go false when a worker is lost.)
    let unanswered = 0;
    for (let i = 0; i < 20 && unanswered === 0; i++) {
      if (await probeGet(port, "/", 300).then(() => false, () => true)) unanswered++;
    }
    assert(unanswered > 0, "a connection reached the hung worker");
    // Once its loop ends, the terminated worker exits and only worker 0 is left on the port.
    await waitFor("the hung worker's socket to close", async () => {
      const all = await Promise.all(
        Array.from({ length: 10 }, () => probeGet(port, "/", 1_000).catch(() => "")),
      );
      return all.every((b) => b.startsWith("v2 two ") && b.endsWith("worker=0"));
    }, { timeoutMs: 10_000 });
  }, { heartbeatMs: 200 });
});

// Was a bug: publish() threw DataCloneError synchronously (a caller's .catch never ran) after
// recording the data as the latest and leaving a pending publication behind.
Deno.test("publish() reports data that cannot be posted as rejected by every worker, and the pool keeps publishing and serving", async () => {
  await withProbePool(2, async (pool, port) => {
    const unclonable = { ...probe("bad"), hook: () => {} } as unknown as ProbeSnapshotData;
    let failed: Promise<PublishResult> | undefined;
    try {
      failed = pool.publish(2, unclonable);
    } catch (error) {
      throw new Error(`publish() threw instead of resolving: ${error}`);
    }
    const result = await within(5_000, "the failed publish()", failed);
    assertEquals(result.rejected.map((r) => r.worker).sort(), [0, 1]);
    assert(
      result.rejected[0]!.message.includes("could not be cloned"),
      result.rejected[0]!.message,
    );
    assertEquals((await probeBodies(port, 10)).filter((b) => !b.startsWith("v1 start ")), []);
    assertEquals(await within(5_000, "the next publish()", pool.publish(3, probe("three"))), {
      rejected: [],
    });
    assertEquals((await probeBodies(port, 10)).filter((b) => !b.startsWith("v3 three ")), []);
  });
});

// Was a bug: a worker ignores a version it already has, yet answers `applied`: publishing
// version 5 twice with different data resolved the second as served while it never was.
Deno.test("publish() refuses a version that is not newer than the last one published", async () => {
  await withProbePool(1, async (pool, port) => {
    assertEquals(await pool.publish(5, probe("five")), { rejected: [] });
    // The worker would ignore it and still answer `applied`: the caller would believe it served.
    await assertRejects(() => pool.publish(5, probe("other five")), RangeError);
    await assertRejects(() => pool.publish(4, probe("four")), RangeError);
    assert((await probeGet(port)).startsWith("v5 five "));
  });
});

Deno.test("shutdown() with a publish() in flight settles both, and publish() after shutdown resolves at once", async () => {
  await withProbePool(2, async (pool) => {
    const publishing = pool.publish(2, probe("two"));
    const stopped = pool.shutdown({ timeoutMs: 2_000 });
    assertEquals(await within(10_000, "the publish()", publishing), { rejected: [] });
    assertEquals(await within(10_000, "the shutdown", stopped), {
      graceful: true,
      openConnections: 0,
    });
    assertEquals(
      await within(1_000, "a publish() after shutdown", pool.publish(3, probe("three"))),
      {
        rejected: [],
      },
    );
    assertEquals(pool.size, 0);
  });
});

Deno.test("a request in flight while snapshots swap finishes on the snapshot it started with", async () => {
  await withProbePool(1, async (pool, port) => {
    const slow = probeGet(port, "/?ms=1500");
    await waitFor("the slow request to be in flight", async () => {
      return (await probeStats(pool))[0]?.inFlight === 1;
    });
    for (let v = 2; v <= 20; v++) await pool.publish(v, probe(`b${v}`));
    const body = await slow;
    assertEquals(body.split(" ").slice(0, 3), ["v1", "start", "ended-v20"]);
  });
});

// --- The real worker entry (sluice_worker.ts), real backends ---------------------------------

const SLUICE_WORKER = new URL("./sluice_worker.ts", import.meta.url);

type SluiceTranslation = SluiceSnapshotData["translation"];

/** Host `host` → one Service with one endpoint at `port` on loopback. */
function site(
  host: string,
  service: string,
  port: number,
): Pick<SluiceTranslation, "routes" | "backends"> {
  return {
    routes: [{ host, path: "/", pathType: "Prefix", ingress: service, backend: `${service}:80` }],
    backends: [{ key: `${service}:80`, service, endpoints: [{ address: "127.0.0.1", port }] }],
  };
}

function translationOf(
  ...sites: Pick<SluiceTranslation, "routes" | "backends">[]
): SluiceTranslation {
  return {
    routes: sites.flatMap((s) => s.routes),
    backends: sites.flatMap((s) => s.backends),
    tlsHosts: [],
    certificates: [],
    issues: [],
  };
}

/** Status and body of `GET path` with `Host: host` on a fresh connection (status 0: no answer). */
async function request(
  port: number,
  host: string,
  path = "/",
): Promise<{ status: number; body: string; ms: number }> {
  const started = performance.now();
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(
      new TextEncoder().encode(
        `GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`,
      ),
    );
    const text = await within(
      10_000,
      `the answer to ${host}${path}`,
      new Response(conn.readable).text(),
    );
    const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
    return {
      status,
      body: text.slice(text.indexOf("\r\n\r\n") + 4),
      ms: performance.now() - started,
    };
  } finally {
    try {
      conn.close();
    } catch {
      // Closed with its readable.
    }
  }
}

/** Runs `lanes` request loops until `stop` resolves; returns every answer. */
async function traffic(
  lanes: number,
  stop: Promise<unknown>,
  send: () => Promise<{ status: number; body: string; ms: number }>,
): Promise<{ status: number; body: string; ms: number }[]> {
  let done = false;
  const answers: { status: number; body: string; ms: number }[] = [];
  const ended = stop.finally(() => done = true);
  await Promise.all(Array.from({ length: lanes }, async () => {
    while (!done) answers.push(await send());
  }));
  await ended;
  return answers;
}

function serviceOf(body: string): string {
  try {
    return (JSON.parse(body) as { service?: string }).service ?? body;
  } catch {
    return body.slice(0, 80);
  }
}

/** Two Sluice workers on a free HTTP port, serving `translation` (and `certOld`) as version 1. */
function sluicePool(translation: SluiceTranslation): Promise<WorkerPool<SluiceSnapshotData>> {
  return startWorkerPool<SluiceSnapshotData>({
    count: 2,
    module: SLUICE_WORKER,
    config: {
      hostname: "127.0.0.1",
      httpPort: 0,
      httpsPort: null,
      handlerOptions: { accessLog: false },
    },
    snapshot: { version: 1, data: { translation, defaultCertificate: certOld } },
    heartbeatMs: 0,
  });
}

Deno.test("requests keep succeeding while 40 snapshots swap their backend, and a slow request in flight finishes on its backend", async () => {
  const [blue, green] = await Promise.all([
    startEchoBackend({ name: "shop/blue" }),
    startEchoBackend({ name: "shop/green" }),
  ]);
  const blueOnly = translationOf(site("a.test", "shop/web", blue.port));
  const greenOnly = translationOf(site("a.test", "shop/web", green.port));
  const pool = await sluicePool(blueOnly);
  try {
    const port = pool.httpPort!;
    const slow = request(port, "a.test", "/slow?delay=1500");
    await blue.waitFor(() => blue.requests.some((r) => r.target.startsWith("/slow")), 5_000);
    const swaps = (async () => {
      for (let v = 2; v <= 41; v++) {
        const translation = v % 2 === 0 ? greenOnly : blueOnly;
        assertEquals(await pool.publish(v, { translation, defaultCertificate: certOld }), {
          rejected: [],
        });
      }
    })();
    const answers = await traffic(4, swaps, () => request(port, "a.test"));
    await swaps;
    assertEquals(answers.filter((a) => a.status !== 200), [], "every request during the swaps");
    const services = new Set(answers.map((a) => serviceOf(a.body)));
    assert(
      [...services].every((s) => s === "shop/blue" || s === "shop/green"),
      [...services].join(),
    );
    // The slow request was routed to blue and finishes there, although blue left the table 39 times.
    const answer = await slow;
    assertEquals([answer.status, serviceOf(answer.body)], [200, "shop/blue"]);
    // v41 is blue: every new request goes there.
    for (let i = 0; i < 10; i++) {
      assertEquals(serviceOf((await request(port, "a.test")).body), "shop/blue");
    }
  } finally {
    await pool.shutdown({ timeoutMs: 2_000 });
    await Promise.all([blue.close(), green.close()]);
  }
});

/** Runs the traffic worker against `host` while `during()` runs; the answers before and during it. */
async function measured<T>(
  port: number,
  host: string,
  during: () => Promise<T>,
): Promise<{ value: T; before: TrafficAnswer[]; while: TrafficAnswer[] }> {
  const client = new Worker(new URL("../../tests/support/traffic_worker.ts", import.meta.url), {
    type: "module",
  });
  const messages: unknown[] = [];
  const received = () => messages.length;
  client.onmessage = (event) => messages.push(event.data);
  try {
    client.postMessage({ port, host, lanes: 2 } satisfies TrafficOrder);
    await waitFor("the traffic to run", () => received() >= 1);
    const start = performance.timeOrigin + performance.now();
    const value = await during();
    const end = performance.timeOrigin + performance.now();
    client.postMessage("stop");
    await waitFor("the traffic's answers", () => received() >= 2);
    const answers = messages[1] as TrafficAnswer[];
    return {
      value,
      before: answers.filter((a) => a.at < start),
      while: answers.filter((a) => a.at >= start && a.at - a.ms <= end),
    };
  } finally {
    client.terminate();
  }
}

function slowest(answers: readonly TrafficAnswer[]): string {
  return Math.max(...answers.map((a) => a.ms)).toFixed(1);
}

Deno.test("a 10,000-Ingress snapshot reaches 2 workers while requests keep being served", async () => {
  const echo = await startEchoBackend({ name: "probe/echo" });
  const big = translate(benchCluster(10_000), BENCH_OPTIONS);
  const probeSite = site("probe.test", "probe/echo", echo.port);
  const small = translationOf(probeSite);
  const large: SluiceTranslation = {
    ...big,
    routes: [
      ...big.routes,
      ...probeSite.routes,
      ...site("big.test", "probe/big", echo.port).routes,
    ],
    backends: [
      ...big.backends,
      ...probeSite.backends,
      ...site("big.test", "probe/big", echo.port).backends,
    ],
  };
  const pool = await sluicePool(small);
  try {
    const port = pool.httpPort!;
    assertEquals((await request(port, "big.test")).status, 404);
    const { value: { result, ms }, before, while: meanwhile } = await measured(
      port,
      "probe.test",
      async () => {
        const started = performance.now();
        const result = await pool.publish(2, { translation: large, defaultCertificate: certOld });
        return { result, ms: performance.now() - started };
      },
    );
    assertEquals(result, { rejected: [] });
    assertEquals(meanwhile.filter((a) => a.status !== 200), [], "every request during the publish");
    assert(meanwhile.length > 0, "requests ran during the publish");
    for (let i = 0; i < 10; i++) assertEquals((await request(port, "big.test")).status, 200);
    // Reported, not asserted: the stall a large snapshot causes in the serving workers, and
    // its parts as measured on this thread (a structured clone, a compile).
    const cloneStarted = performance.now();
    structuredClone(large);
    const cloneMs = performance.now() - cloneStarted;
    const compileStarted = performance.now();
    compileSluiceSnapshot({ translation: large, defaultCertificate: certOld }, 3);
    const compileMs = performance.now() - compileStarted;
    // deno-lint-ignore no-console -- the measurement the brief asks for; nothing else prints.
    console.log(
      `clone ${cloneMs.toFixed(0)} ms, compile ${compileMs.toFixed(0)} ms; ` +
        `10,000 Ingresses (${large.routes.length} routes): applied by 2 workers in ${
          ms.toFixed(0)
        } ms; ` +
        `${meanwhile.length} requests meanwhile, slowest ${slowest(meanwhile)} ms ` +
        `(before: ${before.length}, slowest ${slowest(before)} ms)`,
    );
  } finally {
    await pool.shutdown({ timeoutMs: 2_000 });
    await echo.close();
  }
});
