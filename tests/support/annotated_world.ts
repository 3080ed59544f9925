/**
 * Test support: Ingresses with ingress-nginx annotations served through the
 * whole data path — the real translation (`lib/translate/`), the compiled
 * route table, the real proxy handler behind the real HTTP listener — with
 * one real backend per Ingress on loopback. Each backend says which Ingress
 * it serves and what it received; a `cors` backend also sends its own CORS
 * fields (which ingress-nginx replaces). Not part of Sluice.
 *
 * @module
 */

import type { Ingress, Service } from "../../lib/k8s/objects.ts";
import {
  createProxyHandler,
  type ProxyHandler,
  type ProxyHandlerOptions,
} from "../../lib/proxy/proxy_handler.ts";
import { compileRouteTable } from "../../lib/routing/route_table.ts";
import type { CertificateTable, Snapshot } from "../../lib/routing/snapshot.ts";
import { listenHttp } from "../../lib/server/http_listener.ts";
import { translate } from "../../lib/translate/translate.ts";
import type { Translation } from "../../lib/translate/translation.ts";
import { type EchoBackend, startEchoBackend } from "./echo_backend.ts";
import { type LoggedWarning, recordingLogger } from "./proxy_harness.ts";
import { rawRequest, type RawResponse } from "./raw_http.ts";
import { SLUICE_CLASS, TEST_OPTIONS } from "./route_world.ts";

/** One Ingress of namespace `shop`, its own Service and backend. */
export interface AnnotatedIngress {
  readonly name: string;
  readonly host: string;
  /** Prefix paths. Default `["/"]`. */
  readonly paths?: readonly string[];
  /** Names without the `nginx.ingress.kubernetes.io/` prefix. */
  readonly annotations?: Readonly<Record<string, string>>;
  /** The host is listed in `spec.tls`. */
  readonly tls?: boolean;
  /** `cors`: a backend that answers with its own CORS fields. Default `echo`. */
  readonly backend?: "echo" | "cors";
}

/** What a `cors` backend answers: it also sets these fields. */
export const BACKEND_CORS_FIELDS: readonly [string, string][] = [
  ["Access-Control-Allow-Origin", "https://backend.example"],
  ["Access-Control-Allow-Methods", "BACKEND"],
  ["Access-Control-Allow-Credentials", "false"],
  ["X-Backend-Own", "kept"],
];

/** A request a backend received. */
export interface Received {
  readonly ingress: string;
  readonly method: string;
  readonly target: string;
  readonly headers: readonly [string, string][];
  readonly bodyLength: number;
}

export interface AnnotatedWorld {
  readonly port: number;
  /** The handler itself, for requests with a made-up peer address. */
  readonly handler: ProxyHandler;
  readonly translation: Translation;
  readonly warnings: LoggedWarning[];
  /** Every request the backends received (in order per backend). */
  readonly received: Received[];
  /** Sends raw request text on a fresh connection and reads one response. */
  ask(text: string): Promise<RawResponse>;
  close(): Promise<void>;
}

export interface AnnotatedWorldOptions {
  readonly proxy?: Partial<Omit<ProxyHandlerOptions, "snapshot">>;
  /** The listener's address. Default 127.0.0.1. */
  readonly hostname?: string;
}

const NO_CERTIFICATES: CertificateTable = {
  fingerprint: "none",
  resolve() {
    throw new Error("Cannot resolve certificates in the annotated world");
  },
};

interface RunningBackend {
  readonly port: number;
  close(): Promise<void>;
}

/** A backend that answers JSON describing the request, with its own CORS fields. */
function startCorsBackend(name: string, received: Received[]): RunningBackend {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    async (req) => {
      const body = new Uint8Array(await req.arrayBuffer());
      const url = new URL(req.url);
      const entry: Received = {
        ingress: name,
        method: req.method,
        target: url.pathname + url.search,
        headers: [...req.headers],
        bodyLength: body.length,
      };
      received.push(entry);
      return new Response(JSON.stringify(entry), {
        headers: [["Content-Type", "application/json"], ...BACKEND_CORS_FIELDS],
      });
    },
  );
  return { port: server.addr.port, close: () => server.shutdown() };
}

/** The echo backend, and a function copying its new requests into `received`. */
function echoBackendOf(
  name: string,
  echo: EchoBackend,
  received: Received[],
): RunningBackend & { collect(): void } {
  let seen = 0;
  const collect = () => {
    for (; seen < echo.requests.length; seen++) {
      const r = echo.requests[seen]!;
      received.push({
        ingress: name,
        method: r.method,
        target: r.target,
        headers: r.headers,
        bodyLength: r.bodyLength,
      });
    }
  };
  return { port: echo.port, close: () => echo.close(), collect };
}

