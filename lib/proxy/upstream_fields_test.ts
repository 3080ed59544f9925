/**
 * The request fields ingress-nginx annotations set for the backend, over real
 * sockets: `upstream-vhost` replaces `Host`, `x-forwarded-prefix` sets
 * `X-Forwarded-Prefix` (a client's own one is replaced, as nginx's
 * `proxy_set_header` does); other Ingresses keep the client's.
 *
 * @module
 */
import { assertEquals } from "../../tests/support/assert.ts";
import { type AnnotatedIngress, withAnnotatedWorld } from "../../tests/support/annotated_world.ts";

const INGRESSES: readonly AnnotatedIngress[] = [
  {
    name: "vhost",
    host: "public.example.com",
    annotations: { "upstream-vhost": "internal.svc:8080", "x-forwarded-prefix": "/shop" },
  },
  { name: "plain", host: "plain.example.com" },
];

function get(host: string): string {
  return `GET /x HTTP/1.1\r\nHost: ${host}\r\nX-Forwarded-Prefix: /client\r\nConnection: close\r\n\r\n`;
}

function field(headers: readonly [string, string][], name: string): string[] {
  return headers.filter(([n]) => n.toLowerCase() === name).map(([, v]) => v);
}

Deno.test("upstream-vhost and x-forwarded-prefix replace Host and X-Forwarded-Prefix for the backend", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    assertEquals((await world.ask(get("public.example.com"))).status, 200);
    assertEquals((await world.ask(get("plain.example.com"))).status, 200);
    const [vhost, plain] = ["vhost", "plain"].map((name) =>
      world.received.find((r) => r.ingress === name)!
    );
    assertEquals(field(vhost!.headers, "host"), ["internal.svc:8080"]);
    assertEquals(field(vhost!.headers, "x-forwarded-prefix"), ["/shop"]);
    // The public name still reaches the backend as X-Forwarded-Host.
    assertEquals(field(vhost!.headers, "x-forwarded-host"), ["public.example.com"]);
    assertEquals(field(plain!.headers, "host"), ["plain.example.com"]);
    assertEquals(field(plain!.headers, "x-forwarded-prefix"), ["/client"]);
  });
});
