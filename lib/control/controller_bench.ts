/**
 * Benchmarks of the control loop.
 *
 * 1. Rebuild cost in memory at 1,000 and 10,000 Ingresses: the controller's
 *    full rebuild (store snapshot + translate + comparison with the last
 *    translation) against `translate()` alone (baseline).
 * 2. With a test cluster (`SLUICE_TEST_KUBECONFIG`), change to publish: an
 *    Ingress update returning from the apiserver until the controller
 *    publishes a translation with the new host, with 1,000 Ingresses loaded,
 *    against the same update until a raw watch stream delivers it (baseline).
 *
 *   tools/deno bench -A lib/control/controller_bench.ts
 *   # with the apiserver: start `tools/deno task cluster`, then
 *   SLUICE_TEST_KUBECONFIG=<its kubeconfig> tools/deno bench -A lib/control/controller_bench.ts
 *
 * @module
 */
import { getLogger } from "@logtape/logtape";
import type { Ingress, KubeObject } from "../k8s/objects.ts";
import { KubeClient } from "../k8s/kube_client.ts";
import { loadKubeAccess } from "../k8s/kube_access.ts";
import {
  ENDPOINT_SLICES,
  INGRESS_CLASSES,
  INGRESSES,
  NAMESPACES,
  SERVICES,
} from "../k8s/resources.ts";
import { KubeSource } from "../sources/kube_source.ts";
import { ObjectStore } from "../store/object_store.ts";
import { jsonEqual } from "../store/json_equal.ts";
import { createCertificateInspector } from "../tls/certificate_inspector.ts";
import { translate } from "../translate/translate.ts";
import type { Translation } from "../translate/translation.ts";
import { Controller } from "./controller.ts";

const inspectCertificate = createCertificateInspector();
const NOW = Date.parse("2030-01-01T00:00:00Z");

function ingress(namespace: string, i: number, host = `h${i}.example.com`): Ingress {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "Ingress",
    metadata: {
      namespace,
      name: `web-${i}`,
      resourceVersion: "1",
      creationTimestamp: "2024-01-01T00:00:00Z",
    },
    spec: {
      ingressClassName: "sluice",
      rules: [{
        host,
        http: {
          paths: [
            {
              path: "/",
              pathType: "Prefix",
              backend: { service: { name: `svc-${i % 50}`, port: { number: 80 } } },
            },
            {
              path: "/api",
              pathType: "Exact",
              backend: { service: { name: `svc-${(i + 1) % 50}`, port: { number: 80 } } },
            },
          ],
        },
      }],
    },
  };
}

function cluster(count: number): ObjectStore {
  const store = new ObjectStore();
  store.upsert("IngressClass", {
    metadata: { name: "sluice", resourceVersion: "1" },
    spec: { controller: "sluice.dev/ingress-controller" },
  } as KubeObject);
  for (let s = 0; s < 50; s++) {
    store.upsert("Service", {
      metadata: { namespace: "bench", name: `svc-${s}`, resourceVersion: "1" },
      spec: { ports: [{ port: 80, targetPort: 8080 }] },
    } as KubeObject);
    store.upsert("EndpointSlice", {
      metadata: {
        namespace: "bench",
        name: `svc-${s}-1`,
        resourceVersion: "1",
        labels: { "kubernetes.io/service-name": `svc-${s}` },
      },
      addressType: "IPv4",
      ports: [{ port: 8080 }],
      endpoints: [{ addresses: [`10.244.0.${s + 1}`], conditions: { ready: true } }],
    } as KubeObject);
  }
  for (let i = 0; i < count; i++) store.upsert("Ingress", ingress("bench", i));
  return store;
}

for (const count of [1_000, 10_000]) {
  const store = cluster(count);
  const options = { now: NOW, inspectCertificate };
  let last: Translation = translate(store.objects(), options);
  let flip = 0;
  Deno.bench({
    name: `translate() alone, ${count} Ingresses`,
    group: `rebuild-${count}`,
    baseline: true,
    fn: () => {
      translate(store.objects(), options);
    },
  });
  Deno.bench({
    name: `store write + rebuild + compare, ${count} Ingresses`,
    group: `rebuild-${count}`,
    fn: () => {
      flip++;
      store.upsert("Ingress", { ...ingress("bench", 0, `flip-${flip}.example.com`) });
      const next = translate(store.objects(), options);
      if (jsonEqual(last, next)) throw new Error("The translation did not change");
      last = next;
    },
  });
  const fixed = translate(store.objects(), options);
  const copy = structuredClone(fixed);
  Deno.bench({
    name: `compare two equal translations (worst case), ${count} Ingresses`,
    group: `rebuild-${count}`,
    fn: () => {
      if (!jsonEqual(fixed, copy)) throw new Error("The copies differ");
    },
  });
}