/** The objects of `ingresses`: Ingresses, Services and EndpointSlices at `ports`. */
export function annotatedObjects(
  ingresses: readonly AnnotatedIngress[],
  ports: ReadonlyMap<string, number>,
) {
  const services: Service[] = [];
  const ingressObjects: Ingress[] = ingresses.map((sketch, i) => {
    services.push({
      metadata: { namespace: "shop", name: sketch.name },
      spec: { ports: [{ port: 80, targetPort: ports.get(sketch.name) ?? 8080 }] },
    });
    const annotations = Object.fromEntries(
      Object.entries(sketch.annotations ?? {}).map((
        [k, v],
      ) => [`nginx.ingress.kubernetes.io/${k}`, v]),
    );
    return {
      apiVersion: "networking.k8s.io/v1",
      kind: "Ingress",
      metadata: {
        namespace: "shop",
        name: sketch.name,
        creationTimestamp: new Date(Date.parse("2024-01-01T00:00:00Z") + i * 1000).toISOString(),
        annotations,
      },
      spec: {
        ingressClassName: "sluice",
        ...(sketch.tls === true ? { tls: [{ hosts: [sketch.host] }] } : {}),
        rules: [{
          host: sketch.host,
          http: {
            paths: (sketch.paths ?? ["/"]).map((path) => ({
              path,
              pathType: "Prefix",
              backend: { service: { name: sketch.name, port: { number: 80 } } },
            })),
          },
        }],
      },
    };
  });
  return {
    ingresses: ingressObjects,
    ingressClasses: [SLUICE_CLASS],
    services,
    endpointSlices: ingresses.map((sketch) => ({
      metadata: {
        namespace: "shop",
        name: `${sketch.name}-1`,
        labels: { "kubernetes.io/service-name": sketch.name },
      },
      addressType: "IPv4",
      ports: [{ port: ports.get(sketch.name) ?? 8080 }],
      endpoints: [{ addresses: ["127.0.0.1"] }],
    })),
    secrets: [],
  };
}

/** Starts the backends, translates, compiles, and serves; close it after the test. */
export async function startAnnotatedWorld(
  ingresses: readonly AnnotatedIngress[],
  options: AnnotatedWorldOptions = {},
): Promise<AnnotatedWorld> {
  const received: Received[] = [];
  const backends: RunningBackend[] = [];
  const collectors: (() => void)[] = [];
  const ports = new Map<string, number>();
  for (const sketch of ingresses) {
    let backend: RunningBackend;
    if (sketch.backend === "cors") backend = startCorsBackend(sketch.name, received);
    else {
      const echo = echoBackendOf(
        sketch.name,
        await startEchoBackend({ name: sketch.name, pod: `${sketch.name}-0` }),
        received,
      );
      collectors.push(echo.collect);
      backend = echo;
    }
    backends.push(backend);
    ports.set(sketch.name, backend.port);
  }
  const translation = translate(annotatedObjects(ingresses, ports), TEST_OPTIONS);
  const snapshot: Snapshot = {
    version: 1,
    routes: compileRouteTable(translation),
    certificates: NO_CERTIFICATES,
  };
  const warnings: LoggedWarning[] = [];
  const handler = createProxyHandler({
    logger: recordingLogger(warnings),
    ...options.proxy,
    snapshot: () => snapshot,
  });
  const listener = listenHttp(handler, {
    hostname: options.hostname ?? "127.0.0.1",
    port: 0,
    reusePort: false,
  });
  const sync = () => collectors.forEach((collect) => collect());
  return {
    port: listener.addr.port,
    handler,
    translation,
    warnings,
    get received() {
      sync();
      return received;
    },
    ask: (text) => rawRequest(listener.addr.port, text),
    async close() {
      await listener.shutdown({ timeoutMs: 5_000 });
      handler.close();
      await Promise.all(backends.map((b) => b.close()));
    },
  };
}

/** Runs `fn` in a world of `ingresses`, closed afterwards. */
export async function withAnnotatedWorld(
  ingresses: readonly AnnotatedIngress[],
  fn: (world: AnnotatedWorld) => Promise<void>,
  options: AnnotatedWorldOptions = {},
): Promise<void> {
  const world = await startAnnotatedWorld(ingresses, options);
  try {
    await fn(world);
  } finally {
    await world.close();
  }
}
