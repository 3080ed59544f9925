/**
 * `startWorkerPool()` and `WorkerPool`: snapshots served from every worker on
 * shared ports, refusals at start (a worker that cannot listen, a first snapshot
 * that cannot be compiled, a count that is not a whole number), a worker that
 * never applies a snapshot lost by the heartbeat, heap readings, and
 * `sluice_worker.ts` compiling a posted translation.
 *
 * @module
 */
import { assert, assertEquals, assertRejects } from "../../tests/support/assert.ts";
import { within } from "../../tests/support/wait.ts";
import type { ServingCertificate } from "../routing/snapshot.ts";
import { httpsGet, tlsHandshake } from "../../tests/support/tls_client.ts";
import { generateSelfSignedCertificate } from "../tls/self_signed.ts";
import type { SluiceSnapshotData } from "./sluice_worker.ts";
import type { StubSnapshotData } from "../../tests/support/stub_snapshot.ts";
import { startWorkerPool } from "./worker_pool.ts";
import type { ProbeSnapshotData } from "../../tests/support/snapshot_probe_worker.ts";
import { PROBE, probe } from "../../tests/support/probe_pool.ts";

const STUB_WORKER = new URL("../../tests/support/stub_worker.ts", import.meta.url);

const [certA1, certA2, certDefault] = await Promise.all([
  generateSelfSignedCertificate({ hostnames: ["a.test"], commonName: "a1" }),
  generateSelfSignedCertificate({ hostnames: ["a.test"], commonName: "a2" }),
  generateSelfSignedCertificate({ hostnames: ["default.test"], commonName: "d" }),
]);

function data(backend: string, cert: ServingCertificate): StubSnapshotData {
  return {
    version: 0,
    routes: [{
      host: "a.test",
      path: "/",
      backend: { key: backend, service: backend.split(":")[0]!, endpoints: [] },
    }],
    certificates: [{ hosts: ["a.test"], certificate: cert }],
    defaultCertificate: certDefault,
  };
}

/** One request over a fresh plain-HTTP connection, so the kernel picks a worker each time. */
async function httpGet(port: number, host: string): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  await conn.write(
    new TextEncoder().encode(`GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`),
  );
  const text = await new Response(conn.readable).text();
  return text.slice(text.indexOf("\r\n\r\n") + 4);
}

/** Bodies of `n` requests, each on a new connection. */
async function bodies(n: number, get: () => Promise<string>): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(await get());
  return out;
}

Deno.test("startWorkerPool() serves snapshots from every worker on shared ports", async () => {
  const pool = await startWorkerPool({
    count: 2,
    module: STUB_WORKER,
    config: { hostname: "127.0.0.1", httpPort: 0, httpsPort: 0 },
    snapshot: { version: 1, data: data("shop/a:80", certA1) },
  });
  try {
    const httpPort = pool.httpPort!;
    const httpsPort = pool.httpsPort!;
    assertEquals(pool.size, 2);

    // Both workers answer on the same port; the kernel spreads new connections between them.
    const first = await bodies(40, () => httpGet(httpPort, "a.test"));
    assertEquals(
      new Set(first),
      new Set([
        "v1 shop/a:80 secure=false sluice-worker-0",
        "v1 shop/a:80 secure=false sluice-worker-1",
      ]),
    );
    const secure = await httpsGet(httpsPort, "/", {
      serverName: "a.test",
      caCerts: [certA1.certPem],
    });
    assert(secure.body.startsWith("v1 shop/a:80 secure=true sluice-worker-"), secure.body);

    // A published snapshot is served by every worker once publish() resolves, certificates too.
    assertEquals(await pool.publish(2, data("shop/b:80", certA2)), { rejected: [] });
    const second = await bodies(40, () => httpGet(httpPort, "a.test"));
    assertEquals(second.filter((b) => !b.startsWith("v2 shop/b:80 secure=false")), []);
    assertEquals(new Set(second).size, 2, "both workers answered");
    for (let i = 0; i < 20; i++) {
      await tlsHandshake(httpsPort, { serverName: "a.test", caCerts: [certA2.certPem] });
    }

    // A snapshot a worker cannot compile is rejected; the last good one keeps serving.
    const bad = await pool.publish(3, null as unknown as StubSnapshotData);
    assertEquals(bad.rejected.map((r) => r.worker).sort(), [0, 1]);
    assert((await httpGet(httpPort, "a.test")).startsWith("v2 shop/b:80"));

    assertEquals(await pool.shutdown({ timeoutMs: 5_000 }), { graceful: true, openConnections: 0 });
    assertEquals(pool.size, 0);
    await assertRejects(() => Deno.connect({ hostname: "127.0.0.1", port: httpPort }));
    await assertRejects(() => Deno.connect({ hostname: "127.0.0.1", port: httpsPort }));
  } finally {
    await pool.shutdown({ timeoutMs: 5_000 });
  }
});

