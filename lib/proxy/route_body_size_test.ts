/**
 * `proxy-body-size` over real sockets: the Ingress's own limit replaces
 * `--max-body-size` (smaller or larger), for declared and chunked bodies;
 * `0` lifts the limit; 413 reaches no backend with a whole body.
 *
 * @module
 */

import { assert, assertEquals } from "../../tests/support/assert.ts";
import { type AnnotatedIngress, withAnnotatedWorld } from "../../tests/support/annotated_world.ts";
import { echoOf } from "../../tests/support/echo_world.ts";

const GLOBAL = 1000;

const INGRESSES: readonly AnnotatedIngress[] = [
  { name: "small", host: "small.example.com", annotations: { "proxy-body-size": "1k" } },
  { name: "big", host: "big.example.com", annotations: { "proxy-body-size": "8k" } },
  { name: "unlimited", host: "unlimited.example.com", annotations: { "proxy-body-size": "0" } },
  { name: "global", host: "global.example.com" },
];

function declared(host: string, length: number): string {
  return `POST /upload HTTP/1.1\r\nHost: ${host}\r\nContent-Length: ${length}\r\n` +
    `Connection: close\r\n\r\n${"x".repeat(length)}`;
}

function chunked(host: string, length: number, chunk = 500): string {
  let body = "";
  for (let left = length; left > 0; left -= chunk) {
    const n = Math.min(chunk, left);
    body += `${n.toString(16)}\r\n${"y".repeat(n)}\r\n`;
  }
  return `POST /upload HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: chunked\r\n` +
    `Connection: close\r\n\r\n${body}0\r\n\r\n`;
}

/** `[host, body length, status]`: each sent declared and chunked. */
const CASES: readonly [string, number, number][] = [
  ["small.example.com", 1024, 200],
  ["small.example.com", 1025, 413],
  // Larger than --max-body-size: the Ingress's own limit allows it.
  ["big.example.com", 4000, 200],
  ["big.example.com", 8192, 200],
  ["big.example.com", 8193, 413],
  ["unlimited.example.com", 20_000, 200],
  ["global.example.com", GLOBAL, 200],
  ["global.example.com", GLOBAL + 1, 413],
];

for (const [form, build] of [["declared", declared], ["chunked", chunked]] as const) {
  Deno.test(`proxy-body-size replaces --max-body-size for ${form} bodies, 0 lifting the limit`, async () => {
    await withAnnotatedWorld(INGRESSES, async (world) => {
      for (const [host, length, status] of CASES) {
        const response = await world.ask(build(host, length));
        assertEquals(response.status, status, `${host} ${length}`);
        if (status === 200) assertEquals(echoOf(response).body.length, length, `${host} ${length}`);
      }
      // Every refused body stopped short of the backend.
      const complete = world.received.filter((r) => r.method === "POST");
      for (const r of complete) {
        const limit = { small: 1024, big: 8192, unlimited: Infinity, global: GLOBAL }[r.ingress]!;
        assert(r.bodyLength <= limit, `${r.ingress} got ${r.bodyLength}`);
      }
      if (form === "declared") {
        // A declared body over the limit is refused before any byte is forwarded.
        assertEquals(complete.length, CASES.filter(([, , s]) => s === 200).length);
      }
    }, { proxy: { maxBodyBytes: GLOBAL } });
  });
}

Deno.test("proxy-body-size applies without --max-body-size too, and 413 names no backend", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    assertEquals((await world.ask(declared("small.example.com", 2000))).status, 413);
    assertEquals((await world.ask(declared("global.example.com", 50_000))).status, 200);
    assertEquals(world.received.map((r) => r.ingress), ["global"]);
  });
});
