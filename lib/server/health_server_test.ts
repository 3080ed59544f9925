import { assert, assertEquals } from "../../tests/support/assert.ts";
import { healthResponse, type HealthServerOptions, serveHealth } from "./health_server.ts";
import { METRICS_CONTENT_TYPE } from "../metrics/exposition.ts";
import { headerValue, latin1, RawConnection, rawExchange } from "../../tests/support/raw_http.ts";
import { startEchoBackend } from "../../tests/support/echo_backend.ts";
import { generateSelfSignedCertificate } from "../tls/self_signed.ts";
import { writeManifestDir } from "../../tests/support/manifest_dir.ts";
import { spawnSluice } from "../../tests/support/sluice_process.ts";
import { waitFor } from "../../tests/support/wait.ts";
import { parseExposition, samples } from "../../tests/support/exposition_reader.ts";

function options(state: { live: boolean; ready: boolean }): HealthServerOptions {
  return {
    port: 0,
    live: () => state.live,
    ready: () => state.ready,
    metrics: () =>
      Promise.resolve({
        body: "sluice_config_version 7\n",
        contentType: "text/plain; version=0.0.4",
      }),
  };
}

Deno.test("healthResponse() answers /healthz, /readyz and /metrics from the state it is given", async () => {
  const state = { live: true, ready: false };
  const o = options(state);
  const get = async (path: string, method = "GET") => {
    const r = await healthResponse(new Request(`http://x${path}`, { method }), o);
    return [r.status, await r.text()] as const;
  };
  assertEquals(await get("/healthz"), [200, "ok\n"]);
  assertEquals(await get("/readyz"), [503, "not ready\n"]);
  state.ready = true;
  assertEquals(await get("/readyz"), [200, "ok\n"]);
  state.live = false;
  assertEquals(await get("/healthz"), [503, "not serving\n"]);
  assertEquals(await get("/metrics"), [200, "sluice_config_version 7\n"]);
  assertEquals(await get("/other"), [404, "Not found\n"]);
  assertEquals((await get("/readyz", "POST"))[0], 405);
});

Deno.test("serveHealth() serves the health endpoints over a real socket", async () => {
  const server = serveHealth({ ...options({ live: true, ready: true }), hostname: "127.0.0.1" });
  try {
    const r = await fetch(`http://127.0.0.1:${server.addr.port}/metrics`);
    assertEquals(r.headers.get("content-type"), "text/plain; version=0.0.4");
    assertEquals(await r.text(), "sluice_config_version 7\n");
  } finally {
    await server.shutdown();
  }
});

const EXPECTED_FAMILIES: Record<string, string> = {
  sluice_requests_total: "counter",
  sluice_request_duration_seconds: "histogram",
  sluice_upstream_connect_errors_total: "counter",
  sluice_upstream_retries_total: "counter",
  sluice_access_log_dropped_lines_total: "counter",
  sluice_client_timeouts_total: "counter",
  sluice_active_requests: "gauge",
  sluice_active_websockets: "gauge",
  sluice_snapshot_builds_total: "counter",
  sluice_snapshot_build_duration_seconds: "histogram",
  sluice_config_version: "gauge",
  sluice_last_successful_sync_timestamp_seconds: "gauge",
  sluice_watch_restarts_total: "counter",
  sluice_watch_relists_total: "counter",
  sluice_watch_malformed_lines_total: "counter",
  sluice_issues: "gauge",
  sluice_certificate_expiry_timestamp_seconds: "gauge",
};

// ---------------------------------------------------------------------------
// The health port.

const BODY = "# HELP sluice_config_version v\n# TYPE sluice_config_version gauge\n" +
  "sluice_config_version 7\n";

function healthOptions(overrides: Partial<HealthServerOptions> = {}): HealthServerOptions {
  return {
    hostname: "127.0.0.1",
    port: 0,
    live: () => true,
    ready: () => true,
    metrics: () => Promise.resolve({ body: BODY, contentType: METRICS_CONTENT_TYPE }),
    ...overrides,
  };
}

async function withHealth(
  overrides: Partial<HealthServerOptions>,
  run: (port: number) => Promise<void>,
): Promise<void> {
  const server = serveHealth(healthOptions(overrides));
  try {
    await run(server.addr.port);
  } finally {
    await server.shutdown();
  }
}

/** One request on a fresh connection; the response with its raw body text. */
async function exchange(port: number, head: string, isHead = false) {
  const conn = await RawConnection.open(port);
  try {
    await conn.send(head);
    const r = await conn.readResponse({ head: isHead, timeoutMs: 5_000 });
    return { ...r, text: latin1(r.body) };
  } finally {
    conn.close();
  }
}

