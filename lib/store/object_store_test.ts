import { assert, assertEquals } from "../../tests/support/assert.ts";
import type { EndpointSlice, Ingress, IngressClass, Secret, Service } from "../k8s/objects.ts";
import { ObjectStore } from "./object_store.ts";

const ours: IngressClass = {
  metadata: { name: "sluice", resourceVersion: "1" },
  spec: { controller: "sluice.dev/ingress-controller" },
};

function ingress(namespace: string, name: string, options: {
  className?: string;
  service?: string;
  secret?: string;
  rv?: string;
} = {}): Ingress {
  return {
    metadata: { namespace, name, resourceVersion: options.rv ?? "1" },
    spec: {
      ingressClassName: options.className ?? "sluice",
      ...(options.secret ? { tls: [{ hosts: ["a.test"], secretName: options.secret }] } : {}),
      rules: [{
        host: "a.test",
        http: {
          paths: [{
            path: "/",
            pathType: "Prefix",
            backend: { service: { name: options.service ?? "web", port: { number: 80 } } },
          }],
        },
      }],
    },
  };
}
const secret = (namespace: string, name: string, rv = "1"): Secret => ({
  metadata: { namespace, name, resourceVersion: rv },
  type: "kubernetes.io/tls",
  data: {},
});
const service = (namespace: string, name: string, rv = "1"): Service => ({
  metadata: { namespace, name, resourceVersion: rv },
  spec: {},
});
const slice = (namespace: string, name: string, of: string, rv = "1"): EndpointSlice => ({
  metadata: { namespace, name, resourceVersion: rv, labels: { "kubernetes.io/service-name": of } },
});

Deno.test("ObjectStore keys objects namespace/name, and IngressClasses by name", () => {
  const store = new ObjectStore();
  store.upsert("IngressClass", ours);
  store.upsert("Ingress", ingress("shop", "web"));
  assert(store.get("IngressClass", "sluice") !== undefined);
  assert(store.get("Ingress", "shop/web") !== undefined);
  assertEquals(
    store.upsert("Ingress", { metadata: { name: "nameless-namespace" } }).reason,
    "absent",
  );
  assertEquals(store.size("Ingress"), 1);
});

Deno.test("ObjectStore stores objects without managedFields or the last-applied copy, and a change to those alone does not matter", () => {
  const store = new ObjectStore();
  store.upsert("IngressClass", ours);
  const withBookkeeping = (rv: string, lastApplied: string): Ingress => {
    const object = ingress("shop", "web", { rv });
    return {
      ...object,
      metadata: {
        ...object.metadata,
        managedFields: [{ manager: `m${rv}` }],
        annotations: { "kubectl.kubernetes.io/last-applied-configuration": lastApplied },
      } as NonNullable<Ingress["metadata"]>,
    };
  };
  assert(store.upsert("Ingress", withBookkeeping("1", "{}")).matters);
  const stored = store.get("Ingress", "shop/web")!;
  assertEquals(Object.hasOwn(stored.metadata!, "managedFields"), false);
  assertEquals(stored.metadata!.annotations, {});
  assertEquals(store.upsert("Ingress", withBookkeeping("2", '{"spec":{}}')).matters, false);
});

Deno.test("ObjectStore.replace() in one namespace leaves other namespaces alone and removes what is gone", () => {
  const store = new ObjectStore();
  store.upsert("IngressClass", ours);
  store.replace("Ingress", [ingress("a", "one"), ingress("a", "two")], { namespace: "a" });
  store.replace("Ingress", [ingress("b", "three")], { namespace: "b" });
  const change = store.replace("Ingress", [ingress("a", "two")], { namespace: "a" });
  assertEquals(change, { matters: true, reason: "deleted" });
  assertEquals(store.list("Ingress").map((i) => i.metadata?.name).sort(), ["three", "two"]);
  // Items of other namespaces in a namespaced list are not taken.
  store.replace("Ingress", [ingress("c", "stray")], { namespace: "a" });
  assertEquals(store.list("Ingress").map((i) => i.metadata?.name).sort(), ["three"]);
});

