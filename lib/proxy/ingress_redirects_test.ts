/**
 * The redirects of ingress-nginx annotations over real sockets, through the
 * translation, the compiled table, the handler and the listener:
 * `permanent-redirect`/`temporal-redirect` (codes, `Location` with nginx
 * variables expanded from the request), `ssl-redirect: "false"`,
 * `force-ssl-redirect`, `app-root`, and their order. No redirect reaches a
 * backend; an Ingress whose redirect annotation is invalid answers 503.
 *
 * @module
 */

import { assertEquals } from "../../tests/support/assert.ts";
import { type AnnotatedIngress, withAnnotatedWorld } from "../../tests/support/annotated_world.ts";
import { echoOf } from "../../tests/support/echo_world.ts";
import { headerValues } from "../../tests/support/raw_http.ts";

function get(host: string, target: string, extra = ""): string {
  return `GET ${target} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n${extra}\r\n`;
}

const INGRESSES: readonly AnnotatedIngress[] = [
  {
    name: "moved",
    host: "moved.example.com",
    annotations: {
      "permanent-redirect": "https://new.example.com$request_uri",
      "permanent-redirect-code": "308",
    },
  },
  {
    name: "default-code",
    host: "default.example.com",
    annotations: { "permanent-redirect": "https://new.example.com/landing" },
  },
  {
    name: "temporal",
    host: "temporal.example.com",
    annotations: {
      "temporal-redirect": "https://t.example.com/x$uri$is_args$args",
      "permanent-redirect": "https://p.example.com/",
    },
  },
  {
    name: "temporal-307",
    host: "t307.example.com",
    annotations: {
      "temporal-redirect": "https://t.example.com/?from=$host&scheme=$scheme",
      "temporal-redirect-code": "307",
    },
  },
  {
    name: "invalid",
    host: "invalid.example.com",
    annotations: { "permanent-redirect": "https://$host/" },
  },
  {
    name: "tls-off",
    host: "tls-off.example.com",
    tls: true,
    annotations: { "ssl-redirect": "false" },
  },
  { name: "tls-on", host: "tls-on.example.com", tls: true },
  { name: "forced", host: "forced.example.com", annotations: { "force-ssl-redirect": "true" } },
  { name: "app", host: "app.example.com", annotations: { "app-root": "/app/" } },
  {
    name: "app-and-redirect",
    host: "both.example.com",
    annotations: { "app-root": "/home", "permanent-redirect": "https://new.example.com$uri" },
  },
];

/** `[host, target, status, Location]`. */
const CASES: readonly [string, string, number, string][] = [
  ["moved.example.com", "/a/b?c=1&d=%2F", 308, "https://new.example.com/a/b?c=1&d=%2F"],
  ["moved.example.com", "/", 308, "https://new.example.com/"],
  // $request_uri: ingress-nginx writes the target as received (/a/../b); Sluice the path it
  // routed, normalised (the same resource, and never another host).
  ["moved.example.com", "/a/../b", 308, "https://new.example.com/b"],
  ["moved.example.com", "//evil.example/x", 308, "https://new.example.com/evil.example/x"],
  ["default.example.com", "/anything?x", 301, "https://new.example.com/landing"],
  ["temporal.example.com", "/p?q=1", 302, "https://t.example.com/x/p?q=1"],
  ["temporal.example.com", "/p", 302, "https://t.example.com/x/p"],
  [
    "t307.example.com:8080",
    "/",
    307,
    "https://t.example.com/?from=t307.example.com&scheme=http",
  ],
  ["tls-on.example.com", "/p?q", 308, "https://tls-on.example.com/p?q"],
  ["forced.example.com", "/p?q", 308, "https://forced.example.com/p?q"],
  ["forced.example.com:8080", "/", 308, "https://forced.example.com/"],
  ["app.example.com", "/", 302, "http://app.example.com/app/"],
  ["app.example.com", "/?x=1", 302, "http://app.example.com/app/"],
  ["app.example.com:8080", "/", 302, "http://app.example.com:8080/app/"],
  // app-root runs first (server level), the redirect for every other path.
  ["both.example.com", "/", 302, "http://both.example.com/home"],
  ["both.example.com", "/z", 301, "https://new.example.com/z"],
];

