/**
 * The source ranges of ingress-nginx (`allowlist-source-range`,
 * `whitelist-source-range`, `denylist-source-range`), hostile and ordinary
 * cases, over real sockets through the translation, the handler and the
 * listener. The usual split: a public Ingress serves `/` of a host, a
 * protected one `/admin` of the same host and Service kind. Nothing here may
 * let through a request ingress-nginx would refuse:
 *
 * - the client address is the TCP peer unless the peer is in
 *   `--trusted-proxy-cidrs`; `X-Forwarded-For`, `X-Real-IP`, `Forwarded`
 *   from anyone else change nothing;
 * - IPv4-mapped IPv6 peers are compared as IPv4;
 * - paths and hosts that name the protected route in another spelling
 *   (`//admin`, dot segments, percent-encoding, host case, a trailing dot,
 *   absolute-form targets) reach it, and its 403, not the public route;
 * - the denylist beats the allowlist.
 *
 * Every refusal is checked to have reached no backend.
 *
 * @module
 */

import { assert, assertEquals } from "../../tests/support/assert.ts";
import {
  type AnnotatedIngress,
  type AnnotatedWorld,
  withAnnotatedWorld,
} from "../../tests/support/annotated_world.ts";
import { echoOf, probe } from "../../tests/support/echo_world.ts";

const HOST = "admin.example.com";

/** The peer of every socket test is 127.0.0.1, outside 10.0.0.0/8. */
const INGRESSES: readonly AnnotatedIngress[] = [
  { name: "public", host: HOST, paths: ["/"] },
  {
    name: "admin",
    host: HOST,
    paths: ["/admin"],
    annotations: { "allowlist-source-range": "10.0.0.0/8, 2001:db8::/32" },
  },
  {
    name: "loopback",
    host: HOST,
    paths: ["/loopback"],
    annotations: { "whitelist-source-range": "127.0.0.1/32" },
  },
  {
    name: "denied",
    host: HOST,
    paths: ["/denied"],
    annotations: { "denylist-source-range": "127.0.0.0/8" },
  },
  {
    name: "both",
    host: HOST,
    paths: ["/both"],
    annotations: {
      "allowlist-source-range": "127.0.0.0/8",
      "denylist-source-range": "127.0.0.1",
    },
  },
];

function get(target: string, host = HOST, fields: readonly string[] = []): string {
  return `GET ${target} HTTP/1.1\r\nHost: ${host}\r\n` + fields.map((f) => `${f}\r\n`).join("") +
    "Connection: close\r\n\r\n";
}

async function status(world: AnnotatedWorld, raw: string): Promise<number> {
  return (await world.ask(raw)).status;
}

/** Asserts that `raw` is refused (403, or 400 for a target nginx would not parse) and reached no backend. */
async function refused(world: AnnotatedWorld, raw: string, allowed = [403]): Promise<void> {
  const before = world.received.length;
  const got = await status(world, raw);
  assert(
    allowed.includes(got),
    `${JSON.stringify(raw)} → ${got}, expected ${allowed.join(" or ")}`,
  );
  assertEquals(world.received.slice(before), [], JSON.stringify(raw));
}

Deno.test("the allowlist serves listed clients and refuses others with 403, before any backend", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    assertEquals(await status(world, get("/")), 200);
    assertEquals(await status(world, get("/loopback")), 200);
    await refused(world, get("/admin"));
    await refused(world, get("/admin/users?x=1"));
    await refused(world, `POST /admin HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: 3\r\n\r\nabc`);
    assertEquals(world.received.map((r) => r.ingress), ["public", "loopback"]);
  });
});

Deno.test("the denylist refuses listed clients, and beats an allowlist that lists them too", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    await refused(world, get("/denied"));
    await refused(world, get("/both"));
    assertEquals(world.received, []);
  });
});

const SPOOFS: readonly (readonly string[])[] = [
  ["X-Forwarded-For: 10.0.0.1"],
  ["X-Forwarded-For: 10.0.0.1, 10.0.0.2"],
  ["X-Forwarded-For: 127.0.0.1", "X-Forwarded-For: 10.0.0.1"],
  ["X-Real-IP: 10.0.0.1"],
  ["Forwarded: for=10.0.0.1"],
  ['Forwarded: for="[2001:db8::1]"'],
  ["X_Forwarded_For: 10.0.0.1"],
  ["X-Forwarded-For: 10.0.0.1", "X-Real-IP: 10.0.0.1", "Forwarded: for=10.0.0.1"],
  ["True-Client-IP: 10.0.0.1", "CF-Connecting-IP: 10.0.0.1", "X-Client-IP: 10.0.0.1"],
];

