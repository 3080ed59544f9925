/**
 * Gateway API end to end: with the v1.6.3 CRDs installed on the test
 * cluster, a GatewayClass whose `controllerName` is Sluice's, a Gateway
 * listening on port 80 (Sluice's HTTP listener) and an HTTPRoute are served
 * through Sluice, running as a process under the shipped RBAC; the leader
 * writes the three statuses (conditions with `observedGeneration`, the
 * GatewayClass's supported features, the Gateway's address and the
 * listener's attached routes, the route's parent); a change to the route is
 * served and acknowledged.
 *
 * The CRDs are removed at the end: the cluster is shared, and other tests
 * check Sluice without them.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/e2e/gateway_api_test.ts
 *
 * @module
 */
import { assert, assertEquals } from "../support/assert.ts";
import { createTestHost } from "../support/netns.ts";
import { waitFor } from "../support/wait.ts";
import { installGatewayApiCrds, removeGatewayApiCrds } from "../support/gateway_api_crds.ts";
import type { KubeObject } from "../../lib/k8s/kube_client.ts";
import { GATEWAY_CLASSES, GATEWAYS, HTTP_ROUTES } from "../../lib/k8s/resources.ts";
import { GATEWAY_SUPPORTED_FEATURES } from "../../lib/translate/gateway/features.ts";
import { e2eWorld, HostClient, webBackend, withController } from "./cluster_fixture.ts";

const API = "gateway.networking.k8s.io/v1";

interface Condition {
  type: string;
  status: string;
  reason: string;
  observedGeneration: number;
}

type WithStatus = KubeObject & { status?: Record<string, unknown> };

function conditions(value: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  for (const c of (Array.isArray(value) ? value : []) as Condition[]) {
    out[c.type] = `${c.status}/${c.reason}@${c.observedGeneration}`;
  }
  return out;
}

function routeRules(prefix: string) {
  return [{
    matches: [{ path: { type: "PathPrefix", value: prefix } }],
    backendRefs: [{ name: "web", port: 80 }],
  }];
}

/**
 * Runs `body` in an e2e world with the Gateway API CRDs installed, the `web`
 * echo backend and a GatewayClass of Sluice's named after the namespace;
 * removes the class and the CRDs afterwards (the cluster is shared, and other
 * tests check Sluice without them).
 */
async function withGatewayWorld(
  name: string,
  body: (world: Awaited<ReturnType<typeof e2eWorld>>) => Promise<void>,
): Promise<void> {
  const world = await e2eWorld(name);
  const { admin, ns, at, controllerName } = world;
  await using host = await createTestHost({ name: `${name.slice(0, 8)}-pod` });
  try {
    await installGatewayApiCrds(admin.client);
    await webBackend(admin.client, at, host);
    await admin.client.create(GATEWAY_CLASSES, {}, {
      apiVersion: API,
      kind: "GatewayClass",
      metadata: { name: ns },
      spec: { controllerName },
    });
    await body(world);
  } finally {
    await admin.client.delete(GATEWAY_CLASSES, { name: ns }).catch(() => {});
    await removeGatewayApiCrds(admin.client);
    await world.close();
  }
}

