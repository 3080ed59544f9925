/**
 * ingress-nginx's request limits through the handler over real sockets:
 * `limit-rps` with its burst (`limit-burst-multiplier`) answers 503 past it
 * (or `--limit-status-code`), `limit-allowlist` exempts clients, forwarding
 * headers from an untrusted peer do not change who is counted, limits are
 * per Ingress, and `limit-connections` bounds the requests in flight. The
 * arithmetic of the buckets is pinned in `client_limits_test.ts`.
 *
 * @module
 */
import { assertEquals } from "../../tests/support/assert.ts";
import { type AnnotatedIngress, withAnnotatedWorld } from "../../tests/support/annotated_world.ts";
import { waitFor } from "../../tests/support/wait.ts";

const INGRESSES: readonly AnnotatedIngress[] = [
  // One a second, a burst of one: two requests at once pass, the third waits a second.
  {
    name: "limited",
    host: "limited.test",
    annotations: { "limit-rps": "1", "limit-burst-multiplier": "1" },
  },
  {
    name: "exempt",
    host: "exempt.test",
    annotations: {
      "limit-rps": "1",
      "limit-burst-multiplier": "1",
      "limit-allowlist": "127.0.0.0/8",
    },
  },
  { name: "single", host: "single.test", annotations: { "limit-connections": "1" } },
  { name: "free", host: "free.test" },
];

function get(host: string, target = "/", fields: readonly string[] = []): string {
  return `GET ${target} HTTP/1.1\r\nHost: ${host}\r\n${
    fields.map((f) => `${f}\r\n`).join("")
  }Connection: close\r\n\r\n`;
}

Deno.test("limit-rps lets its burst through at once and answers 503 past it, per client and Ingress", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    const statuses: number[] = [];
    for (let i = 0; i < 2; i++) statuses.push((await world.ask(get("limited.test"))).status);
    // A spoofed client address from an untrusted peer is the same client.
    statuses.push(
      (await world.ask(get("limited.test", "/", ["X-Forwarded-For: 10.9.9.9"]))).status,
    );
    assertEquals(statuses, [200, 200, 503]);
    const forwarded = world.received.filter((r) => r.ingress === "limited").length;
    assertEquals(forwarded, 2, "the refused request never reached the backend");
    // Other Ingresses count apart; an exempt client is never limited.
    for (let i = 0; i < 5; i++) {
      assertEquals((await world.ask(get("free.test"))).status, 200);
      assertEquals((await world.ask(get("exempt.test"))).status, 200);
    }
  });
});

Deno.test("--limit-status-code sets the answer past a limit", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await world.ask(get("limited.test"))).status);
    assertEquals(statuses, [200, 200, 429]);
  }, { proxy: { limitStatus: 429 } });
});

Deno.test("limit-connections answers 503 while the client has that many requests in flight", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    const slow = world.ask(get("single.test", "/?delay=3000"));
    await waitFor(
      "the slow request to reach the backend",
      () => world.received.some((r) => r.ingress === "single"),
    );
    assertEquals((await world.ask(get("single.test", "/again"))).status, 503);
    assertEquals((await world.ask(get("free.test"))).status, 200, "other Ingresses are free");
    assertEquals((await slow).status, 200);
    // Its response over, the client may send the next.
    assertEquals((await world.ask(get("single.test", "/next"))).status, 200);
  });
});
