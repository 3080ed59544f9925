import { assertEquals } from "../../tests/support/assert.ts";
import { getLogger } from "@logtape/logtape";
import {
  KubeApiError,
  type ListPage,
  type WatchItem,
  type WatchOptions,
} from "../k8s/kube_client.ts";
import { GATEWAY_API_GROUP, type Resource } from "../k8s/resources.ts";
import { KubeSource, planReflectors } from "./kube_source.ts";

const describe = (options: Parameters<typeof planReflectors>[0]) =>
  planReflectors(options).map((p) =>
    [p.kind, p.namespace ?? "*", p.fieldSelector ?? "", p.labelSelector ?? ""].join(" ").trim()
  );

Deno.test("planReflectors() watches every kind in all namespaces by default, Secrets but Helm releases and tokens", () => {
  assertEquals(describe({}), [
    "IngressClass *",
    "Ingress *",
    "Service *",
    "EndpointSlice *",
    "Secret * type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token",
  ]);
});

Deno.test("planReflectors() runs one reflector per watched namespace for each namespaced kind", () => {
  assertEquals(describe({ watchNamespaces: ["b", "a", "a", ""] }), [
    "IngressClass *",
    "Ingress a",
    "Ingress b",
    "Service a",
    "Service b",
    "EndpointSlice a",
    "EndpointSlice b",
    "Secret a type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token",
    "Secret b type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token",
  ]);
});

Deno.test("planReflectors() pins the default certificate and backend when their namespace is not watched", () => {
  assertEquals(
    describe({
      watchNamespaces: ["shop"],
      defaultSslCertificate: "sluice/default-cert",
      defaultBackendService: "sluice/fallback:http",
    }).slice(5),
    [
      "Secret sluice type=kubernetes.io/tls,metadata.name=default-cert",
      "Service sluice metadata.name=fallback",
      "EndpointSlice sluice  kubernetes.io/service-name=fallback",
    ],
  );
  // Watched anyway: nothing extra.
  assertEquals(
    describe({ watchNamespaces: ["sluice"], defaultSslCertificate: "sluice/default-cert" }).length,
    5,
  );
  // All namespaces: nothing extra either.
  assertEquals(describe({ defaultBackendService: "sluice/fallback" }).length, 5);
});

Deno.test("planReflectors() pins the publish Service once, even when it is also the default backend", () => {
  assertEquals(
    describe({ watchNamespaces: ["shop"], publishService: "sluice/sluice-lb" }).slice(5),
    ["Service sluice metadata.name=sluice-lb"],
  );
  assertEquals(
    describe({
      watchNamespaces: ["shop"],
      defaultBackendService: "sluice/fallback",
      publishService: "sluice/fallback",
    }).slice(5),
    [
      "Service sluice metadata.name=fallback",
      "EndpointSlice sluice  kubernetes.io/service-name=fallback",
    ],
  );
  assertEquals(describe({ watchNamespaces: ["sluice"], publishService: "sluice/lb" }).length, 5);
});

Deno.test("KubeSource replaces only the pinned object when a pinned reflector lists", async () => {
  const lists: { kind: string; scope: unknown }[] = [];
  const empty: ListPage<never> = { resourceVersion: "7", continue: "", items: [] };
  const source = new KubeSource({
    client: {
      list: <T>() => Promise.resolve(empty as unknown as ListPage<T>),
      // deno-lint-ignore require-yield
      watch: async function* <T>(_r: Resource, options?: WatchOptions) {
        await new Promise((resolve) => options?.signal?.addEventListener("abort", resolve));
        return undefined as unknown as WatchItem<T>;
      },
    },
    logger: getLogger(["sluice-test"]),
    watchNamespaces: ["shop"],
    defaultBackendService: "sluice/fallback",
    publishService: "sluice/lb",
  });
  source.start({
    replace: (kind, _items, scope) => {
      lists.push({ kind, scope });
      return { matters: false, reason: "unchanged" };
    },
    upsert: () => ({ matters: false, reason: "unchanged" }),
    delete: () => ({ matters: false, reason: "unchanged" }),
  });
  try {
    await source.synced;
    const pinned = lists.filter((l) => (l.scope as { namespace?: string }).namespace === "sluice");
    assertEquals(pinned.map((l) => [l.kind, l.scope]).sort(), [
      ["EndpointSlice", {
        namespace: "sluice",
        labels: { "kubernetes.io/service-name": "fallback" },
      }],
      ["Service", { namespace: "sluice", name: "fallback" }],
      ["Service", { namespace: "sluice", name: "lb" }],
    ]);
    assertEquals(
      lists.filter((l) => l.kind === "Ingress").map((l) => l.scope),
      [{ namespace: "shop" }],
    );
  } finally {
    await source.stop();
  }
});

