/**
 * Hostile request targets and hosts against the real data plane: raw bytes
 * over loopback to the HTTP listener running the proxy handler and the
 * compiled route table, with echo backends that record what they receive.
 * The question every test asks: can the rule Sluice chooses and the path or
 * host the backend then resolves disagree? Plus the HTTP to HTTPS redirect
 * and HSTS. Tests whose comment starts "Was a bug" pin a fix; "BUG" marks an
 * ignored test whose fix lies outside lib/proxy/request_target.ts.
 *
 * Complements `hostile_client_test.ts` (Host confusion, absolute-form,
 * OPTIONS *, CONNECT, redirect hosts), which it does not repeat.
 */
import http2 from "node:http2";
import { assert, assertEquals } from "../../tests/support/assert.ts";
import { headerValues } from "../../tests/support/raw_http.ts";
import { startScriptedBackend } from "../../tests/support/scripted_backend.ts";
import { within } from "../../tests/support/wait.ts";
import { compileRouteTable } from "../routing/route_table.ts";
import type { Backend, CertificateTable, Snapshot } from "../routing/snapshot.ts";
import { listenHttp } from "../server/http_listener.ts";
import type { Route } from "../translate/translation.ts";
import {
  ask,
  askEcho,
  echoOf,
  type HostileWorld,
  probe,
  type RuleSketch,
  worldRunner,
} from "../../tests/support/echo_world.ts";
import { createProxyHandler, type HstsOptions } from "./proxy_handler.ts";

const SHOP = "shop.example.com";
const SECURE = "secure.example.com";
const RULES: RuleSketch[] = [
  [SHOP, "/", "Prefix", "shop/public"],
  [SHOP, "/admin", "Prefix", "shop/admin"],
  [SHOP, "/exact", "Exact", "shop/exact"],
  [SHOP, "/exact/deep", "Prefix", "shop/deep"],
];

const withWorld = worldRunner(RULES);

function get(target: string, host = SHOP, extra = ""): string {
  return `GET ${target} HTTP/1.1\r\nHost: ${host}\r\n${extra}\r\n`;
}

// --- The backend must resolve the path that was routed. ---

Deno.test({
  name:
    "a backend receives the path Sluice routed on, so its own reading of dot segments, %2e or // cannot reach another rule's path",
  // Was a bug: proxy_handler.ts forwarded the target as received; it now forwards `where.forward`
  // (the routed path plus the query as received). Raw, `/admin/%2e%2e/public` is routed to the
  // `/` rule while Express-style backends (routing on the undecoded path) serve it as /admin/…;
  // `/admin/a//../..` is routed to `/` while WHATWG URL (Deno, Bun, Node's URL) resolves it to
  // /admin/; `//public/admin` is routed to `/` while `new URL(target, base)` reads host "public"
  // and path /admin. Envoy (normalize_path, merge_slashes) and Traefik forward the normalised path.
  fn: async () => {
    await withWorld(async (world) => {
      const cases: [string, string, string][] = [
        // [target sent, service routed, target the backend must get]
        ["/admin/%2e%2e/public", "shop/public", "/public"],
        ["/admin/x/%2E./%2e%2e/public?q=1", "shop/public", "/public?q=1"],
        ["/admin/a//../..", "shop/public", "/"],
        ["/admin//..//x", "shop/public", "/x"],
        ["//public/admin", "shop/public", "/public/admin"],
        ["//admin/x", "shop/admin", "/admin/x"],
        ["/public\\..\\admin", "shop/admin", "/admin"],
        ["/%61dmin/%2e/x?next=/../%2e%2e", "shop/admin", "/admin/x?next=/../%2e%2e"],
        ["/admin/\xc3\xbc", "shop/admin", "/admin/%C3%BC"],
        // Already normal: byte for byte.
        ["/admin/x;y=1?z=%2F..", "shop/admin", "/admin/x;y=1?z=%2F.."],
      ];
      for (const [target, service, forwarded] of cases) {
        const echo = await askEcho(world.port, get(target));
        assertEquals([echo.service, echo.target], [service, forwarded], target);
      }
    });
  },
});