Deno.test("forwarding headers from an untrusted peer never open the allowlist", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    for (const fields of SPOOFS) await refused(world, get("/admin", HOST, fields));
  });
});

Deno.test("forwarding headers from an untrusted peer never escape the denylist", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    for (const fields of SPOOFS) {
      await refused(world, get("/denied", HOST, fields));
      await refused(world, get("/both", HOST, fields));
    }
    // The peer's own address decides: the loopback-only route still serves, whatever is claimed.
    for (const fields of SPOOFS) {
      assertEquals(await status(world, get("/loopback", HOST, fields)), 200, fields.join());
    }
  });
});

Deno.test("from a trusted proxy the client is the right-most untrusted X-Forwarded-For address", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    // Allowed: the client the trusted proxy saw is in 10.0.0.0/8 or 2001:db8::/32.
    for (
      const fields of [
        ["X-Forwarded-For: 10.0.0.1"],
        ["X-Forwarded-For: 203.0.113.7, 10.0.0.1"],
        ["X-Forwarded-For: ::ffff:10.0.0.1"],
        ["X-Forwarded-For: 2001:db8::5"],
      ]
    ) {
      assertEquals(await status(world, get("/admin", HOST, fields)), 200, fields.join());
    }
    // Refused: the client is outside, whatever it put further left; X-Real-IP and Forwarded
    // are not read (ingress-nginx's real_ip_header is X-Forwarded-For).
    for (
      const fields of [
        ["X-Forwarded-For: 10.0.0.1, 203.0.113.7"],
        ["X-Forwarded-For: 203.0.113.7"],
        ["X-Real-IP: 10.0.0.1"],
        ["Forwarded: for=10.0.0.1"],
        ["X-Forwarded-For: unknown"],
        ["X-Forwarded-For: 10.0.0.1:1234"],
        ["X-Forwarded-For: 010.0.0.1"],
        [],
      ]
    ) {
      await refused(world, get("/admin", HOST, fields));
    }
    // The denylist reads the same client.
    assertEquals(
      await status(world, get("/denied", HOST, ["X-Forwarded-For: 203.0.113.7"])),
      200,
    );
    await refused(world, get("/denied", HOST, ["X-Forwarded-For: 10.0.0.1, 127.0.0.5"]));
  }, { proxy: { trustedProxyCidrs: ["127.0.0.1/32"] } });
});

/** A request as the listener hands it over, from `peer`. */
function fromPeer(
  world: AnnotatedWorld,
  peer: string,
  path: string,
  fields: [string, string][] = [],
) {
  return world.handler(
    new Request(`http://${HOST}${path}`, { headers: [["Host", HOST], ...fields] }),
    { remoteAddr: { hostname: peer, port: 40_000 }, secure: false, localPort: 80 },
  );
}

Deno.test("an IPv4-mapped IPv6 peer is compared as IPv4 against IPv4 ranges", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    const cases: [string, string, number][] = [
      ["::ffff:10.0.0.1", "/admin", 200],
      ["::FFFF:10.1.2.3", "/admin", 200],
      ["::ffff:a00:1", "/admin", 200],
      ["::ffff:11.0.0.1", "/admin", 403],
      // Not IPv4-mapped: IPv4-compatible and NAT64 forms are other IPv6 addresses.
      ["::10.0.0.1", "/admin", 403],
      ["64:ff9b::a00:1", "/admin", 403],
      ["2001:db8::1", "/admin", 200],
      ["::ffff:127.0.0.1", "/denied", 403],
      ["::ffff:127.0.0.1", "/both", 403],
      ["::ffff:127.0.0.2", "/both", 200],
      ["::ffff:127.0.0.1", "/loopback", 200],
      ["::1", "/loopback", 403],
    ];
    for (const [peer, path, expected] of cases) {
      const response = await fromPeer(world, peer, path);
      await response.body?.cancel();
      assertEquals(response.status, expected, `${peer} ${path}`);
    }
  });
});

Deno.test("a dual-stack listener's IPv4-mapped peers meet the IPv4 ranges", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    // Connecting over IPv4 to a listener on `::`: the peer is ::ffff:127.0.0.1 (or 127.0.0.1).
    assertEquals(await status(world, get("/loopback")), 200);
    await refused(world, get("/denied"));
    await refused(world, get("/both"));
    await refused(world, get("/admin"));
  }, { hostname: "::" });
});