Deno.test("ObjectStore.replace() pinned to a name or labels leaves the rest of the namespace alone", () => {
  const store = new ObjectStore();
  store.replace("Service", [service("ops", "lb"), service("ops", "fallback")], {
    namespace: "ops",
  });
  // A reflector pinned to ops/fallback lists it again (gone): only it goes.
  store.replace("Service", [], { namespace: "ops", name: "fallback" });
  assertEquals(store.list("Service").map((s) => s.metadata?.name), ["lb"]);
  // Another pinned list brings back its own object, and ignores items outside its pin.
  store.replace("Service", [service("ops", "fallback"), service("ops", "stray")], {
    namespace: "ops",
    name: "fallback",
  });
  assertEquals(store.list("Service").map((s) => s.metadata?.name).sort(), ["fallback", "lb"]);

  store.replace("EndpointSlice", [slice("ops", "lb-1", "lb"), slice("ops", "fb-1", "fallback")], {
    namespace: "ops",
  });
  store.replace("EndpointSlice", [], {
    namespace: "ops",
    labels: { "kubernetes.io/service-name": "fallback" },
  });
  assertEquals(store.list("EndpointSlice").map((s) => s.metadata?.name), ["lb-1"]);
});

Deno.test("ObjectStore.replace() over all namespaces removes objects of every namespace", () => {
  const store = new ObjectStore();
  store.replace("Service", [service("a", "x"), service("b", "y")]);
  store.replace("Service", [service("b", "y")]);
  assertEquals(store.list("Service").map((s) => s.metadata?.name), ["y"]);
});

Deno.test("ObjectStore.replace() with the same objects again does not matter", () => {
  const store = new ObjectStore();
  store.upsert("IngressClass", ours);
  const items = [ingress("a", "one"), ingress("a", "two")];
  assert(store.replace("Ingress", items).matters);
  const version = store.version;
  assertEquals(store.replace("Ingress", structuredClone(items)), {
    matters: false,
    reason: "unchanged",
  });
  assertEquals(store.version, version);
});

Deno.test("ObjectStore: a Secret matters once an Ingress of ours names it, and stops mattering after", () => {
  const store = new ObjectStore();
  store.upsert("IngressClass", ours);
  assertEquals(store.upsert("Secret", secret("shop", "tls")).reason, "unreferenced-secret");
  assert(store.upsert("Ingress", ingress("shop", "web", { secret: "tls" })).matters);
  assertEquals(store.upsert("Secret", secret("shop", "tls", "2")).reason, "changed");
  // The same name in another namespace is another Secret.
  assertEquals(store.upsert("Secret", secret("other", "tls")).reason, "unreferenced-secret");
  store.upsert("Ingress", ingress("shop", "web", { rv: "3" }));
  assertEquals(store.upsert("Secret", secret("shop", "tls", "4")).reason, "unreferenced-secret");
  // The Secret is kept even though it did not matter.
  assertEquals(store.get("Secret", "shop/tls")?.metadata?.resourceVersion, "4");
});

Deno.test("ObjectStore: the Secret of an Ingress's basic authentication (auth-secret) matters while it is named", () => {
  const store = new ObjectStore();
  store.upsert("IngressClass", ours);
  const withAuth = (value: string, rv: string): Ingress => {
    const object = ingress("shop", "admin", { rv });
    object.metadata!.annotations = { "nginx.ingress.kubernetes.io/auth-secret": value };
    return object;
  };
  const users = (namespace: string, rv: string): Secret => ({
    metadata: { namespace, name: "users", resourceVersion: rv },
    type: "Opaque",
    data: {},
  });
  assertEquals(store.upsert("Secret", users("shop", "1")).reason, "unreferenced-secret");
  assert(store.upsert("Ingress", withAuth("users", "1")).matters);
  assertEquals(store.upsert("Secret", users("shop", "2")).reason, "changed");
  assertEquals(store.delete("Secret", users("shop", "2")).reason, "deleted");
  assert(store.upsert("Ingress", withAuth("auth/users", "2")).matters);
  assertEquals(store.upsert("Secret", users("auth", "1")).reason, "added");
  assertEquals(store.upsert("Secret", users("shop", "3")).reason, "unreferenced-secret");
});

Deno.test("ObjectStore: a Secret named only by an Ingress of another class does not matter", () => {
  const store = new ObjectStore();
  store.upsert("IngressClass", ours);
  assertEquals(
    store.upsert("Ingress", ingress("shop", "nginx", { className: "nginx", secret: "tls" })).reason,
    "foreign-ingress",
  );
  assertEquals(store.upsert("Secret", secret("shop", "tls")).reason, "unreferenced-secret");
});

