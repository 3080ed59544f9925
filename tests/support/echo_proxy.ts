/**
 * Test support: the proxy handler on `Deno.serve` (`proxy_harness.ts`) in
 * front of one echo backend routed at `ECHO_HOST` (and at any host), a raw
 * request on a fresh connection, and what the echo backend says it received.
 *
 * @module
 */
import { type EchoBackend, startEchoBackend } from "./echo_backend.ts";
import { type HarnessOptions, type ProxyHarness, startProxy } from "./proxy_harness.ts";
import type { StaticRoute } from "./static_snapshot.ts";
import { latin1, RawConnection, type RawResponse } from "./raw_http.ts";

export const ECHO_HOST = "shop.example.com";

export interface EchoSetup {
  backend: EchoBackend;
  proxy: ProxyHarness;
}

/** One echo backend behind the proxy at `ECHO_HOST` (and any host), cleaned up afterwards. */
export async function withEchoProxy(
  fn: (setup: EchoSetup) => Promise<void>,
  options: Partial<Omit<HarnessOptions, "routes">> & {
    routes?: (backend: EchoBackend) => StaticRoute[];
  } = {},
): Promise<void> {
  const backend = await startEchoBackend({ name: "shop/web", pod: "web-1" });
  const endpoints = [{ address: "127.0.0.1", port: backend.port }];
  const { routes, ...rest } = options;
  const proxy = await startProxy({
    routes: routes?.(backend) ??
      [{ host: ECHO_HOST, endpoints }, { endpoints, service: "any/host" }],
    ...rest,
  });
  try {
    await fn({ backend, proxy });
  } finally {
    await proxy.close();
    await backend.close();
  }
}

/** Sends raw request text on a fresh connection and reads one response. */
export async function sendRaw(
  proxy: ProxyHarness,
  text: string,
  options: { head?: boolean } = {},
): Promise<RawResponse> {
  const conn = await RawConnection.open(proxy.port);
  try {
    await conn.send(text);
    return await conn.readResponse(options);
  } finally {
    conn.close();
  }
}

export function echoJson(response: RawResponse): {
  target: string;
  host: string;
  headers: [string, string][];
  body: { length: number; sha256: string };
} {
  return JSON.parse(latin1(response.body));
}

export function withoutForwarding(headers: [string, string][]): [string, string][] {
  const forwarding = new Set([
    "x-request-id",
    "x-real-ip",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-proto",
  ]);
  return headers.filter(([name]) => !forwarding.has(name.toLowerCase()));
}
