import { assertEquals } from "../../tests/support/assert.ts";
import type {
  EndpointSlice,
  Ingress,
  KubeObject,
  ObjectMeta,
  Secret,
  Service,
} from "../k8s/objects.ts";
import { type ChangeReason, classifyChange, type Kind, type MattersContext } from "./matters.ts";

function ingress(name: string, extra: Partial<Ingress> = {}, rv = "1"): Ingress {
  return {
    metadata: { namespace: "shop", name, resourceVersion: rv },
    spec: {
      ingressClassName: name.startsWith("foreign") ? "nginx" : "sluice",
      rules: [{
        host: "shop.test",
        http: {
          paths: [{
            path: "/",
            pathType: "Prefix",
            backend: { service: { name: "web", port: { number: 80 } } },
          }],
        },
      }],
    },
    ...extra,
  };
}

const secret = (name: string, rv = "1"): Secret => ({
  metadata: { namespace: "shop", name, resourceVersion: rv },
  type: "kubernetes.io/tls",
  data: { "tls.crt": "Y2VydA==", "tls.key": "a2V5" },
});
const service = (name: string, rv = "1"): Service => ({
  metadata: { namespace: "shop", name, resourceVersion: rv },
  spec: { ports: [{ port: 80 }] },
});
const slice = (name: string, serviceName: string | undefined, rv = "1"): EndpointSlice => ({
  metadata: {
    namespace: "shop",
    name,
    resourceVersion: rv,
    ...(serviceName === undefined ? {} : { labels: { "kubernetes.io/service-name": serviceName } }),
  },
  addressType: "IPv4",
  endpoints: [{ addresses: ["10.0.0.1"] }],
});

/** Ours: class `sluice`; referenced: Service `shop/web`, Secret `shop/tls`. */
const context: MattersContext = {
  relevantIngress: (i) => i.spec?.ingressClassName === "sluice",
  secretReferenced: (key) => key === "shop/tls",
  serviceReferenced: (key) => key === "shop/web",
};

const withStatus = (i: Ingress, rv: string): Ingress => ({
  ...i,
  metadata: { ...i.metadata, resourceVersion: rv },
  status: { loadBalancer: { ingress: [{ ip: "10.0.0.9" }] } },
});
const withHost = (i: Ingress, host: string, rv: string): Ingress => ({
  ...i,
  metadata: { ...i.metadata, resourceVersion: rv },
  spec: { ...i.spec, rules: [{ ...i.spec!.rules![0], host }] },
});
const noRv = <T extends KubeObject>(o: T): T => ({
  ...o,
  metadata: { ...o.metadata, resourceVersion: undefined },
});

const cases: [string, Kind, KubeObject | undefined, KubeObject | undefined, ChangeReason][] = [
  ["an added Ingress of ours", "Ingress", undefined, ingress("web"), "added"],
  ["a deleted Ingress of ours", "Ingress", ingress("web"), undefined, "deleted"],
  [
    "a changed host of our Ingress",
    "Ingress",
    ingress("web"),
    withHost(ingress("web"), "x.test", "2"),
    "changed",
  ],
  [
    "a same-resourceVersion update",
    "Ingress",
    ingress("web"),
    withHost(ingress("web"), "x.test", "1"),
    "unchanged",
  ],
  [
    "a status-only update of our Ingress",
    "Ingress",
    ingress("web"),
    withStatus(ingress("web"), "2"),
    "status-only",
  ],
  [
    "a status update that also changed managedFields",
    "Ingress",
    ingress("web"),
    {
      ...withStatus(ingress("web"), "2"),
      metadata: {
        ...withStatus(ingress("web"), "2").metadata,
        managedFields: [{ manager: "x" }],
      } as never,
    },
    "status-only",
  ],
  [
    "a status update by watch of an Ingress first seen in a LIST (without kind and apiVersion)",
    "Ingress",
    ingress("web"),
    { ...withStatus(ingress("web"), "2"), kind: "Ingress", apiVersion: "networking.k8s.io/v1" },
    "status-only",
  ],
  [
    "an annotation change of our Ingress",
    "Ingress",
    ingress("web"),
    {
      ...ingress("web", {}, "2"),
      metadata: { ...ingress("web").metadata, resourceVersion: "2", annotations: { a: "b" } },
    },
    "changed",
  ],
  [
    "an added Ingress of another class",
    "Ingress",
    undefined,
    ingress("foreign"),
    "foreign-ingress",
  ],
  [
    "a changed Ingress of another class",
    "Ingress",
    ingress("foreign"),
    withHost(ingress("foreign"), "x.test", "2"),
    "foreign-ingress",
  ],
  [
    "a deleted Ingress of another class",
    "Ingress",
    ingress("foreign"),
    undefined,
    "foreign-ingress",
  ],
  [
    "an Ingress leaving our class",
    "Ingress",
    ingress("web"),
    { ...ingress("web", {}, "2"), spec: { ...ingress("web").spec, ingressClassName: "nginx" } },
    "changed",
  ],
  [
    "an Ingress joining our class",
    "Ingress",
    ingress("foreign"),
    {
      ...ingress("foreign", {}, "2"),
      spec: { ...ingress("foreign").spec, ingressClassName: "sluice" },
    },
    "changed",
  ],
  [
    "manifest objects without resourceVersion that are identical",
    "Ingress",
    noRv(ingress("web")),
    noRv(ingress("web")),
    "unchanged",
  ],
  [
    "manifest objects without resourceVersion that differ",
    "Ingress",
    noRv(ingress("web")),
    noRv(withHost(ingress("web"), "x.test", "")),
    "changed",
  ],
  ["any IngressClass change", "IngressClass", undefined, {
    metadata: { name: "nginx", resourceVersion: "1" },
  }, "added"],
  ["a referenced Secret", "Secret", secret("tls"), secret("tls", "2"), "changed"],
  ["a deleted referenced Secret", "Secret", secret("tls"), undefined, "deleted"],
  ["a Secret nobody refers to", "Secret", undefined, secret("other"), "unreferenced-secret"],
  ["a referenced Service", "Service", undefined, service("web"), "added"],
  [
    "a Service nobody refers to",
    "Service",
    service("api"),
    service("api", "2"),
    "unreferenced-service",
  ],
  [
    "a slice of a referenced Service",
    "EndpointSlice",
    slice("web-1", "web"),
    slice("web-1", "web", "2"),
    "changed",
  ],
  [
    "a slice of a Service nobody refers to",
    "EndpointSlice",
    undefined,
    slice("api-1", "api"),
    "unreferenced-endpoint-slice",
  ],
  [
    "a slice without a Service label",
    "EndpointSlice",
    undefined,
    slice("x", undefined),
    "unreferenced-endpoint-slice",
  ],
  [
    "a slice relabelled away from a referenced Service",
    "EndpointSlice",
    slice("s", "web"),
    slice("s", "api", "2"),
    "changed",
  ],
  [
    "a slice relabelled onto a referenced Service",
    "EndpointSlice",
    slice("s", "api"),
    slice("s", "web", "2"),
    "changed",
  ],
  ["nothing before or after", "Service", undefined, undefined, "absent"],
];

