/**
 * Access to one Kubernetes API server: where it is, how to trust it, and how
 * to authenticate to it. Turns a kubeconfig (a file, `$KUBECONFIG`,
 * `~/.kube/config`) or the in-cluster service account into what Deno's
 * `fetch` needs: a `Deno.HttpClient` carrying the CA and client certificate,
 * and request headers carrying the current credentials.
 *
 * `@kubernetes/client-node` parses the kubeconfig and runs credential
 * plugins, but in a short-lived Web Worker (`kube_config_worker.ts`): loaded
 * in the main isolate it would hold its memory for the life of the process
 * (docs/benchmarks.md, "Control plane memory").
 * The worker hands back plain data (`kube_config.ts`) and is terminated,
 * except for plugin credentials (exec, oidc, …), which it keeps answering.
 * A token file (the in-cluster service account) is re-read here every
 * 60 s, as client-go and client-node do. Knows nothing about resources or
 * watches.
 *
 * @module
 */
import type { KubeConfig } from "@kubernetes/client-node";
import {
  currentHeaders,
  type FromConfigWorker,
  type HeaderList,
  type ResolvedKubeConfig,
  resolveKubeConfig,
  type ToConfigWorker,
} from "./kube_config.ts";
import { errorText } from "../log/error_text.ts";

/** An authenticated, verified way to reach one API server. */
export interface KubeAccess {
  /** Base URL of the API server, without a trailing slash. */
  readonly server: string;
  /** Namespace of the current context (in-cluster: the pod's namespace), if any. */
  readonly namespace: string | undefined;
  /** Describes where the configuration came from (a file path or `in-cluster`), for logs. */
  readonly origin: string;
  /** Headers to send with each request: credentials as of now (tokens rotate). */
  headers(): Promise<Headers>;
  /** The HTTP client to pass as `fetch(url, { client })`. */
  readonly client: Deno.HttpClient;
  /** Closes the client and ends a plugin's worker. Idempotent. */
  close(): void;
}

/** How a token file is re-read; options of {@linkcode loadKubeAccess} and {@linkcode accessFromKubeConfig}. */
export interface TokenFileOptions {
  /** A token file is read again once its token is older than this. Default 60,000 ms (client-go's). */
  readonly tokenFileRefreshMs?: number;
  /** The clock, in milliseconds. Default `performance.now()`. */
  readonly now?: () => number;
}

/** Options of {@linkcode loadKubeAccess}. */
export interface LoadKubeAccessOptions extends TokenFileOptions {
  /** A kubeconfig file; else `$KUBECONFIG`, `~/.kube/config`, then the in-cluster service account. */
  readonly kubeconfig?: string | undefined;
  /** Use this context instead of the kubeconfig's current one. */
  readonly context?: string | undefined;
  /** The worker entry module. Default `kube_config_worker.ts`; tests hand in broken ones. */
  readonly workerModule?: URL;
  /**
   * How long each answer of a credential plugin (an exec command that waits
   * for a login prompt, a network call that hangs) may take before it fails
   * with an error naming the wait. Default 30,000 ms. Without it one hung
   * plugin froze every API call for good.
   */
  readonly pluginTimeoutMs?: number;
}

const PLUGIN_TIMEOUT_MS = 30_000;
/** Loading starts an isolate that imports client-node (seconds on a loaded machine), then reads. */
const LOAD_TIMEOUT_MS = 60_000;

/**
 * Loads credentials the way kubectl and client-go do, in the same order.
 * The kubeconfig is read in a Web Worker, which is gone when this resolves
 * unless the credentials come from a plugin ({@linkcode KubeAccess.close}
 * ends it then).
 */
export async function loadKubeAccess(options: LoadKubeAccessOptions = {}): Promise<KubeAccess> {
  const module = options.workerModule ?? new URL("./kube_config_worker.ts", import.meta.url);
  const { config, worker } = await loadInWorker(module, {
    type: "load",
    kubeconfig: options.kubeconfig,
    context: options.context,
  }, options.pluginTimeoutMs ?? PLUGIN_TIMEOUT_MS);
  if (config.credentials.kind !== "plugin") worker.terminate();
  try {
    return await accessFromResolved(config, { ...options, plugin: worker });
  } catch (error) {
    worker.terminate();
    throw error;
  }
}

/**
 * Builds a {@linkcode KubeAccess} from an already loaded `KubeConfig`, in
 * this isolate (whoever passes a `KubeConfig` has loaded client-node anyway).
 */
export async function accessFromKubeConfig(
  kc: KubeConfig,
  origin: string,
  options: TokenFileOptions = {},
): Promise<KubeAccess> {
  const config = await resolveKubeConfig(kc, origin);
  const plugin = {
    headers: async () => toHeaders(await currentHeaders(kc)),
    terminate: () => {},
  };
  return await accessFromResolved(config, { ...options, plugin });
}

interface Plugin {
  headers(): Promise<Headers>;
  terminate(): void;
}