Deno.test("ObjectStore: a class change that makes an Ingress ours makes its Secret matter", () => {
  const store = new ObjectStore();
  store.upsert("Ingress", ingress("shop", "web", { className: "mine", secret: "tls" }));
  assertEquals(store.upsert("Secret", secret("shop", "tls")).reason, "unreferenced-secret");
  assertEquals(
    store.upsert("IngressClass", {
      metadata: { name: "mine", resourceVersion: "1" },
      spec: { controller: "sluice.dev/ingress-controller" },
    } as IngressClass).reason,
    "added",
  );
  assertEquals(store.upsert("Secret", secret("shop", "tls", "2")).reason, "changed");
});

Deno.test("ObjectStore: an Ingress naming our class before that IngressClass exists matters (it has an issue)", () => {
  const store = new ObjectStore();
  assertEquals(store.upsert("Ingress", ingress("shop", "early")).reason, "added");
});

Deno.test("ObjectStore: the default SSL certificate and default backend Service always matter", () => {
  const store = new ObjectStore({
    defaultSslCertificate: "sluice/default-cert",
    defaultBackendService: "sluice/fallback:http",
  });
  assertEquals(store.upsert("Secret", secret("sluice", "default-cert")).reason, "added");
  assertEquals(store.upsert("Service", service("sluice", "fallback")).reason, "added");
  assertEquals(
    store.upsert("EndpointSlice", slice("sluice", "fallback-1", "fallback")).reason,
    "added",
  );
  assertEquals(store.upsert("Service", service("sluice", "other")).reason, "unreferenced-service");
});

Deno.test("ObjectStore: Services and slices matter only while an Ingress of ours refers to them", () => {
  const store = new ObjectStore();
  store.upsert("IngressClass", ours);
  assertEquals(store.upsert("Service", service("shop", "web")).reason, "unreferenced-service");
  assertEquals(
    store.upsert("EndpointSlice", slice("shop", "web-1", "web")).reason,
    "unreferenced-endpoint-slice",
  );
  store.upsert("Ingress", ingress("shop", "a"));
  store.upsert("Ingress", ingress("shop", "b"));
  assertEquals(store.upsert("EndpointSlice", slice("shop", "web-1", "web", "2")).reason, "changed");
  // Still named by "b" after "a" goes.
  store.delete("Ingress", ingress("shop", "a"));
  assertEquals(store.upsert("Service", service("shop", "web", "2")).reason, "changed");
  store.delete("Ingress", ingress("shop", "b"));
  assertEquals(store.delete("Service", service("shop", "web")).reason, "unreferenced-service");
  assertEquals(store.size("Service"), 0);
});

Deno.test("ObjectStore: a status-only Ingress update keeps the newer copy and does not count as a change", () => {
  const store = new ObjectStore();
  store.upsert("IngressClass", ours);
  store.upsert("Ingress", ingress("shop", "web"));
  const version = store.version;
  const updated = {
    ...ingress("shop", "web", { rv: "2" }),
    status: { loadBalancer: { ingress: [{ ip: "10.0.0.1" }] } },
  };
  assertEquals(store.upsert("Ingress", updated).reason, "status-only");
  assertEquals(store.version, version);
  assertEquals(store.get("Ingress", "shop/web")?.metadata?.resourceVersion, "2");
  assertEquals(store.counts["status-only"], 1);
});

Deno.test("ObjectStore: deleting an object it never had does not matter", () => {
  const store = new ObjectStore();
  assertEquals(store.delete("Ingress", ingress("shop", "ghost")), {
    matters: false,
    reason: "absent",
  });
});

/** A Gateway `shop/edge` with one HTTPS listener naming `certificateRefs`. */
const gateway = (certificateRefs: Record<string, string>[], rv = "1") => ({
  metadata: { namespace: "shop", name: "edge", resourceVersion: rv },
  spec: {
    gatewayClassName: "any-class",
    listeners: [{ name: "https", port: 443, protocol: "HTTPS", tls: { certificateRefs } }],
  },
});

/** An HTTPRoute `shop/web` with one rule: `backendRefs`, and `filters` on the rule. */
const httpRoute = (
  backendRefs: Record<string, unknown>[],
  filters: Record<string, unknown>[] = [],
  rv = "1",
) => ({
  metadata: { namespace: "shop", name: "web", resourceVersion: rv },
  spec: { parentRefs: [{ name: "edge" }], rules: [{ backendRefs, filters }] },
});
const mirror = (backendRef: Record<string, unknown>) => ({
  type: "RequestMirror",
  requestMirror: { backendRef },
});

