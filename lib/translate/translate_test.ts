/**
 * Translation as a whole: malformed Ingresses reported at the faulty field,
 * their good paths kept (each run beside a good cluster whose route must stay
 * intact, `tests/support/good_cluster.ts`), malformed controller options,
 * objects from any iterable, determinism, certificate inspection once per
 * Secret, and access-control annotations answering 503 (also through a memo);
 * with `gatewayApi`, the Gateway API translation beside the Ingress one, its
 * backends resolved with theirs (the Gateway API rules themselves are in
 * `gateway/`). Random and mutated input is in `translate_fuzz_test.ts`.
 *
 * @module
 */
import {
  assert,
  assertEquals,
  assertMatch,
  assertStringIncludes,
} from "../../tests/support/assert.ts";
import type { Ingress } from "../k8s/objects.ts";
import { compileRouteTable } from "../routing/route_table.ts";
import { translate } from "./translate.ts";
import type { ClusterObjects, InspectCertificate, TranslateOptions } from "./translation.ts";
import { createTranslationMemo } from "./translation_memo.ts";
import {
  badIngress,
  issuesOf,
  onePath,
  PREFIX,
  routesOf,
  runBesideGood,
  SVC,
} from "../../tests/support/good_cluster.ts";

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
    annotations: { "nginx.ingress.kubernetes.io/auth-url": "https://auth.test/check" },
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
    [annotated, false, "sluice:refused-annotations"],
    [annotated, true, "good/web:80"],
    [annotated, false, "sluice:refused-annotations"],
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
      metadata: { namespace: "sluice", name: "refused-annotations" },
      spec: { ports: [{ port: 80 }] },
    }],
  }, { ...OPTIONS, defaultBackendService: "sluice/refused-annotations" });
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

