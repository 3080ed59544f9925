/**
 * Translation as a whole: robustness against malformed objects (seeded), determinism,
 * certificate inspection once per Secret.
 *
 * @module
 */

import { assert, assertEquals, assertStringIncludes } from "../../tests/support/assert.ts";
import type { Ingress } from "../k8s/objects.ts";
import { compileRouteTable } from "../routing/route_table.ts";
import { translate } from "./translate.ts";
import type { ClusterObjects, InspectCertificate, TranslateOptions } from "./translation.ts";
import { seededRandom } from "../../tests/support/seeded_random.ts";
import { createTranslationMemo } from "./translation_memo.ts";

const NOW = Date.parse("2030-01-01T00:00:00Z");
const NEVER: InspectCertificate = () => ({ ok: false, reason: "not in this test" });
const OPTIONS: TranslateOptions = { now: NOW, inspectCertificate: NEVER };

const GOOD_INGRESS: Ingress = {
  metadata: { namespace: "good", name: "web", creationTimestamp: "2024-01-01T00:00:00Z" },
  spec: {
    ingressClassName: "sluice",
    rules: [{
      host: "good.test",
      http: {
        paths: [{
          path: "/",
          pathType: "Prefix",
          backend: { service: { name: "web", port: { number: 80 } } },
        }],
      },
    }],
  },
};

const GOOD = {
  ingresses: [GOOD_INGRESS],
  ingressClasses: [{
    metadata: { name: "sluice" },
    spec: { controller: "sluice.dev/ingress-controller" },
  }],
  services: [{ metadata: { namespace: "good", name: "web" }, spec: { ports: [{ port: 80 }] } }],
  endpointSlices: [{
    metadata: { namespace: "good", name: "web-1", labels: { "kubernetes.io/service-name": "web" } },
    addressType: "IPv4",
    ports: [{ port: 80 }],
    endpoints: [{ addresses: ["10.0.0.1"] }],
  }],
  secrets: [],
} satisfies ClusterObjects;

const random = seededRandom;

const KEYS = [
  "metadata",
  "spec",
  "rules",
  "host",
  "http",
  "paths",
  "path",
  "pathType",
  "backend",
  "service",
  "name",
  "port",
  "number",
  "tls",
  "hosts",
  "secretName",
  "defaultBackend",
  "ingressClassName",
  "namespace",
  "annotations",
  "creationTimestamp",
  "ports",
  "endpoints",
  "addresses",
  "conditions",
  "ready",
  "serving",
  "terminating",
  "data",
  "stringData",
  "tls.crt",
  "tls.key",
  "resource",
  "kind",
  "labels",
  "addressType",
  "type",
  "externalName",
  "targetPort",
  "controller",
  "__proto__",
  "toString",
];
const STRINGS = [
  "",
  "/",
  "/a",
  "a",
  "Exact",
  "Prefix",
  "ImplementationSpecific",
  "sluice",
  "a.test",
  "*.a.test",
  "*",
  "web",
  "http",
  "IPv4",
  "IPv6",
  "ExternalName",
  "kubernetes.io/service-name",
  "g",
  "%%%",
  "-----BEGIN CERTIFICATE-----",
  "2000-01-01T00:00:00Z",
  "true",
  "10.0.0.9",
  "fd00::9",
];

function garbage(next: () => number, depth: number): unknown {
  const roll = next();
  if (depth <= 0 || roll < 0.3) {
    const scalars = [null, undefined, 0, -1, 80, 70000, 1.5, NaN, true, false];
    return next() < 0.5
      ? scalars[Math.floor(next() * scalars.length)]
      : STRINGS[Math.floor(next() * STRINGS.length)];
  }
  if (roll < 0.5) {
    return Array.from({ length: Math.floor(next() * 4) }, () => garbage(next, depth - 1));
  }
  const object: Record<string, unknown> = {};
  for (let i = Math.floor(next() * 5); i > 0; i--) {
    Object.defineProperty(object, KEYS[Math.floor(next() * KEYS.length)]!, {
      value: garbage(next, depth - 1),
      enumerable: true,
      configurable: true,
      writable: true,
    });
  }
  return object;
}

function garbageIngress(next: () => number, i: number): unknown {
  if (next() < 0.2) return garbage(next, 3);
  const spec = garbage(next, 5);
  if (spec !== null && typeof spec === "object" && !Array.isArray(spec) && next() < 0.8) {
    (spec as Record<string, unknown>).ingressClassName = "sluice";
  }
  const metadata: Record<string, unknown> = {
    namespace: "g",
    name: `g${i}`,
    creationTimestamp: "2000-01-01T00:00:00Z",
  };
  if (next() < 0.3) metadata.annotations = garbageAnnotations(next);
  return { metadata, spec };
}