// ---------------------------------------------------------------------------
// Against a real apiserver
// ---------------------------------------------------------------------------

const kubeconfig = Deno.env.get("SLUICE_TEST_KUBECONFIG");
if (kubeconfig !== undefined && kubeconfig !== "") {
  const LOADED = Number(Deno.env.get("SLUICE_BENCH_INGRESSES") ?? "1000");
  const access = await loadKubeAccess({ kubeconfig });
  const client = new KubeClient(access);
  const ns = `bench-${crypto.randomUUID().slice(0, 8)}`;
  const controllerName = `sluice.dev/bench-${ns}`;
  await client.create(NAMESPACES, {}, { metadata: { name: ns } });
  await client.create(INGRESS_CLASSES, {}, {
    metadata: { name: ns },
    spec: { controller: controllerName },
  });
  for (let s = 0; s < 50; s++) {
    await client.create(SERVICES, { namespace: ns }, {
      metadata: { name: `svc-${s}` },
      spec: { ports: [{ port: 80, targetPort: 8080 }] },
    });
    await client.create(ENDPOINT_SLICES, { namespace: ns }, {
      metadata: { name: `svc-${s}-1`, labels: { "kubernetes.io/service-name": `svc-${s}` } },
      addressType: "IPv4",
      ports: [{ port: 8080 }],
      endpoints: [{ addresses: [`10.244.0.${s + 1}`], conditions: { ready: true } }],
    });
  }
  // Eight writers at a time: bounded load.
  for (let i = 0; i < LOADED; i += 8) {
    await Promise.all(
      Array.from({ length: Math.min(8, LOADED - i) }, (_, j) => {
        const object = ingress(ns, i + j);
        object.spec!.ingressClassName = ns;
        delete object.metadata!.resourceVersion;
        delete object.metadata!.creationTimestamp;
        return client.create(INGRESSES, { namespace: ns }, object);
      }),
    );
  }

  let waiting: { host: string; resolve: () => void } | undefined;
  const controller = new Controller({
    sources: [new KubeSource({ client, logger: getLogger(["bench"]), watchNamespaces: [ns] })],
    settings: { controllerName, ingressClass: ns },
    inspectCertificate,
    publish: (translation) => {
      if (waiting !== undefined && translation.routes.some((r) => r.host === waiting!.host)) {
        waiting.resolve();
        waiting = undefined;
      }
    },
    logger: getLogger(["bench"]),
  });
  const readyStart = performance.now();
  controller.start();
  await controller.whenReady;
  const readyMs = performance.now() - readyStart;

  // A raw watch on the same namespace, for the baseline.
  const abort = new AbortController();
  const listed = await client.list(INGRESSES, { namespace: ns, limit: 1 });
  let rawWaiting: { host: string; resolve: () => void } | undefined;
  const raw = (async () => {
    try {
      for await (
        const item of client.watch<Ingress>(INGRESSES, {
          namespace: ns,
          resourceVersion: listed.resourceVersion,
          signal: abort.signal,
          timeoutSeconds: 3600,
        })
      ) {
        if (item.type === "MODIFIED" && rawWaiting !== undefined) {
          if (item.object.spec?.rules?.[0]?.host === rawWaiting.host) {
            rawWaiting.resolve();
            rawWaiting = undefined;
          }
        }
      }
    } catch {
      // aborted at the end
    }
  })();

  let n = 0;
  const update = async (index: number, host: string) => {
    const current = await client.get<Ingress>(INGRESSES, { namespace: ns, name: `web-${index}` });
    current.spec!.rules![0]!.host = host;
    return current;
  };
  const group = `change to publish, ${LOADED} Ingresses in the apiserver (ready in ${
    Math.round(readyMs)
  } ms)`;
  Deno.bench({
    name: "update returned → raw watch event",
    group,
    baseline: true,
    n: 100,
    warmup: 5,
    async fn(b) {
      const host = `raw-${n++}.example.com`;
      const object = await update(1, host);
      const seen = new Promise<void>((resolve) => rawWaiting = { host, resolve });
      await client.update(INGRESSES, { namespace: ns, name: "web-1" }, object);
      b.start();
      await seen;
      b.end();
    },
  });
  Deno.bench({
    name: "update returned → controller published",
    group,
    n: 100,
    warmup: 5,
    async fn(b) {
      const host = `ctl-${n++}.example.com`;
      const object = await update(2, host);
      const published = new Promise<void>((resolve) => waiting = { host, resolve });
      await client.update(INGRESSES, { namespace: ns, name: "web-2" }, object);
      b.start();
      await published;
      b.end();
    },
  });
  globalThis.addEventListener("unload", () => {
    abort.abort();
    void raw;
    void controller.stop();
    access.close();
  });
}
