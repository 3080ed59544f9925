/**
 * Sluice as a real process against the real kube-apiserver, as the
 * controller's ServiceAccount under the shipped RBAC, in front of echo
 * backends living in network namespaces: Ingresses, Services,
 * EndpointSlices and TLS Secrets created, changed and deleted, and requests
 * routed accordingly, over HTTP and over HTTPS with SNI.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/e2e/routing_test.ts
 *
 * @module
 */
import { assertEquals, assertRejects } from "../support/assert.ts";
import { apply } from "../support/manifests.ts";
import { createTestHost } from "../support/netns.ts";
import { waitFor } from "../support/wait.ts";
import { ENDPOINT_SLICES, INGRESSES, SERVICES } from "../../lib/k8s/resources.ts";
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";
import {
  assertRunning,
  e2eWorld,
  endpointSlice,
  HostClient,
  hostIngress,
  ingress,
  podsSeen,
  service,
  tlsGet,
  tlsSecret,
  withController,
} from "./cluster_fixture.ts";

/** One test's world, with the admin client at hand as `admin`. */
async function world(prefix: string) {
  const w = await e2eWorld(prefix);
  return { ...w, admin: w.admin.client };
}

Deno.test("Sluice routes by host and path as Ingresses, Services and EndpointSlices change", async () => {
  const w = await world("e2e-routing");
  await using hostA = await createTestHost({ name: "pod-a" });
  await using hostB = await createTestHost({ name: "pod-b" });
  using http = new HostClient();
  const { admin, ns, className } = w;
  const at = { namespace: ns };
  try {
    await Promise.all([
      hostA.startEchoBackend({ port: 8080, service: "web", pod: "web-a" }),
      hostA.startEchoBackend({ port: 8081, service: "api", pod: "api-a" }),
      hostB.startEchoBackend({ port: 8080, service: "web", pod: "web-b" }),
    ]);
    await apply(admin, service("web", 8080), at);
    await apply(
      admin,
      endpointSlice("web-1", { service: "web", addresses: [hostA.address], port: 8080 }),
      at,
    );
    await apply(
      admin,
      hostIngress("shop", { className, host: "shop.e2e.test", service: "web" }),
      at,
    );

    await withController({
      credentials: w.credentials,
      controllerName: w.controllerName,
      electionNamespace: ns,
    }, async (sluice, exit) => {
      const port = sluice.httpPort;
      assertEquals((await http.get(port, "shop.e2e.test", "/cart")).pod, "web-a");
      assertEquals((await http.get(port, "unknown.e2e.test", "/")).status, 404);

      // Scaled up: round-robin reaches the new pod.
      await apply(
        admin,
        endpointSlice("web-1", {
          service: "web",
          addresses: [hostA.address, hostB.address],
          port: 8080,
        }),
        at,
      );
      await waitFor("the new pod web-b to get requests", async () => {
        const pods = await podsSeen(http, port, "shop.e2e.test", { n: 4 });
        return pods.has("web-b") && pods.has("web-a");
      }, { timeoutMs: 5_000 });

      // Scaled down: the removed pod gets nothing more.
      await apply(
        admin,
        endpointSlice("web-1", { service: "web", addresses: [hostB.address], port: 8080 }),
        at,
      );
      await waitFor("web-a to leave the rotation", async () => {
        const pods = await podsSeen(http, port, "shop.e2e.test", { n: 4 });
        return pods.size === 1 && pods.has("web-b");
      }, { timeoutMs: 5_000 });
      assertEquals([...await podsSeen(http, port, "shop.e2e.test", { n: 20 })], ["web-b"]);

      // A second Service and an Exact path added to the Ingress.
      await apply(admin, service("api", 8081), at);
      await apply(
        admin,
        endpointSlice("api-1", { service: "api", addresses: [hostA.address], port: 8081 }),
        at,
      );
      await apply(
        admin,
        ingress("shop", {
          className,
          rules: [{
            host: "shop.e2e.test",
            paths: [
              { path: "/", service: "web" },
              { path: "/api/health", pathType: "Exact", service: "api" },
            ],
          }],
        }),
        at,
      );
      await waitFor(
        "the Exact path to reach api",
        async () => (await http.get(port, "shop.e2e.test", "/api/health")).pod === "api-a",
      );
      // Exact means exact: a longer path stays on the Prefix rule.
      assertEquals((await http.get(port, "shop.e2e.test", "/api/health/x")).pod, "web-b");

      // A Service deleted answers 503; recreated, it serves again.
      await admin.delete(SERVICES, { namespace: ns, name: "web" });
      await waitFor(
        "503 once Service web is gone",
        async () => (await http.get(port, "shop.e2e.test", "/")).status === 503,
      );
      assertEquals((await http.get(port, "shop.e2e.test", "/api/health")).pod, "api-a");
      await apply(admin, service("web", 8080), at);
      await waitFor(
        "Service web to serve again",
        async () => (await http.get(port, "shop.e2e.test", "/")).pod === "web-b",
      );

      // The EndpointSlice deleted: no ready endpoints, 503.
      await admin.delete(ENDPOINT_SLICES, { namespace: ns, name: "web-1" });
      await waitFor(
        "503 once the EndpointSlice is gone",
        async () => (await http.get(port, "shop.e2e.test", "/")).status === 503,
      );

      // The Ingress deleted: the host is unknown again.
      await admin.delete(INGRESSES, { namespace: ns, name: "shop" });
      await waitFor(
        "404 once the Ingress is gone",
        async () => (await http.get(port, "shop.e2e.test", "/api/health")).status === 404,
      );
      assertRunning(sluice, exit);
    });
  } finally {
    await w.close();
  }
});

