/**
 * IPv6 and dual-stack end to end: Sluice as a real process, serving
 * EndpointSlices of `addressType: IPv6` (from a `--manifests` directory, so
 * a loopback `::1` backend may stand for a pod) and, against the real
 * kube-apiserver, a dual-stack Service whose IPv4 and IPv6 slices name the
 * same pods, living in network namespaces with a ULA address each. Also
 * whether IPv6 clients reach Sluice's ports at all, as they do in an
 * IPv6-only cluster.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/e2e/dual_stack_test.ts
 *
 * @module
 */
import { join } from "node:path";
import { assertEquals } from "../support/assert.ts";
import { type EchoBackend, startEchoBackend } from "../support/echo_backend.ts";
import { writeManifestDir } from "../support/manifest_dir.ts";
import { apply } from "../support/manifests.ts";
import { createTestHost } from "../support/netns.ts";
import { type SluiceProcess, spawnSluice } from "../support/sluice_process.ts";
import { waitFor } from "../support/wait.ts";
import { ENDPOINT_SLICES } from "../../lib/k8s/resources.ts";
import {
  e2eWorld,
  endpointSlice,
  HostClient,
  hostIngress,
  service,
  withController,
} from "./cluster_fixture.ts";

/** A site whose only EndpointSlice is `addressType: IPv6`, at `[::1]:port`. */
function ipv6SiteYaml(namespace: string, host: string, port: number): string {
  return `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: ${namespace}}
spec:
  ingressClassName: sluice
  rules:
    - host: ${host}
      http:
        paths:
          - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ${namespace}}
spec:
  ipFamilyPolicy: SingleStack
  ipFamilies: [IPv6]
  ports: [{name: http, port: 80, targetPort: ${port}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-v6
  namespace: ${namespace}
  labels: {kubernetes.io/service-name: web}
addressType: IPv6
ports: [{name: http, port: ${port}, protocol: TCP}]
endpoints: [{addresses: ["::1"], conditions: {ready: true}}]
`;
}

async function getText(url: string, host: string, client: Deno.HttpClient) {
  const response = await fetch(url, {
    headers: { host },
    client,
    signal: AbortSignal.timeout(5_000),
  });
  return { status: response.status, body: await response.text() };
}

/**
 * Runs `fn` against a ready Sluice (one worker) serving `v6.test` from a
 * `--manifests` directory to an echo backend at `[::1]` (pod `v6`), with an
 * HTTP client that may set Host; stops and removes everything after it.
 */
async function withV6Site(
  fn: (sluice: SluiceProcess, client: Deno.HttpClient, backend: EchoBackend) => Promise<void>,
): Promise<void> {
  const backend = await startEchoBackend({ hostname: "::1", name: "web", pod: "v6" });
  const dir = await writeManifestDir([]);
  await Deno.writeTextFile(join(dir.path, "v6.yaml"), ipv6SiteYaml("v6", "v6.test", backend.port));
  const sluice = await spawnSluice([
    `--manifests=${dir.path}`,
    "--workers=1",
    "--shutdown-delay=0s",
  ]);
  using client = Deno.createHttpClient({ allowHost: true });
  try {
    await sluice.ready();
    await fn(sluice, client, backend);
  } finally {
    await sluice.stop();
    await backend.close();
    await dir.remove();
  }
}

Deno.test("Sluice proxies to an IPv6 EndpointSlice and logs the upstream bracketed", async () => {
  await withV6Site(async (sluice, client, backend) => {
    const answer = await getText(`http://127.0.0.1:${sluice.httpPort}/x`, "v6.test", client);
    assertEquals(answer.status, 200, answer.body);
    assertEquals(JSON.parse(answer.body).pod, "v6");
    const line = await waitFor(
      "the access line",
      () => sluice.records().find((r) => r.logger === "sluice.access" && r.host === "v6.test"),
    );
    assertEquals(line.upstream, `[::1]:${backend.port}`);
  });
});

