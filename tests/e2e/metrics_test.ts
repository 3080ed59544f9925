/**
 * `/metrics` end to end: Sluice as a process (`--manifests`, two workers) in
 * front of a loopback echo backend, real requests, then the exposition
 * scraped from the health port and read series by series.
 *
 * @module
 */
import { X509Certificate } from "node:crypto";
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";
import { assert, assertEquals, assertMatch } from "../support/assert.ts";
import { startEchoBackend } from "../support/echo_backend.ts";
import { siteYaml, writeManifestDir } from "../support/manifest_dir.ts";
import { freePort, spawnSluice } from "../support/sluice_process.ts";
import { waitFor } from "../support/wait.ts";

const shopCertificate = await generateSelfSignedCertificate({
  hostnames: ["shop.example.com"],
  commonName: "shop.example.com",
});
const SHOP_CERT = shopCertificate.certPem;
const SHOP_KEY = shopCertificate.keyPem;

/** The value of the one sample whose name and labels match, or undefined. */
function sample(text: string, name: string, labels: Record<string, string | RegExp> = {}) {
  const values: number[] = [];
  for (const line of text.split("\n")) {
    const m = line.match(/^([a-z_:]+)(?:\{(.*)\})? (\S+)$/);
    if (m === null || m[1] !== name) continue;
    const seen = Object.fromEntries(
      [...(m[2] ?? "").matchAll(/([a-z_]+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1]!, l[2]!]),
    );
    const ok = Object.entries(labels).every(([k, v]) =>
      typeof v === "string" ? seen[k] === v : v.test(seen[k] ?? "")
    );
    if (ok) values.push(Number(m[3]));
  }
  return values.length === 0 ? undefined : values.reduce((a, b) => a + b, 0);
}

