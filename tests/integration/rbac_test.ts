import { assertEquals } from "../support/assert.ts";
import { KubeApiError, type KubeObject } from "../../lib/k8s/kube_client.ts";
import {
  ENDPOINT_SLICES,
  EVENTS,
  GATEWAY_CLASSES,
  GATEWAYS,
  HTTP_ROUTES,
  INGRESS_CLASSES,
  INGRESSES,
  LEASES,
  NAMESPACES,
  REFERENCE_GRANTS,
  SECRETS,
  SERVICES,
} from "../../lib/k8s/resources.ts";
import { PODS, SERVICE_ACCOUNTS } from "../support/core_resources.ts";
import { controllerIdentity } from "../support/controller_identity.ts";
import { adminClient, freshNamespace } from "../support/kube.ts";
import { waitFor } from "../support/wait.ts";
import { defaultBackendIngress } from "../support/fixture_objects.ts";

async function status(call: () => Promise<unknown>): Promise<number> {
  try {
    const result = await call();
    if (result instanceof Response) await result.body?.cancel();
    return 200;
  } catch (e) {
    if (e instanceof KubeApiError) return e.status;
    throw e;
  }
}

Deno.test("the ClusterRole in manifests/ allows what the controller needs and denies the rest", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "rbac");
  const sa = await controllerIdentity(admin.client, ns);
  try {
    // Authorization caches catch up with new bindings asynchronously.
    await waitFor("the binding to take effect", async () => {
      return await status(() => sa.client.list(INGRESSES)) === 200;
    });

    await admin.client.create(INGRESSES, { namespace: ns }, defaultBackendIngress("web"));
    await admin.client.create(SECRETS, { namespace: ns }, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "plain" },
      stringData: { password: "hunter2" },
    });

    const c = sa.client;
    const allowed: Record<string, () => Promise<unknown>> = {
      "list Ingresses in all namespaces": () => c.list(INGRESSES),
      "list IngressClasses": () => c.list(INGRESS_CLASSES),
      "list Services": () => c.list(SERVICES),
      "list EndpointSlices": () => c.list(ENDPOINT_SLICES),
      "list TLS Secrets": () => c.list(SECRETS, { fieldSelector: "type=kubernetes.io/tls" }),
      "watch Ingresses": () =>
        c.request("GET", `/apis/networking.k8s.io/v1/ingresses`, {
          query: { watch: true, timeoutSeconds: 1 },
        }),
      "patch Ingress status": () =>
        c.patch(INGRESSES, { namespace: ns, name: "web", subresource: "status" }, {
          status: { loadBalancer: { ingress: [{ ip: "192.0.2.10" }] } },
        }),
      "create an Event": () =>
        c.create(EVENTS, { namespace: ns }, {
          apiVersion: "v1",
          kind: "Event",
          metadata: { name: `web.${crypto.randomUUID().slice(0, 8)}` },
          involvedObject: {
            kind: "Ingress",
            namespace: ns,
            name: "web",
            apiVersion: "networking.k8s.io/v1",
          },
          reason: "Test",
          message: "RBAC test",
          type: "Normal",
          source: { component: "sluice" },
        }),
      "create a Lease in its namespace": () =>
        c.create(LEASES, { namespace: ns }, {
          apiVersion: "coordination.k8s.io/v1",
          kind: "Lease",
          metadata: { name: "sluice-leader" },
          spec: { holderIdentity: "test", leaseDurationSeconds: 15 },
        }),
      "get its Lease": () => c.get(LEASES, { namespace: ns, name: "sluice-leader" }),
      "list Namespaces": () => c.list(NAMESPACES),
    };
    // Gateway API: allowed means anything but 403 (200, or 404 while its CRDs
    // are not installed or the object does not exist: authorisation comes first).
    const allowedWithoutCrd: Record<string, () => Promise<unknown>> = {
      "list GatewayClasses": () => c.list(GATEWAY_CLASSES),
      "list Gateways": () => c.list(GATEWAYS),
      "list HTTPRoutes": () => c.list(HTTP_ROUTES),
      "list ReferenceGrants": () => c.list(REFERENCE_GRANTS),
      "patch HTTPRoute status": () =>
        c.patch(HTTP_ROUTES, { namespace: ns, name: "r", subresource: "status" }, { status: {} }),
      "patch Gateway status": () =>
        c.patch(GATEWAYS, { namespace: ns, name: "g", subresource: "status" }, { status: {} }),
      "patch GatewayClass status": () =>
        c.patch(GATEWAY_CLASSES, { name: "c", subresource: "status" }, { status: {} }),
    };
    const denied: Record<string, () => Promise<unknown>> = {
      "list Pods": () => c.list(PODS),
      "delete a Namespace": () => c.delete(NAMESPACES, { name: ns }),
      "change an HTTPRoute's spec": () =>
        c.patch(HTTP_ROUTES, { namespace: ns, name: "r" }, { spec: {} }),
      "update a Secret": () =>
        c.patch(SECRETS, { namespace: ns, name: "plain" }, { stringData: { password: "x" } }),
      "create an Ingress": () =>
        c.create(INGRESSES, { namespace: ns }, {
          apiVersion: "networking.k8s.io/v1",
          kind: "Ingress",
          metadata: { name: "evil" },
          spec: { defaultBackend: { service: { name: "x", port: { number: 80 } } } },
        }),
      "change an Ingress's spec": () =>
        c.patch(INGRESSES, { namespace: ns, name: "web" }, { spec: { ingressClassName: "x" } }),
      "delete a Service": () => c.delete(SERVICES, { namespace: ns, name: "kubernetes" }),
      "create a Lease in another namespace": () =>
        c.create(LEASES, { namespace: "default" }, {
          apiVersion: "coordination.k8s.io/v1",
          kind: "Lease",
          metadata: { name: "sluice-leader" },
          spec: { holderIdentity: "test" },
        }),
      "read ServiceAccount tokens": () =>
        c.create(SERVICE_ACCOUNTS, { namespace: ns, name: "sluice", subresource: "token" }, {
          apiVersion: "authentication.k8s.io/v1",
          kind: "TokenRequest",
          spec: {},
        }),
    };
    const results: Record<string, number> = {};
    for (const [what, call] of Object.entries({ ...allowed, ...denied })) {
      results[what] = await status(call);
    }
    for (const [what, call] of Object.entries(allowedWithoutCrd)) {
      results[what] = await status(call) === 403 ? 403 : 0;
    }
    const expected: Record<string, number> = {};
    for (const what of Object.keys(allowed)) expected[what] = 200;
    for (const what of Object.keys(allowedWithoutCrd)) expected[what] = 0;
    for (const what of Object.keys(denied)) expected[what] = 403;
    assertEquals(results, expected);

    const written = await admin.client.get<KubeObject & { status: unknown }>(INGRESSES, {
      namespace: ns,
      name: "web",
    });
    assertEquals(written.status, { loadBalancer: { ingress: [{ ip: "192.0.2.10" }] } });
  } finally {
    await sa.cleanup();
    admin.access.close();
  }
});
