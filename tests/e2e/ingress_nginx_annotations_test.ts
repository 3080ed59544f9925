/**
 * The served ingress-nginx annotations end to end: the Sluice process reads
 * annotated Ingresses from `--manifests` (no cluster) and serves them over
 * its real HTTP port, in front of a real backend: redirects with variables,
 * force-ssl-redirect, app-root, CORS preflight and echoed origin, source
 * ranges against a spoofed `X-Forwarded-For`, proxy-body-size above and below
 * `--max-body-size` (declared and chunked), basic auth with the users of an
 * Opaque Secret, and an invalid annotation's 503.
 *
 * @module
 */

import { join } from "node:path";
import { assertEquals, assertMatch } from "../support/assert.ts";
import { type AnnotatedIngress, annotatedObjects } from "../support/annotated_world.ts";
import { startEchoBackend } from "../support/echo_backend.ts";
import { headerValues, rawRequest } from "../support/raw_http.ts";
import { spawnSluice } from "../support/sluice_process.ts";

const INGRESSES: readonly AnnotatedIngress[] = [
  {
    name: "moved",
    host: "moved.test",
    annotations: {
      "permanent-redirect": "https://new.test$request_uri",
      "permanent-redirect-code": "308",
    },
  },
  { name: "forced", host: "forced.test", annotations: { "force-ssl-redirect": "true" } },
  { name: "app", host: "app.test", annotations: { "app-root": "/app/" } },
  {
    name: "cors",
    host: "api.test",
    annotations: { "enable-cors": "true", "cors-allow-origin": "https://*.front.test" },
  },
  {
    name: "admin",
    host: "ranges.test",
    paths: ["/admin"],
    annotations: { "allowlist-source-range": "10.0.0.0/8" },
  },
  {
    name: "local",
    host: "ranges.test",
    paths: ["/", "/local"],
    annotations: { "denylist-source-range": "192.0.2.0/24" },
  },
  {
    name: "blocked",
    host: "ranges.test",
    paths: ["/blocked"],
    annotations: { "denylist-source-range": "127.0.0.0/8" },
  },
  { name: "uploads", host: "uploads.test", annotations: { "proxy-body-size": "4k" } },
  {
    name: "unlimited",
    host: "uploads.test",
    paths: ["/any"],
    annotations: { "proxy-body-size": "0" },
  },
  { name: "plain", host: "plain.test" },
  { name: "invalid", host: "invalid.test", annotations: { "proxy-body-size": "1.5m" } },
  {
    name: "guarded",
    host: "guarded.test",
    annotations: { "auth-type": "basic", "auth-secret": "users", "auth-realm": "Staff only" },
  },
];

/** An Opaque Secret (no type: the default) with one htpasswd user, alice:secret ({SHA}). */
const USERS = {
  apiVersion: "v1",
  kind: "Secret",
  metadata: { namespace: "shop", name: "users" },
  data: { auth: btoa("alice:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n") },
};

/** The manifests of `INGRESSES`, every Service at the backend's port, as YAML documents. */
function manifests(port: number): string {
  const ports = new Map(INGRESSES.map((i) => [i.name, port]));
  const objects = annotatedObjects(INGRESSES, ports);
  const typed = [
    ...objects.ingressClasses.map((o) => ({
      apiVersion: "networking.k8s.io/v1",
      kind: "IngressClass",
      ...o,
    })),
    ...objects.ingresses,
    USERS,
    ...objects.services.map((o) => ({ apiVersion: "v1", kind: "Service", ...o })),
    ...objects.endpointSlices.map((o) => ({
      apiVersion: "discovery.k8s.io/v1",
      kind: "EndpointSlice",
      ...o,
      endpoints: o.endpoints.map((e) => ({ ...e, conditions: { ready: true } })),
    })),
  ];
  return typed.map((o) => JSON.stringify(o)).join("\n---\n") + "\n";
}

function request(method: string, host: string, target: string, fields: string[] = []): string {
  return `${method} ${target} HTTP/1.1\r\nHost: ${host}\r\n` +
    fields.map((f) => `${f}\r\n`).join("") + "Connection: close\r\n\r\n";
}

function chunkedPost(host: string, target: string, length: number): string {
  let body = "";
  for (let left = length; left > 0; left -= 1000) {
    const n = Math.min(1000, left);
    body += `${n.toString(16)}\r\n${"c".repeat(n)}\r\n`;
  }
  return `POST ${target} HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: chunked\r\n` +
    `Connection: close\r\n\r\n${body}0\r\n\r\n`;
}

function declaredPost(host: string, target: string, length: number): string {
  return `POST ${target} HTTP/1.1\r\nHost: ${host}\r\nContent-Length: ${length}\r\n` +
    `Connection: close\r\n\r\n${"d".repeat(length)}`;
}

