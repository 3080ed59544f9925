/**
 * Logging end to end: what Sluice writes, read from its captured output.
 * JSON lines by default (with `component`), readable lines with
 * `--log-format pretty`, an access line per request unless
 * `--access-log=false`, and never a certificate, key, token or
 * `Authorization` value: a run with TLS Secrets at `--log-level debug`
 * (manifests) and a run authenticated by a kubeconfig token (cluster) are
 * grepped for them.
 *
 * @module
 */
import { KubeConfig } from "@kubernetes/client-node";
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";
import { INGRESSES, SECRETS } from "../../lib/k8s/resources.ts";
import { assert, assertEquals, assertMatch, assertStringIncludes } from "../support/assert.ts";
import { startEchoBackend } from "../support/echo_backend.ts";
import { adminClient, freshNamespace, testKubeconfig } from "../support/kube.ts";
import { echoSite, writeManifestDir } from "../support/manifest_dir.ts";
import { spawnSluice } from "../support/sluice_process.ts";
import { waitFor } from "../support/wait.ts";

const SECRET_TOKEN = "s3cr3t-t0ken-" + crypto.randomUUID();
const BASIC = btoa("alice:" + crypto.randomUUID());

/** Distinctive pieces of a PEM: its base64 body lines. */
function pemBodies(pem: string): string[] {
  return pem.split("\n").filter((l) => l.length >= 40 && !l.startsWith("-----"));
}

function assertNoneIn(logs: readonly string[], secrets: readonly string[]): void {
  const text = logs.join("\n");
  for (const s of secrets) assert(!text.includes(s), `the logs contain "${s.slice(0, 16)}…"`);
  assert(!text.includes("PRIVATE KEY"), "the logs contain a private key header");
}

Deno.test("logs are JSON lines with an access line per request and no key, certificate or credential", async () => {
  const backend = await startEchoBackend({ name: "web" });
  const tls = await generateSelfSignedCertificate({
    hostnames: ["secure.test"],
    commonName: "secure.test",
  });
  const dir = await writeManifestDir([
    { namespace: "shop", name: "web", host: "shop.test", port: backend.port },
    { namespace: "secure", name: "web", host: "secure.test", port: backend.port, tls },
  ]);
  const sluice = await spawnSluice([
    `--manifests=${dir.path}`,
    "--workers=1",
    "--log-level=debug",
    "--shutdown-delay=0s",
  ]);
  using client = Deno.createHttpClient({ allowHost: true });
  try {
    await sluice.ready();
    for (const authorization of [`Bearer ${SECRET_TOKEN}`, `Basic ${BASIC}`]) {
      const r = await fetch(`http://127.0.0.1:${sluice.httpPort}/a?token=${SECRET_TOKEN}`, {
        headers: { host: "shop.test", authorization },
        client,
      });
      assertEquals(r.status, 200);
      await r.body?.cancel();
    }
    const access = await waitFor("two access lines", () => {
      const lines = sluice.records().filter((r) => r.logger === "sluice.access");
      return lines.length >= 2 ? lines : undefined;
    });
    const line = access[0]!;
    for (const field of ["@timestamp", "client", "method", "host", "path", "status", "bytes"]) {
      assert(field in line, `access lines carry "${field}"`);
    }
    for (const field of ["duration_ms", "upstream", "request_id", "ingress", "service"]) {
      assert(field in line, `access lines carry "${field}"`);
    }
    assertEquals([line.method, line.host, line.path, line.status], ["GET", "shop.test", "/a", 200]);
    assertEquals(line.upstream, `127.0.0.1:${backend.port}`);
    assertEquals(line.ingress, "shop/web");
  } finally {
    assertEquals(await sluice.stop(), 0);
    await backend.close();
    await dir.remove();
  }
  // Every line Sluice writes is one JSON object with a component. Deno itself prints two
  // one-time warnings (permissions from the config file; request.signal's legacy abort).
  const fromDeno = [/Permissions in the config file/, /^Deno\.serve: request\.signal aborts/];
  const lines = sluice.logs.filter((l) => l.trim() !== "" && !fromDeno.some((p) => p.test(l)));
  for (const l of lines) {
    const record = JSON.parse(l) as Record<string, unknown>;
    assert(typeof record.component === "string", `a component on ${l.slice(0, 80)}`);
  }
  assert(lines.some((l) => l.includes('"level":"DEBUG"')), "debug lines were written");
  assertNoneIn(sluice.logs, [
    ...pemBodies(tls.certPem),
    ...pemBodies(tls.keyPem),
    SECRET_TOKEN,
    BASIC,
  ]);
});

