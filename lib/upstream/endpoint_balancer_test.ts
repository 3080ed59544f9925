/**
 * Load balancing: `EndpointBalancer` round-robin per backend, passive health
 * (`markDown`/`markUp`, failing open when every endpoint is down), its bounded
 * per-worker state over many backends, dual-stack pods (one pod on both
 * families), and the proxy spreading real requests evenly, also while endpoints
 * refuse or the endpoint list changes between snapshots.
 *
 * @module
 */
import { assert, assertEquals } from "../../tests/support/assert.ts";
import type { Backend } from "../routing/snapshot.ts";
import { EndpointBalancer } from "./endpoint_balancer.ts";
import { endpointKey } from "./upstream_pool.ts";
import {
  closedPort,
  countingBackend,
  proxyGet,
  tally,
  withProxyTo,
} from "../../tests/support/upstream_backends.ts";
import { latin1 } from "../../tests/support/raw_http.ts";

const backend: Backend = {
  key: "shop/web:80",
  service: "shop/web",
  endpoints: [
    { address: "10.0.0.1", port: 80 },
    { address: "10.0.0.2", port: 80 },
    { address: "fd00::3", port: 8080 },
  ],
};

Deno.test("choose() rotates round-robin per backend", () => {
  const balancer = new EndpointBalancer();
  const picks = Array.from({ length: 6 }, () => endpointKey(balancer.choose(backend)!));
  assertEquals(picks, [
    "10.0.0.1:80",
    "10.0.0.2:80",
    "[fd00::3]:8080",
    "10.0.0.1:80",
    "10.0.0.2:80",
    "[fd00::3]:8080",
  ]);
});

Deno.test("choose() skips endpoints already tried and returns undefined when none are left", () => {
  const balancer = new EndpointBalancer();
  const tried = new Set(["10.0.0.1:80", "10.0.0.2:80"]);
  assertEquals(balancer.choose(backend, tried)?.address, "fd00::3");
  tried.add("[fd00::3]:8080");
  assertEquals(balancer.choose(backend, tried), undefined);
});

Deno.test("markDown() skips an endpoint until downForMs passes", () => {
  let now = 1_000;
  const balancer = new EndpointBalancer({ downForMs: 500, now: () => now });
  balancer.markDown(backend.endpoints[0]!);
  const picks = Array.from({ length: 4 }, () => balancer.choose(backend)!.address);
  assertEquals(picks.includes("10.0.0.1"), false);
  assertEquals(balancer.isDown(backend.endpoints[0]!), true);
  now += 501;
  const later = Array.from({ length: 3 }, () => balancer.choose(backend)!.address).sort();
  assertEquals(later, ["10.0.0.1", "10.0.0.2", "fd00::3"]);
});

Deno.test("choose() fails open when every endpoint is down", () => {
  const balancer = new EndpointBalancer({ downForMs: 10_000 });
  for (const endpoint of backend.endpoints) balancer.markDown(endpoint);
  assertEquals(balancer.choose(backend) !== undefined, true);
});

Deno.test("markUp() clears a mark and an empty backend yields nothing", () => {
  const balancer = new EndpointBalancer();
  balancer.markDown(backend.endpoints[1]!);
  balancer.markUp(backend.endpoints[1]!);
  assertEquals(balancer.isDown(backend.endpoints[1]!), false);
  assertEquals(balancer.choose({ key: "a/b:80", service: "a/b", endpoints: [] }), undefined);
});

