/**
 * The HTTP to HTTPS redirect of TLS hosts (308, the routed path percent-encoded,
 * the query byte for byte, the configured port, never another host, IPv6 hosts
 * bracketed) and HSTS (Sluice's own on HTTPS for TLS hosts, replacing the
 * backend's; never over plain HTTP). Real handler behind real listeners, raw
 * clients.
 *
 * @module
 */
import {
  ask,
  type HostileWorld,
  type RuleSketch,
  worldRunner,
} from "../../tests/support/echo_world.ts";
import { assert, assertEquals, assertStrictEquals } from "../../tests/support/assert.ts";
import { headerValue, headerValues } from "../../tests/support/raw_http.ts";
import { createProxyHandler, type HstsOptions } from "./proxy_handler.ts";
import { startScriptedBackend } from "../../tests/support/scripted_backend.ts";
import type { Backend, CertificateTable, Snapshot } from "../routing/snapshot.ts";
import type { Route } from "../translate/translation.ts";
import { compileRouteTable } from "../routing/route_table.ts";
import { listenHttp } from "../server/http_listener.ts";
import type { EchoBackend } from "../../tests/support/echo_backend.ts";
import { ECHO_HOST, echoJson, sendRaw, withEchoProxy } from "../../tests/support/echo_proxy.ts";
import { exchange, startProxyOn } from "../../tests/support/ipv6_proxy.ts";

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

Deno.test("proxy redirects TLS hosts to HTTPS with 308 and sends HSTS over HTTPS", async () => {
  const routes = (backend: EchoBackend) => [{
    host: ECHO_HOST,
    tls: true,
    endpoints: [{ address: "127.0.0.1", port: backend.port }],
  }];
  await withEchoProxy(async ({ proxy }) => {
    const response = await sendRaw(
      proxy,
      `POST /a/b?c=d HTTP/1.1\r\nHost: ${ECHO_HOST}:8080\r\nContent-Length: 0\r\n\r\n`,
    );
    assertStrictEquals(response.status, 308);
    assertStrictEquals(headerValue(response.headers, "location"), `https://${ECHO_HOST}/a/b?c=d`);
  }, { routes });
  await withEchoProxy(async ({ proxy }) => {
    const response = await sendRaw(proxy, `GET /x HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`);
    assertStrictEquals(response.status, 200);
    assertStrictEquals(
      headerValue(response.headers, "strict-transport-security"),
      "max-age=31536000; includeSubDomains",
    );
    assertStrictEquals(headerValues(echoJson(response).headers, "x-forwarded-proto")[0], "https");
  }, { routes, secure: true });
  await withEchoProxy(async ({ proxy }) => {
    const response = await sendRaw(proxy, `GET /x HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`);
    assertStrictEquals(headerValue(response.headers, "strict-transport-security"), undefined);
  }, { routes, secure: true, hsts: { enabled: false } });
});

const HOST_RULES: RuleSketch[] = [
  [SHOP, "/", "Prefix", "shop/public"],
  [SHOP, "/admin", "Prefix", "shop/admin"],
  [SHOP, "/über", "Exact", "shop/uber"],
  ["*.example.com", "/", "Prefix", "wild/web"],
  ["localhost", "/", "Prefix", "local/dev"],
  ["", "/", "Prefix", "any/web"],
];

const withHostsWorld = worldRunner(HOST_RULES);

Deno.test("the HTTPS redirect never points at another host, whatever the target", async () => {
  const rules: RuleSketch[] = [["secure.example.com", "/", "Prefix", "shop/public"]];
  await withHostsWorld(
    async (world) => {
      const seen = world.mark();
      const cases: [string, string, string][] = [
        // [target, Host, Location]
        ["//evil.example/x", "secure.example.com", "https://secure.example.com/evil.example/x"],
        ["/\\evil.example/", "secure.example.com", "https://secure.example.com/evil.example/"],
        [
          "/%2F%2Fevil.example",
          "secure.example.com",
          "https://secure.example.com/%2F%2Fevil.example",
        ],
        [
          "/a?next=//evil.example",
          "SECURE.example.com.:80",
          "https://SECURE.example.com./a?next=//evil.example",
        ],
        ["http://secure.example.com/p", "evil.example", "https://secure.example.com/p"],
      ];
      for (const [target, host, location] of cases) {
        const response = await ask(world.port, get(target, host));
        assertEquals(response.status, 308, target);
        assertEquals(headerValues(response.headers, "location"), [location], target);
      }
      assertEquals(seen(), []);
    },
    rules,
    { tlsHosts: ["secure.example.com"] },
  );
});

Deno.test("the HTTPS redirect of a request to [v6]:port keeps the brackets and drops only the port", async () => {
  const proxy = startProxyOn([{ tls: true, endpoints: [{ address: "::1", port: 9 }] }]);
  try {
    const authority = `[::1]:${proxy.port}`;
    const response = await exchange(
      proxy.port,
      `GET /p?q=1 HTTP/1.1\r\nHost: ${authority}\r\nConnection: close\r\n\r\n`,
    );
    assertEquals(response.status, 308);
    assertEquals(headerValue(response.headers, "location"), "https://[::1]/p?q=1");
  } finally {
    await proxy.close();
  }
  const other = startProxyOn([{ tls: true, endpoints: [{ address: "::1", port: 9 }] }], {
    httpsRedirectPort: 8443,
  });
  try {
    const response = await exchange(
      other.port,
      "GET / HTTP/1.1\r\nHost: [FD00::1]\r\nConnection: close\r\n\r\n",
    );
    assertEquals(response.status, 308);
    assertEquals(headerValue(response.headers, "location"), "https://[FD00::1]:8443/");
  } finally {
    await other.close();
  }
});