const ANNOTATION_KEYS = [
  "nginx.ingress.kubernetes.io/auth-url",
  "nginx.ingress.kubernetes.io/enable-global-auth",
  "nginx.ingress.kubernetes.io/rewrite-target",
  "kubectl.kubernetes.io/last-applied-configuration",
  "__proto__",
  "toString",
];

function garbageAnnotations(next: () => number): unknown {
  if (next() < 0.3) return garbage(next, 2);
  const annotations: Record<string, unknown> = {};
  for (let i = Math.floor(next() * 4); i > 0; i--) {
    Object.defineProperty(
      annotations,
      ANNOTATION_KEYS[Math.floor(next() * ANNOTATION_KEYS.length)]!,
      {
        value: garbage(next, 1),
        enumerable: true,
        configurable: true,
        writable: true,
      },
    );
  }
  return annotations;
}

Deno.test("translate() never throws and keeps a good Ingress's routes beside random garbage (300 seeds)", () => {
  const inspectCertificate: InspectCertificate = (pems) => {
    if (pems.certPem === "-----BEGIN CERTIFICATE-----") throw new Error("inspector exploded");
    return {
      ok: true,
      notBefore: "2024-01-01T00:00:00Z",
      notAfter: "2124-01-01T00:00:00Z",
      dnsNames: [],
      fingerprint: "f",
    };
  };
  for (let seed = 1; seed <= 300; seed++) {
    const next = random(seed);
    const many = (make: (i: number) => unknown) =>
      Array.from({ length: 1 + Math.floor(next() * 6) }, (_, i) => make(i));
    const objects = {
      ingresses: [...GOOD.ingresses, ...many((i) => garbageIngress(next, i))],
      ingressClasses: [...GOOD.ingressClasses, ...many(() => garbage(next, 3))],
      services: [
        ...GOOD.services,
        ...many(() => ({ metadata: { namespace: "g", name: "web" }, spec: garbage(next, 4) })),
      ],
      endpointSlices: [...GOOD.endpointSlices, ...many(() => garbage(next, 5))],
      secrets: many(() => ({
        metadata: { namespace: "g", name: "s" },
        data: garbage(next, 2),
        stringData: garbage(next, 2),
      })),
    } as ClusterObjects;
    const options = {
      ...OPTIONS,
      inspectCertificate,
      defaultBackendService: next() < 0.5 ? "g/web" : "garbage",
      defaultSslCertificate: "g/s",
    };
    const translation = translate(objects, options);
    const match = compileRouteTable(translation).lookup("good.test", "/x");
    assertEquals(match?.backend.key, "good/web:80", `seed ${seed}`);
    assertEquals(match?.backend.endpoints, [{ address: "10.0.0.1", port: 80 }], `seed ${seed}`);
    assertEquals(
      JSON.parse(JSON.stringify(translation)),
      structuredClone(translation),
      `seed ${seed}`,
    );
  }
});

Deno.test("translate() reads objects from any iterable and skips non-objects", () => {
  const ingresses = new Map<string, Ingress>([["good/web", GOOD_INGRESS]]);
  const translation = translate({
    ...GOOD,
    ingresses: [null, 5, "x", ...ingresses.values()] as Iterable<Ingress>,
  }, OPTIONS);
  assertEquals(translation.routes.map((r) => r.ingress), ["good/web"]);
  assertEquals(translation.issues, []);
});

Deno.test("translate() inspects each referenced Secret once per translation", () => {
  let calls = 0;
  const inspectCertificate: InspectCertificate = () => {
    calls++;
    return {
      ok: true,
      notBefore: "2024-01-01T00:00:00Z",
      notAfter: "2124-01-01T00:00:00Z",
      dnsNames: [],
      fingerprint: "f",
    };
  };
  const ingress = (name: string): Ingress => ({
    metadata: { namespace: "good", name },
    spec: { ingressClassName: "sluice", tls: [{ hosts: [`${name}.test`], secretName: "tls" }] },
  });
  const translation = translate({
    ...GOOD,
    ingresses: [ingress("a"), ingress("b"), ingress("c")],
    secrets: [{
      metadata: { namespace: "good", name: "tls" },
      stringData: { "tls.crt": "c", "tls.key": "k" },
    }],
  }, { ...OPTIONS, inspectCertificate, defaultSslCertificate: "good/tls" });
  assertEquals(calls, 1);
  assertEquals(translation.certificates.map((c) => [c.secret, c.hosts]), [["good/tls", [
    "a.test",
    "b.test",
    "c.test",
  ]]]);
  assertEquals(translation.defaultCertificate?.secret, "good/tls");
});

