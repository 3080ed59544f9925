/**
 * Test support: a worker entry serving {@linkcode StubSnapshotData} with a
 * handler that says which snapshot version and route answered, whether the
 * request was secure, and which worker served it.
 *
 * @module
 */
import { compileStubSnapshot, type StubSnapshotData } from "./stub_snapshot.ts";
import { runWorker, type WorkerScope } from "../../lib/workers/worker_runtime.ts";

const name = (self as unknown as { name: string }).name;

runWorker<StubSnapshotData>(self as unknown as WorkerScope, {
  compile: (data, version) => compileStubSnapshot({ ...data, version }),
  createHandler: ({ snapshot }) => (req, info) => {
    const url = new URL(req.url);
    const current = snapshot();
    const match = current.routes.lookup(url.host, url.pathname);
    return new Response(
      `v${current.version} ${match?.backend.key ?? "none"} secure=${info.secure} ${name}`,
    );
  },
});