/** Each plan as `Kind scope [optional]`. */
const describeGateway = (options: Parameters<typeof planReflectors>[0]) =>
  planReflectors(options).map((p) =>
    [p.kind, p.namespace ?? "*", p.optional === true ? "optional" : ""].join(" ").trim()
  );

const INGRESS_PLANS_ALL = [
  "IngressClass *",
  "Ingress *",
  "Service *",
  "EndpointSlice *",
  "Secret *",
];
const INGRESS_PLANS_A_B = [
  "IngressClass *",
  "Ingress a",
  "Ingress b",
  "Service a",
  "Service b",
  "EndpointSlice a",
  "EndpointSlice b",
  "Secret a",
  "Secret b",
];

const GATEWAY_PLAN_CASES: [string, Parameters<typeof planReflectors>[0], string[]][] = [
  ["off: the Ingress kinds only", { gatewayApi: false }, INGRESS_PLANS_ALL],
  ["off, with watched namespaces", { watchNamespaces: ["b", "a"] }, INGRESS_PLANS_A_B],
  ["on: Gateway API kinds in all namespaces, optional, and every Namespace", {
    gatewayApi: true,
  }, [
    ...INGRESS_PLANS_ALL,
    "GatewayClass * optional",
    "Namespace *",
    "Gateway * optional",
    "HTTPRoute * optional",
    "ReferenceGrant * optional",
  ]],
  ["on, with watched namespaces: one per namespace, Namespaces and classes still cluster-wide", {
    gatewayApi: true,
    watchNamespaces: ["b", "a", "a", ""],
  }, [
    ...INGRESS_PLANS_A_B,
    "GatewayClass * optional",
    "Namespace *",
    "Gateway a optional",
    "Gateway b optional",
    "HTTPRoute a optional",
    "HTTPRoute b optional",
    "ReferenceGrant a optional",
    "ReferenceGrant b optional",
  ]],
];

for (const [what, options, expected] of GATEWAY_PLAN_CASES) {
  Deno.test(`planReflectors() with Gateway API ${what}`, () => {
    assertEquals(describeGateway(options), expected);
    for (const plan of planReflectors(options)) {
      // The plan's kind is the resource's kind; Gateway API's come from its group, v1.
      assertEquals(plan.resource.kind, plan.kind);
      if (plan.optional === true) assertEquals(plan.resource.group, GATEWAY_API_GROUP);
    }
  });
}

Deno.test("KubeSource with Gateway API is synced while its CRDs are not installed, with those kinds empty", async () => {
  const replaced: string[] = [];
  const source = new KubeSource({
    client: {
      list: <T>(r: Resource) =>
        r.group === GATEWAY_API_GROUP
          ? Promise.reject(new KubeApiError(`list ${r.plural}`, 404, { code: 404 }))
          : Promise.resolve({ resourceVersion: "7", continue: "", items: [] } as ListPage<T>),
      // deno-lint-ignore require-yield
      watch: async function* <T>(_r: Resource, options?: WatchOptions) {
        await new Promise((resolve) => options?.signal?.addEventListener("abort", resolve));
        return undefined as unknown as WatchItem<T>;
      },
    },
    logger: getLogger(["sluice-test"]),
    gatewayApi: true,
    // Past the test: stop() cuts the wait short.
    absentRetryMs: 600_000,
  });
  source.start({
    replace: (kind, items) => {
      replaced.push(`${kind} ${[...items].length}`);
      return { matters: false, reason: "unchanged" };
    },
    upsert: () => ({ matters: false, reason: "unchanged" }),
    delete: () => ({ matters: false, reason: "unchanged" }),
  });
  try {
    await source.synced;
    for (const kind of ["GatewayClass", "Gateway", "HTTPRoute", "ReferenceGrant", "Namespace"]) {
      assertEquals(replaced.filter((r) => r.startsWith(`${kind} `)), [`${kind} 0`]);
    }
    const absent = source.status().reflectors.map((r) => [r.kind, r.absent ?? "not optional"]);
    assertEquals(absent.slice(5), [
      ["GatewayClass", true],
      ["Namespace", "not optional"],
      ["Gateway", true],
      ["HTTPRoute", true],
      ["ReferenceGrant", true],
    ]);
    assertEquals(source.status().reflectors.map((r) => r.errors), Array(10).fill(0));
  } finally {
    await source.stop();
  }
});