/** [case, spec, issue fields expected (exactly, sorted), routes it still gives]. */
const MALFORMED_INGRESSES: [string, unknown, string[], number][] = [
  ["spec absent", undefined, ["spec"], 0],
  ["spec null", null, ["spec"], 0],
  ["spec an array", [], ["spec"], 0],
  ["spec a number", 7, ["spec"], 0],
  ["rules null, no defaultBackend", { rules: null }, ["spec"], 0],
  ["rules empty, no defaultBackend", { rules: [] }, ["spec"], 0],
  ["rules an object", { rules: { host: "bad.test" } }, ["spec", "spec.rules"], 0],
  [
    "rules an object beside a defaultBackend",
    {
      rules: { host: "bad.test" },
      defaultBackend: SVC({ number: 80 }),
    },
    ["spec.defaultBackend", "spec.rules"],
    0,
  ],
  ["http.paths an object", { rules: [{ host: "bad.test", http: { paths: {} } }] }, [
    "spec.rules[0].http.paths",
  ], 0],
  ["a path entry a string", { rules: [{ host: "bad.test", http: { paths: ["/"] } }] }, [
    "spec.rules[0].http.paths[0]",
  ], 0],
  ["backend absent", onePath({ path: "/", pathType: "Prefix" }), [
    "spec.rules[0].http.paths[0].backend",
  ], 0],
  ["backend null", onePath(PREFIX(null)), ["spec.rules[0].http.paths[0].backend"], 0],
  ["backend with neither service nor resource", onePath(PREFIX({})), [
    "spec.rules[0].http.paths[0].backend",
  ], 0],
  [
    "backend with both service and resource",
    onePath(PREFIX({
      ...SVC({ number: 80 }),
      resource: { kind: "Bucket", name: "b" },
    })),
    ["spec.rules[0].http.paths[0].backend"],
    0,
  ],
  ["service a string", onePath(PREFIX({ service: "web" })), [
    "spec.rules[0].http.paths[0].backend.service.name",
  ], 0],
  ["service name empty", onePath(PREFIX(SVC({ number: 80 }, ""))), [
    "spec.rules[0].http.paths[0].backend.service.name",
  ], 0],
  ["service name an object", onePath(PREFIX(SVC({ number: 80 }, { name: "web" }))), [
    "spec.rules[0].http.paths[0].backend.service.name",
  ], 0],
  ["port absent", onePath(PREFIX(SVC(undefined))), [
    "spec.rules[0].http.paths[0].backend.service.port",
  ], 0],
  ["port with neither name nor number", onePath(PREFIX(SVC({}))), [
    "spec.rules[0].http.paths[0].backend.service.port",
  ], 0],
  ["port a string", onePath(PREFIX(SVC("80"))), [
    "spec.rules[0].http.paths[0].backend.service.port",
  ], 0],
  ["port name empty and number null", onePath(PREFIX(SVC({ name: "", number: null }))), [
    "spec.rules[0].http.paths[0].backend.service.port",
  ], 0],
  ["port number 0", onePath(PREFIX(SVC({ number: 0 }))), [
    "spec.rules[0].http.paths[0].backend.service.port.number",
  ], 0],
  ["port number 70000", onePath(PREFIX(SVC({ number: 70000 }))), [
    "spec.rules[0].http.paths[0].backend.service.port.number",
  ], 0],
  ["port number negative", onePath(PREFIX(SVC({ number: -80 }))), [
    "spec.rules[0].http.paths[0].backend.service.port.number",
  ], 0],
  ["port number fractional", onePath(PREFIX(SVC({ number: 80.5 }))), [
    "spec.rules[0].http.paths[0].backend.service.port.number",
  ], 0],
  ["port number a string", onePath(PREFIX(SVC({ number: "80" }))), [
    "spec.rules[0].http.paths[0].backend.service.port.number",
  ], 0],
  ["port number an object", onePath(PREFIX(SVC({ number: { value: 80 } }))), [
    "spec.rules[0].http.paths[0].backend.service.port.number",
  ], 0],
  ["port name a number", onePath(PREFIX(SVC({ name: 80 }))), [
    "spec.rules[0].http.paths[0].backend.service.port.name",
  ], 0],
  ["port name uppercase", onePath(PREFIX(SVC({ name: "HTTP" }))), [
    "spec.rules[0].http.paths[0].backend.service.port.name",
  ], 0],
  ["port name of 1 MB", onePath(PREFIX(SVC({ name: "a".repeat(1 << 20) + "-" }))), [
    "spec.rules[0].http.paths[0].backend.service.port.name",
  ], 0],
  ["resource without kind", onePath(PREFIX({ resource: { name: "b" } })), [
    "spec.rules[0].http.paths[0].backend.resource",
  ], 0],
  ["resource a string", onePath(PREFIX({ resource: "bucket" })), [
    "spec.rules[0].http.paths[0].backend.resource",
  ], 0],
  ["pathType absent", onePath({ path: "/", backend: SVC({ number: 80 }) }), [
    "spec.rules[0].http.paths[0].pathType",
  ], 0],
  ["pathType null", onePath({ path: "/", pathType: null, backend: SVC({ number: 80 }) }), [
    "spec.rules[0].http.paths[0].pathType",
  ], 0],
  ["pathType Regex", onePath({ path: "/", pathType: "Regex", backend: SVC({ number: 80 }) }), [
    "spec.rules[0].http.paths[0].pathType",
  ], 0],
  ["path a number", onePath(PREFIX(SVC({ number: 80 }), 5)), [
    "spec.rules[0].http.paths[0].path",
  ], 0],
  ["path an object", onePath(PREFIX(SVC({ number: 80 }), { value: "/" })), [
    "spec.rules[0].http.paths[0].path",
  ], 0],
  ["path relative", onePath(PREFIX(SVC({ number: 80 }), "api")), [
    "spec.rules[0].http.paths[0].path",
  ], 0],
  [
    "Exact path with a dot segment of 1 MB",
    onePath({
      path: `/${"a".repeat(1 << 20)}/..`,
      pathType: "Exact",
      backend: SVC({ number: 80 }),
    }),
    ["spec.rules[0].http.paths[0].path"],
    0,
  ],
  ["host a number", onePath(PREFIX(SVC({ number: 80 })), 5), ["spec.rules[0].host"], 0],
  ["host an object", onePath(PREFIX(SVC({ number: 80 })), { name: "a" }), [
    "spec.rules[0].host",
  ], 0],
  ["host *", onePath(PREFIX(SVC({ number: 80 })), "*"), ["spec.rules[0].host"], 0],
  ["host *.*.a.com", onePath(PREFIX(SVC({ number: 80 })), "*.*.a.com"), [
    "spec.rules[0].host",
  ], 0],
  ["host a.*.com", onePath(PREFIX(SVC({ number: 80 })), "a.*.com"), ["spec.rules[0].host"], 0],
  ["host an IPv4 literal", onePath(PREFIX(SVC({ number: 80 })), "192.0.2.1"), [
    "spec.rules[0].host",
  ], 0],
  ["host an IPv4 literal with trailing dot", onePath(PREFIX(SVC({ number: 80 })), "192.0.2.1."), [
    "spec.rules[0].host",
  ], 0],
  ["host an IPv6 literal", onePath(PREFIX(SVC({ number: 80 })), "2001:db8::1"), [
    "spec.rules[0].host",
  ], 0],
  ["host a bracketed IPv6 literal", onePath(PREFIX(SVC({ number: 80 })), "[2001:db8::1]"), [
    "spec.rules[0].host",
  ], 0],
  ["host with a port", onePath(PREFIX(SVC({ number: 80 })), "bad.test:8080"), [
    "spec.rules[0].host",
  ], 0],
  ["host in Unicode (not punycode)", onePath(PREFIX(SVC({ number: 80 })), "bücher.test"), [
    "spec.rules[0].host",
  ], 0],
  ["host with a space", onePath(PREFIX(SVC({ number: 80 })), "bad .test"), [
    "spec.rules[0].host",
  ], 0],
  ["host with a slash", onePath(PREFIX(SVC({ number: 80 })), "bad.test/x"), [
    "spec.rules[0].host",
  ], 0],
  ["host of two dots", onePath(PREFIX(SVC({ number: 80 })), ".."), ["spec.rules[0].host"], 0],
  ["host of 100 KB", onePath(PREFIX(SVC({ number: 80 })), "a".repeat(100 * 1024)), [
    "spec.rules[0].host",
  ], 0],
  ["defaultBackend with neither service nor resource", { defaultBackend: {} }, [
    "spec.defaultBackend",
  ], 0],
  ["defaultBackend a string", { defaultBackend: "web" }, ["spec.defaultBackend"], 0],
  [
    "defaultBackend beside only invalid hosts",
    {
      rules: [{ host: "*" }],
      defaultBackend: SVC({ number: 80 }),
    },
    ["spec.defaultBackend", "spec.rules[0].host"],
    0,
  ],
  // With a defaultBackend (to a Service that does not exist: one more issue, the route stays).
  ["tls not a list", { tls: { hosts: ["bad.test"] }, defaultBackend: SVC({ number: 80 }) }, [
    "spec.defaultBackend",
    "spec.tls",
  ], 1],
  ["tls hosts with an IP and a wildcard-only", {
    tls: [{ hosts: ["192.0.2.1", "*", null, ""], secretName: "tls" }],
    defaultBackend: SVC({ number: 80 }),
  }, [
    "spec.defaultBackend",
    "spec.tls[0].hosts[0]",
    "spec.tls[0].hosts[1]",
    "spec.tls[0].hosts[2]",
    "spec.tls[0].hosts[3]",
    "spec.tls[0].secretName",
  ], 1],
  [
    "tls secretName in another namespace",
    {
      tls: [{ hosts: ["bad.test"], secretName: "good/tls" }],
      defaultBackend: SVC({ number: 80 }),
    },
    ["spec.defaultBackend", "spec.tls[0].secretName"],
    1,
  ],
  [
    "tls secretName an object",
    {
      tls: [{ hosts: ["bad.test"], secretName: { name: "tls" } }],
      defaultBackend: SVC({ number: 80 }),
    },
    ["spec.defaultBackend", "spec.tls[0].secretName"],
    1,
  ],
];