/** Any object: Gateway API objects and Namespaces have fields `KubeObject` does not name. */
type AnyObject = KubeObject & Record<string, unknown>;

/** A Gateway API object of `kind` with a spec, at `rv`. */
function gatewayObject(kind: Kind, rv: string): AnyObject {
  const namespaced = kind !== "GatewayClass";
  return {
    metadata: {
      ...(namespaced ? { namespace: "shop" } : {}),
      name: "web",
      resourceVersion: rv,
      generation: 1,
    },
    spec: { name: "as written" },
  };
}
const withGatewayStatus = (o: AnyObject, rv: string): AnyObject => ({
  ...o,
  metadata: { ...o.metadata, resourceVersion: rv },
  status: { conditions: [{ type: "Accepted", status: "True" }] },
});
const withSpec = (o: AnyObject, rv: string): AnyObject => ({
  ...o,
  metadata: { ...o.metadata, resourceVersion: rv, generation: 2 },
  spec: { name: "edited" },
});

for (const kind of ["GatewayClass", "Gateway", "HTTPRoute", "ReferenceGrant"] as const) {
  const object = gatewayObject(kind, "1");
  const a = kind === "HTTPRoute" ? "an" : "a";
  cases.push(
    [`an added ${kind}`, kind, undefined, object, "added"],
    [`a deleted ${kind}`, kind, object, undefined, "deleted"],
    [
      `a status-only update of ${a} ${kind}`,
      kind,
      object,
      withGatewayStatus(object, "2"),
      "status-only",
    ],
    [
      `a status update by watch of ${a} ${kind} first seen in a LIST (without kind and apiVersion)`,
      kind,
      object,
      { ...withGatewayStatus(object, "2"), kind, apiVersion: "gateway.networking.k8s.io/v1" },
      "status-only",
    ],
    [`a spec change of ${a} ${kind}`, kind, object, withSpec(object, "2"), "changed"],
    [
      `a spec change of ${a} ${kind} that also wrote its status`,
      kind,
      withGatewayStatus(object, "1"),
      withGatewayStatus(withSpec(object, "2"), "2"),
      "changed",
    ],
    [
      `a label change of ${a} ${kind}`,
      kind,
      object,
      { ...object, metadata: { ...object.metadata, resourceVersion: "2", labels: { a: "b" } } },
      "changed",
    ],
  );
}

/** Namespace `shop` at `rv`, labelled `team: a` unless `labels` says otherwise (`null`: none). */
const namespace = (
  rv: string,
  metadata: Omit<Partial<ObjectMeta>, "labels"> & { labels?: ObjectMeta["labels"] | null } = {},
): AnyObject => {
  const { labels = { team: "a" }, ...rest } = metadata;
  return {
    metadata: { name: "shop", resourceVersion: rv, ...(labels ? { labels } : {}), ...rest },
  };
};
cases.push(
  ["an added Namespace", "Namespace", undefined, namespace("1"), "added"],
  ["a deleted Namespace", "Namespace", namespace("1"), undefined, "deleted"],
  [
    "a label change of a Namespace",
    "Namespace",
    namespace("1"),
    namespace("2", { labels: { team: "b" } }),
    "changed",
  ],
  [
    "a label added to a Namespace",
    "Namespace",
    namespace("1", { labels: null }),
    namespace("2"),
    "changed",
  ],
  [
    "an annotation-only change of a Namespace",
    "Namespace",
    namespace("1"),
    namespace("2", { annotations: { owner: "ops" } }),
    "same-labels",
  ],
  [
    "a status change of a Namespace (Terminating)",
    "Namespace",
    namespace("1"),
    { ...namespace("2"), status: { phase: "Terminating" } } as AnyObject,
    "same-labels",
  ],
  [
    "a Namespace whose labels went from absent to empty",
    "Namespace",
    namespace("1", { labels: null }),
    namespace("2", { labels: {} }),
    "same-labels",
  ],
);

for (const [what, kind, before, after, reason] of cases) {
  const matters = reason === "added" || reason === "changed" || reason === "deleted";
  Deno.test(`classifyChange() says ${what} ${matters ? "matters" : "does not matter"} (${reason})`, () => {
    assertEquals(classifyChange(kind, before, after, context), { matters, reason });
  });
}
