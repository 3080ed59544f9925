/**
 * How the reflector recovers from a misbehaving real kube-apiserver: down and
 * restarted, a 410 Expired after compaction, a continue token expired
 * mid-LIST, RBAC revoked mid-watch, a LIST that hangs, an etcd restored under
 * it, thousands of objects created while it was cut off, a Secret changing
 * type, watches that all expire at once, and "Too large resource version".
 * Network faults the apiserver cannot make go through the loopback TCP relay
 * of `tests/support/apiserver_relay.ts`; only a watch that answers 410 every
 * time uses the scripted server.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/integration/reflector_recovery_test.ts
 *
 * @module
 */
import { assert, assertBetween, assertEquals, assertStringIncludes } from "../support/assert.ts";
import { waitFor, within } from "../support/wait.ts";
import { adminClient, clientWithToken, freshNamespace } from "../support/kube.ts";
import { controllerToken } from "../support/controller_identity.ts";
import { clientThrough, startRelay } from "../support/apiserver_relay.ts";
import { startFakeWatchServer } from "../support/fake_watch_server.ts";
import { TEST_CERT_PEM, TEST_KEY_PEM } from "../support/test_certs.ts";
import { port80Service, webIngress } from "../support/fixture_objects.ts";
import { captureLogs } from "../support/captured_logs.ts";
import { KubeApiError, KubeClient, type ListOptions } from "../../lib/k8s/kube_client.ts";
import {
  INGRESSES,
  NAMESPACES,
  type Resource,
  SECRETS,
  SERVICES,
} from "../../lib/k8s/resources.ts";
import { CLUSTER_ROLE_BINDINGS } from "../support/rbac_resources.ts";
import type { Kind } from "../../lib/store/matters.ts";
import { ObjectStore } from "../../lib/store/object_store.ts";
import { TLS_SECRET_SELECTOR } from "../../lib/sources/kube_source.ts";
import { ownCluster, recordingTimers, reflectInto } from "../support/reflector_harness.ts";
import type { RunningCluster } from "../cluster/harness.ts";
import type { ReflectorClient } from "../../lib/k8s/reflector.ts";

const names = (store: ObjectStore, kind: Kind) =>
  store.list(kind).map((o) => o.metadata?.name ?? "").sort();

/**
 * Reflector settings for an apiserver that will be stopped or cut off: short
 * server-side watch timeouts (a stopping apiserver drains open watches) and
 * short backoffs.
 */
const STOPPABLE = {
  watchTimeoutSeconds: [2, 3] as const,
  watchGraceMs: 1_000,
  backoff: { initialMs: 100, maxMs: 400 },
};

// ---------------------------------------------------------------------------
// Reflector
// ---------------------------------------------------------------------------

Deno.test("Reflector keeps its objects, warns with the 403 and backs off while its RBAC is revoked, and catches up once restored", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hc-refl-rbac");
  await admin.client.create(INGRESSES, { namespace: ns }, webIngress("before"));
  const granted = await controllerToken(admin.client, ns);
  const sa = await clientWithToken(granted.token);
  using logs = captureLogs();
  const timers = recordingTimers(1_000);
  const bindingName = `sluice-${ns}`;
  const { reflector, store } = reflectInto("Ingress", { client: sa.client, resource: INGRESSES }, {
    namespace: ns,
    ...STOPPABLE,
    watchTimeoutSeconds: [1, 1],
    timers,
    logger: logs.logger,
  });
  try {
    await within(10_000, "the first list", reflector.synced);
    assertEquals(names(store, "Ingress"), ["before"]);
    await granted.cleanup(); // the ClusterRoleBinding goes
    await waitFor("four refused reconnects", () => timers.backoffs.length >= 4, {
      timeoutMs: 10_000,
    });
    // The last good copy stays; the refusal is said plainly; the retries slow down.
    assertEquals(names(store, "Ingress"), ["before"]);
    assertStringIncludes(reflector.status.lastError ?? "", "forbidden");
    assert(
      logs.lines().some((l) => l.startsWith("warning") && l.includes("is forbidden")),
      logs.lines().join("\n"),
    );
    const [first, , , fourth] = timers.backoffs;
    assert(fourth! > first! * 2, `backoffs ${timers.backoffs.join(", ")}`);

    await admin.client.create(INGRESSES, { namespace: ns }, webIngress("during"));
    await admin.client.create(CLUSTER_ROLE_BINDINGS, {}, {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRoleBinding",
      metadata: { name: bindingName },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "sluice" },
      subjects: [{ kind: "ServiceAccount", name: "sluice", namespace: ns }],
    });
    await waitFor(
      "the Ingress created while forbidden",
      () => store.get("Ingress", `${ns}/during`),
      {
        timeoutMs: 10_000,
      },
    );
    assertEquals(names(store, "Ingress"), ["before", "during"]);
  } finally {
    await reflector.stop();
    sa.access.close();
    await admin.client.delete(CLUSTER_ROLE_BINDINGS, { name: bindingName }).catch(() => {});
    admin.access.close();
  }
});

