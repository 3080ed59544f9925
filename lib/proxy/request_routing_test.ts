/**
 * How a request's target and Host choose a rule, and what the backend is then
 * told: Host in any case, with a port, a trailing dot, bracketed IPv6 or none at
 * all; absolute-form targets and HTTP/2's :authority; dot segments, escapes and
 * slashes routed (and forwarded) as the resolved path; Exact and Prefix
 * boundaries; 404 without a route and 503 without endpoints; and what gets 400
 * (ambiguous paths, %00, bad hosts) or is refused (CONNECT). Raw bytes over
 * loopback to the real HTTP listener (or `Deno.serve`) running the proxy handler
 * and the compiled route table, with echo backends that record what they
 * receive. The question every test asks: can the rule Sluice chooses and the
 * path or host the backend then resolves disagree? Tests whose comment starts
 * "Was a bug" pin a fix.
 *
 * @module
 */
import http2 from "node:http2";
import { assert, assertEquals, assertStrictEquals } from "../../tests/support/assert.ts";
import { headerValues, latin1, RawConnection } from "../../tests/support/raw_http.ts";
import { within } from "../../tests/support/wait.ts";
import {
  ask,
  askEcho,
  echoOf,
  probe,
  type RuleSketch,
  worldRunner,
} from "../../tests/support/echo_world.ts";
import { ECHO_HOST, echoJson, sendRaw, withEchoProxy } from "../../tests/support/echo_proxy.ts";
import {
  echoed,
  exchange,
  field,
  startProxyOn,
  withV6Backend,
} from "../../tests/support/ipv6_proxy.ts";
import { connectTo, withH2Echo } from "../../tests/support/raw_h2.ts";

const SHOP = "shop.example.com";

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
      // An escaped slash is matched as a slash (nginx's decoded $uri), forwarded escaped.
      ["/exact/deep%2Fx", "shop/deep"],
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

// --- Hosts and targets as clients send them, and what the backend then sees. ---

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

Deno.test("proxy answers 404 without a route and 503 without endpoints", async () => {
  await withEchoProxy(async ({ proxy }) => {
    const none = await sendRaw(proxy, "GET / HTTP/1.1\r\nHost: unknown.example\r\n\r\n");
    assertEquals([none.status, latin1(none.body)], [404, "Not Found\n"]);
    const empty = await sendRaw(proxy, "GET / HTTP/1.1\r\nHost: empty.example\r\n\r\n");
    assertEquals([empty.status, latin1(empty.body)], [503, "Service Unavailable\n"]);
  }, {
    routes: (backend) => [
      { host: ECHO_HOST, endpoints: [{ address: "127.0.0.1", port: backend.port }] },
      { host: "empty.example", endpoints: [] },
    ],
  });
});

Deno.test("proxy routes on the normalised path and forwards that path, not the target as sent", async () => {
  await withEchoProxy(async ({ proxy }) => {
    const targets = ["/public/../admin/x", "/%61dmin/x", "//admin/x", "/public/x"];
    for (const target of targets) {
      const response = await sendRaw(
        proxy,
        `GET ${target} HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`,
      );
      assertStrictEquals(
        echoJson(response).target,
        target.startsWith("/public/x") ? target : "/admin/x",
      );
    }
    await waitUntil(() => proxy.accessLog.length === targets.length);
    assertEquals(proxy.accessLog.map((e) => e.service), [
      "admin/web",
      "admin/web",
      "admin/web",
      "public/web",
    ]);
  }, {
    routes: (backend) => [
      {
        host: ECHO_HOST,
        endpoints: [{ address: "127.0.0.1", port: backend.port }],
        service: "public/web",
      },
      {
        host: ECHO_HOST,
        path: "/admin",
        endpoints: [{ address: "127.0.0.1", port: backend.port }],
        service: "admin/web",
      },
    ],
  });
});