Deno.test({
  name: "a dot segment hidden behind an escaped slash or backslash gets 400 and reaches no backend",
  // Was a bug: proxy_handler.ts routed `/public/..%2Fadmin` on the `/public` rule and forwarded it; a backend
  // that decodes %2F before resolving dot segments (nginx, the usual static-file container, and
  // Python's http.server) serves /admin. ingress-nginx decodes %2F for location matching and would
  // not route it to the `/public` location. Now 400 when `where.ambiguous` is true.
  fn: async () => {
    await withWorld(async (world) => {
      const seen = world.mark();
      for (
        const target of [
          "/public/..%2Fadmin",
          "/public/..%2fadmin/x?y",
          "/public%2F..%2Fadmin",
          "/public/..%5Cadmin",
          "/public/%2e%2e%2Fadmin",
          "/public/.%2E%5cadmin",
        ]
      ) {
        assertEquals((await ask(world.port, get(target))).status, 400, target);
      }
      assertEquals(seen(), []);
      // An escaped slash inside a name (GitLab's `group%2Fproject`) is not a separator.
      const echo = await askEcho(world.port, get("/api/projects/group%2Fproject"));
      assertEquals([echo.service, echo.target], ["shop/public", "/api/projects/group%2Fproject"]);
    });
  },
});

Deno.test("%00 in a path, and a dot segment with ;parameters, get 400 and reach no backend", async () => {
  // Was a bug: `/public/..;/admin` was routed to the `/` rule and forwarded as sent; Tomcat and
  // Jetty drop `;…` from each segment before resolving dots and served /admin. `%00` reached the
  // backend, where a C string ends (nginx refuses both a decoded NUL and such a target).
  await withWorld(async (world) => {
    const seen = world.mark();
    for (
      const target of [
        "/public/..;/admin",
        "/public/..;jsessionid=0/admin",
        "/public/.;/admin",
        "/public/%2e%2e;/admin",
        "/public/.%2E;x=1/admin?q",
        "/admin%00.html",
        "/public/x%00/../admin",
      ]
    ) {
      assertEquals((await ask(world.port, get(target))).status, 400, target);
    }
    assertEquals(seen(), []);
    // `;` anywhere else, and %00 in the query, are ordinary.
    for (const target of ["/public;v=1/x", "/public/a..;b", "/public/...;/x", "/public?x=%00"]) {
      const echo = await askEcho(world.port, get(target));
      assertEquals([echo.service, echo.target], ["shop/public", target], target);
    }
  });
});

Deno.test("Exact and Prefix boundaries hold for every spelling of a path", async () => {
  await withWorld(async (world) => {
    const cases: [string, string][] = [
      ["/exact", "shop/exact"],
      ["/exact?x=/deep", "shop/exact"],
      ["/ex%61ct", "shop/exact"],
      ["//exact", "shop/exact"],
      ["/x/../exact", "shop/exact"],
      ["/exact/", "shop/public"],
      ["/exact/.", "shop/public"],
      ["/exactly", "shop/public"],
      ["/EXACT", "shop/public"],
      ["/exact;x", "shop/public"],
      ["/exact%2F", "shop/public"],
      ["/exact%20", "shop/public"],
      ["/exact/deep", "shop/deep"],
      ["/exact/deep/", "shop/deep"],
      ["/exact//deep/x", "shop/deep"],
      ["/exact/deeper", "shop/public"],
      ["/exact/deep/..", "shop/public"],
      ["/exact/deep%2Fx", "shop/public"],
      ["/admin", "shop/admin"],
      ["/admin.", "shop/public"],
      ["/admin%2E", "shop/public"],
      ["/admin/.", "shop/admin"],
      ["/adm%69n/", "shop/admin"],
    ];
    for (const [target, service] of cases) {
      assertEquals((await askEcho(world.port, get(target))).service, service, target);
    }
  });
});

