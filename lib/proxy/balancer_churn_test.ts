/**
 * The endpoint balancer's per-worker state over a long uptime with many
 * backends: its bounds must not cost the round-robin of backends still in
 * use. Calls the balancer as the proxy handler does (one per worker).
 *
 * @module
 */
import { assertEquals } from "../../tests/support/assert.ts";
import type { Backend } from "../routing/snapshot.ts";
import { EndpointBalancer } from "./endpoint_balancer.ts";

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
