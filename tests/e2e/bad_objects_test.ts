/**
 * Bad objects, end to end: an Ingress naming a missing Service, a TLS Secret
 * holding garbage, regex-looking paths, and one Ingress with thousands of
 * rules. None of them crashes Sluice or disturbs another Ingress's routes,
 * and the problems show up as Warning Events on the Ingresses.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/e2e/bad_objects_test.ts
 *
 * @module
 */
import { assertEquals } from "../support/assert.ts";
import { apply } from "../support/manifests.ts";
import { createTestHost } from "../support/netns.ts";
import { waitFor } from "../support/wait.ts";
import type { KubeObject } from "../../lib/k8s/kube_client.ts";
import { SECRETS } from "../../lib/k8s/resources.ts";
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";
import {
  assertRunning,
  e2eWorld,
  eventsFor,
  HostClient,
  hostIngress,
  ingress,
  tlsGet,
  tlsSecret,
  webBackend,
  withController,
} from "./cluster_fixture.ts";

const HUGE_RULES = 3_000;

Deno.test("Bad objects never crash Sluice nor disturb other Ingresses, and are reported as Warning Events", async () => {
  const world = await e2eWorld("e2e-bad");
  const { admin, ns, at, controllerName, credentials } = world;
  await using host = await createTestHost({ name: "pod-good" });
  using http = new HostClient();
  const good = await generateSelfSignedCertificate({ hostnames: ["good.e2e.test"] });
  try {
    await webBackend(admin.client, at, host);
    await apply(admin.client, tlsSecret("good-tls", good.certPem, good.keyPem), at);
    await apply(
      admin.client,
      hostIngress("good", {
        className: ns,
        host: "good.e2e.test",
        service: "web",
        secretName: "good-tls",
      }),
      at,
    );
    await withController(
      { credentials, controllerName, electionNamespace: ns },
      async (sluice, exit) => {
        const goodStillServed = async () => {
          assertRunning(sluice, exit);
          const https = await tlsGet(sluice.httpsPort, "good.e2e.test", {
            caCerts: [good.certPem],
          });
          assertEquals([https.status, https.pod], [200, "web-1"]);
        };
        await goodStillServed();

        // An Ingress naming a Service that does not exist: 503 for its host, an Event.
        await apply(
          admin.client,
          hostIngress("missing", { className: ns, host: "missing.e2e.test", service: "nope" }),
          at,
        );
        await waitFor(
          "503 for the Ingress naming a missing Service",
          async () => (await http.get(sluice.httpPort, "missing.e2e.test")).status === 503,
        );
        await goodStillServed();

        // A TLS Secret holding garbage: the host is still routed, with an Event.
        await admin.client.create(SECRETS, at, {
          apiVersion: "v1",
          kind: "Secret",
          metadata: { name: "garbage-tls" },
          type: "kubernetes.io/tls",
          data: { "tls.crt": btoa("not a certificate"), "tls.key": btoa("nor a key") },
        } as KubeObject);
        await apply(
          admin.client,
          hostIngress("garbage", {
            className: ns,
            host: "garbage.e2e.test",
            service: "web",
            secretName: "garbage-tls",
          }),
          at,
        );
        await waitFor(
          "the host with a garbage certificate to be routed",
          async () => (await http.get(sluice.httpPort, "garbage.e2e.test")).status !== 404,
        );
        // Its handshake must not present the good host's certificate.
        let garbageHandshake = "rejected";
        try {
          await tlsGet(sluice.httpsPort, "garbage.e2e.test", { caCerts: [good.certPem] });
          garbageHandshake = "accepted";
        } catch {
          // Expected: not the good certificate.
        }
        assertEquals(garbageHandshake, "rejected");
        await goodStillServed();

        // Regex-looking paths are literal paths, never compiled as patterns.
        await apply(
          admin.client,
          ingress("regex", {
            className: ns,
            rules: [{
              host: "regex.e2e.test",
              paths: [
                { path: "/api/(v[0-9]+/.*", pathType: "ImplementationSpecific", service: "web" },
                { path: "/items/[a-z]+", pathType: "Prefix", service: "web" },
                { path: "/x/.*|*", pathType: "Exact", service: "web" },
              ],
            }],
          }),
          at,
        );
        await waitFor(
          "the literal regex-looking Prefix path to be routed",
          async () => (await http.get(sluice.httpPort, "regex.e2e.test", "/items/[a-z]+")).pod,
        );
        assertEquals((await http.get(sluice.httpPort, "regex.e2e.test", "/items/abc")).status, 404);
        assertEquals((await http.get(sluice.httpPort, "regex.e2e.test", "/api/v1/x")).status, 404);
        assertEquals((await http.get(sluice.httpPort, "regex.e2e.test", "/x/yz")).status, 404);
        await goodStillServed();

        // One Ingress with thousands of rules.
        await apply(
          admin.client,
          ingress("huge", {
            className: ns,
            rules: Array.from({ length: HUGE_RULES }, (_, i) => ({
              host: `h${i}.huge.e2e.test`,
              paths: [{ path: `/p${i}`, service: "web" }],
            })),
          }),
          at,
        );
        await waitFor(
          "the last rule of the huge Ingress to be routed",
          async () =>
            (await http.get(
              sluice.httpPort,
              `h${HUGE_RULES - 1}.huge.e2e.test`,
              `/p${HUGE_RULES - 1}/x`,
            )).pod === "web-1",
          { timeoutMs: 15_000 },
        );
        assertEquals(
          (await http.get(sluice.httpPort, "h1500.huge.e2e.test", "/p1500")).pod,
          "web-1",
        );
        assertEquals((await http.get(sluice.httpPort, "h1500.huge.e2e.test", "/p1")).status, 404);
        await goodStillServed();

        // The problems are Warning Events on the Ingresses concerned, once each.
        for (const name of ["missing", "garbage"]) {
          const events = await waitFor(`a Warning Event on Ingress ${ns}/${name}`, async () => {
            const found = (await eventsFor(admin.client, ns, "Ingress", name))
              .filter((e) => e.type === "Warning");
            return found.length > 0 ? found : undefined;
          });
          // Once per issue, not once per rebuild (several rebuilds happened since).
          assertEquals(events.map((e) => [e.reason, e.count]), [["RoutingIssue", 1]]);
        }
        const goodEvents = await eventsFor(admin.client, ns, "Ingress", "good");
        assertEquals(goodEvents.filter((e) => e.type === "Warning"), []);
        assertRunning(sluice, exit);
      },
    );
  } finally {
    await world.close();
  }
});