Deno.test("translate() reports each malformed Ingress at the faulty field and keeps the good route", () => {
  for (const [name, spec, fields, routes] of MALFORMED_INGRESSES) {
    const translation = runBesideGood(
      { ingresses: [badIngress("x", spec)], services: [] },
      {},
      name,
    );
    const issues = issuesOf(translation, "bad", "x");
    assertEquals(issues.map((i) => i.field), fields, name);
    for (const issue of issues) assertMatch(issue.message, /^[A-Z]/, name);
    assertEquals(routesOf(translation, "bad/x").length, routes, name);
  }
});

Deno.test("translate() reports a malformed Ingress's bad paths and keeps its good ones", () => {
  const paths = [
    PREFIX(SVC({ number: 80 }), "/ok"),
    PREFIX(SVC({ number: 0 }), "/zero"),
    PREFIX(null, "/null"),
    { path: "/x", pathType: "Regex", backend: SVC({ number: 80 }) },
    null,
    PREFIX(SVC({ name: "http" }), "/named"),
  ];
  const translation = runBesideGood({
    ingresses: [badIngress("mixed", { rules: [{ host: "mixed.test", http: { paths } }] })],
    services: [{ metadata: { namespace: "bad", name: "web" }, spec: { ports: [{ port: 80 }] } }],
  });
  assertEquals(routesOf(translation, "bad/mixed").map((r) => [r.path, r.backend]), [
    ["/named", "bad/web:http"],
    ["/ok", "bad/web:80"],
  ]);
  assertEquals(
    issuesOf(translation, "bad", "mixed").map((i) => i.field),
    [
      "spec.rules[0].http.paths[1].backend.service.port.number",
      "spec.rules[0].http.paths[2].backend",
      "spec.rules[0].http.paths[3].pathType",
      "spec.rules[0].http.paths[4]",
      // The named port exists on no Service port: the route stays and answers 503.
      "spec.rules[0].http.paths[5].backend",
      // No endpoints for bad/web:80 either.
      "spec.rules[0].http.paths[0].backend",
    ].sort(naturalCompare),
  );
});