Deno.test("HEAD works on /healthz, /readyz and /metrics: same status and type as GET, no body", async () => {
  await withHealth({ ready: () => false }, async (port) => {
    for (
      const [path, status, type] of [
        ["/healthz", 200, "text/plain; charset=utf-8"],
        ["/readyz", 503, "text/plain; charset=utf-8"],
        ["/metrics", 200, METRICS_CONTENT_TYPE],
        ["/nothing", 404, "text/plain; charset=utf-8"],
      ] as const
    ) {
      const get = await exchange(port, `GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`);
      const head = await exchange(port, `HEAD ${path} HTTP/1.1\r\nHost: x\r\n\r\n`, true);
      assertEquals([get.status, head.status], [status, status], path);
      assertEquals(headerValue(head.headers, "content-type"), type, path);
      assertEquals(headerValue(get.headers, "content-type"), type, path);
      assertEquals(head.body.length, 0, path);
    }
  });
});

Deno.test("every other method is answered 405 with Allow: GET, HEAD, on every path, and the port keeps serving", async () => {
  await withHealth({}, async (port) => {
    for (const method of ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "BREW"]) {
      for (const path of ["/healthz", "/readyz", "/metrics", "/other"]) {
        const r = await exchange(
          port,
          `${method} ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc`,
        );
        assertEquals(r.status, 405, `${method} ${path}`);
        assertEquals(headerValue(r.headers, "allow"), "GET, HEAD");
        assert(!r.text.includes("sluice_"), "no metrics in a 405");
      }
    }
    const r = await exchange(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assertEquals([r.status, r.text], [200, "ok\n"]);
  });
});

Deno.test("query strings and fragments do not change what the endpoints answer; near-miss paths are 404", async () => {
  const state = { ready: false };
  const o = healthOptions({ ready: () => state.ready });
  const answer = async (target: string) => {
    const r = await healthResponse(new Request(`http://x${target}`), o);
    return [r.status, await r.text()] as const;
  };
  for (const q of ["?", "?verbose", "?exclude=etcd&verbose=1", "?%00%0a", "#frag"]) {
    assertEquals(await answer(`/healthz${q}`), [200, "ok\n"], q);
    assertEquals(await answer(`/readyz${q}`), [503, "not ready\n"], q);
    assertEquals(await answer(`/metrics${q}`), [200, BODY], q);
  }
  for (const path of ["/healthz/", "/HEALTHZ", "//healthz", "/%68ealthz", "/metrics.txt", "/"]) {
    assertEquals((await answer(path))[0], 404, path);
  }
  // Over a real socket too, with an absolute-form target.
  await withHealth({}, async (port) => {
    const r = await exchange(
      port,
      `GET http://x/readyz?full=1 HTTP/1.1\r\nHost: x\r\n\r\n`,
    );
    assertEquals([r.status, r.text], [200, "ok\n"]);
  });
});