Deno.test("Gateway API: an HTTPRoute on a Gateway of Sluice's GatewayClass is served, followed when it changes, and the leader writes every status", async () => {
  await withGatewayWorld("e2e-gateway", async (world) => {
    const { admin, ns, at, controllerName, credentials } = world;
    await admin.client.create(GATEWAYS, at, {
      apiVersion: API,
      kind: "Gateway",
      metadata: { name: "gateway" },
      spec: {
        gatewayClassName: ns,
        listeners: [{ name: "http", port: 80, protocol: "HTTP" }],
      },
    });
    await admin.client.create(HTTP_ROUTES, at, {
      apiVersion: API,
      kind: "HTTPRoute",
      metadata: { name: "web" },
      spec: {
        parentRefs: [{ name: "gateway" }],
        hostnames: ["gw.e2e.test"],
        rules: routeRules("/app"),
      },
    });

    await withController({
      credentials,
      controllerName,
      electionNamespace: ns,
      extraArgs: ["--publish-status-address=192.0.2.7"],
    }, async (sluice) => {
      using http = new HostClient();
      const port = sluice.httpPort;
      await waitFor(
        "the HTTPRoute to be served",
        async () => (await http.get(port, "gw.e2e.test", "/app/x")).status === 200,
      );
      assertEquals((await http.get(port, "gw.e2e.test", "/app/x")).pod, "web-1");
      assertEquals((await http.get(port, "gw.e2e.test", "/other")).status, 404);
      assertEquals((await http.get(port, "other.e2e.test", "/app")).status, 404);

      const statusOf = async (r: typeof GATEWAYS, name: string, namespaced = true) =>
        (await admin.client.get<WithStatus>(r, namespaced ? { ...at, name } : { name })).status ??
          {};
      await waitFor(
        "the GatewayClass to be Accepted",
        async () =>
          conditions((await statusOf(GATEWAY_CLASSES, ns, false)).conditions).Accepted ===
            "True/Accepted@1",
      );
      const classStatus = await statusOf(GATEWAY_CLASSES, ns, false);
      assertEquals(
        classStatus.supportedFeatures,
        [...GATEWAY_SUPPORTED_FEATURES].sort().map((name) => ({ name })),
      );

      await waitFor(
        "the Gateway to be Programmed",
        async () =>
          conditions((await statusOf(GATEWAYS, "gateway")).conditions).Programmed ===
            "True/Programmed@1",
      );
      const gateway = await statusOf(GATEWAYS, "gateway");
      assertEquals(conditions(gateway.conditions).Accepted, "True/Accepted@1");
      assertEquals(gateway.addresses, [{ type: "IPAddress", value: "192.0.2.7" }]);
      const [listener] = gateway.listeners as {
        name: string;
        attachedRoutes: number;
        supportedKinds: unknown;
        conditions: unknown;
      }[];
      assertEquals(listener?.name, "http");
      assertEquals(listener?.attachedRoutes, 1);
      assertEquals(listener?.supportedKinds, [{
        group: "gateway.networking.k8s.io",
        kind: "HTTPRoute",
      }]);
      assertEquals(conditions(listener?.conditions).Accepted, "True/Accepted@1");

      await waitFor("the HTTPRoute's parent to be Accepted", async () => {
        const parents = (await statusOf(HTTP_ROUTES, "web")).parents as
          | { controllerName: string; conditions: unknown }[]
          | undefined;
        return conditions(parents?.[0]?.conditions).Accepted === "True/Accepted@1";
      });
      const parents = (await statusOf(HTTP_ROUTES, "web")).parents as {
        controllerName: string;
        parentRef: { name: string };
        conditions: unknown;
      }[];
      assertEquals(parents.length, 1);
      assertEquals(parents[0]!.controllerName, controllerName);
      assertEquals(parents[0]!.parentRef.name, "gateway");
      assertEquals(conditions(parents[0]!.conditions).ResolvedRefs, "True/ResolvedRefs@1");

      // The route changes: the new path is served, the old one no longer, and
      // the parent's conditions follow the new generation.
      await admin.client.patch(HTTP_ROUTES, { ...at, name: "web" }, {
        spec: { rules: routeRules("/v2") },
      });
      await waitFor(
        "the changed HTTPRoute to be served",
        async () => (await http.get(port, "gw.e2e.test", "/v2/x")).status === 200,
      );
      assertEquals((await http.get(port, "gw.e2e.test", "/app/x")).status, 404);
      await waitFor("the parent's conditions at generation 2", async () => {
        const after = (await statusOf(HTTP_ROUTES, "web")).parents as
          | { conditions: unknown }[]
          | undefined;
        return conditions(after?.[0]?.conditions).Accepted === "True/Accepted@2";
      });
      assert(
        sluice.records().every((r) => r.level !== "ERROR" && r.level !== "FATAL"),
        "no errors logged",
      );
    });
  });
});

