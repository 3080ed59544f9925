/**
 * The reflector against the real kube-apiserver (list, pages, watch,
 * bookmarks, a restart, a real 410 after compaction, an optional resource
 * whose CRDs come and go) and, only for a torn stream and malformed lines,
 * against a scripted local server.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/integration/reflector_test.ts
 */
import { assert, assertBetween, assertEquals } from "../support/assert.ts";
import { adminClient, freshNamespace } from "../support/kube.ts";
import { waitFor, within } from "../support/wait.ts";
import { startFakeWatchServer } from "../support/fake_watch_server.ts";
import { KubeClient, type ListOptions } from "../../lib/k8s/kube_client.ts";
import { installGatewayApiCrds, removeGatewayApiCrds } from "../support/gateway_api_crds.ts";
import type { ReflectorClient } from "../../lib/k8s/reflector.ts";
import {
  HTTP_ROUTES,
  INGRESSES,
  NAMESPACES,
  type Resource,
  SECRETS,
  SERVICES,
} from "../../lib/k8s/resources.ts";
import type { ObjectStore } from "../../lib/store/object_store.ts";
import { TLS_SECRET_SELECTOR } from "../../lib/sources/kube_source.ts";
import { reflectInto } from "../support/reflector_harness.ts";
import { captureLogs } from "../support/captured_logs.ts";
import { TEST_CERT_PEM, TEST_KEY_PEM } from "../support/test_certs.ts";
import { port80Service, webIngress } from "../support/fixture_objects.ts";

const hostOf = (store: ObjectStore, key: string) =>
  (store.get("Ingress", key) as { spec?: { rules?: { host?: string }[] } } | undefined)?.spec
    ?.rules?.[0]?.host;

// ---------------------------------------------------------------------------
// The shared test cluster
// ---------------------------------------------------------------------------

Deno.test("Reflector lists, then delivers creates, updates and deletes to the store", async () => {
  const { client, access } = await adminClient();
  using logs = captureLogs();
  const ns = await freshNamespace(client, "refl");
  await client.create(INGRESSES, { namespace: ns }, webIngress("before"));
  const { reflector, store } = reflectInto("Ingress", { client, resource: INGRESSES }, {
    namespace: ns,
    logger: logs.logger,
  });
  try {
    await within(10_000, "the first list", reflector.synced);
    assertEquals(store.list("Ingress").map((i) => i.metadata?.name), ["before"]);

    await client.create(INGRESSES, { namespace: ns }, webIngress("web"));
    await waitFor("the created Ingress", () => store.get("Ingress", `${ns}/web`));

    const current = await client.get<ReturnType<typeof webIngress>>(INGRESSES, {
      namespace: ns,
      name: "web",
    });
    current.spec.rules![0]!.host = "changed.example.com";
    await client.update(INGRESSES, { namespace: ns, name: "web" }, current);
    await waitFor("the update", () => hostOf(store, `${ns}/web`) === "changed.example.com");

    await client.delete(INGRESSES, { namespace: ns, name: "before" });
    await waitFor("the delete", () => store.get("Ingress", `${ns}/before`) === undefined);

    const status = reflector.status;
    assertEquals([status.synced, status.lists, status.relists, status.malformed], [
      true,
      1,
      0,
      0,
    ]);
    assert(status.events >= 3, `events: ${status.events}`);
    assert(status.lastSyncTime !== undefined && status.lastSyncTime <= Date.now());
  } finally {
    await reflector.stop();
    access.close();
  }
});

Deno.test("Reflector pages a LIST with limit and continue", async () => {
  const { client, access } = await adminClient();
  using logs = captureLogs();
  const ns = await freshNamespace(client, "pages");
  for (let i = 0; i < 5; i++) {
    await client.create(SERVICES, { namespace: ns }, port80Service(`s${i}`));
  }
  const pages: { limit: number | undefined; continue: string | undefined }[] = [];
  const counting: ReflectorClient = {
    list<T>(r: Resource, options?: ListOptions) {
      pages.push({ limit: options?.limit, continue: options?.continue });
      return client.list<T>(r, options);
    },
    watch: (r, options) => client.watch(r, options),
  };
  const { reflector, store } = reflectInto("Service", { client: counting, resource: SERVICES }, {
    namespace: ns,
    pageSize: 2,
    logger: logs.logger,
  });
  try {
    await within(10_000, "the first list", reflector.synced);
    assertEquals(store.list("Service").map((s) => s.metadata?.name).sort(), [
      "s0",
      "s1",
      "s2",
      "s3",
      "s4",
    ]);
    assertEquals(pages.length, 3);
    assert(pages.every((p) => p.limit === 2));
    assertEquals(pages[0]!.continue, undefined);
    assert(pages[1]!.continue !== undefined && pages[2]!.continue !== undefined);
  } finally {
    await reflector.stop();
    access.close();
  }
});