Deno.test("/metrics counts requests, retries, connections, builds, issues and certificate expiry", async () => {
  const backend = await startEchoBackend({ name: "web" });
  const dead = freePort(); // nothing listens here: connecting fails at once
  const dir = await writeManifestDir([
    { namespace: "shop", name: "web", host: "shop.test", port: backend.port },
    {
      namespace: "secure",
      name: "shop",
      host: "shop.example.com",
      port: backend.port,
      tls: { certPem: SHOP_CERT, keyPem: SHOP_KEY },
    },
  ]);
  // A Service with a dead and a live endpoint (two slices), and an Ingress naming a missing Service.
  await Deno.writeTextFile(
    `${dir.path}/flaky.yaml`,
    siteYaml({ namespace: "flaky", name: "web", host: "flaky.test", port: backend.port }) +
      `---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-dead
  namespace: flaky
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
  - name: http
    port: ${dead}
endpoints:
  - addresses: ["127.0.0.1"]
    conditions:
      ready: true
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: broken
  namespace: flaky
spec:
  ingressClassName: sluice
  rules:
    - host: broken.test
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service:
                name: missing
                port:
                  number: 80
`,
  );
  const sluice = await spawnSluice([
    `--manifests=${dir.path}`,
    "--workers=2",
    "--shutdown-delay=0s",
  ]);
  using client = Deno.createHttpClient({ allowHost: true });
  let idle: Deno.TlsConn | undefined;
  try {
    await sluice.ready();
    const get = async (host: string, method = "GET") => {
      const r = await fetch(`http://127.0.0.1:${sluice.httpPort}/x?y=1`, {
        method,
        headers: { host },
        client,
        ...(method === "POST" ? { body: "hello" } : {}),
      });
      await r.body?.cancel();
      return r.status;
    };
    for (let i = 0; i < 6; i++) assertEquals(await get("shop.test"), 200);
    for (let i = 0; i < 2; i++) assertEquals(await get("shop.test", "POST"), 200);
    assertEquals(await get("unknown.test"), 404);
    assertEquals(await get("broken.test"), 503);
    // Round-robin over a dead and a live endpoint: some attempts fail to connect and are retried.
    for (let i = 0; i < 4; i++) assertEquals(await get("flaky.test"), 200);

    // An HTTPS request held in flight (the backend answers after a delay), over the host's certificate.
    const tcp = await Deno.connect({ hostname: "127.0.0.1", port: sluice.httpsPort });
    idle = await Deno.startTls(tcp, { hostname: "shop.example.com", caCerts: [SHOP_CERT] });
    await idle.write(
      new TextEncoder().encode("GET /?delay=4000 HTTP/1.1\r\nHost: shop.example.com\r\n\r\n"),
    );

    const scrape = async () => {
      const r = await fetch(`http://127.0.0.1:${sluice.healthPort}/metrics`);
      assertMatch(r.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
      return await r.text();
    };
    // Workers count after the response body ended: wait until the 14 finished ones are in, and
    // the slow HTTPS one is being answered.
    const text = await waitFor("every request to be counted", async () => {
      const t = await scrape();
      return (sample(t, "sluice_requests_total") ?? 0) >= 14 &&
          sample(t, "sluice_active_requests", { listener: "https" }) === 1
        ? t
        : undefined;
    });
    const head = new Uint8Array(4096);
    const n = await idle.read(head);
    assertMatch(new TextDecoder().decode(head.subarray(0, n ?? 0)), /^HTTP\/1\.1 200/);

    const shop = { ingress: "shop/web", host: /^(shop\.test)?$/ };
    assertEquals(
      sample(text, "sluice_requests_total", { ...shop, status: "2xx", method: "GET" }),
      6,
    );
    assertEquals(
      sample(text, "sluice_requests_total", { ...shop, status: "2xx", method: "POST" }),
      2,
    );
    assertEquals(sample(text, "sluice_requests_total", { ingress: "", status: "4xx" }), 1);
    assertEquals(
      sample(text, "sluice_requests_total", { ingress: "flaky/broken", status: "5xx" }),
      1,
    );
    assertEquals(sample(text, "sluice_request_duration_seconds_count", shop), 8);
    assertEquals(
      sample(text, "sluice_request_duration_seconds_bucket", { ...shop, le: "+Inf" }),
      8,
    );
    const retries = sample(text, "sluice_upstream_retries_total", { backend: /flaky\/web/ }) ?? 0;
    const errors =
      sample(text, "sluice_upstream_connect_errors_total", { backend: /flaky\/web/ }) ??
        0;
    assert(retries >= 1, `retries counted (${retries})`);
    assert(errors >= retries, `connect errors counted (${errors})`);
    assertEquals(
      sample(text, "sluice_active_requests", { listener: "https" }),
      1,
      "the slow HTTPS request is in flight",
    );
    assertEquals(sample(text, "sluice_active_requests", { listener: "http" }), 0);
    assertEquals(sample(text, "sluice_active_websockets"), 0);
    // Exposed, summed over the workers; nothing dropped with stderr read by the test.
    assertEquals(sample(text, "sluice_access_log_dropped_lines_total"), 0);

    assert((sample(text, "sluice_snapshot_builds_total", { result: "published" }) ?? 0) >= 1);
    assert((sample(text, "sluice_snapshot_build_duration_seconds_count") ?? 0) >= 1);
    assert((sample(text, "sluice_config_version") ?? 0) >= 1);
    assertEquals(sample(text, "sluice_issues", { kind: "Ingress" }), 1);
    const notAfter = Date.parse(new X509Certificate(SHOP_CERT).validTo) / 1000;
    assertEquals(
      sample(text, "sluice_certificate_expiry_timestamp_seconds", {
        host: "shop.example.com",
        secret: "secure/shop-tls",
      }),
      notAfter,
    );
    const synced = sample(text, "sluice_last_successful_sync_timestamp_seconds", {
      kind: "Ingress",
    });
    assert(synced !== undefined && Math.abs(synced - Date.now() / 1000) < 120, "synced recently");
    assertEquals(sample(text, "sluice_watch_restarts_total", { kind: "Ingress" }), 0);
    assertEquals(sample(text, "sluice_watch_relists_total", { kind: "Ingress" }), 0);
  } finally {
    idle?.close();
    assertEquals(await sluice.stop(), 0);
    await backend.close();
    await dir.remove();
  }
});
