/**
 * Ingress status (`desiredAddresses()`, `planStatus()`, `StatusWriter`): the
 * addresses written, only on our Ingresses and only when they differ, coalesced
 * within the hold-off, only while leading, at most `concurrency` at a time, with
 * growing delays after a conflict, and never repeated before the store catches
 * up.
 *
 * @module
 */
import { assert, assertEquals } from "../../tests/support/assert.ts";
import { waitFor } from "../../tests/support/wait.ts";
import { captureLogs } from "../../tests/support/captured_logs.ts";
import { KubeApiError } from "../k8s/kube_client.ts";
import type { Ingress } from "../k8s/objects.ts";
import {
  desiredAddresses,
  isIpAddress,
  planStatus,
  type StatusClient,
  StatusWriter,
  type StatusWriterOptions,
} from "./status_writer.ts";
import { hangingRequests } from "../../tests/support/hanging_requests.ts";

function ingress(
  key: string,
  addresses: { ip?: string; hostname?: string }[] = [],
  resourceVersion = "1",
): Ingress {
  const [namespace, name] = key.split("/");
  return {
    metadata: { namespace: namespace!, name: name!, resourceVersion },
    status: { loadBalancer: addresses.length > 0 ? { ingress: addresses } : {} },
  };
}

Deno.test("isIpAddress() tells IPv4 and IPv6 addresses from host names", () => {
  const cases: [string, boolean][] = [
    ["192.0.2.10", true],
    ["2001:db8::1", true],
    ["::1", true],
    ["256.1.1.1", false],
    ["lb.example.com", false],
    ["10.0.0", false],
  ];
  assertEquals(cases.map(([v]) => [v, isIpAddress(v)]), cases);
});

Deno.test("desiredAddresses() turns status addresses into sorted ip and hostname entries", () => {
  assertEquals(
    desiredAddresses({ addresses: ["lb.example.com", " 192.0.2.2", "192.0.2.1", "192.0.2.1", ""] }),
    [{ ip: "192.0.2.1" }, { ip: "192.0.2.2" }, { hostname: "lb.example.com" }],
  );
});

Deno.test("desiredAddresses() prefers status addresses over the publish Service", () => {
  assertEquals(
    desiredAddresses({ addresses: ["192.0.2.1"], service: { spec: { clusterIP: "10.0.0.1" } } }),
    [{ ip: "192.0.2.1" }],
  );
});

Deno.test("desiredAddresses() takes the Service's load-balancer status before its cluster IPs", () => {
  assertEquals(
    desiredAddresses({
      service: {
        spec: { type: "LoadBalancer", clusterIP: "10.0.0.1" },
        status: {
          loadBalancer: {
            ingress: [{ hostname: "a.elb.example" }, { ip: "203.0.113.5", ports: [{ port: 80 }] }],
          },
        },
      },
    }),
    [{ ip: "203.0.113.5" }, { hostname: "a.elb.example" }],
  );
  assertEquals(
    desiredAddresses({
      service: { spec: { clusterIP: "10.0.0.1", clusterIPs: ["10.0.0.1", "fd00::1"] } },
    }),
    [{ ip: "10.0.0.1" }, { ip: "fd00::1" }],
  );
  assertEquals(desiredAddresses({ service: { spec: { clusterIP: "None" } } }), []);
  assertEquals(
    desiredAddresses({ service: { spec: { type: "ExternalName", externalName: "x.example" } } }),
    [{ hostname: "x.example" }],
  );
});

Deno.test("desiredAddresses() is undefined without a source or while the Service is missing", () => {
  assertEquals(desiredAddresses({}), undefined);
  assertEquals(desiredAddresses({ addresses: [], service: undefined }), undefined);
});

Deno.test("planStatus() writes only ours that differ and clears others carrying our addresses", () => {
  const desired = [{ ip: "192.0.2.1" }, { hostname: "lb.example.com" }];
  const actions = planStatus({
    ingresses: [
      ingress("a/same", [{ hostname: "lb.example.com" }, { ip: "192.0.2.1" }]),
      ingress("a/empty"),
      ingress("a/other", [{ ip: "198.51.100.1" }]),
      ingress("b/left", [{ ip: "192.0.2.1" }, { hostname: "lb.example.com" }], "7"),
      ingress("b/foreign", [{ ip: "198.51.100.1" }]),
      ingress("b/remembered", [{ ip: "192.0.2.99" }]),
      ingress("b/none"),
    ],
    owned: new Set(["a/same", "a/empty", "a/other"]),
    desired,
    written: new Map([["b/remembered", "ip:192.0.2.99"]]),
  });
  assertEquals(actions.map((a) => [a.kind, a.key, a.resourceVersion]), [
    ["write", "a/empty", "1"],
    ["write", "a/other", "1"],
    ["clear", "b/left", "7"],
    ["clear", "b/remembered", "1"],
  ]);
});

Deno.test("planStatus() plans nothing while the desired addresses are unknown", () => {
  assertEquals(
    planStatus({ ingresses: [ingress("a/x")], owned: new Set(["a/x"]), desired: undefined }),
    [],
  );
});

