/**
 * HTTPRoutes served by the handler, from objects to sockets: Gateway API
 * objects are translated (`translate` with `gatewayApi`), compiled into a
 * snapshot (`buildSnapshot`), and served by the proxy handler to real echo
 * backends. Pins matching (path, method, header, query parameter, hostname),
 * weights, the 500s the spec asks for, the filters (header modifiers,
 * redirects, rewrites), and the fall-through to Ingress routes.
 *
 * The backends listen on loopback, which Kubernetes refuses in
 * EndpointSlices: the translation's endpoints are pointed at them after
 * translating, the one step not taken from objects.
 *
 * @module
 */
import { assert, assertEquals } from "../../tests/support/assert.ts";
import { type EchoBackend, startEchoBackend } from "../../tests/support/echo_backend.ts";
import { rawRequest } from "../../tests/support/raw_http.ts";
import { buildSnapshot } from "../routing/snapshot_builder.ts";
import type { KubeObject } from "../k8s/objects.ts";
import { translate } from "../translate/translate.ts";
import type { Translation } from "../translate/translation.ts";
import { createProxyHandler } from "./proxy_handler.ts";

const NS = "gw";

function service(name: string): KubeObject {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { namespace: NS, name },
    spec: { ports: [{ name: "http", port: 80, targetPort: 8080, protocol: "TCP" }] },
  } as KubeObject;
}

function slice(name: string, address: string): KubeObject {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: {
      namespace: NS,
      name: `${name}-1`,
      labels: { "kubernetes.io/service-name": name },
    },
    addressType: "IPv4",
    endpoints: [{ addresses: [address], conditions: { ready: true } }],
    ports: [{ name: "http", port: 8080, protocol: "TCP" }],
  } as KubeObject;
}

function route(name: string, spec: Record<string, unknown>): KubeObject {
  return {
    apiVersion: "gateway.networking.k8s.io/v1",
    kind: "HTTPRoute",
    metadata: { namespace: NS, name, generation: 1 },
    spec: { parentRefs: [{ name: "gateway" }], ...spec },
  } as KubeObject;
}

const ref = (name: string, weight?: number) => ({
  name,
  port: 80,
  ...(weight !== undefined ? { weight } : {}),
});

/** The objects: one Gateway on port 80, the routes under test, and an Ingress for the fall-through. */
function objects() {
  return {
    gatewayClasses: [{
      apiVersion: "gateway.networking.k8s.io/v1",
      kind: "GatewayClass",
      metadata: { name: "sluice", generation: 1 },
      spec: { controllerName: "sluice.dev/ingress-controller" },
    }],
    gateways: [{
      apiVersion: "gateway.networking.k8s.io/v1",
      kind: "Gateway",
      metadata: { namespace: NS, name: "gateway", generation: 1 },
      spec: {
        gatewayClassName: "sluice",
        listeners: [{ name: "http", port: 80, protocol: "HTTP" }],
      },
    }],
    httpRoutes: [
      route("matching", {
        hostnames: ["match.example.com"],
        rules: [
          { matches: [{ path: { type: "Exact", value: "/exact" } }], backendRefs: [ref("one")] },
          {
            matches: [{ path: { type: "PathPrefix", value: "/" }, method: "POST" }],
            backendRefs: [ref("two")],
          },
          {
            matches: [{ headers: [{ name: "Version", value: "two" }] }],
            backendRefs: [ref("two")],
          },
          {
            matches: [{ queryParams: [{ name: "animal", value: "whale" }] }],
            backendRefs: [ref("two")],
          },
          { matches: [{ path: { type: "PathPrefix", value: "/v2/" } }], backendRefs: [ref("two")] },
          { backendRefs: [ref("one")] },
        ],
      }),
      route("weights", {
        hostnames: ["weights.example.com"],
        rules: [
          { matches: [{ path: { value: "/zero" } }], backendRefs: [ref("one", 0)] },
          { matches: [{ path: { value: "/missing" } }], backendRefs: [ref("nowhere")] },
          { backendRefs: [ref("one", 1), ref("two", 1)] },
        ],
      }),
      route("filters", {
        hostnames: ["filters.example.com"],
        rules: [
          {
            matches: [{ path: { value: "/headers" } }],
            filters: [
              {
                type: "RequestHeaderModifier",
                requestHeaderModifier: {
                  set: [{ name: "X-Set", value: "set" }],
                  add: [{ name: "X-Add", value: "added" }],
                  remove: ["X-Remove"],
                },
              },
              {
                type: "ResponseHeaderModifier",
                responseHeaderModifier: {
                  set: [{ name: "X-Answer", value: "yes" }],
                  remove: ["Content-Type"],
                },
              },
            ],
            backendRefs: [ref("one")],
          },
          {
            matches: [{ path: { value: "/old" } }],
            filters: [{
              type: "RequestRedirect",
              requestRedirect: {
                scheme: "https",
                hostname: "new.example.com",
                path: { type: "ReplacePrefixMatch", replacePrefixMatch: "/new" },
                statusCode: 301,
              },
            }],
          },
          {
            matches: [{ path: { value: "/port" } }],
            filters: [{ type: "RequestRedirect", requestRedirect: { port: 8443 } }],
          },
          {
            matches: [{ path: { value: "/slow" } }],
            timeouts: { request: "300ms" },
            backendRefs: [ref("one")],
          },
          {
            matches: [{ path: { value: "/mirrored" } }],
            filters: [{ type: "RequestMirror", requestMirror: { backendRef: ref("two") } }],
            backendRefs: [ref("one")],
          },
          {
            matches: [{ path: { value: "/rewrite" } }],
            filters: [{
              type: "URLRewrite",
              urlRewrite: {
                hostname: "backend.internal",
                path: { type: "ReplacePrefixMatch", replacePrefixMatch: "/" },
              },
            }],
            backendRefs: [ref("two")],
          },
        ],
      }),
    ],
    ingresses: [{
      apiVersion: "networking.k8s.io/v1",
      kind: "Ingress",
      metadata: { namespace: NS, name: "legacy" },
      spec: {
        ingressClassName: "sluice",
        rules: [{
          host: "legacy.example.com",
          http: {
            paths: [{
              path: "/",
              pathType: "Prefix",
              backend: { service: { name: "two", port: { number: 80 } } },
            }],
          },
        }],
      },
    }],
    ingressClasses: [{
      apiVersion: "networking.k8s.io/v1",
      kind: "IngressClass",
      metadata: { name: "sluice" },
      spec: { controller: "sluice.dev/ingress-controller" },
    }],
    services: [service("one"), service("two")],
    endpointSlices: [slice("one", "10.0.0.1"), slice("two", "10.0.0.2")],
  };
}