Deno.test("Reflector reads only TLS Secrets through the field selector", async () => {
  const { client, access } = await adminClient();
  using logs = captureLogs();
  const ns = await freshNamespace(client, "tls");
  await client.create(SECRETS, { namespace: ns }, {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name: "opaque" },
    data: { password: btoa("hunter2") },
  });
  const { reflector, store } = reflectInto("Secret", { client, resource: SECRETS }, {
    namespace: ns,
    fieldSelector: TLS_SECRET_SELECTOR,
    logger: logs.logger,
  });
  try {
    await within(10_000, "the first list", reflector.synced);
    assertEquals(store.size("Secret"), 0);
    await client.create(SECRETS, { namespace: ns }, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "tls" },
      type: "kubernetes.io/tls",
      data: { "tls.crt": btoa(TEST_CERT_PEM), "tls.key": btoa(TEST_KEY_PEM) },
    });
    await client.create(SECRETS, { namespace: ns }, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "opaque-2" },
      data: { a: btoa("b") },
    });
    await waitFor("the TLS Secret", () => store.get("Secret", `${ns}/tls`));
    // A TLS Secret created after the Opaque one arrived, so the Opaque one was not sent.
    await client.create(SECRETS, { namespace: ns }, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "tls-2" },
      type: "kubernetes.io/tls",
      data: { "tls.crt": btoa(TEST_CERT_PEM), "tls.key": btoa(TEST_KEY_PEM) },
    });
    await waitFor("the second TLS Secret", () => store.get("Secret", `${ns}/tls-2`));
    assertEquals(store.list("Secret").map((s) => s.metadata?.name).sort(), ["tls", "tls-2"]);

    // The selector of a pinned reflector (the default certificate outside the watched namespaces).
    const pinned = reflectInto("Secret", { client, resource: SECRETS }, {
      namespace: ns,
      fieldSelector: `${TLS_SECRET_SELECTOR},metadata.name=tls-2`,
      logger: logs.logger,
    });
    await within(10_000, "the pinned list", pinned.reflector.synced);
    await pinned.reflector.stop();
    assertEquals(pinned.store.list("Secret").map((s) => s.metadata?.name), ["tls-2"]);
  } finally {
    await reflector.stop();
    access.close();
  }
});

Deno.test("Reflector gets BOOKMARKs from the real apiserver and resumes from their resourceVersion", async () => {
  const { client, access } = await adminClient();
  using logs = captureLogs();
  const ns = await freshNamespace(client, "bookmark");
  const watches: (string | undefined)[] = [];
  const recording: ReflectorClient = {
    list: (r, options) => client.list(r, options),
    watch<T>(r: Resource, options?: Parameters<KubeClient["watch"]>[1]) {
      watches.push(options?.resourceVersion);
      return client.watch<T>(r, options);
    },
  };
  // The apiserver sends a bookmark about 2 s before a watch's timeout.
  const { reflector } = reflectInto("Ingress", { client: recording, resource: INGRESSES }, {
    namespace: ns,
    watchTimeoutSeconds: [4, 4],
    logger: logs.logger,
  });
  try {
    await within(10_000, "the first list", reflector.synced);
    const listed = reflector.status.resourceVersion;
    // The apiserver's Ingress cache only bookmarks resourceVersions of Ingress
    // events newer than the watch's start: make one where this reflector does not watch.
    const other = await freshNamespace(client, "bookmark-other");
    await client.create(INGRESSES, { namespace: other }, webIngress("elsewhere"));
    await waitFor("a bookmark", () => reflector.status.bookmarks >= 1, { timeoutMs: 20_000 });
    const bookmarked = reflector.status.resourceVersion;
    assert(Number(bookmarked) >= Number(listed), `bookmark ${bookmarked} < list ${listed}`);
    await waitFor("the next watch", () => watches.length >= 2, { timeoutMs: 20_000 });
    assertEquals(watches[0], listed);
    assert(Number(watches[1]) >= Number(bookmarked), `resumed from ${watches[1]}`);
    assertEquals(reflector.status.restarts, 0, "a server timeout is not a failure");
    assertEquals(reflector.status.lists, 1);
  } finally {
    await reflector.stop();
    await client.delete(NAMESPACES, { name: ns }).catch(() => {});
    access.close();
  }
});