Deno.test("a long target full of dot segments is routed promptly; one over 8 KiB gets 414 and reaches no backend", async () => {
  // Was a bug: the header cap did not count the request line, so a 60 KB target reached the
  // backend (nginx, and so ingress-nginx, answers 414 past one 8 KiB header buffer).
  await withWorld(async (world) => {
    const dots = "/x/..".repeat(1_000) + "/%2e%2e/%61dmin" + "//".repeat(1_000) + "y";
    assert(dots.length < 8 * 1024);
    const echo = await within(5_000, "a long target", askEcho(world.port, get(dots)));
    assertEquals(echo.service, "shop/admin");
    const seen = world.mark();
    const limit = "/" + "a".repeat(8 * 1024 - 1);
    assertEquals((await askEcho(world.port, get(limit))).service, "shop/public");
    for (const target of [limit + "b", "/a?" + "q".repeat(10_000), "/" + "a".repeat(60_000)]) {
      assertEquals((await probe(world.port, get(target))).map((r) => r.status), [414]);
    }
    assertEquals(seen().length, 1);
  });
});

// --- The HTTP to HTTPS redirect. ---

const SECURE_RULES: RuleSketch[] = [[SECURE, "/", "Prefix", "shop/public"]];

async function redirectOf(world: HostileWorld, raw: string): Promise<string[]> {
  const response = await ask(world.port, raw);
  assertEquals(response.status, 308, raw);
  assertEquals(headerValues(response.headers, "strict-transport-security"), [], raw);
  return headerValues(response.headers, "location");
}

Deno.test("the HTTPS redirect keeps the query byte for byte and names the configured port, never the client's", async () => {
  await withWorld(
    async (world) => {
      const seen = world.mark();
      const cases: [string, string, string][] = [
        [get("/p?a=%2F&b=%20&c=%zz&d=/../x", `${SECURE}:8080`), "/p?a=%2F&b=%20&c=%zz&d=/../x", ""],
        [get("/?", SECURE), "/?", ""],
        [get("https://secure.example.com/over-plain", "x"), "/over-plain", ""],
        [get("http://SECURE.example.com.:80/p", "x"), "/p", ""],
        [`DELETE /d HTTP/1.1\r\nHost: ${SECURE}\r\nContent-Length: 0\r\n\r\n`, "/d", ""],
      ];
      for (const [raw, pathAndQuery] of cases) {
        const location = await redirectOf(world, raw);
        assertEquals(location.length, 1, raw);
        const url = new URL(location[0]!);
        assertEquals([url.protocol, url.port], ["https:", "8443"], raw);
        assertEquals(url.hostname.replace(/\.$/, "").toLowerCase(), SECURE, raw);
        assert(location[0]!.endsWith(`:8443${pathAndQuery}`), `${raw} → ${location[0]}`);
      }
      assertEquals(seen(), []);
    },
    SECURE_RULES,
    { tlsHosts: [SECURE], proxy: { httpsRedirectPort: 8443 } },
  );
});

Deno.test({
  name: "the HTTPS redirect names the routed path, percent-encoded as a URI",
  // Was a bug: proxy_handler.ts built Location from the target as received: a raw UTF-8 path
  // (`/caf\xc3\xa9`, which Deno hands over as "café") goes out as the Latin-1 byte 0xE9, so the
  // browser is sent to `/caf%E9`, another resource; `"`, `<`, `>` go out raw, and `/x/../y`
  // unresolved. Location is now built from `where.forward`, non-ASCII percent-encoded as UTF-8.
  fn: async () => {
    await withWorld(
      async (world) => {
        const cases: [string, string][] = [
          ["/caf\xc3\xa9", "https://secure.example.com/caf%C3%A9"],
          ['/a"<>', "https://secure.example.com/a%22%3C%3E"],
          ["/x/../y", "https://secure.example.com/y"],
          ["/q?s=caf\xc3\xa9", "https://secure.example.com/q?s=caf%C3%A9"],
        ];
        for (const [target, location] of cases) {
          assertEquals(await redirectOf(world, get(target, SECURE)), [location], target);
        }
      },
      SECURE_RULES,
      { tlsHosts: [SECURE] },
    );
  },
});