/** Sync input in which every named Ingress (no status yet, resourceVersion "1") is ours. */
function owning(...keys: string[]) {
  return { ingresses: keys.map((key) => ingress(key)), owned: new Set(keys) };
}

/** A writer publishing `192.0.2.1`: leader, no hold-off, unless `options` say otherwise. */
function leaderWriter(client: StatusClient, options: Partial<StatusWriterOptions> = {}) {
  return new StatusWriter({
    client,
    isLeader: () => true,
    publishStatusAddresses: ["192.0.2.1"],
    holdOffMs: 0,
    ...options,
  });
}

/** A client that records status patches and answers from a table of outcomes. */
function recordingClient(fail: (name: string) => KubeApiError | undefined = () => undefined) {
  const patches: { name: string; body: unknown }[] = [];
  const client: StatusClient = {
    patch<T>(_r: unknown, at: { name?: string | undefined }, body: unknown): Promise<T> {
      patches.push({ name: at.name ?? "", body });
      const error = fail(at.name ?? "");
      if (error !== undefined) return Promise.reject(error);
      return Promise.resolve({ metadata: { resourceVersion: "99" } } as T);
    },
  } as StatusClient;
  return { client, patches };
}

Deno.test("StatusWriter coalesces syncs within the hold-off into one pass", async () => {
  const { client, patches } = recordingClient();
  const writer = leaderWriter(client, { holdOffMs: 20 });
  const first = writer.sync(owning("a/x"));
  const second = writer.sync(owning("a/x", "a/y"));
  assertEquals(await first, await second);
  assertEquals((await first).written, 2);
  assertEquals(patches.map((p) => p.name), ["x", "y"]);
  await writer.close();
});

Deno.test("StatusWriter does not repeat a write the store has not caught up with", async () => {
  const { client, patches } = recordingClient();
  const writer = leaderWriter(client);
  const input = { ingresses: [ingress("a/x", [], "5")], owned: new Set(["a/x"]) };
  assertEquals((await writer.sync(input)).written, 1);
  assertEquals((await writer.sync(input)).written, 0);
  // A newer version of the object without our status is written again.
  assertEquals(
    (await writer.sync({ ingresses: [ingress("a/x", [], "6")], owned: new Set(["a/x"]) }))
      .written,
    1,
  );
  assertEquals(patches.length, 2);
  await writer.close();
});

Deno.test("StatusWriter asks for leadership before each write and stops when it ends", async () => {
  const { client, patches } = recordingClient();
  let leader = true;
  const writer = leaderWriter(client, { isLeader: () => leader, concurrency: 1 });
  const original = client.patch.bind(client);
  (client as { patch: StatusClient["patch"] }).patch = (...args) => {
    leader = false; // lost while the first write is in flight
    return original(...args);
  };
  const result = await writer.sync(owning("a/x", "a/y", "a/z"));
  assertEquals(result, { written: 1, cleared: 0, failed: 0, notLeader: 2 });
  assertEquals(patches.map((p) => p.name), ["x"]);
  assertEquals(await writer.sync(owning("a/w")), {
    written: 0,
    cleared: 0,
    failed: 0,
    notLeader: 1,
  });
  await writer.close();
});

Deno.test("StatusWriter ignores deleted Ingresses and retries other failures", async () => {
  let failures = 1;
  const { client, patches } = recordingClient((name) => {
    if (name === "gone") return new KubeApiError("patch", 404, { reason: "NotFound" });
    if (name === "flaky" && failures-- > 0) return new KubeApiError("patch", 500, {});
    return undefined;
  });
  const writer = leaderWriter(client, { retryMs: { min: 10, max: 10 }, logger: silentLogger() });
  const result = await writer.sync(owning("a/gone", "a/flaky"));
  assertEquals(result, { written: 0, cleared: 0, failed: 1, notLeader: 0 });
  // The retry runs by itself, after the refused write's backoff (a sync meanwhile does not
  // re-send it).
  const flaky = () => patches.filter((p) => p.name === "flaky").length;
  await waitFor("the retry", () => flaky() === 2);
  assertEquals(patches.slice(0, 2).map((p) => p.name), ["flaky", "gone"]);
  assertEquals((await writer.sync(owning("a/gone", "a/flaky"))).written, 0);
  await writer.close();
});

Deno.test("StatusWriter clears with the resourceVersion as a precondition", async () => {
  const { client, patches } = recordingClient();
  const writer = leaderWriter(client);
  const result = await writer.sync({
    ingresses: [ingress("a/left", [{ ip: "192.0.2.1" }], "42")],
    owned: new Set(),
  });
  assertEquals(result.cleared, 1);
  assertEquals(patches[0]?.body, {
    metadata: { resourceVersion: "42" },
    status: { loadBalancer: null },
  });
  await writer.close();
});

function silentLogger() {
  // deno-lint-ignore no-explicit-any
  const noop = (() => {}) as any;
  // deno-lint-ignore no-explicit-any
  return { debug: noop, info: noop, warn: noop, error: noop } as any;
}

