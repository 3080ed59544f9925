/**
 * Test support: the stub worker, except that it never sees a snapshot posted
 * after its start (it still answers pings): a worker stuck waiting on
 * something, which only the pool's apply timeout can notice.
 *
 * @module
 */
import { compileStubSnapshot, type StubSnapshotData } from "./stub_snapshot.ts";
import { runWorker, type WorkerScope } from "../../lib/workers/worker_runtime.ts";

const scope = self as unknown as WorkerScope;
const deaf: WorkerScope = {
  get onmessage() {
    return scope.onmessage;
  },
  set onmessage(handler) {
    scope.onmessage = handler === null ? null : (event) => {
      if ((event.data as { type?: unknown } | null)?.type === "snapshot") return;
      handler(event);
    };
  },
  postMessage: (message) => scope.postMessage(message),
  close: () => scope.close(),
};

runWorker<StubSnapshotData>(deaf, {
  compile: (data, version) => compileStubSnapshot({ ...data, version }),
  createHandler: ({ snapshot }) => () => new Response(`v${snapshot().version}`),
});