Deno.test("Gateway API: with --gateway-addresses each Gateway is served on its own address, with its own routes only", async () => {
  await withGatewayWorld("e2e-gateway-addresses", async (world) => {
    const { admin, ns, at, controllerName, credentials } = world;
    const gateway = (name: string) => ({
      apiVersion: API,
      kind: "Gateway",
      metadata: { name },
      spec: { gatewayClassName: ns, listeners: [{ name: "http", port: 80, protocol: "HTTP" }] },
    });
    const route = (name: string, parents: string[], prefix: string) => ({
      apiVersion: API,
      kind: "HTTPRoute",
      metadata: { name },
      spec: { parentRefs: parents.map((p) => ({ name: p })), rules: routeRules(prefix) },
    });
    await admin.client.create(GATEWAYS, at, gateway("first"));
    await admin.client.create(HTTP_ROUTES, at, route("shared", ["first", "second"], "/shared"));
    await admin.client.create(HTTP_ROUTES, at, route("first-only", ["first"], "/first"));
    await admin.client.create(HTTP_ROUTES, at, route("second-only", ["second"], "/second"));

    await withController({
      credentials,
      controllerName,
      electionNamespace: ns,
      extraArgs: ["--publish-status-address=192.0.2.7", "--gateway-addresses=127.0.1.1,127.0.1.2"],
    }, async (sluice) => {
      using http = new HostClient();
      const port = sluice.httpPort;
      const statusOf = async (name: string) =>
        (await admin.client.get<WithStatus>(GATEWAYS, { ...at, name })).status ?? {};
      const addressOf = async (name: string) =>
        ((await statusOf(name)).addresses as { value: string }[] | undefined)?.[0]?.value;
      // Created one after the other, so that "first" is the older of the two.
      await waitFor(
        "Gateway first to show its address",
        async () => await addressOf("first") === "127.0.1.1",
      );
      await admin.client.create(GATEWAYS, at, gateway("second"));
      await waitFor(
        "Gateway second to show its address",
        async () => await addressOf("second") === "127.0.1.2",
      );
      assertEquals((await statusOf("first")).addresses, [{
        type: "IPAddress",
        value: "127.0.1.1",
      }]);

      const status = (address: string, path: string) =>
        http.getOn(address, port, "any.e2e.test", path).then((a) => a.status);
      await waitFor(
        "the dedicated route of Gateway second",
        async () => await status("127.0.1.2", "/second") === 200,
      );
      const cases: [string, string, number][] = [
        ["127.0.1.1", "/shared", 200],
        ["127.0.1.1", "/first", 200],
        ["127.0.1.1", "/second", 404],
        ["127.0.1.2", "/shared", 200],
        ["127.0.1.2", "/second", 200],
        ["127.0.1.2", "/first", 404],
        // The main listener serves no Gateway that has an address of its own.
        ["127.0.0.1", "/shared", 404],
        ["127.0.0.1", "/first", 404],
      ];
      for (const [address, path, expected] of cases) {
        assertEquals(await status(address, path), expected, `${address}${path}`);
      }

      // A third Gateway finds no free address: not programmed, its route served nowhere.
      await admin.client.create(GATEWAYS, at, gateway("third"));
      await admin.client.create(HTTP_ROUTES, at, route("third-only", ["third"], "/third"));
      await waitFor(
        "Gateway third to be AddressNotAssigned",
        async () =>
          conditions((await statusOf("third")).conditions).Programmed ===
            "False/AddressNotAssigned@1",
      );
      for (const address of ["127.0.0.1", "127.0.1.1", "127.0.1.2"]) {
        assertEquals(await status(address, "/third"), 404, `${address}/third`);
      }
      assertEquals(await addressOf("first"), "127.0.1.1", "first keeps its address");

      // Its address freed, Gateway second's goes to third.
      await admin.client.delete(GATEWAYS, { ...at, name: "second" });
      await waitFor(
        "Gateway third to take the freed address",
        async () => await addressOf("third") === "127.0.1.2",
      );
      await waitFor(
        "the route of Gateway third on that address",
        async () => await status("127.0.1.2", "/third") === 200,
      );
      assertEquals(await status("127.0.1.2", "/second"), 404);
      assert(
        sluice.records().every((r) => r.level !== "ERROR" && r.level !== "FATAL"),
        "no errors logged",
      );
    });
  });
});