Deno.test("other spellings of the protected path reach its route and its 403, never the public route", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    for (
      const target of [
        "//admin",
        "///admin/",
        "/./admin",
        "/x/../admin",
        "/admin/./",
        "/admin//users",
        "/%61dmin",
        "/%61%64%6d%69%6e/users",
        "/public/%2e%2e/admin",
        "/public/%2E%2E/admin",
        "/public/..%2Fadmin",
        "/x/%2e%2e%2fadmin",
        "/admin?x=/",
        "/admin#frag",
      ]
    ) {
      // nginx answers 400 for some of these (a dot segment climbing above the root, an
      // encoded slash after `..`); either way nothing reaches a backend.
      await refused(world, get(target), [400, 403]);
    }
    // Climbing above the root: nginx refuses (400); never the public route.
    for (const target of ["/%2e%2e/admin", "/../admin", "/%2E%2E/%2e%2e/admin"]) {
      await refused(world, get(target), [400, 403]);
    }
    assertEquals(world.received, []);
  });
});

Deno.test({
  name: "an escaped slash in the path reaches the protected route's 403, as nginx decodes it",
  // Was a bypass: `%2F` was kept as a character of its segment, so `/admin%2Fusers` routed to
  // the public `/` Ingress (whose backend may decode it to /admin/users). nginx decodes `%2F`
  // before choosing the location; Sluice now matches on that path too (`matchPath`).
  async fn() {
    await withAnnotatedWorld(INGRESSES, async (world) => {
      for (const target of ["/admin%2Fusers", "/admin%2fusers", "/%2Fadmin", "/%2fadmin/x"]) {
        await refused(world, get(target), [403]);
      }
      assertEquals(world.received, []);
    });
  },
});

Deno.test("the path match is case-sensitive as in nginx: /ADMIN is the public route's, passed unchanged", async () => {
  // ingress-nginx's locations are case-sensitive (without use-regex): /ADMIN goes to the
  // public Ingress; what matters is that Sluice does not hand that backend another path.
  await withAnnotatedWorld(INGRESSES, async (world) => {
    for (const target of ["/ADMIN", "/Admin/users"]) {
      const response = await world.ask(get(target));
      assertEquals(response.status, 200, target);
      const echo = echoOf(response);
      assertEquals([echo.service, echo.target], ["public", target]);
    }
  });
});

Deno.test("other spellings of the protected host reach its routes and their 403", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    for (
      const host of [
        "ADMIN.example.com",
        "Admin.Example.Com",
        "admin.example.com.",
        "admin.example.com:80",
        "ADMIN.EXAMPLE.COM.:80",
      ]
    ) {
      await refused(world, get("/admin", host), [400, 403]);
      await refused(world, get("//admin", host), [400, 403]);
    }
    // Absolute-form targets are routed by their own authority, as nginx does.
    await refused(world, get("http://admin.example.com/admin", "other.example.com"), [400, 403]);
    await refused(world, get("http://ADMIN.example.com./admin", HOST), [400, 403]);
    assertEquals(world.received, []);
  });
});

Deno.test("a WebSocket upgrade and a pipelined request to the protected path are refused too", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    await refused(
      world,
      `GET /admin/ws HTTP/1.1\r\nHost: ${HOST}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    );
    const before = world.received.length;
    const responses = await probe(
      world.port,
      `GET / HTTP/1.1\r\nHost: ${HOST}\r\n\r\nGET /admin HTTP/1.1\r\nHost: ${HOST}\r\n\r\n` +
        `GET /x/../admin HTTP/1.1\r\nHost: ${HOST}\r\nConnection: close\r\n\r\n`,
    );
    assertEquals(responses.map((r) => r.status), [200, 403, 403]);
    assertEquals(world.received.slice(before).map((r) => r.target), ["/"]);
  });
});

Deno.test("an Ingress whose allowlist does not parse answers 503, never serving everyone", async () => {
  await withAnnotatedWorld([
    { name: "public", host: HOST, paths: ["/"] },
    {
      name: "broken",
      host: HOST,
      paths: ["/admin"],
      annotations: { "whitelist-source-range": "10.0.0.0/8 127.0.0.1" },
    },
  ], async (world) => {
    await refused(world, get("/admin"), [503]);
    await refused(world, get("//admin/x"), [503]);
    assertEquals(await status(world, get("/")), 200);
  });
});