function naturalCompare(a: string, b: string): number {
  return a.localeCompare(b, "en", { numeric: true });
}

Deno.test("translate() reports an Ingress whose metadata is missing, null or of the wrong type", () => {
  const cases: [string, unknown, string][] = [
    ["metadata null", null, "metadata.name"],
    ["metadata a string", "x", "metadata.name"],
    ["name empty", { namespace: "bad", name: "" }, "metadata.name"],
    ["name a number", { namespace: "bad", name: 5 }, "metadata.name"],
    ["namespace an object", { namespace: { a: 1 }, name: "n" }, "metadata.namespace"],
  ];
  for (const [what, metadata, field] of cases) {
    const ingress = {
      metadata,
      spec: { ingressClassName: "sluice", defaultBackend: SVC({ number: 80 }) },
    };
    const translation = runBesideGood({ ingresses: [ingress] }, {}, what);
    const issues = translation.issues.filter((i) => i.kind === "Ingress" && i.field === field);
    assertEquals(issues.length, 1, what);
    assertEquals(translation.routes.length, 1, what);
  }
});

// Was a bug: an Ingress whose rules name hosts but no path, without a defaultBackend, routed
// nothing and said nothing.
Deno.test({
  name: "translate() reports an Ingress whose rules give no route at all",
  fn() {
    const cases: [string, unknown][] = [
      ["http null", { rules: [{ host: "empty.test", http: null }] }],
      ["http a string", { rules: [{ host: "empty.test", http: "paths: [...]" }] }],
      ["http.paths empty", { rules: [{ host: "empty.test", http: { paths: [] } }] }],
      ["rule without http", { rules: [{ host: "empty.test" }] }],
    ];
    for (const [what, spec] of cases) {
      const translation = runBesideGood({ ingresses: [badIngress("empty", spec)] }, {}, what);
      assertEquals(routesOf(translation, "bad/empty").length, 0, what);
      assert(issuesOf(translation, "bad", "empty").length > 0, `silently dropped: ${what}`);
    }
  },
});