Deno.test("ObjectStore: Secrets named by a Gateway's certificateRefs matter, in its namespace or the one named, whatever its class", () => {
  // No IngressClass at all, and the Gateway's class is not even known: a superset.
  const store = new ObjectStore();
  const refs = [
    { name: "tls" },
    { name: "shared", namespace: "certs" },
    { kind: "Secret", group: "", name: "explicit" },
    { kind: "ConfigMap", name: "not-a-secret" },
    { group: "example.com", kind: "Secret", name: "foreign-group" },
  ];
  assertEquals(store.upsert("Secret", secret("shop", "tls")).reason, "unreferenced-secret");
  assertEquals(store.upsert("Gateway", gateway(refs)).reason, "added");
  const verdicts = [
    secret("shop", "tls", "2"),
    secret("certs", "shared"),
    secret("shop", "explicit"),
    secret("shop", "not-a-secret"),
    secret("shop", "foreign-group"),
    secret("other", "tls"),
  ].map((s) => `${s.metadata?.namespace}/${s.metadata?.name} ${store.upsert("Secret", s).reason}`);
  assertEquals(verdicts, [
    "shop/tls changed",
    "certs/shared added",
    "shop/explicit added",
    "shop/not-a-secret unreferenced-secret",
    "shop/foreign-group unreferenced-secret",
    "other/tls unreferenced-secret",
  ]);
  // A new version that drops a reference, then the Gateway's deletion, let them go.
  store.upsert("Gateway", gateway([{ name: "tls" }], "2"));
  assertEquals(
    store.upsert("Secret", secret("certs", "shared", "2")).reason,
    "unreferenced-secret",
  );
  assertEquals(store.upsert("Secret", secret("shop", "tls", "3")).reason, "changed");
  assertEquals(store.delete("Gateway", gateway([])).reason, "deleted");
  assertEquals(store.upsert("Secret", secret("shop", "tls", "4")).reason, "unreferenced-secret");
});

Deno.test("ObjectStore: Services named by an HTTPRoute's backendRefs and mirrors matter, with their EndpointSlices", () => {
  const store = new ObjectStore();
  const route = httpRoute(
    [
      { name: "web", port: 80 },
      { name: "api", namespace: "other", port: 80 },
      // A mirror on one backend.
      { name: "canary", port: 80, filters: [mirror({ name: "shadow-b", namespace: "other" })] },
      { kind: "ServiceImport", group: "multicluster.x-k8s.io", name: "imported", port: 80 },
    ],
    [mirror({ name: "shadow", port: 8080 })],
  );
  assertEquals(store.upsert("HTTPRoute", route).reason, "added");
  const services = [
    service("shop", "web"),
    service("other", "api"),
    service("shop", "canary"),
    service("shop", "shadow"),
    service("other", "shadow-b"),
    service("shop", "imported"),
    service("shop", "api"),
  ].map((s) => `${s.metadata?.namespace}/${s.metadata?.name} ${store.upsert("Service", s).reason}`);
  assertEquals(services, [
    "shop/web added",
    "other/api added",
    "shop/canary added",
    "shop/shadow added",
    "other/shadow-b added",
    "shop/imported unreferenced-service",
    "shop/api unreferenced-service",
  ]);
  const slices = [
    slice("shop", "web-1", "web"),
    slice("other", "api-1", "api"),
    slice("shop", "shadow-1", "shadow"),
    slice("other", "shadow-b-1", "shadow-b"),
    slice("shop", "api-1", "api"),
  ].map((s) =>
    `${s.metadata?.namespace}/${s.metadata?.name} ${store.upsert("EndpointSlice", s).reason}`
  );
  assertEquals(slices, [
    "shop/web-1 added",
    "other/api-1 added",
    "shop/shadow-1 added",
    "other/shadow-b-1 added",
    "shop/api-1 unreferenced-endpoint-slice",
  ]);
  // A status-only update keeps the references; deleting the route drops them.
  const withStatus = {
    ...route,
    metadata: { ...route.metadata, resourceVersion: "2" },
    status: {},
  };
  assertEquals(store.upsert("HTTPRoute", withStatus).reason, "status-only");
  assertEquals(store.upsert("Service", service("other", "api", "2")).reason, "changed");
  assertEquals(store.delete("HTTPRoute", route).reason, "deleted");
  assertEquals(
    store.upsert("Service", service("other", "api", "3")).reason,
    "unreferenced-service",
  );
  assertEquals(
    store.upsert("EndpointSlice", slice("shop", "web-1", "web", "2")).reason,
    "unreferenced-endpoint-slice",
  );
});