// Was a bug: Reflector sent its LIST requests without a deadline: a LIST caught on a connection
// that died (a partition, a vanished apiserver host) hung for good and the reflector never synced;
// each LIST request now has `listTimeoutMs` (default 60 s) and is retried after a backoff.
Deno.test("Reflector abandons a LIST that gets no answer and lists again", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hc-refl-hung-list");
  await admin.client.create(INGRESSES, { namespace: ns }, webIngress("web"));
  await using relay = startRelay(admin.client.server);
  const cut = await clientThrough(relay, { http2: false });
  using logs = captureLogs();
  relay.setMode("drop");
  const { reflector, store } = reflectInto("Ingress", { client: cut.client, resource: INGRESSES }, {
    namespace: ns,
    ...STOPPABLE,
    listTimeoutMs: 500,
    logger: logs.logger,
  });
  try {
    await waitFor("a LIST to be given up", () => reflector.status.errors >= 1, {
      timeoutMs: 5_000,
    });
    assertStringIncludes(reflector.status.lastError ?? "", "no answer within 500 ms");
    relay.setMode("pass");
    await within(5_000, "the first list", reflector.synced);
    assertEquals(names(store, "Ingress"), ["web"]);
  } finally {
    relay.cutAll();
    await reflector.stop();
    cut.access.close();
    admin.access.close();
  }
});

// Was a bug: after the apiserver came back on a restored (older) etcd, Reflector resumed its watch
// from its own, now future, resourceVersion; the apiserver holds such a watch open without a word
// until its revision reaches that number, so objects deleted by the restore kept being served and
// new ones were never seen. After a failed watch it now asks for one object at its
// resourceVersion ("NotOlderThan"): "Too large resource version" means relist.
Deno.test("Reflector lists again when the apiserver comes back with older data (etcd restored) instead of keeping a stale copy", async () => {
  const own = await ownCluster();
  using logs = captureLogs();
  const { client } = own;
  await client.create(NAMESPACES, {}, { metadata: { name: "shop" } });
  await client.create(NAMESPACES, {}, { metadata: { name: "other" } });
  // Move the revision well past what a fresh apiserver writes while it starts.
  await Promise.all(
    Array.from({ length: 150 }, (_, i) =>
      client.create(SERVICES, { namespace: "other" }, {
        apiVersion: "v1",
        kind: "Service",
        metadata: { name: `s${i}` },
        spec: { ports: [{ port: 80 }] },
      })),
  );
  await client.create(INGRESSES, { namespace: "shop" }, webIngress("lost-in-restore"));
  const { reflector, store } = reflectInto("Ingress", { client, resource: INGRESSES }, {
    namespace: "shop",
    ...STOPPABLE,
    logger: logs.logger,
  });
  try {
    await within(10_000, "the first list", reflector.synced);
    const before = Number(reflector.status.resourceVersion);
    await own.stop();
    await own.start({ fresh: true });
    await client.create(NAMESPACES, {}, { metadata: { name: "shop" } });
    await client.create(INGRESSES, { namespace: "shop" }, webIngress("after-restore"));
    const now = Number((await client.list(INGRESSES, { namespace: "shop" })).resourceVersion);
    assert(now < before, `restored revision ${now} is not older than ${before}`);
    await waitFor(
      "the restored state",
      () => names(store, "Ingress").join() === "after-restore",
      { timeoutMs: 20_000 },
    );
    assert(reflector.status.relists >= 1);
    assert(
      logs.lines().some((l) => l.includes("Too large resource version")),
      logs.lines().join("\n"),
    );
  } finally {
    await reflector.stop();
    await own.close();
  }
});