/** The translation with each Service's endpoint moved to its echo backend. */
function translated(backends: Readonly<Record<string, EchoBackend>>): Translation {
  const translation = translate(objects() as never, {
    gatewayApi: true,
    now: Date.parse("2026-12-01T00:00:00Z"),
    inspectCertificate: () => ({ ok: false, reason: "no certificates here" }),
  });
  return {
    ...translation,
    backends: translation.backends.map((backend) => {
      const echo = backends[backend.service.split("/")[1] ?? ""];
      return echo === undefined || backend.endpoints.length === 0
        ? backend
        : { ...backend, endpoints: [{ address: "127.0.0.1", port: echo.port }] };
    }),
  };
}

interface World {
  readonly port: number;
  readonly translation: Translation;
  readonly backends: { readonly one: EchoBackend; readonly two: EchoBackend };
  get(host: string, target: string, extra?: string[]): Promise<Answer>;
}

interface Answer {
  readonly status: number;
  readonly headers: [string, string][];
  /** The echo backend that answered, and what it saw; undefined for Sluice's own answers. */
  readonly echo?: { service: string; target: string; headers: [string, string][] };
}

async function withWorld(run: (world: World) => Promise<void>): Promise<void> {
  const one = await startEchoBackend({ name: "one" });
  const two = await startEchoBackend({ name: "two" });
  const translation = translated({ one, two });
  const snapshot = buildSnapshot(translation, {
    version: 1,
    defaultCertificate: { source: "test", certPem: "", keyPem: "" },
  });
  const handler = createProxyHandler({ snapshot: () => snapshot });
  let localPort = 0;
  const server: Deno.HttpServer<Deno.NetAddr> = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (req, info) =>
      handler(req, {
        remoteAddr: info.remoteAddr as Deno.NetAddr,
        secure: false,
        localPort,
      }),
  );
  const port = localPort = server.addr.port;
  try {
    await run({
      port,
      translation,
      backends: { one, two },
      async get(host, target, extra = []) {
        const head = [`GET ${target} HTTP/1.1`, `Host: ${host}`, ...extra, "Connection: close"];
        const response = await rawRequest(port, head.join("\r\n") + "\r\n\r\n");
        const body = new TextDecoder().decode(response.body);
        const echo = body.startsWith("{") && body.includes('"service"')
          ? JSON.parse(body)
          : undefined;
        return { status: response.status, headers: response.headers, echo };
      },
    });
  } finally {
    await server.shutdown();
    handler.close();
    await one.close();
    await two.close();
  }
}

function header(fields: readonly [string, string][] | undefined, name: string): string[] {
  return (fields ?? []).filter(([n]) => n.toLowerCase() === name).map(([, v]) => v);
}

Deno.test("HTTPRoute matches: Exact path, method, header, query parameter, element-wise prefix, then the catch-all rule", async () => {
  await withWorld(async ({ get }) => {
    const cases: [string, string[], string, string][] = [
      // target, extra header lines, method, expected service
      ["/exact", [], "GET", "one"],
      ["/exact/more", [], "GET", "one"],
      ["/anything?animal=whale", [], "GET", "two"],
      ["/anything?animal=dolphin", [], "GET", "one"],
      ["/anything", ["version: two"], "GET", "two"],
      ["/anything", ["Version: three"], "GET", "one"],
      ["/v2", [], "GET", "two"],
      ["/v2/x", [], "GET", "two"],
      ["/v2x", [], "GET", "one"],
    ];
    for (const [target, extra, , expected] of cases) {
      const answer = await get("match.example.com", target, extra);
      assertEquals(answer.status, 200, `${target} ${extra}`);
      assertEquals(answer.echo?.service, expected, `${target} ${extra}`);
      assertEquals(answer.echo?.target, target, "the target reaches the backend unchanged");
    }
  });
});

