/**
 * Test support for the IPv6 cases of the proxy tests: the proxy handler
 * behind a real `Deno.serve` on `::1` (or another loopback address), a
 * one-request exchange over a fresh connection, and an echo backend on
 * `::1` whose answer says what it received.
 *
 * Only loopback is used (`::1`, `127.0.0.1`): documentation and ULA
 * addresses appear only as header values or as endpoints never connected to.
 *
 * @module
 */
import {
  type AccessLogEntry,
  createProxyHandler,
  type ProxyHandler,
  type ProxyHandlerOptions,
} from "../../lib/proxy/proxy_handler.ts";
import { type LoggedWarning, recordingLogger } from "./proxy_harness.ts";
import { type StaticRoute, staticSnapshot } from "./static_snapshot.ts";
import { headerValue, RawConnection, type RawResponse } from "./raw_http.ts";
import { assertEquals } from "./assert.ts";
import { type EchoBackend, startEchoBackend } from "./echo_backend.ts";
import type { Endpoint } from "../../lib/routing/snapshot.ts";

/** The proxy handler behind `Deno.serve` on `hostname` (default `::1`). */
export interface V6Proxy {
  readonly port: number;
  readonly handler: ProxyHandler;
  readonly accessLog: AccessLogEntry[];
  readonly warnings: LoggedWarning[];
  close(): Promise<void>;
}

export function startProxyOn(
  routes: readonly StaticRoute[],
  options: Partial<Omit<ProxyHandlerOptions, "snapshot">> & { hostname?: string } = {},
): V6Proxy {
  const { hostname = "::1", ...rest } = options;
  const snapshot = staticSnapshot(routes);
  const accessLog: AccessLogEntry[] = [];
  const warnings: LoggedWarning[] = [];
  const handler = createProxyHandler({
    logger: recordingLogger(warnings),
    onAccess: (entry) => accessLog.push(entry),
    newRequestId: () => "id-1",
    ...rest,
    snapshot: () => snapshot,
  });
  let port = 0;
  const server = Deno.serve(
    { hostname, port: 0, onListen() {}, onError: () => new Response(null, { status: 500 }) },
    (req, info) =>
      handler(req, { remoteAddr: info.remoteAddr as Deno.NetAddr, secure: false, localPort: port }),
  );
  port = server.addr.port;
  return {
    port,
    handler,
    accessLog,
    warnings,
    async close() {
      await server.shutdown();
      handler.close();
    },
  };
}

/** One request on a fresh connection to `[::1]:port` (or `hostname`). */
export async function exchange(
  port: number,
  head: string,
  hostname = "::1",
): Promise<RawResponse> {
  using conn = await RawConnection.open(port, hostname);
  await conn.send(head);
  return await conn.readResponse({ timeoutMs: 5_000 });
}

/** What the echo backend says it received. */
export interface Echoed {
  readonly host: string;
  readonly target: string;
  readonly headers: [string, string][];
}

export function echoed(response: RawResponse): Echoed {
  assertEquals(response.status, 200, new TextDecoder().decode(response.body));
  return JSON.parse(new TextDecoder().decode(response.body)) as Echoed;
}

export function field(e: Echoed, name: string): string | undefined {
  return headerValue(e.headers, name);
}

export async function withV6Backend(body: (backend: EchoBackend, at: Endpoint) => Promise<void>) {
  const backend = await startEchoBackend({ hostname: "::1", name: "web", pod: "v6" });
  try {
    await body(backend, { address: "::1", port: backend.port });
  } finally {
    await backend.close();
  }
}