Deno.test("redirect annotations answer with their code and Location, variables expanded, and reach no backend", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    for (const [host, target, status, location] of CASES) {
      const response = await world.ask(get(host, target));
      assertEquals(
        [response.status, headerValues(response.headers, "location")],
        [status, [location]],
        `${host} ${target}`,
      );
    }
    assertEquals(world.received, []);
  });
});

Deno.test("HEAD and POST are redirected the same; a body does not change the answer", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    const head = await world.ask(
      "HEAD /h HTTP/1.1\r\nHost: moved.example.com\r\nConnection: close\r\n\r\n",
    );
    assertEquals([head.status, headerValues(head.headers, "location")], [308, [
      "https://new.example.com/h",
    ]]);
    const post = await world.ask(
      "POST /p HTTP/1.1\r\nHost: moved.example.com\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    );
    assertEquals([post.status, headerValues(post.headers, "location")], [308, [
      "https://new.example.com/p",
    ]]);
    assertEquals(world.received, []);
  });
});

Deno.test("ssl-redirect false serves a TLS host over HTTP; without it the host is redirected", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    const served = await world.ask(get("tls-off.example.com", "/p"));
    assertEquals(served.status, 200);
    assertEquals(echoOf(served).target, "/p");
    const redirected = await world.ask(get("tls-on.example.com", "/p"));
    assertEquals(redirected.status, 308);
    assertEquals(world.received.map((r) => r.ingress), ["tls-off"]);
  });
});

Deno.test("app-root leaves every path but / to the backend", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    for (const target of ["/app/", "/index.html", "/?", "//", "/./"]) {
      const response = await world.ask(get("app.example.com", target));
      // nginx compares the normalised $uri (merge_slashes): `//` and `/./` are `/` too.
      if (["/?", "//", "/./"].includes(target)) {
        assertEquals(response.status, 302, target);
        continue;
      }
      assertEquals(response.status, 200, target);
    }
    assertEquals(world.received.map((r) => r.target), ["/app/", "/index.html"]);
  });
});

Deno.test("an Ingress with an invalid redirect answers 503 and never redirects", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    const response = await world.ask(get("invalid.example.com", "/"));
    assertEquals(response.status, 503);
    assertEquals(headerValues(response.headers, "location"), []);
    assertEquals(world.received, []);
    // The other Ingresses are not affected.
    assertEquals((await world.ask(get("tls-off.example.com", "/"))).status, 200);
  });
});

Deno.test("with --ssl-redirect=false a TLS host is served over HTTP, force-ssl-redirect still redirects", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    assertEquals((await world.ask(get("tls-on.example.com", "/"))).status, 200);
    const forced = await world.ask(get("forced.example.com", "/p"));
    assertEquals([forced.status, headerValues(forced.headers, "location")], [308, [
      "https://forced.example.com:8443/p",
    ]]);
  }, { proxy: { sslRedirect: false, httpsRedirectPort: 8443 } });
});

Deno.test({
  name: "app-root redirects / even when another Ingress of the host serves /, as ingress-nginx",
  // Was a difference: app-root applied only when the route of `/` was the app-root Ingress's.
  // ingress-nginx writes `if ($uri = /) { return 302 …; }` in the server block, for the host.
  async fn() {
    await withAnnotatedWorld([
      { name: "public", host: "split.example.com", paths: ["/"] },
      {
        name: "app",
        host: "split.example.com",
        paths: ["/app"],
        annotations: { "app-root": "/app" },
      },
    ], async (world) => {
      const response = await world.ask(get("split.example.com", "/"));
      assertEquals([response.status, headerValues(response.headers, "location")], [302, [
        "http://split.example.com/app",
      ]]);
    });
  },
});

Deno.test("from-to-www-redirect sends the www. twin of a host to it with 308, the target kept", async () => {
  await withAnnotatedWorld([
    { name: "shop", host: "shop.example.com", annotations: { "from-to-www-redirect": "true" } },
    { name: "plain", host: "plain.example.com" },
  ], async (world) => {
    const twin = await world.ask(get("www.shop.example.com", "/a/b?c=1"));
    assertEquals([twin.status, headerValues(twin.headers, "location")], [308, [
      "http://shop.example.com/a/b?c=1",
    ]]);
    assertEquals((await world.ask(get("shop.example.com", "/a"))).status, 200);
    // No twin for a host whose Ingress does not ask for it.
    assertEquals((await world.ask(get("www.plain.example.com", "/"))).status, 404);
    assertEquals(world.received.filter((r) => r.ingress === "shop").length, 1);
  });
});