Deno.test("ObjectStore: a Service named by both an Ingress and an HTTPRoute matters until both are gone", () => {
  const store = new ObjectStore();
  store.upsert("IngressClass", ours);
  store.upsert("Ingress", ingress("shop", "web"));
  store.upsert("HTTPRoute", httpRoute([{ name: "web", port: 80 }]));
  store.delete("Ingress", ingress("shop", "web"));
  assertEquals(store.upsert("Service", service("shop", "web")).reason, "added");
  store.upsert("Ingress", ingress("shop", "web"));
  store.delete("HTTPRoute", httpRoute([]));
  assertEquals(store.upsert("Service", service("shop", "web", "2")).reason, "changed");
  store.delete("Ingress", ingress("shop", "web"));
  assertEquals(store.upsert("Service", service("shop", "web", "3")).reason, "unreferenced-service");
});

Deno.test("ObjectStore: malformed Gateways and HTTPRoutes are stored and refer to nothing", () => {
  const store = new ObjectStore();
  const odd = [
    { metadata: { namespace: "shop", name: "a" } },
    { metadata: { namespace: "shop", name: "b" }, spec: null },
    { metadata: { namespace: "shop", name: "c" }, spec: { listeners: "x", rules: 5 } },
    { metadata: { namespace: "shop", name: "d" }, spec: { listeners: [null, { tls: null }] } },
    {
      metadata: { namespace: "shop", name: "e" },
      spec: { rules: [null, { backendRefs: [null, 7, { name: 7 }], filters: [null, {}] }] },
    },
  ];
  for (const object of odd) {
    assertEquals(store.upsert("Gateway", object).reason, "added");
    assertEquals(store.upsert("HTTPRoute", object).reason, "added");
  }
  assertEquals([store.size("Gateway"), store.size("HTTPRoute")], [5, 5]);
  assertEquals(store.upsert("Service", service("shop", "web")).reason, "unreferenced-service");
});

// Was a bug: the index told an Ingress from precomputed references by a `services` key, so an
// Ingress (from a manifest) with a stray top-level `services` field threw out of upsert().
Deno.test("ObjectStore indexes an Ingress with a stray top-level services field by its spec", () => {
  const store = new ObjectStore();
  store.upsert("IngressClass", ours);
  const stray = { ...ingress("shop", "web"), services: ["shop/other"] };
  assertEquals(store.upsert("Ingress", stray).reason, "added");
  assertEquals(store.upsert("Service", service("shop", "web")).reason, "added");
  assertEquals(store.upsert("Service", service("shop", "other")).reason, "unreferenced-service");
});

Deno.test("ObjectStore.objects() carries the Gateway API kinds and Namespaces, keyed as their scope says", () => {
  const store = new ObjectStore();
  store.upsert("GatewayClass", { metadata: { name: "sluice", resourceVersion: "1" } });
  store.upsert("Gateway", gateway([]));
  store.upsert("HTTPRoute", httpRoute([]));
  store.upsert("ReferenceGrant", {
    metadata: { namespace: "other", name: "g", resourceVersion: "1" },
  });
  store.upsert("Namespace", {
    metadata: { name: "shop", resourceVersion: "1", labels: { a: "b" } },
  });
  assert(store.get("GatewayClass", "sluice") !== undefined);
  assert(store.get("Namespace", "shop") !== undefined);
  const names = (
    items: Iterable<{ metadata?: { namespace?: string; name?: string } }> | undefined,
  ) => [...items ?? []].map((o) => `${o.metadata?.namespace ?? ""}/${o.metadata?.name}`);
  const objects = store.objects();
  assertEquals(
    {
      gatewayClasses: names(objects.gatewayClasses),
      gateways: names(objects.gateways),
      httpRoutes: names(objects.httpRoutes),
      referenceGrants: names(objects.referenceGrants),
      namespaces: names(objects.namespaces),
    },
    {
      gatewayClasses: ["/sluice"],
      gateways: ["shop/edge"],
      httpRoutes: ["shop/web"],
      referenceGrants: ["other/g"],
      namespaces: ["/shop"],
    },
  );
  // A cluster-scoped list replaces all of its kind.
  store.replace("GatewayClass", []);
  store.replace("Namespace", [{ metadata: { name: "other", resourceVersion: "1" } }]);
  assertEquals(names(store.objects().gatewayClasses), []);
  assertEquals(names(store.objects().namespaces), ["/other"]);
});
