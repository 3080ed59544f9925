// A benchmark script: printing its report is its job.
// deno-lint-ignore-file no-console
/**
 * Sluice as the benchmark runs it: one route (any host, `/`) to one backend,
 * served on `--port` by `--workers` serving workers (the real
 * `lib/workers/` pool and `lib/server/` listeners) with the real proxy
 * handler (`createProxyHandler` from `lib/proxy/`).
 *
 * Usage: `deno run -A --unstable-net tests/bench/sluice_bench_server.ts --port 18080 --workers 2 --backend 127.0.0.1:18081 [--https-port 18443]`
 * (HTTPS with a generated self-signed default certificate).
 * (`--hello` answers a static 1 KiB body instead of proxying: the listeners and workers alone).
 * (`--annotations cors|allowlist|basic-auth` gives the route that ingress-nginx annotation's
 * behaviour: CORS for any origin, an allowlist holding 127.0.0.0/8, or basic auth of user `bench`
 * with password `bench` ({SHA}), whose verification is cached after the first request.)
 * Prints one JSON line `{ "ready": true, "handler": "...", "port": n }` when serving; stops on SIGTERM or SIGINT.
 *
 * The same file is the workers' entry module (it serves when loaded in a worker).
 *
 * @module
 */
import {
  CORS_DEFAULTS,
  type IngressBehaviour,
} from "../../lib/translate/nginx/ingress_behaviour.ts";
import { ConnectionActivity } from "../../lib/server/connection_activity.ts";
import { HttpConnectionReaper } from "../../lib/server/http_connection_reaper.ts";
import {
  DEFAULT_FIRST_BYTES_TIMEOUT_MS,
  DEFAULT_IDLE_TIMEOUT_MS,
} from "../../lib/server/https_listener.ts";
import type { Snapshot } from "../../lib/routing/snapshot.ts";
import { createProxyHandler } from "../../lib/proxy/proxy_handler.ts";
import type { RequestHandler } from "../../lib/server/listener.ts";
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";
import { compileStubSnapshot, type StubSnapshotData } from "../support/stub_snapshot.ts";
import { startWorkerPool } from "../../lib/workers/worker_pool.ts";
import { runWorker, type WorkerScope } from "../../lib/workers/worker_runtime.ts";

type HandlerFactory = (
  options: { snapshot: () => Snapshot; handlerOptions: unknown },
) => RequestHandler;

/**
 * The handler the workers serve with. Imported statically: on Deno 2.9.6 a
 * worker whose top-level code awaited a dynamic `import()` of a module
 * changed since the last run never finished loading (the bench hung right
 * after a source edit).
 */
function handlerFactory(hello: boolean): { name: string; create: HandlerFactory } {
  if (hello) {
    const body = new Uint8Array(1024).fill(97);
    return { name: "static 1 KiB (no upstream)", create: () => () => new Response(body) };
  }
  return {
    name: "lib/proxy proxy_handler.ts",
    create: (options) => createProxyHandler({ snapshot: options.snapshot }),
  };
}

/** The route behaviour of `--annotations`. */
function annotated(name: string | undefined): { behaviour?: IngressBehaviour } {
  switch (name) {
    case undefined:
      return {};
    case "cors":
      return { behaviour: { cors: CORS_DEFAULTS } };
    case "allowlist":
      return { behaviour: { allow: ["127.0.0.0/8"] } };
    case "basic-auth":
      // bench:bench, as `htpasswd -s` writes it.
      return {
        behaviour: {
          basicAuth: { realm: "bench", users: { bench: "{SHA}5cicUp3MubQnFvTZEY1hB5yIPZ4=" } },
        },
      };
    default:
      throw new Error(`Cannot start the bench server: unknown --annotations ${name}`);
  }
}

function flag(name: string, fallback?: string): string {
  const index = Deno.args.indexOf(`--${name}`);
  const value = index >= 0 ? Deno.args[index + 1] : fallback;
  if (value === undefined) throw new Error(`Cannot start the bench server: --${name} is required`);
  return value;
}

if ("WorkerGlobalScope" in globalThis) {
  const factories = { proxy: handlerFactory(false), hello: handlerFactory(true) };
  runWorker<StubSnapshotData>(self as unknown as WorkerScope, {
    compile: (data, version) => compileStubSnapshot({ ...data, version }),
    createHandler: (options) =>
      (options.handlerOptions === "hello" ? factories.hello : factories.proxy).create(options),
  });
} else if (import.meta.main) {
  const [address, port] = flag("backend").split(":");
  const defaultCertificate = await generateSelfSignedCertificate();
  const data: StubSnapshotData = {
    version: 1,
    routes: [{
      ...annotated(Deno.args.includes("--annotations") ? flag("annotations") : undefined),
      host: "",
      path: "/",
      backend: {
        key: "bench/backend:80",
        service: "bench/backend",
        endpoints: [{ address: address!, port: Number(port) }],
      },
    }],
    certificates: [],
    defaultCertificate,
  };
  // As Sluice runs: plain HTTP's requests counted for the connection reaper on this thread.
  const activity = new ConnectionActivity();
  const pool = await startWorkerPool({
    count: Number(flag("workers", String(navigator.hardwareConcurrency))),
    module: new URL(import.meta.url),
    config: {
      hostname: "127.0.0.1",
      httpPort: Number(flag("port")),
      httpsPort: Deno.args.includes("--https-port") ? Number(flag("https-port")) : null,
      connectionActivity: activity.buffer,
      handlerOptions: Deno.args.includes("--hello") ? "hello" : "proxy",
    },
    snapshot: { version: 1, data },
  });
  const reaper = pool.httpPort === null ? undefined : new HttpConnectionReaper({
    port: pool.httpPort,
    activity,
    firstBytesTimeoutMs: DEFAULT_FIRST_BYTES_TIMEOUT_MS,
    idleTimeoutMs: DEFAULT_IDLE_TIMEOUT_MS,
    onUnavailable: (reason) => console.error(`No connection reaper: ${reason}`),
  });
  reaper?.start();
  const { name } = handlerFactory(Deno.args.includes("--hello"));
  console.log(JSON.stringify({ ready: true, handler: name, port: pool.httpPort, pid: Deno.pid }));
  const stop = Promise.withResolvers<void>();
  Deno.addSignalListener("SIGTERM", stop.resolve);
  Deno.addSignalListener("SIGINT", stop.resolve);
  await stop.promise;
  await pool.shutdown({ timeoutMs: 2_000 });
  await reaper?.stop();
  Deno.exit(0);
}