Deno.test("startWorkerPool() rejects when a worker cannot start listening", async () => {
  const taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  try {
    await assertRejects(
      () =>
        startWorkerPool({
          count: 1,
          module: STUB_WORKER,
          config: { hostname: "127.0.0.1", httpPort: taken.addr.port, httpsPort: null },
          snapshot: { version: 1, data: data("shop/a:80", certA1) },
        }),
      Error,
      "Cannot start worker 0",
    );
  } finally {
    taken.close();
  }
});

Deno.test("sluice_worker.ts compiles a posted translation and proxies with it", async () => {
  const backend = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    (req) => new Response(`backend saw ${new URL(req.url).pathname}`),
  );
  const translation = (port: number): SluiceSnapshotData["translation"] => ({
    routes: [{
      host: "a.test",
      path: "/",
      pathType: "Prefix",
      ingress: "shop/web",
      backend: "shop/web:80",
    }],
    backends: [{
      key: "shop/web:80",
      service: "shop/web",
      endpoints: [{ address: "127.0.0.1", port }],
    }],
    tlsHosts: [],
    certificates: [],
    issues: [],
  });
  const pool = await startWorkerPool<SluiceSnapshotData>({
    count: 1,
    module: new URL("./sluice_worker.ts", import.meta.url),
    config: { hostname: "127.0.0.1", httpPort: 0, httpsPort: 0 },
    snapshot: {
      version: 1,
      data: { translation: translation(backend.addr.port), defaultCertificate: certDefault },
    },
  });
  try {
    assertEquals(await httpGet(pool.httpPort!, "a.test"), "backend saw /");
    // No Ingress certificate: every server name gets the default one.
    await tlsHandshake(pool.httpsPort!, {
      serverName: "default.test",
      caCerts: [certDefault.certPem],
    });
  } finally {
    await pool.shutdown({ timeoutMs: 5_000 });
    await backend.shutdown();
  }
});

Deno.test("a worker that answers pings but never applies a snapshot is lost, and publish() resolves", async () => {
  // Was a bug: publish() waited for such a worker for good, so the rebuild scheduler (which
  // awaits each publication) stalled and no route change was ever served again.
  const pool = await startWorkerPool<StubSnapshotData>({
    count: 1,
    module: new URL("../../tests/support/deaf_snapshot_worker.ts", import.meta.url),
    config: { hostname: "127.0.0.1", httpPort: 0, httpsPort: null },
    snapshot: { version: 1, data: data("first:80", certA1) },
    heartbeatMs: 50,
    applyTimeoutMs: 200,
  });
  try {
    assertEquals(pool.size, 1);
    const result = await within(5_000, "publish()", pool.publish(2, data("second:80", certA1)));
    assertEquals(result.rejected, []);
    assertEquals(pool.size, 0, "the deaf worker is counted lost");
  } finally {
    await pool.shutdown({ timeoutMs: 1_000 });
  }
});

Deno.test("startWorkerPool() rejects, naming the cause, when the first snapshot cannot be compiled, and leaves nothing running", async () => {
  const error = await assertRejects(() =>
    startWorkerPool<ProbeSnapshotData>({
      count: 2,
      module: PROBE,
      config: { hostname: "127.0.0.1", httpPort: 0, httpsPort: null },
      snapshot: { version: 1, data: probe("start", { poison: "throw" }) },
      heartbeatMs: 0,
    })
  );
  assert(error.message.includes("Cannot start worker 0"), error.message);
  assert(error.message.includes("poisoned on purpose"), error.message);
});

// Was a bug: a count of 1.5 started 2 workers while `count` said 1.5, so `size === count`
// (liveness) could never hold.
Deno.test("startWorkerPool() refuses a count that is not a whole number of workers", async () => {
  for (const count of [0, 1.5, Number.NaN]) {
    await assertRejects(
      () =>
        startWorkerPool<ProbeSnapshotData>({
          count,
          module: PROBE,
          config: { hostname: "127.0.0.1", httpPort: 0, httpsPort: null },
          snapshot: { version: 1, data: probe("start") },
        }),
      RangeError,
    );
  }
});

Deno.test("WorkerPool.heap() answers one heap reading per live worker", async () => {
  const data: StubSnapshotData = {
    version: 0,
    routes: [],
    certificates: [],
    defaultCertificate: await generateSelfSignedCertificate({ hostnames: ["default.test"] }),
  };
  const pool = await startWorkerPool({
    count: 2,
    module: STUB_WORKER,
    config: { hostname: "127.0.0.1", httpPort: 0, httpsPort: null },
    snapshot: { version: 1, data },
  });
  try {
    const heaps = await pool.heap({ timeoutMs: 10_000 });
    assertEquals(heaps.length, 2);
    for (const heap of heaps) {
      assert(heap.heapUsed > 0 && heap.heapTotal >= heap.heapUsed, JSON.stringify(heap));
      // This test process does not expose gc: the reading says so.
      assertEquals(heap.collected, "gc" in globalThis);
    }
  } finally {
    await pool.shutdown({ timeoutMs: 2_000 });
  }
});