Deno.test("translate() reports malformed controller options instead of throwing", () => {
  const cases: [string, Partial<TranslateOptions>, string][] = [
    [
      "default backend with a bad port",
      { defaultBackendService: "good/web:http!" },
      "default-backend-service",
    ],
    [
      "default backend of 100 KB",
      { defaultBackendService: `good/${"a".repeat(100 * 1024)}` },
      "web",
    ],
    [
      "default certificate with a port",
      { defaultSslCertificate: "good/tls:443" },
      "default-ssl-certificate",
    ],
    ["default certificate of spaces", { defaultSslCertificate: "   " }, "default-ssl-certificate"],
  ];
  for (const [what, options, name] of cases) {
    const translation = runBesideGood({}, options, what);
    assert(translation.issues.some((i) => i.name === name || i.name.startsWith("a")), what);
    assertEquals(translation.defaultCertificate, undefined, what);
  }
});

// ---------------------------------------------------------------------------
// Gateway API beside Ingress (`gatewayApi`)
// ---------------------------------------------------------------------------

/**
 * GOOD, plus a Gateway `infra/gw` of our class on port 80 and an HTTPRoute `shop/web` for
 * `web.test`: `/` to `shop/web:8080`, mirrored to `shop/shadow:9090`; `/gone` to a Service
 * that does not exist (an issue, a 500 share, no backend). Both Services have one endpoint.
 */
const GATEWAY_CLUSTER = {
  ...GOOD,
  gatewayClasses: [{
    metadata: { name: "sluice", generation: 1 },
    spec: { controllerName: "sluice.dev/ingress-controller" },
  }],
  gateways: [{
    metadata: { namespace: "infra", name: "gw", generation: 1 },
    spec: {
      gatewayClassName: "sluice",
      listeners: [{
        name: "http",
        port: 80,
        protocol: "HTTP",
        allowedRoutes: { namespaces: { from: "All" } },
      }],
    },
  }],
  httpRoutes: [{
    metadata: {
      namespace: "shop",
      name: "web",
      generation: 1,
      creationTimestamp: "2030-01-01T00:00:00Z",
    },
    spec: {
      parentRefs: [{ name: "gw", namespace: "infra" }],
      hostnames: ["web.test"],
      rules: [
        {
          matches: [{ path: { type: "PathPrefix", value: "/" } }],
          filters: [{
            type: "RequestMirror",
            requestMirror: { backendRef: { name: "shadow", port: 9090 } },
          }],
          backendRefs: [{ name: "web", port: 8080 }],
        },
        {
          matches: [{ path: { type: "PathPrefix", value: "/gone" } }],
          backendRefs: [{ name: "ghost", port: 8080 }],
        },
      ],
    },
  }],
  services: [
    ...GOOD.services,
    {
      metadata: { namespace: "shop", name: "web" },
      spec: { ports: [{ name: "http", port: 8080 }] },
    },
    { metadata: { namespace: "shop", name: "shadow" }, spec: { ports: [{ port: 9090 }] } },
  ],
  endpointSlices: [
    ...GOOD.endpointSlices,
    ...[["web", "10.0.1.1", 8080, "http"], ["shadow", "10.0.2.1", 9090, ""]].map((
      [service, address, port, name],
    ) => ({
      metadata: {
        namespace: "shop",
        name: `${service}-1`,
        labels: { "kubernetes.io/service-name": service as string },
      },
      addressType: "IPv4",
      ports: [{ name: name as string, port: port as number }],
      endpoints: [{ addresses: [address as string] }],
    })),
  ],
} satisfies ClusterObjects;