// Was a bug: close() aborts the writes in flight (they have a deadline now), and each was then
// warned about as if the API had refused it, on every shutdown with a write in flight.
Deno.test("StatusWriter.close() ends a write in flight without warning about it", async () => {
  using logs = captureLogs();
  const { started, hang } = hangingRequests();
  const client = { patch: (_r, _at, _body, options) => hang(options) } as StatusClient;
  const writer = leaderWriter(client, { logger: logs.logger });
  const synced = writer.sync(owning("a/x"));
  await started;
  await writer.close();
  await synced;
  assertEquals(logs.lines().filter((line) => line.startsWith("warning")), []);
});

/** A leading StatusWriter publishing 192.0.2.1, with no hold-off and a silent logger. */
function leadingWriter(
  client: StatusClient,
  options: Partial<StatusWriterOptions> = {},
): StatusWriter {
  return new StatusWriter({
    client,
    isLeader: () => true,
    publishStatusAddresses: ["192.0.2.1"],
    holdOffMs: 0,
    logger: quietLogger(),
    ...options,
  });
}

function quietLogger() {
  // deno-lint-ignore no-explicit-any
  const noop = (() => {}) as any;
  // deno-lint-ignore no-explicit-any
  const logger: any = { debug: noop, info: noop, warn: noop, error: noop };
  logger.with = () => logger;
  return logger;
}

function ingressNamed(key: string, ips: string[] = [], resourceVersion = "1"): Ingress {
  const [namespace, name] = key.split("/");
  return {
    metadata: { namespace: namespace!, name: name!, resourceVersion },
    status: { loadBalancer: ips.length > 0 ? { ingress: ips.map((ip) => ({ ip })) } : {} },
  };
}

function slowStatusClient(fail: (name: string) => Error | undefined = () => undefined) {
  const state = { inFlight: 0, most: 0, patches: [] as string[] };
  const client = {
    patch<T>(_r: unknown, at: { name?: string }): Promise<T> {
      state.patches.push(at.name ?? "");
      state.inFlight++;
      state.most = Math.max(state.most, state.inFlight);
      return new Promise<T>((resolve, reject) =>
        setTimeout(() => {
          state.inFlight--;
          const error = fail(at.name ?? "");
          if (error !== undefined) reject(error);
          else resolve({ metadata: { resourceVersion: "99" } } as T);
        }, 0)
      );
    },
  } as StatusClient;
  return { client, state };
}

Deno.test("StatusWriter writes 1,000 Ingresses' statuses once each, at most `concurrency` at a time, in one pass", async () => {
  const { client, state } = slowStatusClient();
  const writer = leadingWriter(client);
  const keys = Array.from({ length: 1_000 }, (_, i) => `shop/web-${i}`);
  const input = { ingresses: keys.map((k) => ingressNamed(k)), owned: new Set(keys) };
  const results = await Promise.all([writer.sync(input), writer.sync(input), writer.sync(input)]);
  assertEquals(results[0]!.written, 1_000);
  assertEquals(state.patches.length, 1_000);
  assert(state.most <= 4, `${state.most} status patches at once`);
  // Until the store catches up, nothing is written again.
  assertEquals((await writer.sync(input)).written, 0);
  assertEquals(state.patches.length, 1_000);
  await writer.close();
});

Deno.test("StatusWriter retries a conflicting write with growing delays, not in a tight loop", async () => {
  const { client, state } = slowStatusClient(() =>
    new KubeApiError("patch", 409, { reason: "Conflict" })
  );
  const writer = leadingWriter(client, { retryMs: { min: 20, max: 80 } });
  const started = performance.now();
  assertEquals(
    (await writer.sync({ ingresses: [ingressNamed("shop/web")], owned: new Set(["shop/web"]) }))
      .failed,
    1,
  );
  // Retries run by themselves: 20, 40, 80, 80 ms later.
  await waitFor("five attempts", () => state.patches.length >= 5, { timeoutMs: 5_000 });
  const elapsed = performance.now() - started;
  assert(elapsed >= 20 + 40 + 80 + 80 - 10, `5 attempts within ${elapsed} ms`);
  await writer.close();
});

// Was a bug: after a successful clear, #apply deletes the #written entry and nothing remembers the clear, so every pass before the store catches up re-sends the clear (with a stale resourceVersion: a 409 and a retry in the real API).
Deno.test({
  name: "StatusWriter does not repeat a clear the store has not caught up with",

  async fn() {
    const { client, state } = slowStatusClient();
    const writer = leadingWriter(client);
    const left = {
      ingresses: [ingressNamed("shop/left", ["192.0.2.1"], "7")],
      owned: new Set<string>(),
    };
    assertEquals((await writer.sync(left)).cleared, 1);
    for (let rebuild = 0; rebuild < 5; rebuild++) await writer.sync(left);
    assertEquals(state.patches, ["left"]);
    await writer.close();
  },
});