// --- HSTS: only over HTTPS, only for hosts with TLS. ---

interface HstsWorld {
  readonly port: number;
  close(): Promise<void>;
}

/**
 * One scripted backend answering 200 with its own `Strict-Transport-Security`,
 * routed for a TLS host and a plain host, behind the real handler whose
 * listener reports `secure` as given (the HTTPS listener's relay does the same).
 */
function startHstsWorld(secure: boolean, hsts?: HstsOptions): HstsWorld {
  const backend = startScriptedBackend(async (conn) => {
    while (await conn.readHead() !== null) {
      await conn.write(
        "HTTP/1.1 200 OK\r\nStrict-Transport-Security: max-age=5\r\nContent-Length: 2\r\n\r\nok",
      );
    }
  });
  const endpoints = [{ address: "127.0.0.1", port: backend.port }];
  const backends: Backend[] = [{ key: "shop/web:80", service: "shop/web", endpoints }];
  const routes: Route[] = [SECURE, SHOP].map((host) => ({
    host,
    path: "/",
    pathType: "Prefix",
    ingress: "shop/web",
    backend: "shop/web:80",
  }));
  const certificates: CertificateTable = {
    fingerprint: "none",
    resolve() {
      throw new Error("Cannot resolve certificates in the HSTS world");
    },
  };
  const snapshot: Snapshot = {
    version: 1,
    routes: compileRouteTable({ routes, backends, tlsHosts: [SECURE] }),
    certificates,
  };
  const handler = createProxyHandler({
    snapshot: () => snapshot,
    sslRedirect: false,
    ...(hsts === undefined ? {} : { hsts }),
  });
  const listener = listenHttp(
    (req, info) => handler(req, { ...info, secure }),
    { hostname: "127.0.0.1", port: 0, reusePort: false },
  );
  return {
    port: listener.addr.port,
    async close() {
      await listener.shutdown({ timeoutMs: 5_000 });
      handler.close();
      await backend.close();
    },
  };
}

async function hstsOf(world: HstsWorld, host: string): Promise<string[]> {
  const response = await ask(world.port, get("/", host));
  assertEquals(response.status, 200, host);
  return headerValues(response.headers, "strict-transport-security");
}

Deno.test("over HTTPS a TLS host gets exactly Sluice's HSTS, replacing the backend's, and a host without TLS gets the backend's untouched", async () => {
  const world = startHstsWorld(true);
  try {
    assertEquals(await hstsOf(world, SECURE), ["max-age=31536000; includeSubDomains"]);
    assertEquals(await hstsOf(world, "SECURE.example.com.:443"), [
      "max-age=31536000; includeSubDomains",
    ]);
    assertEquals(await hstsOf(world, SHOP), ["max-age=5"]);
  } finally {
    await world.close();
  }
  const tuned = startHstsWorld(true, {
    maxAgeSeconds: 60,
    includeSubDomains: false,
    preload: true,
  });
  try {
    assertEquals(await hstsOf(tuned, SECURE), ["max-age=60; preload"]);
  } finally {
    await tuned.close();
  }
});

Deno.test({
  name: "Strict-Transport-Security never goes out over plain HTTP, not even from the backend",
  // Was a bug: RFC 6797 section 7.2: an HSTS host "MUST NOT include the STS header field in HTTP
  // responses conveyed over non-secure transport"; Sluice passed the backend's through on the
  // HTTP listener (here with --ssl-redirect=false, or for a host without TLS). Now dropped.
  fn: async () => {
    const world = startHstsWorld(false);
    try {
      assertEquals(await hstsOf(world, SECURE), []);
      assertEquals(await hstsOf(world, SHOP), []);
    } finally {
      await world.close();
    }
  },
});

