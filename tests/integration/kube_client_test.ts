import { assert, assertEquals, assertRejects } from "../support/assert.ts";
import { KubeApiError, type KubeObject, type WatchItem } from "../../lib/k8s/kube_client.ts";
import {
  ENDPOINT_SLICES,
  INGRESS_CLASSES,
  INGRESSES,
  NAMESPACES,
  SECRETS,
  SERVICES,
} from "../../lib/k8s/resources.ts";
import { adminClient, freshNamespace } from "../support/kube.ts";
import { within } from "../support/wait.ts";
import { TEST_CERT_PEM, TEST_KEY_PEM } from "../support/test_certs.ts";
import { webEndpointSlice, webService } from "../support/fixture_objects.ts";

const b64 = (s: string) => btoa(s);

Deno.test("KubeClient creates, lists and gets every kind Sluice reads, over verified TLS with a token", async () => {
  const { client, access } = await adminClient();
  try {
    assert(client.server.startsWith("https://"), `server is ${client.server}`);
    const ns = await freshNamespace(client, "kc");
    const namespaces = await client.listAll<KubeObject>(NAMESPACES);
    assert(namespaces.items.some((n) => n.metadata?.name === ns));

    await client.create(SERVICES, { namespace: ns }, webService());
    await client.create(ENDPOINT_SLICES, { namespace: ns }, webEndpointSlice(["10.244.0.10"]));
    const className = `${ns}-class`;
    await client.create(INGRESS_CLASSES, {}, {
      apiVersion: "networking.k8s.io/v1",
      kind: "IngressClass",
      metadata: { name: className },
      spec: { controller: "sluice.dev/ingress-controller" },
    });
    await client.create(SECRETS, { namespace: ns }, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "tls" },
      type: "kubernetes.io/tls",
      data: { "tls.crt": b64(TEST_CERT_PEM), "tls.key": b64(TEST_KEY_PEM) },
    });
    await client.create(INGRESSES, { namespace: ns }, ingress("web", className));

    const slices = await client.listAll<KubeObject>(ENDPOINT_SLICES, {
      namespace: ns,
      labelSelector: "kubernetes.io/service-name=web",
    });
    assertEquals(slices.items.map((s) => s.metadata?.name), ["web-1"]);
    const tlsSecrets = await client.listAll<KubeObject>(SECRETS, {
      namespace: ns,
      fieldSelector: "type=kubernetes.io/tls",
    });
    assertEquals(tlsSecrets.items.map((s) => s.metadata?.name), ["tls"]);
    const svc = await client.get<{ spec: { clusterIP: string } }>(SERVICES, {
      namespace: ns,
      name: "web",
    });
    assert(svc.spec.clusterIP.startsWith("10.96."), `clusterIP ${svc.spec.clusterIP}`);
    const cls = await client.get<KubeObject>(INGRESS_CLASSES, { name: className });
    assertEquals(cls.metadata?.name, className);
    const ing = await client.get<KubeObject>(INGRESSES, { namespace: ns, name: "web" });
    assertEquals(ing.metadata?.namespace, ns);

    // Pagination: two pages of one item each still return every item.
    await client.create(SERVICES, { namespace: ns }, {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name: "api" },
      spec: { ports: [{ port: 80 }] },
    });
    const page = await client.list<KubeObject>(SERVICES, { namespace: ns, limit: 1 });
    assertEquals(page.items.length, 1);
    assert(page.continue !== "", "a continue token for the second page");
    const all = await client.listAll<KubeObject>(SERVICES, { namespace: ns, limit: 1 });
    assertEquals(all.items.map((s) => s.metadata?.name).sort(), ["api", "web"]);

    const missing = await assertRejects(
      () => client.get(SERVICES, { namespace: ns, name: "nope" }),
      KubeApiError,
    );
    assert(missing.isNotFound);
    await client.delete(INGRESS_CLASSES, { name: className });
  } finally {
    access.close();
  }
});

Deno.test("KubeClient.watch() delivers ADDED, MODIFIED and DELETED from the list's resourceVersion", async () => {
  const { client, access } = await adminClient();
  const abort = new AbortController();
  try {
    const ns = await freshNamespace(client, "watch");
    await client.create(INGRESSES, { namespace: ns }, ingress("before", "sluice"));
    const listed = await client.listAll<KubeObject>(INGRESSES, { namespace: ns });
    assertEquals(listed.items.length, 1);

    const events = client.watch<KubeObject>(INGRESSES, {
      namespace: ns,
      resourceVersion: listed.resourceVersion,
      allowWatchBookmarks: true,
      timeoutSeconds: 60,
      signal: abort.signal,
    });
    const next = async (): Promise<WatchItem<KubeObject>> => {
      while (true) {
        const r = await within(10_000, "a watch event", events.next());
        if (r.done) throw new Error("The watch ended early");
        if (r.value.type !== "BOOKMARK") return r.value;
      }
    };
    // The watch starts after the list: the object listed is not delivered again.
    const first = next();
    await client.create(INGRESSES, { namespace: ns }, ingress("web", "sluice"));
    const added = await first;
    assertEquals([added.type, nameOf(added)], ["ADDED", "web"]);

    const current = await client.get<KubeObject & { spec: Record<string, unknown> }>(INGRESSES, {
      namespace: ns,
      name: "web",
    });
    await client.update(INGRESSES, { namespace: ns, name: "web" }, {
      ...current,
      spec: { ...current.spec, ingressClassName: "other" },
    });
    const modified = await next();
    assertEquals([modified.type, nameOf(modified)], ["MODIFIED", "web"]);

    await client.delete(INGRESSES, { namespace: ns, name: "web" });
    const deleted = await next();
    assertEquals([deleted.type, nameOf(deleted)], ["DELETED", "web"]);
    abort.abort();
    await events.return(undefined);
  } finally {
    abort.abort();
    access.close();
  }
});

function nameOf(item: WatchItem<KubeObject>): string | undefined {
  return "object" in item ? (item.object as KubeObject).metadata?.name : undefined;
}

function ingress(name: string, className: string) {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "Ingress",
    metadata: { name },
    spec: {
      ingressClassName: className,
      tls: [{ hosts: ["web.example.com"], secretName: "tls" }],
      rules: [{
        host: "web.example.com",
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