Deno.test("Reflector catches up with 2,000 Ingresses created while its connection was cut", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hc-refl-burst");
  await using relay = startRelay(admin.client.server);
  const cut = await clientThrough(relay);
  using logs = captureLogs();
  const { reflector, store } = reflectInto("Ingress", { client: cut.client, resource: INGRESSES }, {
    namespace: ns,
    ...STOPPABLE,
    logger: logs.logger,
  });
  try {
    await within(10_000, "the first list", reflector.synced);
    relay.setMode("refuse");
    relay.cutAll();
    await waitFor("the watch to fail", () => reflector.status.restarts >= 1);
    const total = 2_000;
    const queue = Array.from({ length: total }, (_, i) => i);
    const worker = async () => {
      for (let i = queue.shift(); i !== undefined; i = queue.shift()) {
        await admin.client.create(INGRESSES, { namespace: ns }, webIngress(`web-${i}`));
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    assertEquals(store.size("Ingress"), 0);
    relay.setMode("pass");
    const healed = performance.now();
    await waitFor("every Ingress", () => store.size("Ingress") === total, { timeoutMs: 20_000 });
    const took = performance.now() - healed;
    assert(took < 15_000, `caught up after ${Math.round(took)} ms`);
    // Each object once: none lost, none twice (the store is keyed by namespace/name).
    assertEquals(new Set(names(store, "Ingress")).size, total);
    assertEquals(reflector.status.malformed, 0);
  } finally {
    await reflector.stop();
    cut.access.close();
    admin.access.close();
  }
});

Deno.test("Reflector drops a TLS Secret replaced by an Opaque one of the same name, and takes it back when it returns as TLS", async () => {
  const admin = await adminClient();
  const ns = await freshNamespace(admin.client, "hc-refl-secret-type");
  using logs = captureLogs();
  const tls = {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name: "cert" },
    type: "kubernetes.io/tls",
    stringData: { "tls.crt": TEST_CERT_PEM, "tls.key": TEST_KEY_PEM },
  };
  const opaque = { ...tls, type: "Opaque" };
  const at = { namespace: ns, name: "cert" };
  await admin.client.create(SECRETS, { namespace: ns }, tls);
  // The reflector on a connection of its own: this test's requests, sent while its watch was
  // open on the same HTTP/2 connection, twice got no answer in full runs (the test hung).
  const watcher = await adminClient();
  const { reflector, store } = reflectInto(
    "Secret",
    { client: watcher.client, resource: SECRETS },
    {
      namespace: ns,
      fieldSelector: TLS_SECRET_SELECTOR,
      logger: logs.logger,
    },
  );
  try {
    await within(10_000, "the first list", reflector.synced);
    assertEquals(names(store, "Secret"), ["cert"]);
    // The API keeps a Secret's type immutable...
    const current = await admin.client.get<Record<string, unknown>>(SECRETS, at);
    const refused = await admin.client.update(SECRETS, at, { ...current, type: "Opaque" }).then(
      () => 200,
      (error) => error instanceof KubeApiError ? error.status : 0,
    );
    assertEquals(refused, 422);
    // ...so it is replaced under the same name.
    await admin.client.delete(SECRETS, at);
    await admin.client.create(SECRETS, { namespace: ns }, opaque);
    await waitFor("the TLS Secret to go", () => store.size("Secret") === 0);
    // An Opaque Secret never reaches the store, whatever happens to it.
    await admin.client.patch(SECRETS, at, { metadata: { labels: { touched: "yes" } } });
    await admin.client.delete(SECRETS, at);
    await admin.client.create(SECRETS, { namespace: ns }, tls);
    await waitFor("the TLS Secret to be back", () => store.size("Secret") === 1);
    assertEquals(reflector.status.malformed, 0);
    assertEquals(reflector.status.lists, 1);
  } finally {
    await reflector.stop();
    watcher.access.close();
    admin.access.close();
  }
});

