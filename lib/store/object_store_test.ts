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
