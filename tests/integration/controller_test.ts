/**
 * The control loop against the real kube-apiserver: reflectors → store →
 * scheduler → translate → publish, under the ServiceAccount and RBAC shipped
 * in `manifests/`.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/integration/controller_test.ts
 */
import { assert, assertEquals } from "../support/assert.ts";
import { adminClient, freshNamespace } from "../support/kube.ts";
import { controllerIdentity } from "../support/controller_identity.ts";
import { waitFor, within } from "../support/wait.ts";
import { TEST_CERT_PEM, TEST_KEY_PEM } from "../support/test_certs.ts";
import { KubeApiError, type KubeClient, type ListOptions } from "../../lib/k8s/kube_client.ts";
import type { ReflectorClient } from "../../lib/k8s/reflector.ts";
import {
  ENDPOINT_SLICES,
  INGRESS_CLASSES,
  INGRESSES,
  type Resource,
  SECRETS,
  SERVICES,
} from "../../lib/k8s/resources.ts";
import { KubeSource } from "../../lib/sources/kube_source.ts";
import { Controller } from "../../lib/control/controller.ts";
import { captureLogs } from "../support/captured_logs.ts";
import { createCertificateInspector } from "../../lib/tls/certificate_inspector.ts";
import type { Translation } from "../../lib/translate/translation.ts";
import { webEndpointSlice, webService } from "../support/fixture_objects.ts";

interface Setup {
  admin: KubeClient;
  ns: string;
  className: string;
  controllerName: string;
}

async function prepare(admin: KubeClient, prefix: string): Promise<Setup> {
  const ns = await freshNamespace(admin, prefix);
  const controllerName = `sluice.dev/test-${ns}`;
  await admin.create(INGRESS_CLASSES, {}, {
    apiVersion: "networking.k8s.io/v1",
    kind: "IngressClass",
    metadata: { name: ns },
    spec: { controller: controllerName },
  });
  await admin.create(SERVICES, { namespace: ns }, webService());
  await admin.create(ENDPOINT_SLICES, { namespace: ns }, webEndpointSlice(["10.244.0.10"]));
  return { admin, ns, className: ns, controllerName };
}

function ingress(className: string, options: { host?: string; tls?: boolean } = {}) {
  const host = options.host ?? "web.example.com";
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "Ingress",
    metadata: { name: "web" },
    spec: {
      ingressClassName: className,
      ...(options.tls ? { tls: [{ hosts: [host], secretName: "tls" }] } : {}),
      rules: [{
        host,
        http: {
          paths: [{
            path: "/",
            pathType: "Prefix",
            backend: { service: { name: "web", port: { name: "http" } } },
          }],
        },
      }],
    },
  };
}

function tlsSecret(name: string) {
  return {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name },
    type: "kubernetes.io/tls",
    data: { "tls.crt": btoa(TEST_CERT_PEM), "tls.key": btoa(TEST_KEY_PEM) },
  };
}

function endpointsOf(translation: Translation | undefined): string[] {
  const route = translation?.routes[0];
  const backend = translation?.backends.find((b) => b.key === route?.backend);
  return (backend?.endpoints ?? []).map((e) => `${e.address}:${e.port}`).sort();
}