// ---------------------------------------------------------------------------
// Optional resources: the Gateway API CRDs, absent, then installed, then removed
// ---------------------------------------------------------------------------

Deno.test("Reflector of an optional resource is synced and empty without its CRD, delivers an HTTPRoute once the CRDs are applied, and empties when they go", async () => {
  const { client, access } = await adminClient();
  using logs = captureLogs();
  // The test cluster has no CRDs of its own; another test may have left these.
  await removeGatewayApiCrds(client);
  const ns = await freshNamespace(client, "gwapi");
  const { reflector, store } = reflectInto("HTTPRoute", { client, resource: HTTP_ROUTES }, {
    namespace: ns,
    logger: logs.logger,
    optional: { absentRetryMs: 200 },
  });
  try {
    await within(10_000, "the first list", reflector.synced);
    assertEquals([reflector.status.absent, reflector.status.errors], [true, 0]);
    assertEquals(store.size("HTTPRoute"), 0);

    await installGatewayApiCrds(client);
    await waitFor("the reflector to watch HTTPRoutes", () => reflector.status.watching, {
      timeoutMs: 30_000,
    });
    assertEquals(reflector.status.absent, false);
    await client.create(HTTP_ROUTES, { namespace: ns }, {
      apiVersion: "gateway.networking.k8s.io/v1",
      kind: "HTTPRoute",
      metadata: { name: "web" },
      spec: { parentRefs: [{ name: "gw" }], rules: [{ backendRefs: [{ name: "web", port: 80 }] }] },
    });
    await waitFor("the HTTPRoute", () => store.get("HTTPRoute", `${ns}/web`));

    await removeGatewayApiCrds(client);
    await waitFor(
      "the reflector to find HTTPRoutes absent again",
      () => reflector.status.absent === true,
      { timeoutMs: 30_000 },
    );
    assertEquals(store.size("HTTPRoute"), 0);
    // Said once per absence: at the start, and after the CRD went.
    const absent = logs.lines().filter((l) => l.includes("is not served by the API server"));
    assertEquals(absent.length, 2, absent.join("\n"));
  } finally {
    await reflector.stop();
    await removeGatewayApiCrds(client).catch(() => {});
    access.close();
  }
});

// ---------------------------------------------------------------------------
// The scripted server: torn streams and malformed lines only
// ---------------------------------------------------------------------------

function event(type: string, name: string, rv: string, extra: Record<string, unknown> = {}) {
  return JSON.stringify({
    type,
    object: {
      kind: "Ingress",
      metadata: { namespace: "shop", name, resourceVersion: rv },
      ...extra,
    },
  }) + "\n";
}

Deno.test("Reflector joins events split across chunks and resumes from the last resourceVersion after a stream torn mid-line", async () => {
  using logs = captureLogs();
  const first = event("ADDED", "a", "11");
  const second = event("ADDED", "b", "12");
  await using server = startFakeWatchServer({
    list: () => ({ items: [], resourceVersion: "10" }),
    watch: (_url, n) =>
      n === 0
        ? {
          steps: [
            { send: first.slice(0, 7) },
            { send: first.slice(7, 40) },
            { send: first.slice(40) + second.slice(0, 25) }, // "b" is cut mid-line
            { cut: true },
          ],
        }
        : n === 1
        ? { steps: [{ send: second }] }
        : undefined,
  });
  const client = new KubeClient(server.access);
  const { reflector, store } = reflectInto("Ingress", { client, resource: INGRESSES }, {
    backoff: { initialMs: 20, maxMs: 100 },
    logger: logs.logger,
  });
  try {
    await waitFor("both Ingresses", () => store.size("Ingress") === 2);
    assertEquals(server.watches.map((u) => u.searchParams.get("resourceVersion")), ["10", "11"]);
    assertEquals(server.watches[0]!.searchParams.get("allowWatchBookmarks"), "true");
    const timeout = Number(server.watches[0]!.searchParams.get("timeoutSeconds"));
    assertBetween(timeout, 300, 600, "timeoutSeconds");
    const status = reflector.status;
    assertEquals([status.restarts, status.malformed, status.events, status.lists], [1, 0, 2, 1]);
  } finally {
    await reflector.stop();
  }
});