async function accessFromResolved(
  config: ResolvedKubeConfig,
  options: TokenFileOptions & { readonly plugin: Plugin },
): Promise<KubeAccess> {
  const credentials = config.credentials;
  let headers: () => Promise<Headers>;
  switch (credentials.kind) {
    case "static":
      headers = () => Promise.resolve(toHeaders(credentials.headers));
      break;
    case "tokenFile": {
      const token = tokenFileReader(credentials.path, options);
      // Read now, so that a missing file fails the load, as it did in client-node.
      await token();
      headers = async () => {
        const result = toHeaders(credentials.headers);
        const current = await token();
        if (current !== "") result.set("authorization", `Bearer ${current}`);
        return result;
      };
      break;
    }
    case "plugin":
      headers = () => options.plugin.headers();
      break;
  }
  // HTTP/1.1 only: over HTTP/2 every request shares one connection, and Deno 2.9.6 neither pings
  // it (client-go does after 30 s) nor drops it when a request is aborted (only the stream is
  // reset), so one connection that died silently (a NAT or load balancer dropping the flow) hung
  // the elector, the LISTs and the status writes until the kernel gave up (about 15 minutes).
  // Each watch holds its own connection instead.
  const clientOptions: Deno.CreateHttpClientOptions = { http1: true, http2: false };
  if (config.ca !== undefined) clientOptions.caCerts = [config.ca];
  if (config.proxyUrl !== undefined) clientOptions.proxy = { url: config.proxyUrl };
  const client = config.cert !== undefined && config.key !== undefined
    ? Deno.createHttpClient({ ...clientOptions, cert: config.cert, key: config.key })
    : Deno.createHttpClient(clientOptions);
  let closed = false;
  return {
    server: config.server,
    namespace: config.namespace,
    origin: config.origin,
    client,
    headers,
    close() {
      if (closed) return;
      closed = true;
      options.plugin.terminate();
      client.close();
    },
  };
}

function toHeaders(list: HeaderList): Headers {
  return new Headers(list as [string, string][]);
}

/**
 * Returns the token in `path`, read again once it is older than
 * `tokenFileRefreshMs` (concurrent callers share one read). Like client-go,
 * a failed re-read keeps the last token (and is tried again next call); only
 * a failed first read fails.
 */
function tokenFileReader(path: string, options: TokenFileOptions): () => Promise<string> {
  const refreshMs = options.tokenFileRefreshMs ?? 60_000;
  const now = options.now ?? (() => performance.now());
  let last: { token: string; at: number } | undefined;
  let reading: Promise<string> | undefined;
  const read = async (): Promise<string> => {
    try {
      const token = (await Deno.readTextFile(path)).trim();
      last = { token, at: now() };
      return token;
    } catch (error) {
      if (last !== undefined) return last.token;
      const detail = errorText(error);
      throw new Error(`Cannot read token file "${path}": ${detail}`, { cause: error });
    }
  };
  return () => {
    if (last !== undefined && now() - last.at <= refreshMs) return Promise.resolve(last.token);
    reading ??= read().finally(() => reading = undefined);
    return reading;
  };
}

/**
 * Starts the kubeconfig worker and waits for its answer to `request`. On any
 * failure (its answer, an uncaught error in it, a message it cannot send)
 * the worker is terminated and the promise rejects; so do pending and later
 * `headers()` calls. Loading fails after a minute, each `headers()` answer
 * after `timeoutMs` (that call alone: the next one asks again).
 */
async function loadInWorker(
  module: URL,
  request: ToConfigWorker & { type: "load" },
  timeoutMs: number,
): Promise<{ config: ResolvedKubeConfig; worker: Plugin }> {
  const worker = new Worker(module, { type: "module", name: "kube-config" });
  const loaded = Promise.withResolvers<ResolvedKubeConfig>();
  const pending = new Map<number, PromiseWithResolvers<Headers>>();
  let nextId = 1;
  let ended: Error | undefined;
  const end = (error: Error) => {
    if (ended !== undefined) return;
    ended = error;
    worker.terminate();
    loaded.reject(error);
    for (const waiting of pending.values()) waiting.reject(error);
    pending.clear();
  };
  const settle = (id: number, how: (waiting: PromiseWithResolvers<Headers>) => void) => {
    const waiting = pending.get(id);
    if (waiting === undefined) return;
    pending.delete(id);
    how(waiting);
  };
  const seconds = `${timeoutMs / 1000} s`;
  worker.onmessage = (event: MessageEvent<FromConfigWorker>) => {
    const message = event.data;
    switch (message.type) {
      case "loaded":
        loaded.resolve(message.config);
        break;
      case "loadFailed":
        end(new Error(message.message));
        break;
      case "headers":
        settle(message.id, (waiting) => waiting.resolve(toHeaders(message.headers)));
        break;
      case "headersFailed":
        settle(
          message.id,
          (waiting) => waiting.reject(new Error(`Cannot get credentials: ${message.message}`)),
        );
        break;
    }
  };
  worker.onerror = (event) => {
    // Without preventDefault an error in a worker also terminates the main thread.
    event.preventDefault();
    end(new Error(`Cannot load the kubeconfig: its worker failed: ${event.message}`));
  };
  worker.onmessageerror = () => {
    end(new Error("Cannot load the kubeconfig: a message from its worker could not be read"));
  };
  worker.postMessage(request);
  const loadTimer = setTimeout(() => {
    end(new Error(`Cannot load the kubeconfig: no answer within ${LOAD_TIMEOUT_MS / 1000} s`));
  }, LOAD_TIMEOUT_MS);
  let config: ResolvedKubeConfig;
  try {
    config = await loaded.promise;
  } finally {
    clearTimeout(loadTimer);
  }
  return {
    config,
    worker: {
      headers() {
        if (ended !== undefined) return Promise.reject(ended);
        const id = nextId++;
        const waiting = Promise.withResolvers<Headers>();
        pending.set(id, waiting);
        worker.postMessage({ type: "headers", id } satisfies ToConfigWorker);
        // A hung plugin fails this call, named, and leaves the next one free to ask again
        // (a plugin that waits on the network may answer later).
        const timer = setTimeout(() => {
          settle(id, (late) =>
            late.reject(
              new Error(
                `Cannot get credentials: the credential plugin did not answer within ${seconds}`,
              ),
            ));
        }, timeoutMs);
        return waiting.promise.finally(() => clearTimeout(timer));
      },
      terminate() {
        end(new Error("Cannot get credentials: the Kubernetes access is closed"));
      },
    },
  };
}
