import { assertEquals } from "../../tests/support/assert.ts";
import type { Backend } from "../routing/snapshot.ts";
import { EndpointBalancer } from "./endpoint_balancer.ts";
import { endpointKey } from "./upstream_pool.ts";

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