Deno.test("HTTPRoute: a request no route matches falls through to the Ingress routes, and an unknown host is 404", async () => {
  await withWorld(async ({ get }) => {
    const legacy = await get("legacy.example.com", "/x");
    assertEquals(legacy.status, 200);
    assertEquals(legacy.echo?.service, "two");
    assertEquals((await get("unknown.example.com", "/")).status, 404);
  });
});

Deno.test("HTTPRoute weights: both backends of 1:1 get requests; a weight-0 or unresolved backend answers 500", async () => {
  await withWorld(async ({ get }) => {
    const seen = new Set<string>();
    // 1:1 over 64 requests: the chance of never seeing one side is 2^-63.
    for (let i = 0; i < 64 && seen.size < 2; i++) {
      const answer = await get("weights.example.com", "/");
      assertEquals(answer.status, 200);
      seen.add(answer.echo!.service);
    }
    assertEquals([...seen].sort(), ["one", "two"]);
    assertEquals((await get("weights.example.com", "/zero")).status, 500);
    assertEquals((await get("weights.example.com", "/missing")).status, 500);
  });
});

Deno.test("HTTPRoute header modifiers: set, add and remove on the request; set and remove on the response", async () => {
  await withWorld(async ({ get }) => {
    const answer = await get("filters.example.com", "/headers", [
      "X-Set: original",
      "X-Add: first",
      "X-Remove: gone",
    ]);
    assertEquals(answer.status, 200);
    const seen = answer.echo!.headers;
    assertEquals(header(seen, "x-set"), ["set"]);
    assertEquals(header(seen, "x-add"), ["first,added"]);
    assertEquals(header(seen, "x-remove"), []);
    assertEquals(header(answer.headers, "x-answer"), ["yes"]);
    assertEquals(header(answer.headers, "content-type"), []);
  });
});

Deno.test("HTTPRoute RequestRedirect: scheme, hostname, prefix replacement and status; a port alone keeps the scheme", async () => {
  await withWorld(async ({ get }) => {
    const moved = await get("filters.example.com", "/old/page?q=1");
    assertEquals(moved.status, 301);
    assertEquals(header(moved.headers, "location"), ["https://new.example.com/new/page?q=1"]);
    const port = await get("filters.example.com", "/port");
    assertEquals(port.status, 302);
    assertEquals(header(port.headers, "location"), ["http://filters.example.com:8443/port"]);
  });
});

Deno.test("HTTPRoute URLRewrite: the backend gets the rewritten Host and path, the query kept", async () => {
  await withWorld(async ({ get }) => {
    const answer = await get("filters.example.com", "/rewrite/deep/path?x=1");
    assertEquals(answer.status, 200);
    assertEquals(answer.echo?.service, "two");
    assertEquals(answer.echo?.target, "/deep/path?x=1");
    assertEquals(header(answer.echo?.headers, "host"), ["backend.internal"]);
  });
});

Deno.test("the translation behind these tests carries the Gateway routes and resolves their backends", async () => {
  await withWorld(({ translation }) => {
    assert(translation.gateway !== undefined);
    assertEquals(translation.gateway.routes.map((g) => g.hostname), [
      "filters.example.com",
      "match.example.com",
      "weights.example.com",
    ]);
    // A backendRef to a missing Service is invalid in the translation (its share answers
    // 500), so it needs no backend entry.
    assertEquals(translation.backends.map((b) => b.key), ["gw/one:80", "gw/two:80"]);
    return Promise.resolve();
  });
});

Deno.test("HTTPRoute timeouts.request: a backend slower than the rule's timeout gets 504, a faster one answers", async () => {
  await withWorld(async ({ get }) => {
    assertEquals((await get("filters.example.com", "/slow?delay=2000")).status, 504);
    const fast = await get("filters.example.com", "/slow?delay=10");
    assertEquals(fast.status, 200);
    assertEquals(fast.echo?.service, "one");
  });
});

Deno.test("HTTPRoute RequestMirror: the mirror backend gets a copy, the client gets the real backend's answer", async () => {
  await withWorld(async ({ get, backends }) => {
    const answer = await get("filters.example.com", "/mirrored?n=1", ["X-Trace: mirror-me"]);
    assertEquals(answer.status, 200);
    assertEquals(answer.echo?.service, "one");
    await backends.two.waitFor(() =>
      backends.two.requests.some((r) => r.target === "/mirrored?n=1")
    );
    const copy = backends.two.requests.find((r) => r.target === "/mirrored?n=1")!;
    assertEquals(header(copy.headers, "x-trace"), ["mirror-me"]);
  });
});