// Was a bug: the cursor moved one place per request whatever was skipped, so the endpoint after a
// down one took its turn too: with one of three down, one survivor got 2/3 of the traffic.
Deno.test("round-robin shares a down endpoint's turns evenly among the others", () => {
  const backend: Backend = {
    key: "shop/web:80",
    service: "shop/web",
    endpoints: ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"].map((address) => ({
      address,
      port: 80,
    })),
  };
  const balancer = new EndpointBalancer({ now: () => 0 });
  balancer.markDown(backend.endpoints[0]!);
  const counts = tally(Array.from({ length: 600 }, () => balancer.choose(backend)!.address));
  assertEquals(counts, { "10.0.0.2": 200, "10.0.0.3": 200, "10.0.0.4": 200 });
  balancer.markDown(backend.endpoints[2]!);
  const two = tally(Array.from({ length: 600 }, () => balancer.choose(backend)!.address));
  assertEquals(two, { "10.0.0.2": 300, "10.0.0.4": 300 });
});

Deno.test("round-robin stays even when the endpoint list shrinks, grows or reorders between snapshots", () => {
  const at = (...last: number[]): Backend => ({
    key: "shop/web:80",
    service: "shop/web",
    endpoints: last.map((n) => ({ address: `10.0.0.${n}`, port: 80 })),
  });
  const balancer = new EndpointBalancer();
  for (let i = 0; i < 5; i++) balancer.choose(at(1, 2, 3, 4, 5, 6));
  const shrunk = tally(Array.from({ length: 10 }, () => balancer.choose(at(7, 8))!.address));
  assertEquals(shrunk, { "10.0.0.7": 5, "10.0.0.8": 5 });
  const grown = tally(Array.from({ length: 30 }, () => balancer.choose(at(7, 8, 9))!.address));
  assertEquals(grown, { "10.0.0.7": 10, "10.0.0.8": 10, "10.0.0.9": 10 });
  const reordered = tally(
    Array.from({ length: 30 }, () => balancer.choose(at(9, 7, 8))!.address),
  );
  assertEquals(reordered, { "10.0.0.7": 10, "10.0.0.8": 10, "10.0.0.9": 10 });
});

Deno.test("concurrent requests are spread evenly, and evenly over the survivors when one endpoint refuses", async () => {
  const backends = ["a", "b", "c"].map((name) => countingBackend(name));
  const dead = { address: "127.0.0.1", port: closedPort() };
  try {
    await withProxyTo(backends.map((b) => b.endpoint), async (proxy) => {
      const answers = await Promise.all(
        Array.from({ length: 60 }, (_, i) => proxyGet(proxy, `/even/${i}`)),
      );
      assertEquals(tally(answers.map((r) => latin1(r.body))), { a: 20, b: 20, c: 20 });
    });
    await withProxyTo([dead, backends[0]!.endpoint, backends[1]!.endpoint], async (proxy) => {
      const answers: string[] = [];
      for (let i = 0; i < 40; i++) answers.push(latin1((await proxyGet(proxy, `/seq/${i}`)).body));
      assertEquals(tally(answers), { a: 20, b: 20 });
    }, { endpointDownMs: 60_000 });
  } finally {
    await Promise.all(backends.map((b) => b.close()));
  }
});

Deno.test("when every endpoint is marked down the route still tries them, and serves as soon as one is back", async () => {
  const ports = [closedPort(), closedPort()];
  const endpoints = ports.map((port) => ({ address: "127.0.0.1", port }));
  await withProxyTo(endpoints, async (proxy) => {
    assertEquals((await proxyGet(proxy, "/")).status, 502);
    assert(endpoints.every((e) => proxy.handler.balancer.isDown(e)), "both marked down");
    assertEquals((await proxyGet(proxy, "/")).status, 502);
    // One comes back, well within the 60 s its mark lasts.
    const revived = countingBackend("back", { port: ports[1]! });
    try {
      const answers = [await proxyGet(proxy, "/1"), await proxyGet(proxy, "/2")];
      assertEquals(answers.map((r) => [r.status, latin1(r.body)]), [[200, "back"], [200, "back"]]);
      assert(!proxy.handler.balancer.isDown(endpoints[1]!), "a success clears the mark");
    } finally {
      await revived.close();
    }
  }, { endpointDownMs: 60_000 });
});

