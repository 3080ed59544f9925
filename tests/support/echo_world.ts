/**
 * Test support: the world of the request routing tests
 * (`lib/proxy/request_routing_test.ts` and the tests beside it).
 * The real proxy handler behind the real HTTP listener (`lib/server/`),
 * routing through the real compiled route table (`lib/routing/`), with one
 * echo backend per Service, so a test sees which rule a request reached and
 * exactly what that backend received. Plus raw-socket helpers for requests
 * and WebSockets. Not part of Sluice.
 *
 * @module
 */

import { type EchoBackend, type LoggedRequest, startEchoBackend } from "./echo_backend.ts";
import { type LoggedWarning, recordingLogger } from "./proxy_harness.ts";
import { parseResponses, RawConnection, rawRequest, type RawResponse } from "./raw_http.ts";
import { waitFor } from "./wait.ts";
import { compileRouteTable } from "../../lib/routing/route_table.ts";
import type { Backend, CertificateTable, Snapshot } from "../../lib/routing/snapshot.ts";
import { listenHttp } from "../../lib/server/http_listener.ts";
import type { Route } from "../../lib/translate/translation.ts";
import { createProxyHandler, type ProxyHandlerOptions } from "../../lib/proxy/proxy_handler.ts";
import { decodeClosePayload, FrameDecoder, type WsFrame } from "../../lib/websocket/ws_frame.ts";

/** `[host, path, pathType, service]`; host `""` for any host. A service `none/*` has no endpoints. */
export type RuleSketch = readonly [
  host: string,
  path: string,
  pathType: "Exact" | "Prefix",
  service: string,
];

/** A request a backend received, with the Service that received it. */
export interface Seen {
  readonly service: string;
  readonly request: LoggedRequest;
}

/** What the echo backend answers (a subset of its JSON). */
export interface Echo {
  readonly service: string;
  readonly method: string;
  readonly target: string;
  readonly headers: [string, string][];
  readonly body: { readonly length: number };
}

export interface HostileWorld {
  /** The listener's port. */
  readonly port: number;
  readonly backends: ReadonlyMap<string, EchoBackend>;
  readonly warnings: LoggedWarning[];
  /** Relays currently running. */
  readonly webSockets: () => number;
  /** Returns a function listing the requests backends received since this call. */
  mark(): () => Seen[];
  close(): Promise<void>;
}

export interface WorldOptions {
  /** Hosts listed in `spec.tls` (plain requests to them are redirected). */
  readonly tlsHosts?: readonly string[];
  readonly proxy?: Partial<Omit<ProxyHandlerOptions, "snapshot" | "onWebSocket">>;
}

const NO_CERTIFICATES: CertificateTable = {
  fingerprint: "none",
  resolve() {
    throw new Error("Cannot resolve certificates in the hostile-client world");
  },
};

/** Starts the backends, the compiled table, the handler and the listener; close it after the test. */
export async function startWorld(
  rules: readonly RuleSketch[],
  options: WorldOptions = {},
): Promise<HostileWorld> {
  const backends = new Map<string, EchoBackend>();
  const table: Backend[] = [];
  const routes: Route[] = [];
  for (const [host, path, pathType, service] of rules) {
    if (!table.some((b) => b.service === service)) {
      let endpoints: { address: string; port: number }[] = [];
      if (!service.startsWith("none/")) {
        const backend = await startEchoBackend({ name: service, pod: `${service}-0` });
        backends.set(service, backend);
        endpoints = [{ address: "127.0.0.1", port: backend.port }];
      }
      table.push({
        key: `${service}:80`,
        service,
        endpoints,
        ...(endpoints.length === 0 ? { unavailable: "no ready endpoints" } : {}),
      });
    }
    routes.push({ host, path, pathType, ingress: `${service}-ingress`, backend: `${service}:80` });
  }
  const snapshot: Snapshot = {
    version: 1,
    routes: compileRouteTable({ routes, backends: table, tlsHosts: options.tlsHosts ?? [] }),
    certificates: NO_CERTIFICATES,
  };
  const warnings: HostileWorld["warnings"] = [];
  let relays = 0;
  const handler = createProxyHandler({
    logger: recordingLogger(warnings),
    ...options.proxy,
    snapshot: () => snapshot,
    onWebSocket: (delta) => relays += delta,
  });
  const listener = listenHttp(handler, { hostname: "127.0.0.1", port: 0, reusePort: false });
  return {
    port: listener.addr.port,
    backends,
    warnings,
    webSockets: () => relays,
    mark() {
      const counts = new Map([...backends].map(([name, b]) => [name, b.requests.length]));
      return () =>
        [...backends].flatMap(([service, b]) =>
          b.requests.slice(counts.get(service) ?? 0).map((request) => ({ service, request }))
        );
    },
    async close() {
      await waitFor("WebSocket relays to end", () => relays === 0, { timeoutMs: 10_000 })
        .catch(() => {});
      await listener.shutdown({ timeoutMs: 5_000 });
      handler.close();
      await Promise.all([...backends.values()].map((b) => b.close()));
    },
  };
}