Deno.test("--log-format pretty writes readable lines and --access-log=false writes no access line", async () => {
  const site = await echoSite({ name: "web" });
  const { dir } = site;
  const sluice = await spawnSluice([
    `--manifests=${dir.path}`,
    "--workers=1",
    "--log-format=pretty",
    "--access-log=false",
    "--shutdown-delay=0s",
  ]);
  using client = Deno.createHttpClient({ allowHost: true });
  try {
    await sluice.ready();
    const r = await fetch(`http://127.0.0.1:${sluice.httpPort}/quiet`, {
      headers: { host: "shop.test" },
      client,
    });
    assertEquals(r.status, 200);
    await r.body?.cancel();
  } finally {
    assertEquals(await sluice.stop(), 0);
    await site.close();
  }
  assertEquals(sluice.records(), [], "no JSON lines");
  assert(sluice.logs.some((l) => /\bINF\b|\binfo\b/i.test(l) && l.includes("Ready")), "readable");
  assert(!sluice.logs.some((l) => l.includes("/quiet")), "no access line");
});

// Was a bug: with --log-format pretty every other line was text, but access lines stayed JSON.
Deno.test("--log-format pretty writes access lines as readable text too", async () => {
  const site = await echoSite({ name: "web" });
  const sluice = await spawnSluice([
    `--manifests=${site.dir.path}`,
    "--workers=1",
    "--log-format=pretty",
    "--shutdown-delay=0s",
  ]);
  using client = Deno.createHttpClient({ allowHost: true });
  try {
    await sluice.ready();
    const r = await fetch(`http://127.0.0.1:${sluice.httpPort}/pretty?q=secret`, {
      headers: { host: "shop.test" },
      client,
    });
    assertEquals(r.status, 200);
    await r.body?.cancel();
    await waitFor("the access line", () => sluice.logs.some((l) => l.includes("/pretty")));
  } finally {
    assertEquals(await sluice.stop(), 0);
    await site.close();
  }
  assertEquals(sluice.records(), [], "no JSON lines, access lines included");
  const line = sluice.logs.find((l) => l.includes("/pretty"))!;
  assertMatch(line, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \+00 \[INF\] sluice·access: GET /);
  assertStringIncludes(line, "shop.test/pretty 200");
  assert(!line.includes("secret"), "no query string");
});

Deno.test("a run authenticated by a kubeconfig token never logs the token or TLS Secret data", async () => {
  const admin = await adminClient();
  const kc = new KubeConfig();
  kc.loadFromFile(testKubeconfig());
  const token = kc.getCurrentUser()?.token;
  assert(token !== undefined && token.length > 16, "the test kubeconfig carries a token");
  const tls = await generateSelfSignedCertificate({
    hostnames: ["logged.test"],
    commonName: "logged.test",
  });
  const ns = await freshNamespace(admin.client, "logging");
  await admin.client.create(SECRETS, { namespace: ns }, {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name: "web-tls" },
    type: "kubernetes.io/tls",
    stringData: { "tls.crt": tls.certPem, "tls.key": tls.keyPem },
  });
  await admin.client.create(INGRESSES, { namespace: ns }, {
    apiVersion: "networking.k8s.io/v1",
    kind: "Ingress",
    metadata: { name: "web" },
    spec: {
      ingressClassName: "sluice",
      tls: [{ hosts: ["logged.test"], secretName: "web-tls" }],
      rules: [{ host: "logged.test" }],
    },
  });
  const sluice = await spawnSluice([
    `--kubeconfig=${testKubeconfig()}`,
    "--workers=1",
    "--log-level=debug",
    `--election-id=logging-${ns}`,
    "--shutdown-delay=0s",
  ], { env: { POD_NAME: `logging-${ns}`, POD_NAMESPACE: ns } });
  using client = Deno.createHttpClient({ allowHost: true });
  try {
    await sluice.ready();
    const r = await fetch(`http://127.0.0.1:${sluice.httpPort}/`, {
      headers: { host: "logged.test", authorization: `Bearer ${token}` },
      client,
    });
    await r.body?.cancel();
  } finally {
    assertEquals(await sluice.stop(), 0);
    admin.access.close();
  }
  assert(sluice.records().length > 5, "lines were written");
  assertNoneIn(sluice.logs, [token, ...pemBodies(tls.certPem), ...pemBodies(tls.keyPem)]);
});