Deno.test("Reflector logs and counts malformed lines and objects, and keeps watching", async () => {
  using logs = captureLogs();
  await using server = startFakeWatchServer({
    list: () => ({ items: [], resourceVersion: "10" }),
    watch: (_url, n) =>
      n === 0
        ? {
          steps: [
            { send: "this is not json\n" },
            { send: `{"kind":"Status"}\n` },
            {
              send: JSON.stringify({ type: "ADDED", object: { metadata: { namespace: "shop" } } }) +
                "\n",
            },
            { send: event("ADDED", "good", "11") },
            { send: JSON.stringify({ type: "BOOKMARK", object: { metadata: {} } }) + "\n" },
          ],
        }
        : undefined,
  });
  const client = new KubeClient(server.access);
  const { reflector, store } = reflectInto("Ingress", { client, resource: INGRESSES }, {
    logger: logs.logger,
  });
  try {
    await waitFor("the good Ingress", () => store.get("Ingress", "shop/good"));
    await waitFor("4 malformed items", () => reflector.status.malformed === 4);
    const warnings = logs.lines().filter((l) => l.startsWith("warning:"));
    assertEquals(warnings.length, 4, warnings.join("\n"));
    assert(warnings.some((l) => l.includes("this is not json")));
    assert(warnings.some((l) => l.includes("metadata.name is missing")));
    assertEquals(reflector.status.restarts, 0, "the loop carried on");
    assertEquals(server.watches.length, 1);
  } finally {
    await reflector.stop();
  }
});

Deno.test("Reflector keeps the text of malformed Secret lines out of its logs", async () => {
  using logs = captureLogs();
  const secretLine = `{"type":"ADDED","object":{"data":{"tls.key":"c2VjcmV0LWtleQ=="`;
  await using server = startFakeWatchServer({
    list: () => ({ items: [], resourceVersion: "10" }),
    watch: (_url, n) => n === 0 ? { steps: [{ send: `${secretLine}\n` }] } : undefined,
  });
  const client = new KubeClient(server.access);
  const { reflector } = reflectInto("Secret", { client, resource: SECRETS }, {
    logger: logs.logger,
  });
  try {
    await waitFor("the malformed line", () => reflector.status.malformed === 1);
    const text = JSON.stringify(logs.records);
    assert(!text.includes("c2VjcmV0"), "a Secret's data reached the log");
    assert(logs.lines().some((l) => l.includes("redacted")));
  } finally {
    await reflector.stop();
  }
});

Deno.test("Reflector resumes from a BOOKMARK's resourceVersion after the server ends the stream", async () => {
  using logs = captureLogs();
  await using server = startFakeWatchServer({
    list: () => ({ items: [], resourceVersion: "10" }),
    watch: (_url, n) =>
      n === 0
        ? {
          steps: [
            { send: event("ADDED", "a", "11") },
            {
              send: JSON.stringify({
                type: "BOOKMARK",
                object: { metadata: { resourceVersion: "50" } },
              }) + "\n",
            },
            { end: true },
          ],
        }
        : undefined,
  });
  const client = new KubeClient(server.access);
  const { reflector } = reflectInto("Ingress", { client, resource: INGRESSES }, {
    minWatchMs: 0,
    logger: logs.logger,
  });
  try {
    await waitFor("a second watch", () => server.watches.length === 2);
    assertEquals(server.watches[1]!.searchParams.get("resourceVersion"), "50");
    assertEquals(reflector.status.bookmarks, 1);
    assertEquals(reflector.status.restarts, 0);
  } finally {
    await reflector.stop();
  }
});