// --- Hosts. ---

Deno.test("an IPv6 zone, a bracket with trailing bytes or an unbracketed IPv6 Host gets 400 and reaches no backend", async () => {
  await withWorld(async (world) => {
    const seen = world.mark();
    for (const host of ["[fe80::1%eth0]", "[fe80::1%25eth0]", "[::1]x", "[::1]:80:80", "::1"]) {
      assertEquals((await ask(world.port, get("/", host))).status, 400, host);
    }
    for (const target of ["http://[::1/x", "http://a.com:/x", "http://u@/x", "http://%61.com/x"]) {
      assertEquals((await ask(world.port, get(target, SHOP))).status, 400, target);
    }
    assertEquals(seen(), []);
  });
});

Deno.test("an absolute-form target's authority decides both the route and the Host the backend sees, whatever case, dot or port it carries", async () => {
  const rules: RuleSketch[] = [...RULES, ["", "/", "Prefix", "any/web"]];
  await withWorld(async (world) => {
    const cases: [string, string, string, string][] = [
      // [target, Host field, service, Host seen]
      ["http://SHOP.example.com./admin", "evil.example", "shop/admin", "SHOP.example.com."],
      ["http://shop.example.com:1/admin", "evil.example", "shop/admin", "shop.example.com:1"],
      ["http://[::1]:8080/admin", SHOP, "any/web", "[::1]:8080"],
      ["http://evil.example/admin", SHOP, "any/web", "evil.example"],
      [
        "http://shop.example.com.evil.example/admin",
        SHOP,
        "any/web",
        "shop.example.com.evil.example",
      ],
    ];
    for (const [target, host, service, hostSeen] of cases) {
      const echo = echoOf(await ask(world.port, get(target, host)));
      assertEquals(
        [echo.service, headerValues(echo.headers, "host")],
        [service, [hostSeen]],
        target,
      );
    }
  }, rules);
});

Deno.test("over HTTP/2 the :authority routes and is the one Host the backend sees, whatever host field the client adds", async () => {
  await withWorld(async (world) => {
    const client = http2.connect(`http://127.0.0.1:${world.port}`);
    try {
      const cases: [Record<string, string>, string, string][] = [
        // [request fields, service, Host seen]
        [{ ":authority": SHOP, host: "evil.example", ":path": "/admin/x" }, "shop/admin", SHOP],
        [{ ":authority": "evil.example", host: SHOP, ":path": "/admin/x" }, "", ""],
        [{ ":authority": SHOP, ":path": "/x/%2e%2e/admin" }, "shop/admin", SHOP],
      ];
      for (const [fields, service, hostSeen] of cases) {
        const { status, body } = await within(5_000, "an h2 answer", h2Get(client, fields));
        if (service === "") {
          assertEquals(status, 404, JSON.stringify(fields));
          continue;
        }
        const echo = JSON.parse(body) as { service: string; headers: [string, string][] };
        assertEquals(
          [echo.service, headerValues(echo.headers, "host")],
          [service, [hostSeen]],
          JSON.stringify(fields),
        );
      }
    } finally {
      await new Promise<void>((resolve) => client.close(() => resolve()));
    }
  });
});

function h2Get(
  client: http2.ClientHttp2Session,
  fields: Record<string, string>,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const stream = client.request({ ":method": "GET", ...fields });
    let status = 0;
    let body = "";
    stream.setEncoding("utf8");
    stream.on("response", (head) => status = Number(head[":status"]));
    stream.on("data", (chunk: string) => body += chunk);
    stream.on("end", () => resolve({ status, body }));
    stream.on("error", reject);
    stream.end();
  });
}