// Was a bug: a watch that delivered an event before its 410 counted as healthy, which reset the
// backoff and skipped the pause between relists, so a server answering "event, then 410" every
// time was hammered with LISTs in a tight loop; health is now judged by how long the watch lasted.
Deno.test("Reflector paces its relists when every watch expires at once, with or without an event first", async () => {
  using logs = captureLogs();
  for (const withEvent of [false, true]) {
    const expired = JSON.stringify({
      type: "ERROR",
      object: { kind: "Status", code: 410, reason: "Expired", message: "too old resource version" },
    }) + "\n";
    const added = (n: number) =>
      JSON.stringify({
        type: "ADDED",
        object: { metadata: { namespace: "shop", name: `w${n}`, resourceVersion: String(20 + n) } },
      }) + "\n";
    await using server = startFakeWatchServer({
      list: () => ({ items: [], resourceVersion: "10" }),
      watch: (_url, n) => ({ steps: [{ send: withEvent ? added(n) + expired : expired }] }),
    });
    const timers = recordingTimers(1_000);
    const { reflector } = reflectInto("Ingress", {
      client: new KubeClient(server.access),
      resource: INGRESSES,
    }, {
      backoff: { initialMs: 50, maxMs: 400 },
      timers,
      logger: logs.logger,
    });
    try {
      const started = performance.now();
      await waitFor("a second and a half", () => performance.now() - started > 1_500, {
        timeoutMs: 2_500,
      });
      const lists = reflector.status.lists;
      // 50 + 100 + 200 + 400 + 400 ms (±20 %) fit in 1.5 s: about six lists, not hundreds.
      assertBetween(lists, 2, 9, `lists with${withEvent ? "" : "out"} an event first`);
      assert(timers.backoffs.length >= 2, `backoffs ${timers.backoffs.join(", ")}`);
    } finally {
      await reflector.stop();
    }
  }
});

// Was a bug: Reflector answered "Too large resource version" (the server's data is older than its
// copy) like any failure, watching again from the same version; it now lists again.
Deno.test('Reflector lists again when a watch answers "Too large resource version", as an ERROR event or as a 504', async () => {
  using logs = captureLogs();
  const tooLarge = {
    kind: "Status",
    status: "Failure",
    message: "Timeout: Too large resource version: 900, current: 12",
    reason: "Timeout",
    details: { causes: [{ reason: "ResourceVersionTooLarge" }], retryAfterSeconds: 1 },
    code: 504,
  };
  for (const asEvent of [true, false]) {
    let listed = 0;
    await using server = startFakeWatchServer({
      list: () => ({ items: [], resourceVersion: String(900 + listed++) }),
      watch: (_url, n) =>
        n > 0
          ? undefined // held open
          : asEvent
          ? { steps: [{ send: JSON.stringify({ type: "ERROR", object: tooLarge }) + "\n" }] }
          : { status: 504, body: tooLarge },
    });
    const { reflector } = reflectInto("Ingress", {
      client: new KubeClient(server.access),
      resource: INGRESSES,
    }, {
      backoff: { initialMs: 20, maxMs: 100 },
      logger: logs.logger,
    });
    try {
      await waitFor("a relist", () => reflector.status.lists === 2);
      await waitFor("the second watch", () => server.watches.length === 2);
      assertEquals(server.watches[1]!.searchParams.get("resourceVersion"), "901");
      assertEquals(reflector.status.relists, 1);
    } finally {
      await reflector.stop();
    }
  }
});

/**
 * Reflector settings for an API server that will be stopped: a stopping
 * kube-apiserver keeps open watches running until their timeout (the harness
 * gives up after 30 s), so keep server-side timeouts short.
 */
const RESTARTABLE = {
  watchTimeoutSeconds: [2, 3] as const,
  backoff: { initialMs: 100, maxMs: 400 },
};

async function compact(cluster: RunningCluster): Promise<number> {
  const response = await fetch(`${cluster.control}/compact`, { method: "POST" });
  const body = await response.json() as { revision: number };
  return body.revision;
}

Deno.test("Reflector keeps its objects while the apiserver is down, backs off, and catches up after a restart", async () => {
  const own = await ownCluster();
  using logs = captureLogs();
  const timers = recordingTimers(60_000);
  const { client } = own;
  await client.create(NAMESPACES, {}, { metadata: { name: "shop" } });
  await client.create(INGRESSES, { namespace: "shop" }, webIngress("web"));
  const { reflector, store } = reflectInto("Ingress", { client, resource: INGRESSES }, {
    namespace: "shop",
    ...RESTARTABLE,
    timers,
    logger: logs.logger,
  });
  try {
    await within(10_000, "the first list", reflector.synced);
    await own.restart(async () => {
      await waitFor("three failed reconnects", () => timers.backoffs.length >= 4, {
        timeoutMs: 20_000,
      });
      // Last state kept: nothing withdrawn while the API is unreachable.
      assertEquals(store.list("Ingress").map((i) => i.metadata?.name), ["web"]);
      assert(reflector.status.synced);
      assert(reflector.status.lastError !== undefined);
    });
    // Exponential, jittered (±20 %), capped.
    timers.backoffs.slice(0, 4).forEach((ms, i) => {
      const base = Math.min(400, 100 * 2 ** i);
      assertBetween(ms, base * 0.8, base * 1.2, `backoff ${i}`);
    });
    await client.create(INGRESSES, { namespace: "shop" }, webIngress("after"));
    await waitFor(
      "the Ingress created after the restart",
      () => store.get("Ingress", "shop/after"),
      {
        timeoutMs: 20_000,
      },
    );
    assert(reflector.status.restarts >= 3, `restarts: ${reflector.status.restarts}`);
    assertEquals(store.size("Ingress"), 2);
  } finally {
    await reflector.stop();
    await own.close();
  }
});

