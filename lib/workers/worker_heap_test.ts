import { assert, assertEquals } from "../../tests/support/assert.ts";
import { generateSelfSignedCertificate } from "../tls/self_signed.ts";
import type { StubSnapshotData } from "../../tests/support/stub_snapshot.ts";
import { startWorkerPool } from "./worker_pool.ts";

const STUB_WORKER = new URL("../../tests/support/stub_worker.ts", import.meta.url);

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