Deno.test("translate() with gatewayApi returns the Gateway routes beside the Ingress ones, their Services resolved to endpoints", () => {
  const translation = translate(GATEWAY_CLUSTER, { ...OPTIONS, gatewayApi: true });
  // The Ingress routes are untouched.
  assertEquals(translation.routes.map((r) => `${r.host}${r.path} ${r.backend}`), [
    "good.test/ good/web:80",
  ]);
  const gateway = translation.gateway;
  assert(gateway !== undefined, "a gateway translation");
  assertEquals(gateway.routes.map((g) => `${g.port} ${g.hostname}`), ["80 web.test"]);
  const entries = gateway.routes[0]!.entries;
  assertEquals(entries.map((e) => `${e.route} ${e.matches.path.value}`), [
    "shop/web /gone",
    "shop/web /",
  ]);
  const byPath = new Map(entries.map((e) => [e.matches.path.value, e]));
  assertEquals(byPath.get("/")!.backends.map((b) => b.key), ["shop/web:8080"]);
  assertEquals(byPath.get("/")!.filters.map((f) => f.type === "RequestMirror" && f.backend.key), [
    "shop/shadow:9090",
  ]);
  assert(byPath.get("/gone")!.backends[0]!.invalid !== undefined, "the missing Service is invalid");

  // Every valid backend, mirrors included, is in `backends` with its endpoints; invalid ones are not.
  assertEquals(
    translation.backends.map((b) => ({ key: b.key, endpoints: b.endpoints })),
    [
      { key: "good/web:80", endpoints: [{ address: "10.0.0.1", port: 80 }] },
      { key: "shop/shadow:9090", endpoints: [{ address: "10.0.2.1", port: 9090 }] },
      { key: "shop/web:8080", endpoints: [{ address: "10.0.1.1", port: 8080 }] },
    ],
  );
  // Its issues are among everyone's, sorted; its own list is empty.
  assertEquals(gateway.issues, []);
  assertEquals(translation.issues.map((i) => `${i.kind} ${i.namespace}/${i.name}`), [
    "HTTPRoute shop/web",
  ]);
  assertStringIncludes(translation.issues[0]!.message, "shop/ghost");
  // The statuses to publish come along.
  assertEquals(gateway.statuses.httpRoutes.map((s) => s.route), ["shop/web"]);
  // Plain data, the same on a second run.
  assertEquals(structuredClone(translation), translation);
  assertEquals(translate(GATEWAY_CLUSTER, { ...OPTIONS, gatewayApi: true }), translation);
});

Deno.test("translate() without gatewayApi reads no Gateway API object", () => {
  for (const options of [OPTIONS, { ...OPTIONS, gatewayApi: false }]) {
    const translation = translate(GATEWAY_CLUSTER, options);
    assertEquals(translation.gateway, undefined);
    assertEquals("gateway" in translation, false);
    assertEquals(translation.backends.map((b) => b.key), ["good/web:80"]);
    assertEquals(translation.issues, []);
    assertEquals(translation, translate(GOOD, OPTIONS));
  }
});

Deno.test("translate() with gatewayApi serves only GatewayClasses of its controllerName", () => {
  const translation = translate(GATEWAY_CLUSTER, {
    ...OPTIONS,
    gatewayApi: true,
    controllerName: "example.com/other",
  });
  // The option is shared: the IngressClass "sluice" is not ours either.
  assertEquals(translation.routes, []);
  assertEquals(translation.gateway?.routes, []);
  assertEquals(translation.gateway?.classes, []);
  assertEquals(translation.backends.map((b) => b.key).filter((k) => k.startsWith("shop/")), []);
});

Deno.test("translate() with gatewayApi and no Gateway API objects adds an empty gateway translation only", () => {
  const translation = translate(GOOD, { ...OPTIONS, gatewayApi: true });
  assertEquals(translation.gateway?.routes, []);
  assertEquals(translation.gateway?.issues, []);
  const { gateway: _gateway, ...rest } = translation;
  assertEquals(rest, translate(GOOD, OPTIONS));
});

Deno.test("translate() with gatewayApi reports an HTTPRoute backend without ready endpoints once, on its route", () => {
  const cluster = {
    ...GATEWAY_CLUSTER,
    endpointSlices: GATEWAY_CLUSTER.endpointSlices.filter((s) => s.metadata.name !== "web-1"),
  };
  const translation = translate(cluster, { ...OPTIONS, gatewayApi: true });
  assertEquals(
    translation.backends.find((b) => b.key === "shop/web:8080")?.endpoints,
    [],
  );
  const issues = translation.issues.filter((i) => i.message.includes("shop/web"));
  assertEquals(issues.map((i) => `${i.kind} ${i.namespace}/${i.name} ${i.field}`), [
    "HTTPRoute shop/web spec.rules[0].backendRefs",
  ]);
  assertStringIncludes(issues[0]!.message, "answers 503");
});