Deno.test("Reflector lists again after a 410 Expired on a compacted resourceVersion", async () => {
  const own = await ownCluster();
  using logs = captureLogs();
  const { client } = own;
  await client.create(NAMESPACES, {}, { metadata: { name: "shop" } });
  await client.create(NAMESPACES, {}, { metadata: { name: "other" } });
  await client.create(INGRESSES, { namespace: "shop" }, webIngress("web"));
  const { reflector, store } = reflectInto("Ingress", { client, resource: INGRESSES }, {
    namespace: "shop",
    ...RESTARTABLE,
    logger: logs.logger,
  });
  try {
    await within(10_000, "the first list", reflector.synced);
    const listedAt = Number(reflector.status.resourceVersion);
    // Writes this reflector does not see move etcd's revision past its resourceVersion.
    for (let i = 0; i < 3; i++) {
      await client.create(SERVICES, { namespace: "other" }, port80Service(`s${i}`));
    }
    const revision = await compact(own.cluster());
    assert(revision > listedAt, `compacted at ${revision}, listed at ${listedAt}`);
    await own.restart();
    await waitFor("a relist", () => reflector.status.relists >= 1, { timeoutMs: 20_000 });
    assert(
      // The apiserver's own words, as an ERROR event: "too old resource version".
      logs.lines().some((l) => l.includes("too old resource version")),
      `no 410 logged:\n${logs.lines().join("\n")}`,
    );
    assertEquals(reflector.status.lists, 2);
    await client.create(INGRESSES, { namespace: "shop" }, webIngress("after"));
    await waitFor(
      "the Ingress created after the relist",
      () => store.get("Ingress", "shop/after"),
      {
        timeoutMs: 20_000,
      },
    );
  } finally {
    await reflector.stop();
    await own.close();
  }
});

Deno.test("Reflector starts a LIST over when its continue token has expired", async () => {
  const own = await ownCluster();
  using logs = captureLogs();
  const { client } = own;
  await client.create(NAMESPACES, {}, { metadata: { name: "shop" } });
  await client.create(NAMESPACES, {}, { metadata: { name: "other" } });
  for (let i = 0; i < 3; i++) {
    await client.create(SERVICES, { namespace: "shop" }, port80Service(`s${i}`));
  }
  const pages: (string | undefined)[] = [];
  let broken = false;
  const breaking: ReflectorClient = {
    async list<T>(r: Resource, options?: ListOptions) {
      pages.push(options?.continue);
      const page = await client.list<T>(r, options);
      if (!broken) {
        // Between the first and second page: the token's revision is compacted away.
        broken = true;
        await client.create(SERVICES, { namespace: "other" }, port80Service("moves-the-revision"));
        await compact(own.cluster());
        await own.restart();
      }
      return page;
    },
    watch: (r, options) => client.watch(r, options),
  };
  const { reflector, store } = reflectInto("Service", { client: breaking, resource: SERVICES }, {
    namespace: "shop",
    pageSize: 1,
    ...RESTARTABLE,
    logger: logs.logger,
  });
  try {
    await within(30_000, "the first list", reflector.synced);
    assertEquals(store.list("Service").map((s) => s.metadata?.name).sort(), ["s0", "s1", "s2"]);
    // page 1, page 2 (410), then pages 1–3 again.
    assertEquals(pages.length, 5, `pages: ${JSON.stringify(pages)}`);
    assertEquals(pages[2], undefined);
    assertEquals(reflector.status.relists, 1);
    assertEquals(reflector.status.errors, 0);
  } finally {
    await reflector.stop();
    await own.close();
  }
});
