/**
 * Worker resilience with the real pool: this file is also the worker entry
 * module (loaded by `startWorkerPool` inside each worker, where it runs
 * `runWorker` instead of registering tests). Its handler throws, rejects,
 * throws from a timer or closes its own worker on demand, so the tests can
 * see what the client gets, what happens to the port and to in-flight
 * requests, and whether the pool notices or restarts anything.
 *
 * @module
 */
import { assertEquals } from "../../tests/support/assert.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import { compileStubSnapshot, type StubSnapshotData } from "../../tests/support/stub_snapshot.ts";
import { generateSelfSignedCertificate } from "../tls/self_signed.ts";
import { startWorkerPool, type WorkerPool } from "./worker_pool.ts";
import { runWorker, type WorkerScope } from "./worker_runtime.ts";

const IN_WORKER = "WorkerGlobalScope" in globalThis;

if (IN_WORKER) {
  let hanging = 0;
  runWorker<StubSnapshotData>(self as unknown as WorkerScope, {
    compile: (data, version) => compileStubSnapshot({ ...data, version }),
    collect: () => hanging,
    createHandler: () => async (req) => {
      const path = new URL(req.url).pathname;
      switch (path) {
        case "/throw":
          throw new Error("Cannot serve: thrown on purpose");
        case "/reject":
          await Promise.resolve();
          throw new Error("Cannot serve: rejected on purpose");
        case "/timer-throw":
          setTimeout(() => {
            throw new Error("Cannot run timer: thrown on purpose");
          }, 0);
          return new Response("armed");
        case "/unhandled":
          Promise.reject(new Error("Cannot run: rejected and never handled"));
          return new Response("armed");
        case "/close":
          setTimeout(() => self.close(), 0);
          return new Response("closing");
        case "/upgrade-then-502":
          // Deno 2.9.6 closes the whole server when an upgraded handler answers this.
          Deno.upgradeWebSocket(req);
          return new Response("no", { status: 502 });
        case "/hang":
          // In flight until the worker goes away.
          hanging++;
          await new Promise(() => {});
          return new Response("never");
        default:
          return new Response("ok");
      }
    },
  });
}

const DATA: StubSnapshotData | undefined = IN_WORKER ? undefined : {
  version: 0,
  routes: [],
  certificates: [],
  defaultCertificate: await generateSelfSignedCertificate({ hostnames: ["a.test"] }),
};

/** One request on a fresh connection: the status (0 when the connection closed without one). */
async function get(port: number, path: string, timeoutMs = 10_000): Promise<number> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(
      new TextEncoder().encode(`GET ${path} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n`),
    );
    const text = await within(
      timeoutMs,
      `the answer to ${path}`,
      new Response(conn.readable).text(),
    )
      .catch((error) => {
        if (String(error).includes("Timed out")) throw error;
        return "";
      });
    return Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
  } finally {
    try {
      conn.close();
    } catch {
      // Closed by the readable.
    }
  }
}

/** True when nothing accepts a connection on `port` (any connection made is closed at once). */
function refuses(port: number): Promise<boolean> {
  return Deno.connect({ hostname: "127.0.0.1", port }).then((c) => {
    c.close();
    return false;
  }, () => true);
}

async function withPool(
  count: number,
  fn: (pool: WorkerPool<StubSnapshotData>, port: number) => Promise<void>,
) {
  const pool = await startWorkerPool<StubSnapshotData>({
    count,
    module: new URL(import.meta.url),
    config: { hostname: "127.0.0.1", httpPort: 0, httpsPort: null },
    snapshot: { version: 1, data: DATA! },
    heartbeatMs: 200,
  });
  try {
    await fn(pool, pool.httpPort!);
  } finally {
    pool.terminate();
  }
}

if (!IN_WORKER) {
  Deno.test("a handler that throws or rejects answers 500 and its worker keeps serving", async () => {
    await withPool(1, async (pool, port) => {
      assertEquals(await get(port, "/throw"), 500);
      assertEquals(await get(port, "/reject"), 500);
      assertEquals(await get(port, "/"), 200);
      assertEquals(pool.size, 1);
    });
  });

  Deno.test("an uncaught error in a worker's timer ends the worker: its in-flight requests get no answer, and nothing restarts it", async () => {
    // Deno also prints the uncaught error to stderr from the worker; that is expected here.
    await withPool(1, async (pool, port) => {
      const hung = get(port, "/hang");
      await waitFor("the hanging request to reach the handler", async () => {
        return (await pool.collect())[0] === 1;
      });
      assertEquals(await get(port, "/timer-throw"), 200);
      await waitFor("the pool to count the worker gone", () => pool.size === 0);
      assertEquals(await hung, 0, "the in-flight request's status");
      // The only worker held the only listener: the port is closed and stays closed.
      await waitFor("the port to refuse connections", () => refuses(port));
      assertEquals(pool.size, 0);
    });
  });

  Deno.test("an unhandled rejection in a worker also ends it and the pool counts it gone", async () => {
    await withPool(1, async (pool, port) => {
      assertEquals(await get(port, "/unhandled"), 200);
      await waitFor("the pool to count the worker gone", () => pool.size === 0);
    });
  });

  Deno.test("when one of two workers dies the other keeps serving the shared port", async () => {
    await withPool(2, async (pool, port) => {
      // The kernel spreads connections: retry until one lands on a worker that dies.
      await waitFor("a worker to die", async () => {
        if (pool.size === 2) await get(port, "/timer-throw");
        return pool.size === 1;
      });
      // Connections that were queued on the dead listener may be reset; new ones must not be.
      await waitFor("the port to be served", async () => await get(port, "/") === 200);
      for (let i = 0; i < 20; i++) assertEquals(await get(port, "/"), 200, `request ${i}`);
      assertEquals(pool.size, 1);
    });
  });

  // Was a bug: a listener whose server Deno closed on its own (here: an upgraded handler
  // answering 502) left its worker counted alive, so the pod stayed ready and live while its
  // port refused every connection.
  Deno.test("a worker whose listener's server Deno closed on its own is counted gone", async () => {
    await withPool(1, async (pool, port) => {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port });
      try {
        await conn.write(
          new TextEncoder().encode(
            "GET /upgrade-then-502 HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\n" +
              "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
              "Sec-WebSocket-Version: 13\r\n\r\n",
          ),
        );
        await waitFor("the pool to count the worker gone", () => pool.size === 0);
      } finally {
        conn.close();
      }
      await waitFor("the port to refuse connections", () => refuses(port));
    });
  });

  // Was a bug: a worker that exits without an error event (self.close()) stayed counted by
  // pool.size, so /healthz stayed up while nothing listened. The heartbeat now loses it.
  Deno.test({
    name: "a worker that closes itself is no longer counted as alive",
    fn: async () => {
      await withPool(1, async (pool, port) => {
        assertEquals(await get(port, "/close"), 200);
        await waitFor("the port to refuse connections", () => refuses(port));
        await waitFor("the pool to count the worker gone", () => pool.size === 0, {
          timeoutMs: 3_000,
        });
      });
    },
  });
}