/** Runs `fn` in a world of `rules` (the test file's default if omitted), closed afterwards. */
export type WithWorld = (
  fn: (world: HostileWorld) => Promise<void>,
  rules?: readonly RuleSketch[],
  options?: WorldOptions,
) => Promise<void>;

/** A test file's {@linkcode WithWorld}, whose rules default to `defaults`. */
export function worldRunner(defaults: readonly RuleSketch[]): WithWorld {
  return async (fn, rules = defaults, options = {}) => {
    const world = await startWorld(rules, options);
    try {
      await fn(world);
    } finally {
      await world.close();
    }
  };
}

/** Sends raw request text on a fresh connection and reads one response. */
export function ask(port: number, text: string): Promise<RawResponse> {
  return rawRequest(port, text);
}

/** {@linkcode ask}, then {@linkcode echoOf} the response. */
export async function askEcho(port: number, text: string): Promise<Echo> {
  return echoOf(await ask(port, text));
}

/**
 * Sends raw bytes and returns every response that arrives until the server
 * closes or stays quiet for 300 ms (for probes that may be answered more
 * than once, or not at all).
 */
export async function probe(port: number, text: string): Promise<RawResponse[]> {
  const conn = await RawConnection.open(port);
  try {
    await conn.send(text).catch(() => {});
    return parseResponses(await conn.readUntilQuiet(300, 5_000));
  } finally {
    conn.close();
  }
}

/**
 * The echo backend's description of the request it answered. Its JSON is
 * UTF-8 and its strings hold the received bytes one char per byte, so a
 * target compares equal to the text sent with {@linkcode ask}.
 */
export function echoOf(response: RawResponse): Echo {
  return JSON.parse(new TextDecoder().decode(response.body));
}

const WS_KEY = "dGhlIHNhbXBsZSBub25jZQ==";

/** The lines of a WebSocket upgrade request for `/ws` (without the final empty line). */
export function upgradeHead(
  host: string,
  fields: readonly string[] = [`Sec-WebSocket-Key: ${WS_KEY}`, "Sec-WebSocket-Version: 13"],
): string {
  return `GET /ws HTTP/1.1\r\nHost: ${host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
    fields.map((f) => `${f}\r\n`).join("");
}

/** What a raw WebSocket client saw: the handshake status and every frame until the server closed. */
export interface RawWebSocketOutcome {
  readonly status: number;
  readonly frames: WsFrame[];
}

/**
 * Opens a WebSocket through the proxy with raw bytes, sends `frames` (already
 * encoded, masked or not), then reads frames until the server closes the
 * connection (at most `timeoutMs`).
 */
export async function rawWebSocket(
  port: number,
  host: string,
  frames: readonly Uint8Array[],
  timeoutMs = 5_000,
): Promise<RawWebSocketOutcome> {
  const conn = await RawConnection.open(port);
  try {
    await conn.send(upgradeHead(host) + "\r\n");
    const response = await conn.readResponse();
    if (response.status !== 101) return { status: response.status, frames: [] };
    for (const frame of frames) await conn.send(frame).catch(() => {});
    const bytes = await conn.readToEnd(timeoutMs);
    const decoder = new FrameDecoder({ maxPayload: 1 << 20, expectMasked: false });
    decoder.push(bytes);
    const out: WsFrame[] = [];
    for (let frame = decoder.next(); frame !== undefined; frame = decoder.next()) out.push(frame);
    return { status: 101, frames: out };
  } finally {
    conn.close();
  }
}

/** A close frame's code, or undefined for other frames. */
export function closeCodeOf(frame: WsFrame): number | undefined {
  return frame.opcode === 0x8 ? decodeClosePayload(frame.payload).code : undefined;
}
