import { assert, assertEquals } from "../../tests/support/assert.ts";
import { webIngressSpec } from "../../tests/support/fixture_objects.ts";
import type { Ingress, KubeObject } from "../k8s/objects.ts";
import type { ObjectSource, SourceStatus, StoreWriter } from "../sources/source.ts";
import { createCertificateInspector } from "../tls/certificate_inspector.ts";
import { translate } from "../translate/translate.ts";
import type { Translation } from "../translate/translation.ts";
import { FakeTimers, settle } from "../../tests/support/fake_timers.ts";
import { captureLogs } from "../../tests/support/captured_logs.ts";
import { Controller, type ControllerOptions } from "./controller.ts";

/** A source the test drives by hand. */
class HandSource implements ObjectSource {
  readonly name = "hand";
  writer: StoreWriter | undefined;
  #resolve!: () => void;
  readonly synced = new Promise<void>((resolve) => this.#resolve = resolve);
  isSynced = false;
  stopped = false;
  start(writer: StoreWriter): void {
    this.writer = writer;
  }
  sync(): void {
    this.isSynced = true;
    this.#resolve();
  }
  status(): SourceStatus {
    return { type: "kubernetes", synced: this.isSynced, reflectors: [] };
  }
  stop(): Promise<void> {
    this.stopped = true;
    return Promise.resolve();
  }
}

const ingressClass: KubeObject = {
  metadata: { name: "sluice", resourceVersion: "1" },
  spec: { controller: "sluice.dev/ingress-controller" },
} as KubeObject;

function ingress(name: string, host: string, rv: string): Ingress {
  return {
    metadata: {
      namespace: "shop",
      name,
      resourceVersion: rv,
      creationTimestamp: "2024-01-01T00:00:00Z",
    },
    spec: webIngressSpec(host),
  };
}

function setup(
  options: Partial<Omit<ControllerOptions, "sources">> & { sources?: HandSource[] } = {},
) {
  const logs = captureLogs("controller");
  const timers = new FakeTimers(0);
  const sources = options.sources ?? [new HandSource()];
  const published: Translation[] = [];
  const controller = new Controller({
    sources,
    settings: {},
    inspectCertificate: createCertificateInspector(),
    publish: (t) => {
      published.push(t);
    },
    logger: logs.logger,
    timers,
    now: () => Date.parse("2030-01-01T00:00:00Z") + timers.now(),
    ...options,
  });
  controller.start();
  return { controller, sources, published, timers, logs, source: sources[0]! };
}

Deno.test("Controller publishes nothing and is not ready until every source synced", async () => {
  const { controller, sources, published, timers, logs } = setup({
    sources: [new HandSource(), new HandSource()],
  });
  using _ = logs;
  sources[0]!.writer!.upsert("IngressClass", ingressClass);
  sources[0]!.writer!.upsert("Ingress", ingress("web", "a.test", "1"));
  sources[0]!.sync();
  await timers.advance(1_000);
  assertEquals(published.length, 0);
  assert(!controller.ready);
  sources[1]!.sync();
  await timers.advance(0);
  assertEquals(published.length, 1);
  assert(controller.ready);
  assertEquals(published[0]!.routes.map((r) => r.host), ["a.test"]);
  await controller.stop();
  assert(sources.every((s) => s.stopped));
});

Deno.test("Controller publishes a change that matters, once, and skips changes that do not", async () => {
  const { controller, source, published, timers, logs } = setup();
  using _ = logs;
  source.writer!.upsert("IngressClass", ingressClass);
  source.writer!.upsert("Ingress", ingress("web", "a.test", "1"));
  source.sync();
  await controller.whenReady;
  assertEquals(published.length, 1);

  // Status only: no rebuild at all.
  const withStatus = {
    ...ingress("web", "a.test", "2"),
    status: { loadBalancer: { ingress: [{ ip: "10.0.0.1" }] } },
  };
  source.writer!.upsert("Ingress", withStatus);
  await timers.advance(1_000);
  assertEquals(controller.stats().rebuilds, 1);

  // A burst of real changes: coalesced.
  for (let i = 0; i < 10; i++) {
    source.writer!.upsert("Ingress", ingress("web", `b${i}.test`, `${3 + i}`));
  }
  await timers.advance(1_000);
  assertEquals(published.length, 2);
  assertEquals(published[1]!.routes.map((r) => r.host), ["b9.test"]);
  assertEquals(controller.stats().changes["status-only"], 1);
  await controller.stop();
});

Deno.test("Controller does not publish a translation equal to the last one", async () => {
  const { controller, source, published, timers, logs } = setup();
  using _ = logs;
  source.writer!.upsert("IngressClass", ingressClass);
  source.writer!.upsert("Ingress", ingress("web", "a.test", "1"));
  source.sync();
  await controller.whenReady;
  // An annotation change matters to the store but not to the routes.
  const annotated = ingress("web", "a.test", "2");
  annotated.metadata!.annotations = { "example.com/note": "hello" };
  source.writer!.upsert("Ingress", annotated);
  await timers.advance(1_000);
  assertEquals(controller.stats().rebuilds, 2);
  assertEquals(controller.stats().unchanged, 1);
  assertEquals(published.length, 1);
  await controller.stop();
});

Deno.test("Controller keeps the last good translation when translate throws", async () => {
  let fail = false;
  const { controller, source, published, timers, logs } = setup({
    translate: (objects, options) => {
      if (fail) throw new Error("bug");
      return translate(objects, options);
    },
  });
  using _ = logs;
  source.writer!.upsert("IngressClass", ingressClass);
  source.writer!.upsert("Ingress", ingress("web", "a.test", "1"));
  source.sync();
  await controller.whenReady;
  fail = true;
  source.writer!.upsert("Ingress", ingress("web", "b.test", "2"));
  await timers.advance(1_000);
  assertEquals(published.length, 1);
  assertEquals(controller.published?.routes.map((r) => r.host), ["a.test"]);
  assertEquals(controller.stats().translateErrors, 1);
  assert(logs.lines().some((l) => l.startsWith("error: Cannot translate")));
  assert(controller.ready, "still ready: the last good routes serve");
  fail = false;
  source.writer!.upsert("Ingress", ingress("web", "c.test", "3"));
  await timers.advance(1_000);
  assertEquals(controller.published?.routes.map((r) => r.host), ["c.test"]);
  await controller.stop();
});

Deno.test("Controller retries a failed publish and becomes ready only once one succeeds", async () => {
  let failures = 2;
  const published: Translation[] = [];
  const { controller, source, timers, logs } = setup({
    publishRetryMs: 500,
    publish: (t) => {
      if (failures-- > 0) throw new Error("workers are busy");
      published.push(t);
    },
  });
  using _ = logs;
  source.writer!.upsert("IngressClass", ingressClass);
  source.sync();
  await timers.advance(0);
  assert(!controller.ready);
  await timers.advance(499);
  assert(!controller.ready);
  await timers.advance(1_000);
  assert(controller.ready);
  assertEquals(published.length, 1);
  assertEquals(controller.stats().publishErrors, 2);
  await controller.stop();
});

Deno.test("Controller rebuilds when a published certificate expires", async () => {
  const notAfter = "2030-01-01T01:00:00Z";
  let calls = 0;
  const { controller, source, timers, logs } = setup({
    translate: () => {
      calls++;
      return {
        routes: [],
        backends: [],
        tlsHosts: [],
        certificates: calls === 1
          ? [{
            secret: "shop/tls",
            hosts: ["a.test"],
            notBefore: "2029-01-01T00:00:00Z",
            notAfter,
            dnsNames: ["a.test"],
            fingerprint: "AA",
            certPem: "",
            keyPem: "",
          }]
          : [],
        issues: [],
      };
    },
  });
  using _ = logs;
  source.sync();
  await controller.whenReady;
  assertEquals(calls, 1);
  await timers.advance(3_600_000 - 1);
  assertEquals(calls, 1);
  await timers.advance(1_001);
  assertEquals(calls, 2);
  assertEquals(controller.published?.certificates.length, 0);
  await controller.stop();
  await settle();
  assertEquals(timers.pendingCount, 0);
});