function dualStack(): Backend {
  // As translation builds it: both families' addresses of every pod, sorted.
  return {
    key: "shop/web:80",
    service: "shop/web",
    endpoints: [
      { address: "10.0.0.1", port: 8080 },
      { address: "10.0.0.2", port: 8080 },
      { address: "fd00::1", port: 8080 },
      { address: "fd00::2", port: 8080 },
    ],
  };
}

Deno.test("round-robin over a dual-stack backend gives every pod the same share (each family of each pod once per round)", () => {
  const balancer = new EndpointBalancer({ now: () => 0 });
  const backend = dualStack();
  const counts = new Map<string, number>();
  for (let i = 0; i < 400; i++) {
    const key = endpointKey(balancer.choose(backend)!);
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  assertEquals([...counts.values()], [100, 100, 100, 100]);
});

Deno.test("passive health marks one family of a pod down without the other, and a retry skips the address tried", () => {
  let now = 0;
  const balancer = new EndpointBalancer({ now: () => now, downForMs: 1_000 });
  const backend = dualStack();
  balancer.markDown({ address: "fd00::1", port: 8080 });
  assert(balancer.isDown({ address: "fd00::1", port: 8080 }));
  assert(!balancer.isDown({ address: "10.0.0.1", port: 8080 }));
  const seen = new Set<string>();
  for (let i = 0; i < 6; i++) seen.add(endpointKey(balancer.choose(backend)!));
  assert(!seen.has("[fd00::1]:8080"), [...seen].join());
  assertEquals(seen.size, 3);
  const tried = new Set(["[fd00::2]:8080", "10.0.0.1:8080", "10.0.0.2:8080"]);
  // Everything else tried: the down one is still offered (fail open), as for IPv4.
  assertEquals(endpointKey(balancer.choose(backend, tried)!), "[fd00::1]:8080");
  now = 2_000;
  assert(!balancer.isDown({ address: "fd00::1", port: 8080 }));
});

function backends(count: number): Backend[] {
  return Array.from({ length: count }, (_, i) => ({
    key: `ns-${i}/web:80`,
    service: `ns-${i}/web`,
    endpoints: [{ address: `10.1.${i >> 8}.${i & 255}`, port: 80 }, {
      address: `10.2.${i >> 8}.${i & 255}`,
      port: 80,
    }],
  }));
}

// Was a bug: EndpointBalancer cleared every round-robin cursor once 4,096 backend keys were
// tracked, so a worker serving more backends restarted each at its first endpoint: nearly all
// traffic went to the first (sorted) pod of every Service.
Deno.test({
  name: "choose() alternates the two endpoints of each of 5,000 backends served in turn",
  fn() {
    const balancer = new EndpointBalancer();
    const all = backends(5_000);
    const first = all.map((b) => balancer.choose(b)!.address);
    const second = all.map((b) => balancer.choose(b)!.address);
    const same = first.filter((address, i) => address === second[i]).length;
    assertEquals(same, 0, `${same} backends sent their second request to the same endpoint`);
  },
});

Deno.test({
  name:
    "choose() keeps alternating the endpoints of backends in use while 140,000 one-off backends come and go",
  fn() {
    const balancer = new EndpointBalancer();
    const live = backends(50);
    const last = live.map((b) => balancer.choose(b)!.address);
    let repeated = 0;
    // More one-off backends (deleted preview environments) than two generations of cursors hold.
    const oneOff = { ...live[0]!, key: "" };
    for (let i = 0; i < 140_000; i++) {
      balancer.choose({ ...oneOff, key: `preview-${i}/web:80` });
      if (i % 500 !== 0) continue;
      live.forEach((b, j) => {
        const address = balancer.choose(b)!.address;
        if (address === last[j]) repeated++;
        last[j] = address;
      });
    }
    assertEquals(repeated, 0, `${repeated} requests went to the endpoint the previous one had`);
  },
});