// Was a bug: every port listened on 0.0.0.0 only, so in an IPv6-only cluster neither traffic nor
// the kubelet's probes (sent to the pod's IPv6 address) reached Sluice. It now listens on "::"
// (IPv6 and IPv4) where the host has IPv6 (--bind-address chooses otherwise).
Deno.test({
  name: "IPv6 clients reach Sluice's HTTP, HTTPS and health ports, as in an IPv6-only cluster",
  async fn() {
    await withV6Site(async (sluice, client) => {
      const health = await getText(`http://[::1]:${sluice.healthPort}/readyz`, "x", client);
      assertEquals(health.status, 200);
      const answer = await getText(`http://[::1]:${sluice.httpPort}/`, "v6.test", client);
      assertEquals(answer.status, 200, answer.body);
      const echoed = JSON.parse(answer.body) as { headers: [string, string][] };
      const xff = echoed.headers.find(([k]) => k.toLowerCase() === "x-forwarded-for")?.[1];
      assertEquals(xff, "::1");
      // An IPv4 client of the same port still arrives, told as dotted IPv4 (not ::ffff:…).
      const v4 = await getText(`http://127.0.0.1:${sluice.httpPort}/`, "v6.test", client);
      const v4Xff = (JSON.parse(v4.body) as { headers: [string, string][] }).headers
        .find(([k]) => k.toLowerCase() === "x-forwarded-for")?.[1];
      assertEquals(v4Xff, "127.0.0.1");
      const conn = await Deno.connect({ hostname: "::1", port: sluice.httpsPort });
      conn.close();
    });
  },
});

/** `pod family` of each of `n` answers (family from the source address the backend saw). */
async function seen(http: HostClient, port: number, n: number): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const answer = await http.get(port, "dual.e2e.test", "/");
    if (answer.status !== 200) {
      out.push(`status ${answer.status}`);
      continue;
    }
    const remote = String((JSON.parse(answer.body) as { remoteAddr?: string }).remoteAddr);
    out.push(`${answer.pod} ${remote.startsWith("fd51:") ? "IPv6" : "IPv4"}`);
  }
  return out;
}

function tally(items: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const item of [...items].sort()) out[item] = (out[item] ?? 0) + 1;
  return out;
}

Deno.test("a dual-stack Service's IPv4 and IPv6 slices reach every pod on both families, evenly, and FQDN slices are ignored", async () => {
  const w = await e2eWorld("e2e-dual");
  await using hostA = await createTestHost({ name: "pod-a", ipv6: true });
  await using hostB = await createTestHost({ name: "pod-b", ipv6: true });
  using http = new HostClient();
  const at = { namespace: w.ns };
  const admin = w.admin.client;
  try {
    // Pods listen on both families, as dual-stack pods do.
    await Promise.all([
      hostA.startEchoBackend({ port: 8080, service: "web", pod: "web-a", hostname: "::" }),
      hostB.startEchoBackend({ port: 8080, service: "web", pod: "web-b", hostname: "::" }),
    ]);
    await apply(admin, service("web", 8080), at);
    const slice = (name: string, addressType: "IPv4" | "IPv6" | "FQDN", addresses: string[]) =>
      endpointSlice(name, { service: "web", addressType, addresses, port: 8080 });
    await apply(admin, slice("web-v4", "IPv4", [hostA.address, hostB.address]), at);
    await apply(admin, slice("web-v6", "IPv6", [hostA.address6!, hostB.address6!]), at);
    // Never connected to: a name that resolves nowhere.
    await apply(admin, slice("web-fqdn", "FQDN", ["pod-c.invalid"]), at);
    await apply(
      admin,
      hostIngress("dual", { className: w.className, host: "dual.e2e.test", service: "web" }),
      at,
    );
    await withController({
      credentials: w.credentials,
      controllerName: w.controllerName,
      electionNamespace: w.ns,
    }, async (sluice) => {
      const port = sluice.httpPort;
      await waitFor("both families of both pods", async () => {
        return Object.keys(tally(await seen(http, port, 8))).length === 4;
      }, { timeoutMs: 10_000 });
      // Round-robin over 4 endpoints (2 pods x 2 families): every pod gets half.
      assertEquals(tally(await seen(http, port, 40)), {
        "web-a IPv4": 10,
        "web-a IPv6": 10,
        "web-b IPv4": 10,
        "web-b IPv6": 10,
      });

      // The IPv4 slice gone (an IPv6-only Service): every request goes over IPv6.
      await admin.delete(ENDPOINT_SLICES, { namespace: w.ns, name: "web-v4" });
      await waitFor("IPv6 only", async () => {
        const t = tally(await seen(http, port, 8));
        return t["web-a IPv6"] === 4 && t["web-b IPv6"] === 4;
      }, { timeoutMs: 10_000 });

      // A pod stopped: its IPv6 endpoint fails to connect and the other pod serves every request.
      await hostA.close();
      const after = tally(await seen(http, port, 10));
      assertEquals(after, { "web-b IPv6": 10 });
    });
  } finally {
    await w.close();
  }
});
