/**
 * Entry of the Web Worker that reads the kubeconfig (started by
 * `kube_access.ts`). It alone imports `@kubernetes/client-node`, whose
 * generated API costs the isolate that loads it much memory: the main isolate
 * receives plain data and terminates the worker, unless the user's
 * credentials come from a plugin (exec, oidc, …), in which case the worker
 * stays to answer `headers` requests.
 *
 * Protocol (`kube_config.ts`): one `load` → `loaded` | `loadFailed`; then
 * any number of `headers` (with an id) → `headers` | `headersFailed`.
 * Knows nothing of `fetch` or of what the main isolate does with the data.
 *
 * @module
 */
import { KubeConfig } from "@kubernetes/client-node";
import {
  currentHeaders,
  type FromConfigWorker,
  loadKubeConfig,
  resolveKubeConfig,
  type ToConfigWorker,
} from "./kube_config.ts";
import { errorText } from "../log/error_text.ts";

interface ConfigWorkerScope {
  onmessage: ((event: MessageEvent<ToConfigWorker>) => void) | null;
  postMessage(message: FromConfigWorker): void;
}

/** Answers the main isolate's messages on `scope`. */
function serve(scope: ConfigWorkerScope): void {
  let loaded: KubeConfig | undefined;
  const load = async (request: ToConfigWorker & { type: "load" }) => {
    try {
      const kc = new KubeConfig();
      const origin = loadKubeConfig(kc, request);
      const config = await resolveKubeConfig(kc, origin);
      loaded = kc;
      scope.postMessage({ type: "loaded", config });
    } catch (error) {
      scope.postMessage({ type: "loadFailed", message: errorText(error) });
    }
  };
  const headers = async (id: number) => {
    try {
      if (loaded === undefined) throw new Error("no kubeconfig is loaded");
      scope.postMessage({ type: "headers", id, headers: await currentHeaders(loaded) });
    } catch (error) {
      scope.postMessage({ type: "headersFailed", id, message: errorText(error) });
    }
  };
  scope.onmessage = (event) => {
    const request = event.data;
    if (request.type === "load") void load(request);
    else if (request.type === "headers") void headers(request.id);
  };
}

if ("WorkerGlobalScope" in globalThis) {
  serve(self as unknown as ConfigWorkerScope);
}