Deno.test("the Sluice process serves ingress-nginx redirects, CORS, source ranges and body sizes from --manifests", async () => {
  const backend = await startEchoBackend({ name: "shop/web" });
  const dir = await Deno.makeTempDir({ prefix: "sluice-annotations-" });
  await Deno.writeTextFile(join(dir, "objects.yaml"), manifests(backend.port));
  const sluice = await spawnSluice([
    `--manifests=${dir}`,
    "--workers=1",
    "--shutdown-delay=0s",
    "--max-body-size=1k",
  ]);
  try {
    await sluice.ready();
    const ask = (text: string) => rawRequest(sluice.httpPort, text);
    const seen = () => backend.requests.length;

    // Redirects: answered by Sluice, never forwarded.
    const before = seen();
    const moved = await ask(request("GET", "moved.test", "/a/b?c=1"));
    assertEquals([moved.status, headerValues(moved.headers, "location")], [308, [
      "https://new.test/a/b?c=1",
    ]]);
    const forced = await ask(request("GET", "forced.test", "/p?q"));
    assertEquals(forced.status, 308);
    assertMatch(
      headerValues(forced.headers, "location")[0] ?? "",
      /^https:\/\/forced\.test(:\d+)?\/p\?q$/,
    );
    const app = await ask(request("GET", "app.test", "/"));
    assertEquals([app.status, headerValues(app.headers, "location")], [302, [
      "http://app.test/app/",
    ]]);
    assertEquals(seen(), before);

    // CORS: the preflight of a matching origin answered 204; another origin's forwarded.
    const preflight = await ask(
      request("OPTIONS", "api.test", "/v1", ["Origin: https://a.front.test"]),
    );
    assertEquals(preflight.status, 204);
    assertEquals(headerValues(preflight.headers, "access-control-allow-origin"), [
      "https://a.front.test",
    ]);
    assertEquals(headerValues(preflight.headers, "access-control-max-age"), ["1728000"]);
    const other = await ask(
      request("OPTIONS", "api.test", "/v1", ["Origin: https://a.b.front.test"]),
    );
    assertEquals(other.status, 200);
    assertEquals(headerValues(other.headers, "access-control-allow-origin"), []);
    const actual = await ask(request("GET", "api.test", "/v1", ["Origin: https://x.front.test"]));
    assertEquals(headerValues(actual.headers, "access-control-allow-origin"), [
      "https://x.front.test",
    ]);

    // Source ranges: the peer is 127.0.0.1, whatever X-Forwarded-For claims.
    const ranges = seen();
    for (const fields of [[], ["X-Forwarded-For: 10.0.0.1"], ["X-Real-IP: 10.0.0.1"]]) {
      assertEquals((await ask(request("GET", "ranges.test", "/admin", fields))).status, 403);
      assertEquals((await ask(request("GET", "ranges.test", "//admin", fields))).status, 403);
      assertEquals((await ask(request("GET", "ranges.test", "/blocked", fields))).status, 403);
    }
    assertEquals(seen(), ranges);
    assertEquals((await ask(request("GET", "ranges.test", "/local"))).status, 200);

    // proxy-body-size: the Ingress's 4k replaces --max-body-size=1k; 0 lifts it.
    assertEquals((await ask(declaredPost("uploads.test", "/up", 3000))).status, 200);
    assertEquals((await ask(chunkedPost("uploads.test", "/up", 3000))).status, 200);
    assertEquals((await ask(declaredPost("uploads.test", "/up", 5000))).status, 413);
    assertEquals((await ask(chunkedPost("uploads.test", "/up", 5000))).status, 413);
    assertEquals((await ask(chunkedPost("uploads.test", "/any", 20_000))).status, 200);
    assertEquals((await ask(declaredPost("plain.test", "/", 1500))).status, 413);
    assertEquals((await ask(declaredPost("plain.test", "/", 1000))).status, 200);

    // Basic auth with the users of an Opaque Secret: 401 with the realm, then the right password
    // passes and the backend never sees the credentials.
    const guarded = seen();
    const anonymous = await ask(request("GET", "guarded.test", "/"));
    assertEquals([anonymous.status, headerValues(anonymous.headers, "www-authenticate")], [401, [
      'Basic realm="Staff only"',
    ]]);
    const wrong = await ask(
      request("GET", "guarded.test", "/", [`Authorization: Basic ${btoa("alice:wrong")}`]),
    );
    assertEquals(wrong.status, 401);
    assertEquals(seen(), guarded);
    const right = await ask(
      request("GET", "guarded.test", "/", [`Authorization: Basic ${btoa("alice:secret")}`]),
    );
    assertEquals(right.status, 200);
    const forwarded = backend.requests.at(-1)!;
    assertEquals(forwarded.headers.filter(([n]) => n.toLowerCase() === "authorization"), []);

    // An invalid annotation: that Ingress answers 503, the others serve.
    assertEquals((await ask(request("GET", "invalid.test", "/"))).status, 503);
    assertEquals((await ask(request("GET", "plain.test", "/"))).status, 200);
  } finally {
    await sluice.stop("SIGKILL");
    await backend.close();
    await Deno.remove(dir, { recursive: true });
  }
});