async function waitUntil(
  predicate: () => boolean | Promise<boolean>,
  timeoutMs = 5_000,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await predicate())) {
    if (performance.now() > deadline) throw new Error("Condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const HOST_RULES: RuleSketch[] = [
  [SHOP, "/", "Prefix", "shop/public"],
  [SHOP, "/admin", "Prefix", "shop/admin"],
  [SHOP, "/über", "Exact", "shop/uber"],
  ["*.example.com", "/", "Prefix", "wild/web"],
  ["localhost", "/", "Prefix", "local/dev"],
  ["", "/", "Prefix", "any/web"],
];

const withHostsWorld = worldRunner(HOST_RULES);

Deno.test("a Host in any case, with a port or a trailing dot reaches its rule, and the backend sees that Host unchanged", async () => {
  await withHostsWorld(async (world) => {
    const cases: [string, string][] = [
      [SHOP, "shop/public"],
      ["Shop.Example.COM", "shop/public"],
      ["shop.example.com:8080", "shop/public"],
      ["shop.example.com.", "shop/public"],
      ["SHOP.example.com.:80", "shop/public"],
      ["a.example.com", "wild/web"],
      ["A.Example.com.", "wild/web"],
      ["a.b.example.com", "any/web"],
      ["example.com", "any/web"],
      ["[::1]:8080", "any/web"],
      ["127.0.0.1", "any/web"],
    ];
    for (const [host, service] of cases) {
      const echo = await askEcho(world.port, get("/x", host));
      assertEquals(echo.service, service, host);
      assertEquals(headerValues(echo.headers, "host"), [host], host);
      assertEquals(headerValues(echo.headers, "x-forwarded-host"), [host], host);
      assertEquals(headerValues(echo.headers, "x-forwarded-port"), [String(world.port)], host);
    }
  });
});

Deno.test("a Host that is not a host name gets 400 and reaches no backend", async () => {
  await withHostsWorld(async (world) => {
    const seen = world.mark();
    const hosts = [
      "a.com, b.com",
      "shop.example.com:",
      "shop.example.com:80:80",
      ".example.com",
      "*.example.com",
      "[::1",
      "shop.example.com%2Fadmin",
      "shop.example.com;admin",
      "shop.example.com?x",
      "shop.example.com\\admin",
    ];
    for (const host of hosts) {
      assertEquals((await ask(world.port, get("/admin", host))).status, 400, host);
    }
    // Deno.serve itself refuses two Host fields and control characters in one (400).
    for (
      const raw of [
        `GET / HTTP/1.1\r\nHost: ${SHOP}\r\nhost: evil.example\r\n\r\n`,
        `GET / HTTP/1.1\r\nHost: ${SHOP}\rX: y\r\n\r\n`,
        `GET / HTTP/1.1\r\nHost: ${SHOP}\x00\r\n\r\n`,
      ]
    ) {
      assertEquals((await probe(world.port, raw)).map((r) => r.status), [400], raw);
    }
    assertEquals(seen(), []);
  });
});

Deno.test("an absolute-form target routes on its own authority, and that authority is the Host the backend sees", async () => {
  await withHostsWorld(async (world) => {
    const cases: [string, string, string, string, string][] = [
      // [target, Host field, service, Host seen, target seen]
      ["http://other.example.org/admin", SHOP, "any/web", "other.example.org", "/admin"],
      [
        "http://shop.example.com/admin/x?q=1",
        "other.example.org",
        "shop/admin",
        SHOP,
        "/admin/x?q=1",
      ],
      ["HTTP://SHOP.EXAMPLE.COM:8080/admin", "x", "shop/admin", "SHOP.EXAMPLE.COM:8080", "/admin"],
      ["http://shop.example.com", "other.example.org", "shop/public", SHOP, "/"],
      ["https://a.example.com/", SHOP, "wild/web", "a.example.com", "/"],
    ];
    for (const [target, host, service, hostSeen, targetSeen] of cases) {
      const echo = await askEcho(world.port, get(target, host));
      assertEquals(
        [echo.service, headerValues(echo.headers, "host"), echo.target],
        [service, [hostSeen], targetSeen],
        target,
      );
      assertEquals(headerValues(echo.headers, "x-forwarded-host"), [hostSeen], target);
      // The listener is plain HTTP whatever scheme the target names.
      assertEquals(headerValues(echo.headers, "x-forwarded-proto"), ["http"], target);
    }
    const seen = world.mark();
    const userinfo = await ask(world.port, get("http://user:pw@shop.example.com/admin", SHOP));
    assertEquals(userinfo.status, 400);
    assertEquals(seen(), []);
  });
});

Deno.test(
  "a request without Host is routed host-less with an empty Host, never as Deno's invented localhost:<port>",
  async () => {
    // Was a bug: Deno.serve builds req.url from "localhost:<its own port>" when Host is missing or
    // empty, and that was routed as the authority (the backend got Host "localhost:<port>", over
    // HTTPS the inner relay's port). HTTP/1.0 may omit Host (HAProxy's httpchk does): such a
    // request reaches only host-less rules, and the backend gets an empty Host (RFC 9112 3.2).
    await withHostsWorld(async (world) => {
      for (
        const raw of [
          "GET /a HTTP/1.1\r\n\r\n",
          "OPTIONS / HTTP/1.0\r\n\r\n",
          "GET /c HTTP/1.1\r\nHost: \r\n\r\n",
        ]
      ) {
        const echo = echoOf(await ask(world.port, raw));
        assertEquals(echo.service, "any/web", raw);
        assertEquals(headerValues(echo.headers, "host"), [""], raw);
        assertEquals(headerValues(echo.headers, "x-forwarded-host"), [""], raw);
      }
      // A client naming localhost itself still reaches the localhost rule.
      const named = await ask(
        world.port,
        `GET /d HTTP/1.1\r\nHost: localhost:${world.port}\r\n\r\n`,
      );
      assertEquals(echoOf(named).service, "local/dev");
    });
  },
);

Deno.test("dot segments, escapes and slashes route as the resolved path, which is what the backend gets", async () => {
  await withHostsWorld(async (world) => {
    const cases: [string, string, string][] = [
      // [target sent, service routed, target the backend gets]
      ["/admin", "shop/admin", "/admin"],
      ["/admin/", "shop/admin", "/admin/"],
      ["/adminx", "shop/public", "/adminx"],
      ["/public/../admin", "shop/admin", "/admin"],
      ["/public/%2e%2e/admin", "shop/admin", "/admin"],
      ["/public/.%2E/admin", "shop/admin", "/admin"],
      ["/public/%2E./admin/x", "shop/admin", "/admin/x"],
      ["/public\\..\\admin", "shop/admin", "/admin"],
      ["/%2e%2e/%2e%2e/admin", "shop/admin", "/admin"],
      ["/../admin", "shop/admin", "/admin"],
      ["/admin/../public", "shop/public", "/public"],
      ["/admin/%2e%2e/public", "shop/public", "/public"],
      ["//admin", "shop/admin", "/admin"],
      ["/./admin", "shop/admin", "/admin"],
      ["/%2e/admin", "shop/admin", "/admin"],
      ["/admin/.", "shop/admin", "/admin/"],
      ["/%61dmin/x", "shop/admin", "/admin/x"],
      ["/%41dmin", "shop/public", "/Admin"],
      ["/admin?x=/../public", "shop/admin", "/admin?x=/../public"],
      ["/public?/admin", "shop/public", "/public?/admin"],
      ["/%C3%BCber", "shop/uber", "/%C3%BCber"],
      ["/\xc3\xbcber", "shop/uber", "/%C3%BCber"],
      ["/\xc3\xbcber/", "shop/public", "/%C3%BCber/"],
      // Choices that match nginx's $uri, pinned here on purpose: case is significant
      // (Kubernetes: Exact and Prefix are case-sensitive), `%2F` is matched as a separator (nginx
      // decodes it before choosing a location, so the rules of `/admin`, access control included,
      // hold for `/admin%2Fx`) but forwarded as received, and `;` is an ordinary character (a
      // Tomcat/Spring backend reading `/admin;x` as `/admin` is reached through the `/` rule —
      // only that backend's own rules protect it). A dot segment behind `%2F` gets 400 (the
      // dot-segment test above).
      ["/ADMIN", "shop/public", "/ADMIN"],
      ["/admin%2Fx", "shop/admin", "/admin%2Fx"],
      ["/%2Fadmin", "shop/admin", "/%2Fadmin"],
      ["/admin;jsessionid=1", "shop/public", "/admin;jsessionid=1"],
    ];
    for (const [target, service, forwarded] of cases) {
      const response = await ask(world.port, get(target, SHOP));
      assertEquals(response.status, 200, target);
      const echo = echoOf(response);
      assertEquals([echo.service, echo.target], [service, forwarded], target);
    }
    const seen = world.mark();
    assertEquals((await ask(world.port, get("/admin#frag", SHOP))).status, 400);
    assertEquals(seen(), []);
  });
});

Deno.test("a percent-escape in lowercase hex routes like the same escape in uppercase", async () => {
  // Was a bug: "/%c3%bcber" missed the `/über` rule, keyed with uppercase hex (RFC 3986
  // section 6.2.2.1: the same URI).
  await withHostsWorld(async (world) => {
    for (const target of ["/%c3%bcber", "/%C3%bcber", "/%c3%BCber"]) {
      const echo = await askEcho(world.port, get(target, SHOP));
      assertEquals([echo.service, echo.target], ["shop/uber", "/%C3%BCber"], target);
    }
  });
});

Deno.test("OPTIONS * reaches the backend as OPTIONS /* because Deno.serve rewrites the asterisk", async () => {
  // Deno.serve gives `OPTIONS *` and `OPTIONS /*` the same req.url; Sluice cannot tell them
  // apart, so the backend gets the origin-form target. Pinned so a Deno change is noticed.
  await withHostsWorld(async (world) => {
    const echo = await askEcho(world.port, `OPTIONS * HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`);
    assertEquals([echo.method, echo.target, echo.service], ["OPTIONS", "/*", "shop/public"]);
  });
});

Deno.test("CONNECT is refused and never reaches a backend", async () => {
  // Was a bug: Deno turns the authority-form target into "/", so the backend got `CONNECT /`.
  await withHostsWorld(async (world) => {
    const seen = world.mark();
    const responses = await probe(
      world.port,
      `CONNECT ${SHOP}:443 HTTP/1.1\r\nHost: ${SHOP}:443\r\n\r\n`,
    );
    assert([405, 501].includes(responses[0]?.status ?? 0), `got ${responses[0]?.status}`);
    assertEquals(seen(), []);
  });
});

Deno.test("Host [::1]:port routes to a host-less rule and reaches the backend unchanged in Host and X-Forwarded-Host", async () => {
  await withV6Backend(async (_backend, at) => {
    const proxy = startProxyOn([{ host: "named.test", endpoints: [] }, { endpoints: [at] }]);
    try {
      const authority = `[::1]:${proxy.port}`;
      const e = echoed(
        await exchange(
          proxy.port,
          `GET /x HTTP/1.1\r\nHost: ${authority}\r\nConnection: close\r\n\r\n`,
        ),
      );
      assertEquals(e.host, authority);
      assertEquals(field(e, "x-forwarded-host"), authority);
      assertEquals(field(e, "x-forwarded-port"), String(proxy.port));
      assertEquals(proxy.accessLog.at(-1)!.host, authority);
    } finally {
      await proxy.close();
    }
  });
});

Deno.test("an absolute-form target with an IPv6 authority routes on it and sends it as Host", async () => {
  await withV6Backend(async (_backend, at) => {
    const proxy = startProxyOn([{ endpoints: [at] }]);
    try {
      const e = echoed(
        await exchange(
          proxy.port,
          "GET http://[fd00::5]:8080/p HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n",
        ),
      );
      assertEquals(e.host, "[fd00::5]:8080");
      assertEquals(e.target, "/p");
    } finally {
      await proxy.close();
    }
  });
});

Deno.test("http/1.1: two Host fields get 400 from the plain and HTTPS listeners and reach no backend", async () => {
  await withH2Echo(async (world, backends) => {
    const listeners: [string, () => Promise<Deno.Conn>][] = [
      ["plain", () => Deno.connect({ hostname: "127.0.0.1", port: world.httpPort })],
      [
        "https",
        () => connectTo(world.httpsPort, { caCerts: [world.caCert], alpn: "http/1.1" }),
      ],
    ];
    const heads = [
      "Host: a.test\r\nHost: b.test\r\n",
      "Host: a.test\r\nHost: a.test\r\n",
      "Host: a.test\r\nhost: a.test\r\n",
    ];
    for (const [listener, open] of listeners) {
      for (const head of heads) {
        const what = `${listener} ${JSON.stringify(head)}`;
        using conn = RawConnection.wrap(await open());
        await conn.send(`GET /x HTTP/1.1\r\n${head}\r\n`);
        assertEquals((await conn.readResponse()).status, 400, what);
        assert(await conn.closedByPeer(), `${what}: the connection stays open`);
      }
    }
    // Deno.serve refuses them before the handler: nothing was logged, nothing forwarded.
    assertEquals(world.accessLog, []);
    assertEquals(backends.map((b) => b.requests.length), [0, 0]);
  });
});