Deno.test("Controller publishes routes from the apiserver, under the shipped RBAC, and follows every change that matters", async () => {
  const { client: admin, access: adminAccess } = await adminClient();
  using logs = captureLogs();
  const setup = await prepare(admin, "ctl");
  const { ns, className, controllerName } = setup;
  await admin.create(INGRESSES, { namespace: ns }, ingress(className));
  const identity = await controllerIdentity(admin, ns);
  const published: Translation[] = [];
  const controller = new Controller({
    sources: [
      new KubeSource({ client: identity.client, logger: logs.logger, watchNamespaces: [ns] }),
    ],
    settings: { controllerName, ingressClass: className },
    inspectCertificate: createCertificateInspector(),
    publish: (t) => {
      published.push(t);
    },
    logger: logs.logger,
  });
  const rebuilds = () => controller.stats().rebuilds;
  try {
    assert(!controller.ready);
    controller.start();
    await within(15_000, "readiness", controller.whenReady);
    assertEquals(published.length, 1);
    assertEquals(published[0]!.routes.map((r) => `${r.host}${r.path} ${r.ingress}`), [
      `web.example.com/ ${ns}/web`,
    ]);
    assertEquals(endpointsOf(published[0]), ["10.244.0.10:8080"]);
    const stats = controller.stats();
    assert(stats.ready);
    const source = stats.sources[0]!;
    assert(source.type === "kubernetes" && source.reflectors.every((r) => r.synced));
    assertEquals(source.reflectors.length, 5);

    // Our own status write comes back as a status-only change: no rebuild.
    const before = rebuilds();
    const patched = await admin.patch<{ metadata: { resourceVersion: string } }>(
      INGRESSES,
      { namespace: ns, name: "web", subresource: "status" },
      { status: { loadBalancer: { ingress: [{ ip: "192.0.2.1" }] } } },
    );
    await waitFor(
      "the status change in the store",
      () =>
        controller.store.get("Ingress", `${ns}/web`)?.metadata?.resourceVersion ===
          patched.metadata.resourceVersion,
    );
    // An unrelated TLS Secret: stored, no rebuild.
    await admin.create(SECRETS, { namespace: ns }, tlsSecret("unused"));
    await waitFor(
      "the unused Secret in the store",
      () => controller.store.get("Secret", `${ns}/unused`),
    );
    assertEquals(rebuilds(), before, JSON.stringify(controller.stats().changes));
    assert(controller.stats().changes["status-only"] >= 1);
    assert(controller.stats().changes["unreferenced-secret"] >= 1);

    // Endpoints scaled up.
    const current = await admin.get<{ metadata: { resourceVersion: string } }>(ENDPOINT_SLICES, {
      namespace: ns,
      name: "web-1",
    });
    await admin.update(
      ENDPOINT_SLICES,
      { namespace: ns, name: "web-1" },
      webEndpointSlice(["10.244.0.10", "10.244.0.11"], current.metadata.resourceVersion),
    );
    await waitFor("two endpoints", () => endpointsOf(controller.published).length === 2);
    assertEquals(endpointsOf(controller.published), ["10.244.0.10:8080", "10.244.0.11:8080"]);

    // TLS: the Ingress names a Secret; the certificate is published.
    await admin.create(SECRETS, { namespace: ns }, tlsSecret("tls"));
    const ing = await admin.get<{ metadata: { resourceVersion: string } }>(INGRESSES, {
      namespace: ns,
      name: "web",
    });
    await admin.update(INGRESSES, { namespace: ns, name: "web" }, {
      ...ingress(className, { tls: true }),
      metadata: { name: "web", resourceVersion: ing.metadata.resourceVersion },
    });
    await waitFor("the certificate", () => controller.published?.certificates.length === 1);
    assertEquals(controller.published?.certificates[0]?.secret, `${ns}/tls`);

    // Service deleted: the route stays and answers 503.
    await admin.delete(SERVICES, { namespace: ns, name: "web" });
    await waitFor(
      "the backend without endpoints",
      () => endpointsOf(controller.published).length === 0,
    );
    assertEquals(controller.published?.routes.length, 1);

    // Ingress deleted: no route.
    await admin.delete(INGRESSES, { namespace: ns, name: "web" });
    await waitFor("no routes", () => controller.published?.routes.length === 0);
    assertEquals(controller.stats().translateErrors, 0);
    // Every publish differed from the one before it.
    for (let i = 1; i < published.length; i++) {
      assert(JSON.stringify(published[i]) !== JSON.stringify(published[i - 1]), `publish ${i}`);
    }
  } finally {
    await controller.stop();
    await admin.delete(INGRESS_CLASSES, { name: className }).catch(() => {});
    await identity.cleanup();
    adminAccess.close();
  }
});

Deno.test("Controller publishes nothing and is not ready until every kind has been listed", async () => {
  const { client: admin, access } = await adminClient();
  using logs = captureLogs();
  const { ns, className, controllerName } = await prepare(admin, "gate");
  await admin.create(INGRESSES, { namespace: ns }, ingress(className));
  // Secrets cannot be listed (as if RBAC were missing) until the gate opens.
  let open = false;
  let refused = 0;
  const gated: ReflectorClient = {
    list<T>(r: Resource, options?: ListOptions) {
      if (r === SECRETS && !open) {
        refused++;
        return Promise.reject(
          new KubeApiError("list secrets", 403, { reason: "Forbidden", message: "gate closed" }),
        );
      }
      return admin.list<T>(r, options);
    },
    watch: (r, options) => admin.watch(r, options),
  };
  const published: Translation[] = [];
  const controller = new Controller({
    sources: [
      new KubeSource({
        client: gated,
        logger: logs.logger,
        watchNamespaces: [ns],
        reflector: { backoff: { initialMs: 50, maxMs: 200 } },
      }),
    ],
    settings: { controllerName, ingressClass: className },
    inspectCertificate: createCertificateInspector(),
    publish: (t) => {
      published.push(t);
    },
    logger: logs.logger,
  });
  try {
    controller.start();
    await waitFor("three refused Secret lists", () => refused >= 3);
    const source = controller.stats().sources[0]!;
    assert(source.type === "kubernetes");
    assertEquals(source.reflectors.filter((r) => r.synced).length, 4);
    assert(!controller.ready);
    assertEquals(published.length, 0);
    open = true;
    await within(10_000, "readiness", controller.whenReady);
    assertEquals(published.length, 1);
    assertEquals(published[0]!.routes.length, 1);
  } finally {
    await controller.stop();
    await admin.delete(INGRESS_CLASSES, { name: className }).catch(() => {});
    access.close();
  }
});