Deno.test("oversized requests are refused or cut without taking the health port down", async () => {
  await withHealth({}, async (port) => {
    const big = "a".repeat(1024 * 1024);
    const attacks = [
      `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${big}\r\n\r\n`,
      `GET /healthz?${big} HTTP/1.1\r\nHost: x\r\n\r\n`,
      `GET /healthz HTTP/1.1\r\nHost: x\r\n${"X-H: v\r\n".repeat(5_000)}\r\n`,
    ];
    for (const attack of attacks) {
      const bytes = await rawExchange(port, attack, { timeoutMs: 10_000 });
      const status = /^HTTP\/1\.1 (\d{3})/.exec(latin1(bytes))?.[1];
      assert(
        status === undefined || (Number(status) >= 400 && Number(status) < 500),
        `refused or cut (got ${status})`,
      );
    }
    // A large body the handler never reads: 405 at once, without waiting for 8 MiB.
    const conn = await RawConnection.open(port);
    try {
      await conn.send(
        `POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: ${8 * 2 ** 20}\r\n\r\n${
          "b".repeat(65_536)
        }`,
      );
      assertEquals((await conn.readResponse({ timeoutMs: 5_000 })).status, 405);
    } finally {
      conn.close();
    }
    const r = await exchange(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assertEquals([r.status, r.text], [200, "ok\n"]);
  });
});

Deno.test("a failing collector answers 500 without its message, and the next scrape works", async () => {
  const errors: unknown[] = [];
  let fail = true;
  await withHealth({
    metrics: () =>
      fail
        ? Promise.reject(new Error('secret detail "token=abc"'))
        : Promise.resolve({ body: BODY, contentType: METRICS_CONTENT_TYPE }),
    onError: (e) => errors.push(e),
  }, async (port) => {
    const r = await exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assertEquals([r.status, r.text], [500, "Internal error\n"]);
    assertEquals(errors.length, 1);
    fail = false;
    const again = await exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assertEquals([again.status, again.text], [200, BODY]);
  });
});

Deno.test("/healthz and /readyz answer while a /metrics scrape hangs", async () => {
  const release = Promise.withResolvers<void>();
  await withHealth({
    metrics: async () => {
      await release.promise;
      return { body: BODY, contentType: METRICS_CONTENT_TYPE };
    },
  }, async (port) => {
    const hanging = RawConnection.open(port).then(async (conn) => {
      try {
        await conn.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        return (await conn.readResponse({ timeoutMs: 10_000 })).status;
      } finally {
        conn.close();
      }
    });
    try {
      for (const path of ["/healthz", "/readyz"]) {
        const r = await exchange(port, `GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`);
        assertEquals(r.status, 200, path);
      }
    } finally {
      release.resolve();
    }
    assertEquals(await hanging, 200);
  });
});

// ---------------------------------------------------------------------------
// A real Sluice: the scrape parses strictly, and the proxy ports are not the health port.

Deno.test("a live Sluice's /metrics parses strictly, and its proxy ports never answer for the health port", async () => {
  const backend = await startEchoBackend({ name: "web" });
  const cert = await generateSelfSignedCertificate({
    hostnames: ["shop.example.com"],
    commonName: "shop.example.com",
  });
  const dir = await writeManifestDir([
    { namespace: "shop", name: "web", host: "shop.test", port: backend.port },
    {
      namespace: "secure",
      name: "shop",
      host: "shop.example.com",
      port: backend.port,
      tls: { certPem: cert.certPem, keyPem: cert.keyPem },
    },
  ]);
  const sluice = await spawnSluice([
    `--manifests=${dir.path}`,
    "--workers=2",
    "--shutdown-delay=0s",
  ]);
  using client = Deno.createHttpClient({ allowHost: true });
  /** One request over TLS with SNI shop.example.com; the status and the echoed target. */
  const tlsGet = async (host: string, path: string) => {
    const tcp = await Deno.connect({ hostname: "127.0.0.1", port: sluice.httpsPort });
    const conn = await Deno.startTls(tcp, {
      hostname: "shop.example.com",
      caCerts: [cert.certPem],
    });
    try {
      await conn.write(
        new TextEncoder().encode(
          `GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`,
        ),
      );
      const text = new TextDecoder().decode(
        await new Response(conn.readable).arrayBuffer().then((b) => new Uint8Array(b)),
      );
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]);
      const target = /"target":"([^"]*)"/.exec(text)?.[1];
      return [status, target] as const;
    } finally {
      try {
        conn.close();
      } catch {
        // closed with its readable stream
      }
    }
  };
  try {
    await sluice.ready();
    const proxied = async (host: string, path: string, method = "GET") => {
      const r = await fetch(`http://127.0.0.1:${sluice.httpPort}${path}`, {
        method,
        headers: { host },
        client,
      });
      return [r.status, await r.text()] as const;
    };
    // Unknown hosts, hostile Host values and methods: answered by the proxy, never the health port.
    for (const host of ["127.0.0.1", "localhost", "unknown.test", 'evil"host', "a\\b"]) {
      for (const path of ["/metrics", "/healthz", "/readyz", "/metrics?x=1"]) {
        const [status, text] = await proxied(host, path);
        assert(status === 404 || status === 400, `${host}${path}: ${status}`);
        assert(!text.includes("sluice_") && text !== "ok\n", `${host}${path}: ${text}`);
      }
    }
    // A routed host passes the paths on to its backend.
    const before = backend.requests.length;
    for (const path of ["/metrics", "/healthz", "/readyz"]) {
      const [status, text] = await proxied("shop.test", path, "BREW");
      assertEquals(status, 200, path);
      assertEquals(JSON.parse(text).target, path);
    }
    // Over TLS, for a routed host and for an unknown Host on the routed host's certificate.
    assertEquals(await tlsGet("shop.example.com", "/metrics"), [200, "/metrics"]);
    const [status] = await tlsGet("127.0.0.1", "/metrics");
    assert(status !== 200, `unknown Host over TLS: ${status}`);
    assertEquals(backend.requests.slice(before).map((r) => r.target), [
      "/metrics",
      "/healthz",
      "/readyz",
      "/metrics",
    ]);

    const families = await waitFor("the proxied requests to be counted", async () => {
      const r = await fetch(`http://127.0.0.1:${sluice.healthPort}/metrics`);
      assertEquals(r.headers.get("content-type"), METRICS_CONTENT_TYPE);
      const f = parseExposition(await r.text());
      const counted = samples(f, "sluice_requests_total").reduce((a, s) => a + s.value, 0);
      return counted >= 25 ? f : undefined;
    });
    for (const [name, type] of Object.entries(EXPECTED_FAMILIES)) {
      assertEquals(families.get(name)?.type, type, name);
    }
    // Label values come from the routing table, never from the client.
    for (const s of samples(families, "sluice_requests_total")) {
      assert(["", "shop/web", "secure/shop"].includes(s.labels.ingress!), s.labels.ingress);
      assert(["", "shop.test", "shop.example.com"].includes(s.labels.host!), s.labels.host);
    }
    assertEquals(
      samples(families, "sluice_requests_total", { ingress: "shop/web", method: "OTHER" })
        .reduce((a, s) => a + s.value, 0),
      3,
    );
    // HEAD on the live health port.
    const head = await fetch(`http://127.0.0.1:${sluice.healthPort}/metrics`, { method: "HEAD" });
    assertEquals([head.status, await head.text()], [200, ""]);
  } finally {
    assertEquals(await sluice.stop(), 0);
    await backend.close();
    await dir.remove();
  }
});