Deno.test("translate() reports an inspector that throws instead of throwing itself", () => {
  const translation = translate({
    ...GOOD,
    ingresses: [{
      metadata: { namespace: "good", name: "a" },
      spec: { ingressClassName: "sluice", tls: [{ hosts: ["a.test"], secretName: "tls" }] },
    }],
    secrets: [{
      metadata: { namespace: "good", name: "tls" },
      stringData: { "tls.crt": "c", "tls.key": "k" },
    }],
  }, {
    ...OPTIONS,
    inspectCertificate: () => {
      throw new Error("boom");
    },
  });
  assertEquals(
    translation.issues.filter((i) => i.field.startsWith("spec.tls")).map((i) => i.message),
    [
      'Cannot use TLS Secret "good/tls": the certificate could not be inspected (boom); the default certificate is served instead',
    ],
  );
  assertEquals(translation.tlsHosts, ["a.test"]);
});

Deno.test("translate() gives the same output for the same input", () => {
  const first = JSON.stringify(translate(GOOD, OPTIONS));
  assertEquals(JSON.stringify(translate(structuredClone(GOOD), OPTIONS)), first);
  assert(first.includes('"good/web:80"'));
});

Deno.test("translate() reports an Ingress with 150,000 bad rules without throwing", () => {
  // One object can carry this many rules (about 5 bytes each in etcd); spreading
  // them into push() arguments would throw a RangeError out of translate().
  const rules = Array.from({ length: 150_000 }, () => ({ host: "bad_host" }));
  const huge: Ingress = {
    metadata: { namespace: "big", name: "huge" },
    spec: { ingressClassName: "sluice", rules },
  };
  const translation = translate({ ...GOOD, ingresses: [huge, GOOD_INGRESS] }, OPTIONS);
  assertEquals(translation.routes.map((r) => r.ingress), ["good/web"]);
  assertEquals(translation.issues.length, 150_000);
  assertEquals(translation.issues[149_999]?.field, "spec.rules[149999].host");
});

Deno.test("translate() names at most five hosts of a TLS entry in one issue message", () => {
  const hosts = Array.from({ length: 20_000 }, (_, i) => `h${i}.test`);
  const translation = translate({
    ...GOOD,
    ingresses: [{
      metadata: { namespace: "good", name: "tls" },
      spec: { ingressClassName: "sluice", tls: [{ hosts }] },
    }],
  }, OPTIONS);
  assertEquals(translation.issues.filter((i) => i.field !== "spec").map((i) => i.message), [
    'Cannot serve a certificate for "h0.test", "h1.test", "h2.test", "h3.test", "h4.test" ' +
    "and 19995 more: secretName is missing; the default certificate is served",
  ]);
  assertEquals(translation.tlsHosts.length, 20_000);
});

const AUTH_URL = "nginx.ingress.kubernetes.io/auth-url";

/** An Ingress of `good` routing `host` `path` to Service `web`, created at `created`. */
function routeIngress(
  name: string,
  options: {
    host: string;
    path: string;
    created: string;
    annotations?: Record<string, string>;
    service?: string;
  },
): Ingress {
  return {
    metadata: {
      namespace: "good",
      name,
      creationTimestamp: options.created,
      ...(options.annotations ? { annotations: options.annotations } : {}),
    },
    spec: {
      ingressClassName: "sluice",
      rules: [{
        host: options.host,
        http: {
          paths: [{
            path: options.path,
            pathType: "Prefix",
            backend: { service: { name: options.service ?? "web", port: { number: 80 } } },
          }],
        },
      }],
    },
  };
}

Deno.test("translate() answers 503 on the routes of an Ingress asking for access control, never falling through", () => {
  const admin = routeIngress("admin", {
    host: "good.test",
    path: "/admin",
    created: "2025-01-01T00:00:00Z",
    annotations: { [AUTH_URL]: "https://auth.test/check" },
  });
  const translation = translate({ ...GOOD, ingresses: [GOOD_INGRESS, admin] }, OPTIONS);
  const table = compileRouteTable(translation);
  // The protected path answers 503 instead of reaching good/web through the public "/".
  for (const path of ["/admin", "/admin/", "/admin/users"]) {
    const match = table.lookup("good.test", path);
    assertEquals(match?.ingress, "good/admin", path);
    assertEquals(match?.backend.endpoints, [], path);
    assertEquals(match?.backend.service, "", path);
  }
  // The other Ingress's routes on the same host are unaffected.
  for (const path of ["/", "/administrator", "/x"]) {
    assertEquals(table.lookup("good.test", path)?.backend.key, "good/web:80", path);
  }
  assertEquals(translation.issues.map((i) => [i.namespace, i.name, i.field]), [[
    "good",
    "admin",
    "metadata.annotations",
  ]]);
  assertStringIncludes(translation.issues[0]!.message, 'Cannot serve Ingress "good/admin"');
});

