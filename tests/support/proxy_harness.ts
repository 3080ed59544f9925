/**
 * Runs the proxy handler behind a real `Deno.serve` on loopback, with a
 * static routing snapshot, for proxy tests. The listener side is a stand-in
 * for `lib/server/`: it passes `remoteAddr`, `secure` and `localPort` the way
 * the real listeners do.
 *
 * @module
 */

import {
  type AccessLogEntry,
  createProxyHandler,
  type ProxyHandler,
  type ProxyHandlerOptions,
  type ProxyLogger,
  type ProxyRequestInfo,
} from "../../lib/proxy/proxy_handler.ts";
import type { Snapshot } from "../../lib/routing/snapshot.ts";
import { type StaticRoute, staticSnapshot } from "./static_snapshot.ts";

/** What a plain-HTTP listener on port 8080 passes with a request from 127.0.0.1:40000, for calling a handler directly. */
export const PLAIN_INFO: ProxyRequestInfo = Object.freeze({
  remoteAddr: Object.freeze({ hostname: "127.0.0.1", port: 40000 }),
  secure: false,
  localPort: 8080,
});

/** A warning or error the handler logged. */
export interface LoggedWarning {
  message: string;
  properties?: Record<string, unknown>;
}

/** A handler logger that appends every warning and error to `warnings`. */
export function recordingLogger(warnings: LoggedWarning[]): ProxyLogger {
  const record = (message: string, properties?: Record<string, unknown>) =>
    warnings.push(properties === undefined ? { message } : { message, properties });
  return { warn: record, error: record };
}

export interface ProxyHarness {
  readonly port: number;
  /** `http://127.0.0.1:port` */
  readonly url: string;
  readonly handler: ProxyHandler;
  readonly accessLog: AccessLogEntry[];
  readonly warnings: LoggedWarning[];
  /** Swaps the routes (a new snapshot version). */
  setRoutes(routes: readonly StaticRoute[]): void;
  close(): Promise<void>;
}

export interface HarnessOptions extends Partial<Omit<ProxyHandlerOptions, "snapshot">> {
  readonly routes: readonly StaticRoute[];
  /** Tell the handler the listener is HTTPS (the stand-in listener is plain). Default false. */
  readonly secure?: boolean;
}

/** Starts `Deno.serve` + handler; close it at the end of the test. */
export function startProxy(options: HarnessOptions): Promise<ProxyHarness> {
  let snapshot: Snapshot = staticSnapshot(options.routes);
  const accessLog: AccessLogEntry[] = [];
  const warnings: ProxyHarness["warnings"] = [];
  const { routes: _routes, secure = false, ...rest } = options;
  const handler = createProxyHandler({
    logger: recordingLogger(warnings),
    onAccess: (entry) => accessLog.push(entry),
    ...rest,
    snapshot: () => snapshot,
  });
  let port = 0;
  const server = Deno.serve(
    {
      hostname: "127.0.0.1",
      port: 0,
      onListen() {},
      // A body the proxy ends with an error (backend died mid-stream) is reported here.
      onError: () => new Response(null, { status: 500 }),
    },
    (req, info) =>
      handler(req, { remoteAddr: info.remoteAddr as Deno.NetAddr, secure, localPort: port }),
  );
  port = server.addr.port;
  return Promise.resolve({
    port,
    url: `http://127.0.0.1:${port}`,
    handler,
    accessLog,
    warnings,
    setRoutes(routes) {
      snapshot = staticSnapshot(routes, snapshot.version + 1);
    },
    async close() {
      await server.shutdown();
      handler.close();
    },
  });
}