Deno.test("Sluice serves each TLS host its Secret's certificate by SNI and picks up a rotated one", async () => {
  const w = await world("e2e-tls");
  await using host = await createTestHost({ name: "pod-secure" });
  using http = new HostClient();
  const { admin, ns, className } = w;
  const at = { namespace: ns };
  const first = await generateSelfSignedCertificate({ hostnames: ["secure.e2e.test"] });
  const second = await generateSelfSignedCertificate({ hostnames: ["secure.e2e.test"] });
  const other = await generateSelfSignedCertificate({ hostnames: ["other.e2e.test"] });
  try {
    await host.startEchoBackend({ port: 8080, service: "web", pod: "secure-1" });
    await apply(admin, service("web", 8080), at);
    await apply(
      admin,
      endpointSlice("web-1", { service: "web", addresses: [host.address], port: 8080 }),
      at,
    );
    await apply(admin, tlsSecret("secure-tls", first.certPem, first.keyPem), at);
    await apply(admin, tlsSecret("other-tls", other.certPem, other.keyPem), at);
    await apply(
      admin,
      ingress("secure", {
        className,
        tls: [
          { hosts: ["secure.e2e.test"], secretName: "secure-tls" },
          { hosts: ["other.e2e.test"], secretName: "other-tls" },
        ],
        rules: [
          { host: "secure.e2e.test", paths: [{ path: "/", service: "web" }] },
          { host: "other.e2e.test", paths: [{ path: "/", service: "web" }] },
        ],
      }),
      at,
    );
    await withController({
      credentials: w.credentials,
      controllerName: w.controllerName,
      electionNamespace: ns,
      extraArgs: ["--https-redirect-port=8443"],
    }, async (sluice, exit) => {
      const port = sluice.httpsPort;
      const served = await tlsGet(port, "secure.e2e.test", { caCerts: [first.certPem] });
      assertEquals([served.status, served.pod], [200, "secure-1"]);
      // Each name gets its own certificate.
      assertEquals(
        (await tlsGet(port, "other.e2e.test", { caCerts: [other.certPem] })).pod,
        "secure-1",
      );
      await assertRejects(() => tlsGet(port, "secure.e2e.test", { caCerts: [other.certPem] }));
      // Plain HTTP for a TLS host redirects to HTTPS.
      const redirect = await http.get(sluice.httpPort, "secure.e2e.test", "/a?b=1");
      assertEquals(
        [redirect.status, redirect.location],
        [308, "https://secure.e2e.test:8443/a?b=1"],
      );

      // Rotated: the new certificate is served, the old one no longer.
      await apply(admin, tlsSecret("secure-tls", second.certPem, second.keyPem), at);
      await waitFor("the rotated certificate", async () => {
        const r = await tlsGet(port, "secure.e2e.test", { caCerts: [second.certPem] });
        return r.status === 200;
      }, { timeoutMs: 5_000 });
      await assertRejects(() => tlsGet(port, "secure.e2e.test", { caCerts: [first.certPem] }));
      // The other host keeps its certificate. (Polled: while the retired listener generation
      // shuts down, a connection it had accepted can be closed before its request is read,
      // a known data-plane limitation reported with this test.)
      await waitFor("the other host after the rotation", async () => {
        const r = await tlsGet(port, "other.e2e.test", { caCerts: [other.certPem] });
        return r.status === 200;
      }, { timeoutMs: 5_000 });
      assertRunning(sluice, exit);
    });
  } finally {
    await w.close();
  }
});