Deno.test("translate() keeps a refused Ingress's precedence, so a newer copy of its path does not serve it", () => {
  const refused = routeIngress("protected", {
    host: "good.test",
    path: "/",
    created: "2020-01-01T00:00:00Z",
    annotations: { "nginx.ingress.kubernetes.io/whitelist-source-range": "10.0.0.0/8" },
  });
  const translation = translate({ ...GOOD, ingresses: [GOOD_INGRESS, refused] }, OPTIONS);
  const match = compileRouteTable(translation).lookup("good.test", "/x");
  assertEquals([match?.ingress, match?.backend.endpoints], ["good/protected", []]);
  assertEquals(translation.issues.map((i) => [i.name, i.field]), [
    ["protected", "metadata.annotations"],
    ["web", "spec.rules[0].http.paths[0]"],
  ]);
});

Deno.test("translate() serves an Ingress asking for access control with ignoreAccessAnnotations", () => {
  const admin = routeIngress("admin", {
    host: "good.test",
    path: "/admin",
    created: "2025-01-01T00:00:00Z",
    annotations: { [AUTH_URL]: "https://auth.test/check" },
  });
  const translation = translate(
    { ...GOOD, ingresses: [GOOD_INGRESS, admin] },
    { ...OPTIONS, ignoreAccessAnnotations: true },
  );
  const match = compileRouteTable(translation).lookup("good.test", "/admin");
  assertEquals([match?.ingress, match?.backend.key], ["good/admin", "good/web:80"]);
  assertEquals(translation.backends.map((b) => b.key), ["good/web:80"]);
  assertStringIncludes(translation.issues[0]!.message, "access control not enforced");
});

Deno.test("translate() with a memo follows annotations being added, waived and removed", () => {
  const memo = createTranslationMemo();
  const plain = routeIngress("admin", {
    host: "good.test",
    path: "/admin",
    created: "2025-01-01T00:00:00Z",
  });
  const annotated: Ingress = {
    ...plain,
    metadata: { ...plain.metadata, annotations: { [AUTH_URL]: "https://auth.test/check" } },
  };
  const steps: [Ingress, boolean, string][] = [
    [plain, false, "good/web:80"],
    [annotated, false, "sluice:access-control-not-enforced"],
    [annotated, true, "good/web:80"],
    [annotated, false, "sluice:access-control-not-enforced"],
    [plain, false, "good/web:80"],
  ];
  for (const [ingress, ignoreAccessAnnotations, backend] of steps) {
    const translation = translate(
      { ...GOOD, ingresses: [GOOD_INGRESS, ingress] },
      { ...OPTIONS, memo, ignoreAccessAnnotations },
    );
    const match = compileRouteTable(translation).lookup("good.test", "/admin");
    assertEquals(match?.backend.key, backend, `${ingress === plain} ${ignoreAccessAnnotations}`);
  }
});

Deno.test("translate() keeps the refused backend apart from a Service of the same-looking name", () => {
  // A key with a "/" could collide with `namespace/name` of a real Service (here the
  // controller-wide default backend) and send refused routes to it.
  const refused = routeIngress("admin", {
    host: "good.test",
    path: "/admin",
    created: "2025-01-01T00:00:00Z",
    annotations: { [AUTH_URL]: "x" },
  });
  const translation = translate({
    ...GOOD,
    ingresses: [GOOD_INGRESS, refused],
    services: [...GOOD.services, {
      metadata: { namespace: "sluice", name: "access-control-not-enforced" },
      spec: { ports: [{ port: 80 }] },
    }],
  }, { ...OPTIONS, defaultBackendService: "sluice/access-control-not-enforced" });
  const table = compileRouteTable(translation);
  assertEquals(table.lookup("good.test", "/admin")?.backend.endpoints, []);
  assertEquals(new Set(translation.backends.map((b) => b.key)).size, translation.backends.length);
});

Deno.test("translate() answers 503 for an Ingress whose annotations cannot be read", () => {
  const annotations = {};
  Object.defineProperty(annotations, AUTH_URL, {
    enumerable: true,
    get() {
      throw new Error("unreadable");
    },
  });
  const broken = routeIngress("admin", {
    host: "good.test",
    path: "/admin",
    created: "2025-01-01T00:00:00Z",
  });
  (broken.metadata as Record<string, unknown>).annotations = annotations;
  const translation = translate({ ...GOOD, ingresses: [GOOD_INGRESS, broken] }, OPTIONS);
  const table = compileRouteTable(translation);
  assertEquals(table.lookup("good.test", "/admin")?.backend.endpoints, []);
  assertEquals(table.lookup("good.test", "/")?.backend.key, "good/web:80");
  assertEquals(translation.issues.map((i) => i.message), [
    'Cannot read annotations: unexpected error "unreadable"; its routes answer 503',
  ]);
});
