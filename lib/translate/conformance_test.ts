/**
 * Conformance review: does the translation mean what the Kubernetes Ingress
 * API says, and what users of ingress-nginx expect?
 *
 * Every case runs the real translation and the compiled tables (routes and
 * certificates), and states its source: the Kubernetes Ingress docs ("Path
 * types" examples table, "Hostname wildcards", "Default IngressClass"), the
 * API reference (IngressTLS, EndpointConditions…), the ingress-controller
 * conformance features (path_rules, host_rules, default_backend,
 * ingress_class), or a deliberate, documented difference from ingress-nginx.
 *
 * @module
 */

import { assert, assertEquals } from "../../tests/support/assert.ts";
import type {
  EndpointSlice,
  EndpointSliceEndpoint,
  Ingress,
  IngressClass,
  Secret,
  Service,
  ServicePort,
} from "../k8s/objects.ts";
import { compileCertificateTable } from "../routing/certificate_table.ts";
import { createReferenceMatcher } from "../../tests/support/reference_matcher.ts";
import { compileRouteTable } from "../routing/route_table.ts";
import type { RouteTable } from "../routing/snapshot.ts";
import { createCertificateInspector } from "../tls/certificate_inspector.ts";
import { normalizeRoutePath } from "./paths.ts";
import { translate } from "./translate.ts";
import type { ClusterObjects, TranslateOptions, Translation } from "./translation.ts";

// ---------------------------------------------------------------------------
// A small cluster builder
// ---------------------------------------------------------------------------

const NS = "conf";
const OURS: IngressClass = {
  metadata: { name: "sluice" },
  spec: { controller: "sluice.dev/ingress-controller" },
};
const NGINX: IngressClass = {
  metadata: { name: "nginx" },
  spec: { controller: "k8s.io/ingress-nginx" },
};

/** `[path, pathType, service]`; a service `svc:port-name` names its port, else port number 80. */
type PathSketch = readonly [path: string | undefined, pathType: string, service: string];

function backendOf(service: string) {
  const [name, portName] = service.split(":");
  return {
    service: {
      name: name!,
      port: portName === undefined ? { number: 80 } : { name: portName },
    },
  };
}

function rule(host: string, ...paths: PathSketch[]) {
  return {
    ...(host === "" ? {} : { host }),
    http: {
      paths: paths.map(([path, pathType, service]) => ({
        ...(path === undefined ? {} : { path }),
        pathType,
        backend: backendOf(service),
      })),
    },
  };
}

let created = 0;
/** An Ingress of class `sluice` in namespace `conf`, each one a second younger than the last. */
function ingress(name: string, spec: Record<string, unknown>, meta: Record<string, unknown> = {}) {
  created++;
  return {
    metadata: {
      namespace: NS,
      name,
      creationTimestamp: new Date(Date.UTC(2024, 0, 1, 0, 0, created)).toISOString(),
      ...meta,
    },
    spec: { ingressClassName: "sluice", ...spec },
  } as Ingress;
}

/** A Service with one TCP port `http` 80 → 8080 and a slice with one ready endpoint. */
function serviceWithEndpoint(name: string, address: string): [Service, EndpointSlice] {
  return [
    {
      metadata: { namespace: NS, name },
      spec: { ports: [{ name: "http", port: 80, targetPort: 8080 }] },
    },
    {
      metadata: {
        namespace: NS,
        name: `${name}-1`,
        labels: { "kubernetes.io/service-name": name },
      },
      addressType: "IPv4",
      ports: [{ name: "http", port: 8080 }],
      endpoints: [{ addresses: [address] }],
    },
  ];
}

interface World {
  readonly translation: Translation;
  readonly routes: RouteTable;
  /** `service` (200), `503 service`, or `404`; checked against the reference matcher. */
  answer(host: string, path: string): string;
  /** Whether the request's host is served over TLS (HTTP redirected, HSTS sent). */
  tls(host: string, path?: string): boolean | undefined;
  /** The certificate source the SNI resolver picks. */
  certificateFor(serverName: string | undefined): string;
  /** Issues as `namespace/name field: message`. */
  issues(): string[];
}

const inspectCertificate = createCertificateInspector();
const NOW = Date.parse("2030-01-01T00:00:00Z");

/**
 * Translates the objects; every Service an Ingress names that is not given
 * exists with one ready endpoint (so only the cases about Services build
 * their own).
 */
function world(
  objects: ClusterObjects & { readonly ingresses: readonly Ingress[] },
  options: Omit<TranslateOptions, "now" | "inspectCertificate"> = {},
): World {
  const services = [...(objects.services ?? [])];
  const slices = [...(objects.endpointSlices ?? [])];
  const given = new Set(services.map((s) => s.metadata?.name));
  const named = new Set<string>();
  const walk = (value: unknown): void => {
    if (value === null || typeof value !== "object") return;
    const service = (value as { service?: { name?: unknown } }).service;
    if (typeof service?.name === "string") named.add(service.name);
    for (const child of Object.values(value)) walk(child);
  };
  for (const ing of objects.ingresses) walk(ing.spec);
  let n = 0;
  for (const name of [...named].sort()) {
    if (given.has(name)) continue;
    const [service, slice] = serviceWithEndpoint(name, `10.1.0.${++n}`);
    services.push(service);
    slices.push(slice);
  }
  const translation = translate({
    ingressClasses: [OURS, NGINX],
    ...objects,
    services,
    endpointSlices: slices,
  }, { ...options, now: NOW, inspectCertificate });
  const routes = compileRouteTable(translation);
  const reference = createReferenceMatcher(translation);
  const certificates = compileCertificateTable(translation, {
    defaultCertificate: { source: "sluice/self-signed", certPem: "-", keyPem: "-" },
  });
  return {
    translation,
    routes,
    answer(host, path) {
      const match = routes.lookup(host, path);
      assertEquals(match, reference.lookup(host, path), `reference matcher for ${host} ${path}`);
      if (match === undefined) return "404";
      const name = match.backend.service.split("/")[1] ?? match.backend.key;
      return match.backend.endpoints.length > 0 ? name : `503 ${name}`;
    },
    tls: (host, path = "/") => routes.lookup(host, path)?.tls,
    certificateFor: (serverName) => certificates.resolve(serverName).source,
    issues: () =>
      translation.issues.map((i) => `${i.namespace}/${i.name} ${i.field}: ${i.message}`),
  };
}

/** Runs `[host, path, expected]` rows against one world, reporting every wrong row at once. */
function expectAnswers(w: World, rows: readonly (readonly [string, string, string])[]): void {
  const wrong = rows
    .map(([host, path, expected]) => [host, path, expected, w.answer(host, path)])
    .filter(([, , expected, actual]) => expected !== actual)
    .map(([host, path, expected, actual]) => `${host}${path}: want ${expected}, got ${actual}`);
  assertEquals(wrong, []);
}

// ---------------------------------------------------------------------------
// Paths: the Kubernetes docs' examples table, row by row
// ---------------------------------------------------------------------------

// Kubernetes docs, Ingress, "Examples" under "Path types": [kind, paths, request, matches?].
// The matching path is the one named in the last column, `-` for no match.
const DOCS_TABLE: readonly (readonly [PathSketch[], string, string])[] = [
  [[["/", "Prefix", "root"]], "/", "root"], // Prefix / (all paths)
  [[["/", "Prefix", "root"]], "/anything/at/all", "root"],
  [[["/foo", "Exact", "foo"]], "/foo", "foo"], // Exact /foo, /foo: yes
  [[["/foo", "Exact", "foo"]], "/bar", "-"], // Exact /foo, /bar: no
  [[["/foo", "Exact", "foo"]], "/foo/", "-"], // Exact /foo, /foo/: no
  [[["/foo/", "Exact", "foo"]], "/foo", "-"], // Exact /foo/, /foo: no
  [[["/foo", "Prefix", "foo"]], "/foo", "foo"], // Prefix /foo, /foo, /foo/: yes
  [[["/foo", "Prefix", "foo"]], "/foo/", "foo"],
  [[["/foo/", "Prefix", "foo"]], "/foo", "foo"], // Prefix /foo/, /foo, /foo/: yes
  [[["/foo/", "Prefix", "foo"]], "/foo/", "foo"],
  [[["/aaa/bb", "Prefix", "bb"]], "/aaa/bbb", "-"], // Prefix /aaa/bb, /aaa/bbb: no
  [[["/aaa/bbb", "Prefix", "bbb"]], "/aaa/bbb", "bbb"], // Prefix /aaa/bbb, /aaa/bbb: yes
  [[["/aaa/bbb/", "Prefix", "bbb"]], "/aaa/bbb", "bbb"], // ignores trailing slash
  [[["/aaa/bbb", "Prefix", "bbb"]], "/aaa/bbb/", "bbb"], // matches trailing slash
  [[["/aaa/bbb", "Prefix", "bbb"]], "/aaa/bbb/ccc", "bbb"], // matches subpath
  [[["/aaa/bbb", "Prefix", "bbb"]], "/aaa/bbbxyz", "-"], // not a string prefix match
  [[["/", "Prefix", "root"], ["/aaa", "Prefix", "aaa"]], "/aaa/ccc", "aaa"], // longest
  [
    [["/", "Prefix", "root"], ["/aaa", "Prefix", "aaa"], ["/aaa/bbb", "Prefix", "bbb"]],
    "/aaa/bbb",
    "bbb",
  ],
  [
    [["/", "Prefix", "root"], ["/aaa", "Prefix", "aaa"], ["/aaa/bbb", "Prefix", "bbb"]],
    "/ccc",
    "root",
  ],
  [[["/aaa", "Prefix", "aaa"]], "/ccc", "-"], // Prefix /aaa, /ccc: no (default backend)
  [[["/foo", "Prefix", "prefix"], ["/foo", "Exact", "exact"]], "/foo", "exact"], // Mixed
  [[["/foo", "Exact", "exact"], ["/foo", "Prefix", "prefix"]], "/foo", "exact"], // any order
];

Deno.test("lookup() answers every row of the Kubernetes docs' path examples table", () => {
  const wrong: string[] = [];
  DOCS_TABLE.forEach(([paths, request, expected], i) => {
    const w = world({
      ingresses: [ingress(`docs-${i}`, { rules: [rule("docs.test", ...paths)] })],
    });
    const actual = w.answer("docs.test", request);
    const want = expected === "-" ? "404" : expected;
    if (actual !== want) wrong.push(`row ${i} ${request}: want ${want}, got ${actual}`);
    assertEquals(w.issues(), [], `row ${i}`);
  });
  assertEquals(wrong, []);
});

Deno.test("lookup() passes the conformance suite's path_rules scenarios", () => {
  const w = world({
    ingresses: [ingress("path-rules", {
      rules: [
        rule("exact-path-rules", ["/foo", "Exact", "foo-exact"]),
        rule(
          "prefix-path-rules",
          ["/foo", "Prefix", "foo-prefix"],
          ["/aaa/bbb", "Prefix", "aaa-slash-bbb-prefix"],
          ["/aaa", "Prefix", "aaa-prefix"],
        ),
        rule("mixed-path-rules", ["/foo", "Prefix", "foo-prefix"], ["/foo", "Exact", "foo-exact"]),
        rule(
          "trailing-slash-path-rules",
          ["/aaa/bbb/", "Prefix", "aaa-slash-bbb-slash-prefix"],
          ["/foo/", "Exact", "foo-slash-exact"],
        ),
      ],
    })],
  });
  expectAnswers(w, [
    ["exact-path-rules", "/foo", "foo-exact"],
    ["exact-path-rules", "/foo/", "404"],
    ["exact-path-rules", "/FOO", "404"],
    ["exact-path-rules", "/bar", "404"],
    ["prefix-path-rules", "/foo", "foo-prefix"],
    ["prefix-path-rules", "/foo/", "foo-prefix"],
    ["prefix-path-rules", "/FOO", "404"],
    ["prefix-path-rules", "/aaa/bbb", "aaa-slash-bbb-prefix"],
    ["prefix-path-rules", "/aaa/bbb/ccc", "aaa-slash-bbb-prefix"],
    ["prefix-path-rules", "/aaa/ccc", "aaa-prefix"],
    ["prefix-path-rules", "/aaaccc", "404"],
    ["mixed-path-rules", "/foo", "foo-exact"],
    ["mixed-path-rules", "/foo/", "foo-prefix"],
    ["trailing-slash-path-rules", "/aaa/bbb", "aaa-slash-bbb-slash-prefix"],
    ["trailing-slash-path-rules", "/aaa/bbb/", "aaa-slash-bbb-slash-prefix"],
    ["trailing-slash-path-rules", "/foo", "404"],
    ["trailing-slash-path-rules", "/foo/", "foo-slash-exact"],
  ]);
});

Deno.test("lookup() gives the longest match first, then Exact, across Ingresses and namespaces", () => {
  // "Multiple matches": longest matching path first, then Exact over Prefix; rules of
  // one host merge across Ingresses, so precedence must not depend on which Ingress.
  const w = world({
    ingresses: [
      ingress("a", {
        rules: [rule("m.test", ["/", "Prefix", "root"], ["/api", "Exact", "api-exact"])],
      }),
      ingress("b", { rules: [rule("m.test", ["/api", "Prefix", "api-prefix"])] }),
      ingress("c", {
        rules: [rule("m.test", ["/api/v1", "Prefix", "v1"], ["/api/v1/x", "Exact", "x"])],
      }),
    ],
  });
  expectAnswers(w, [
    ["m.test", "/api", "api-exact"],
    ["m.test", "/api/", "api-prefix"],
    ["m.test", "/api/v2", "api-prefix"],
    ["m.test", "/api/v1", "v1"],
    ["m.test", "/api/v1/x", "x"],
    ["m.test", "/api/v1/x/", "v1"],
    ["m.test", "/apiv1", "root"],
  ]);
});

Deno.test("lookup() ignores the query string and matches escapes in normal form", () => {
  const w = world({
    ingresses: [ingress("q", {
      rules: [rule("q.test", ["/foo", "Exact", "foo"], ["/~user", "Prefix", "user"])],
    })],
  });
  expectAnswers(w, [
    ["q.test", "/foo?x=1", "foo"],
    ["q.test", "/foo?", "foo"],
    ["q.test", "/~user/x", "user"],
    // A request path reaches the table in normal form ("%7E" decoded by the proxy).
    ["q.test", "/%7Euser/x", "404"],
  ]);
});

// ---------------------------------------------------------------------------
// ImplementationSpecific
// ---------------------------------------------------------------------------

Deno.test("ImplementationSpecific paths match as element-wise prefixes, an absent path as /", () => {
  // Kubernetes: "Interpretation is up to the IngressClass". Sluice: Prefix (README).
  // ingress-nginx differs: its plain nginx location is a string prefix (/foo matches
  // /foobar) — a documented difference.
  const w = world({
    ingresses: [ingress("is", {
      rules: [
        rule("is.test", ["/foo", "ImplementationSpecific", "foo"], ["/foo", "Exact", "exact"]),
        rule("all.test", [undefined, "ImplementationSpecific", "all"]),
      ],
    })],
  });
  expectAnswers(w, [
    ["is.test", "/foo", "exact"],
    ["is.test", "/foo/", "foo"],
    ["is.test", "/foo/bar", "foo"],
    ["is.test", "/foobar", "404"],
    ["all.test", "/", "all"],
    ["all.test", "/x/y", "all"],
  ]);
});

Deno.test("ImplementationSpecific and Prefix of the same path are one route: the oldest wins", () => {
  const w = world({
    ingresses: [
      ingress("old", { rules: [rule("c.test", ["/app/", "ImplementationSpecific", "old"])] }),
      ingress("new", { rules: [rule("c.test", ["/app", "Prefix", "new"])] }),
    ],
  });
  expectAnswers(w, [["c.test", "/app/x", "old"]]);
  assertEquals(w.issues().length, 1);
  assert(w.issues()[0]!.startsWith("conf/new spec.rules[0].http.paths[0]:"), w.issues()[0]);
});

// Was a bug: an ImplementationSpecific path holding "//" or a dot segment (which the
// apiserver accepts for that type only) could never match, since requests are
// matched in normal form (slashes merged, dot segments resolved); the rule was
// silently dead. Rule paths are now brought to the same normal form.
Deno.test("ImplementationSpecific paths with // or dot segments match in normal form, like requests", () => {
  const w = world({
    ingresses: [ingress("dots", {
      rules: [rule(
        "n.test",
        ["/api//v1", "ImplementationSpecific", "merged"],
        ["/static/./img", "ImplementationSpecific", "dot"],
        ["/old/../new", "ImplementationSpecific", "dotdot"],
        ["/win\\dows", "ImplementationSpecific", "backslash"],
      )],
    })],
  });
  assertEquals(w.issues(), []);
  // Request paths as the proxy hands them to the table.
  const routed = (path: string) => normalizeRoutePath(path)!;
  expectAnswers(w, [
    ["n.test", routed("/api//v1/x"), "merged"],
    ["n.test", routed("/api/v1"), "merged"],
    ["n.test", routed("/static/./img/a.png"), "dot"],
    ["n.test", routed("/static/img"), "dot"],
    ["n.test", routed("/new"), "dotdot"],
    ["n.test", routed("/old/x"), "404"],
    ["n.test", routed("/win/dows/x"), "backslash"],
  ]);
});

// Was a bug: an Exact or Prefix path spelling a dot segment with escapes (`/a/%2e%2e/b`
// passes the apiserver's validation, which looks for `/../` only) never matched.
Deno.test("Exact and Prefix paths with escaped dot segments match in normal form, like requests", () => {
  const w = world({
    ingresses: [ingress("esc", {
      rules: [rule("e.test", ["/a/%2e%2e/b", "Exact", "b"], ["/x/%2E/y", "Prefix", "y"])],
    })],
  });
  const routed = (path: string) => normalizeRoutePath(path)!;
  expectAnswers(w, [
    ["e.test", routed("/a/%2e%2e/b"), "b"],
    ["e.test", routed("/b"), "b"],
    ["e.test", routed("/x/%2e/y/z"), "y"],
  ]);
});

Deno.test("paths equal in normal form are one route: the oldest Ingress wins", () => {
  const w = world({
    ingresses: [
      ingress("first", { rules: [rule("d.test", ["/a/b", "Prefix", "first"])] }),
      ingress("second", {
        rules: [rule("d.test", ["/a//b/", "ImplementationSpecific", "second"])],
      }),
    ],
  });
  expectAnswers(w, [["d.test", "/a/b/c", "first"]]);
  assertEquals(w.issues().map((i) => i.split(":")[0]), [
    `${NS}/second spec.rules[0].http.paths[0]`,
  ]);
});

// ---------------------------------------------------------------------------
// Hosts
// ---------------------------------------------------------------------------

Deno.test("lookup() passes the conformance suite's host_rules scenarios", () => {
  const w = world({
    ingresses: [ingress("host-rules", {
      tls: [{ hosts: ["foo.bar.com"], secretName: "conformance-tls" }],
      rules: [
        rule("*.foo.com", ["/", "Prefix", "wildcard-foo-com"]),
        rule("foo.bar.com", ["/", "Prefix", "foo-bar-com:http"]),
      ],
    })],
    services: serviceWithEndpoint("foo-bar-com", "10.2.0.1").slice(0, 1) as Service[],
    endpointSlices: serviceWithEndpoint("foo-bar-com", "10.2.0.1").slice(1) as EndpointSlice[],
  });
  expectAnswers(w, [
    ["foo.bar.com", "/", "foo-bar-com"], // by port name
    ["subdomain.bar.com", "/", "404"],
    ["bar.foo.com", "/", "wildcard-foo-com"],
    ["baz.bar.foo.com", "/", "404"],
    ["foo.com", "/", "404"],
  ]);
  assertEquals(w.tls("foo.bar.com"), true);
  assertEquals(w.tls("bar.foo.com"), false);
});

Deno.test("lookup() reads request hosts case-insensitively, without port or trailing dot", () => {
  const w = world({
    ingresses: [ingress("h", {
      rules: [
        rule("Shop.Example.COM", ["/", "Prefix", "shop"]),
        rule("*.Example.com", ["/", "Prefix", "wild"]),
        rule("", ["/", "Prefix", "any"]),
      ],
    })],
  });
  expectAnswers(w, [
    ["shop.example.com", "/", "shop"],
    ["SHOP.EXAMPLE.COM:8443", "/", "shop"],
    ["shop.example.com.", "/", "shop"],
    ["shop.example.com.:80", "/", "shop"],
    ["Other.Example.Com", "/", "wild"],
    ["a.shop.example.com", "/", "any"],
    ["example.com", "/", "any"],
    ["10.0.0.1:8080", "/", "any"],
    ["[2001:db8::1]:8080", "/", "any"],
    ["", "/", "any"],
  ]);
});

Deno.test("an exact host beats a wildcard, and a host's unmatched path falls through (documented)", () => {
  // Kubernetes leaves fall-through open; Sluice falls through exact host → wildcard →
  // rules without host (README "Fall-through"), where ingress-nginx picks one server
  // by host and answers its default backend. A host with its own default backend
  // stops the fall-through.
  const w = world({
    ingresses: [
      ingress("exact", { rules: [rule("a.foo.com", ["/api", "Prefix", "exact-api"])] }),
      ingress("wild", {
        rules: [rule("*.foo.com", ["/", "Prefix", "wild-root"], ["/api", "Prefix", "wild-api"])],
      }),
      ingress("any", { rules: [rule("", ["/admin", "Prefix", "any-admin"])] }),
      ingress("stop", {
        defaultBackend: backendOf("stop-default"),
        rules: [rule("b.foo.com", ["/api", "Prefix", "stop-api"])],
      }),
    ],
  });
  expectAnswers(w, [
    ["a.foo.com", "/api/x", "exact-api"],
    ["a.foo.com", "/other", "wild-root"],
    ["c.foo.com", "/api", "wild-api"],
    ["c.foo.com", "/admin", "wild-root"],
    ["x.test", "/admin", "any-admin"],
    ["b.foo.com", "/api", "stop-api"],
    ["b.foo.com", "/other", "stop-default"],
    ["b.foo.com", "/admin", "stop-default"],
  ]);
});

// ---------------------------------------------------------------------------
// Default backends
// ---------------------------------------------------------------------------

Deno.test("an Ingress with only a defaultBackend takes every host and path (conformance default_backend)", () => {
  const w = world({
    ingresses: [ingress("default-backend", { defaultBackend: backendOf("echo-service") })],
  });
  expectAnswers(w, [
    ["my-host", "/", "echo-service"],
    ["my-host", "/sub-path", "echo-service"],
    ["some-host", "/resource", "echo-service"],
    ["", "/resource", "echo-service"],
  ]);
  const match = w.routes.lookup("my-host", "/");
  assertEquals([match?.pathType, match?.ingress], ["Default", `${NS}/default-backend`]);
});

Deno.test("rules beat a stand-alone defaultBackend; the controller default comes last", () => {
  const w = world({
    ingresses: [
      ingress("catch-all", { defaultBackend: backendOf("catch-all") }),
      ingress("site", { rules: [rule("site.test", ["/app", "Prefix", "app"])] }),
    ],
    services: [{
      metadata: { namespace: "kube", name: "fallback" },
      spec: { ports: [{ port: 80 }] },
    }],
  }, { defaultBackendService: "kube/fallback" });
  expectAnswers(w, [
    ["site.test", "/app", "app"],
    ["site.test", "/other", "catch-all"],
    ["elsewhere.test", "/", "catch-all"],
  ]);

  const without = world({
    ingresses: [ingress("site", { rules: [rule("site.test", ["/app", "Prefix", "app"])] })],
    services: [{
      metadata: { namespace: "kube", name: "fallback" },
      spec: { ports: [{ port: 80 }] },
    }],
  }, { defaultBackendService: "kube/fallback" });
  // No endpoints for the controller's default backend: it still answers (503), never 404.
  expectAnswers(without, [["site.test", "/other", "503 fallback"], [
    "x.test",
    "/",
    "503 fallback",
  ]]);
});

Deno.test("an Ingress's defaultBackend serves unmatched paths of its wildcard host only", () => {
  const w = world({
    ingresses: [ingress("wd", {
      defaultBackend: backendOf("wild-default"),
      rules: [rule("*.w.test", ["/api", "Prefix", "api"])],
    })],
  });
  expectAnswers(w, [
    ["a.w.test", "/api", "api"],
    ["a.w.test", "/else", "wild-default"],
    ["w.test", "/else", "404"],
    ["a.b.w.test", "/else", "404"],
  ]);
});

// ---------------------------------------------------------------------------
// IngressClass selection
// ---------------------------------------------------------------------------

Deno.test("IngressClass selection follows spec.ingressClassName, then the annotation, then the default class", () => {
  const withDefault = (ingressClass: IngressClass, value = "true"): IngressClass => ({
    ...ingressClass,
    metadata: {
      ...ingressClass.metadata,
      annotations: { "ingressclass.kubernetes.io/is-default-class": value },
    },
  });
  const plain = (className?: string, annotation?: string): Ingress => {
    const ing = ingress(
      "i",
      {
        defaultBackend: backendOf("web"),
        ...(className === undefined ? {} : { ingressClassName: className }),
      },
      annotation === undefined
        ? {}
        : { annotations: { "kubernetes.io/ingress.class": annotation } },
    );
    if (className === undefined) {
      delete (ing.spec as { ingressClassName?: string }).ingressClassName;
    }
    return ing;
  };
  const OURS_WITH_PARAMS: IngressClass = {
    metadata: { name: "sluice-internal" },
    spec: {
      controller: "sluice.dev/ingress-controller",
      parameters: { apiGroup: "example.com", kind: "SluiceParams", name: "internal" },
    },
  };
  const cases: [string, IngressClass[], Ingress, boolean][] = [
    ["ingressClassName naming our class", [OURS], plain("sluice"), true],
    ["ingressClassName naming another controller's class", [OURS, NGINX], plain("nginx"), false],
    // The deprecated annotation is read only when ingressClassName is absent (both set:
    // the field wins, as in ingress-nginx and the Kubernetes docs).
    [
      "field for another class wins over our annotation",
      [OURS, NGINX],
      plain("nginx", "sluice"),
      false,
    ],
    [
      "field for our class wins over another annotation",
      [OURS, NGINX],
      plain("sluice", "nginx"),
      true,
    ],
    ["annotation only, ours", [OURS], plain(undefined, "sluice"), true],
    ["annotation only, another", [OURS], plain(undefined, "nginx"), false],
    ["no class, no default class", [OURS, NGINX], plain(), false],
    ["no class, our class is the default", [withDefault(OURS), NGINX], plain(), true],
    [
      "no class, another controller's class is the default",
      [OURS, withDefault(NGINX)],
      plain(),
      false,
    ],
    // Kubernetes: several defaults make the admission plugin refuse new class-less
    // Ingresses; existing ones stay claimable by every controller whose class is a default.
    [
      "no class, several default classes including ours",
      [withDefault(OURS), withDefault(NGINX)],
      plain(),
      true,
    ],
    // The admission plugin compares the annotation with "true" exactly.
    [
      'no class, default annotation "True" is not default',
      [withDefault(OURS, "True")],
      plain(),
      false,
    ],
    [
      "no class, our default class with an annotation for another class",
      [withDefault(OURS)],
      plain(undefined, "nginx"),
      false,
    ],
    // IngressClass.spec.parameters are controller-specific; Sluice has none and routes.
    ["a class of ours with parameters", [OURS_WITH_PARAMS], plain("sluice-internal"), true],
    ["a class name that does not exist", [OURS], plain("traefik"), false],
  ];
  const wrong: string[] = [];
  for (const [name, classes, ing, ours] of cases) {
    const w = world({ ingresses: [ing], ingressClasses: classes });
    const routed = w.answer("any.test", "/") === "web";
    if (routed !== ours) wrong.push(`${name}: want ${ours ? "ours" : "foreign"}`);
    // Foreign Ingresses are never reported.
    if (!ours && w.issues().length > 0) wrong.push(`${name}: reported ${w.issues()}`);
  }
  assertEquals(wrong, []);
});

Deno.test("an Ingress naming an IngressClass that does not exist gets no route (conformance ingress_class)", () => {
  const w = world({
    ingresses: [ingress("test-ingress-class", {
      ingressClassName: "some-invalid-class-name",
      rules: [rule("ingress-class", ["/", "Prefix", "ingress-class-prefix"])],
    })],
  });
  assertEquals(w.translation.routes, []);
  assertEquals(w.answer("ingress-class", "/"), "404");
});

// ---------------------------------------------------------------------------
// Services, ports and EndpointSlices
// ---------------------------------------------------------------------------

function svc(name: string, ports: ServicePort[], extra: Record<string, unknown> = {}): Service {
  return { metadata: { namespace: NS, name }, spec: { ports, ...extra } } as Service;
}

function slice(
  service: string,
  name: string,
  ports: { name?: string; port: number; protocol?: string }[],
  endpoints: EndpointSliceEndpoint[],
  addressType = "IPv4",
): EndpointSlice {
  return {
    metadata: { namespace: NS, name, labels: { "kubernetes.io/service-name": service } },
    addressType,
    ports,
    endpoints,
  };
}

function endpointsOf(w: World, host: string): string[] {
  const match = w.routes.lookup(host, "/");
  return (match?.backend.endpoints ?? []).map((e) => `${e.address} ${e.port}`);
}

Deno.test("a Service port is found by number or by name, and reaches the slice port of that name", () => {
  const w = world({
    ingresses: [ingress("ports", {
      rules: [
        rule("by-number.test", ["/", "Prefix", "web"]),
        rule("by-name.test", ["/", "Prefix", "web:admin"]),
        rule("by-target.test", ["/", "Prefix", "other"]),
      ],
    })],
    services: [
      svc("web", [
        { name: "http", port: 80, targetPort: "web" },
        { name: "admin", port: 9000, targetPort: 9090 },
      ]),
      // The Ingress names the Service port, never the target port.
      svc("other", [{ name: "http", port: 8080, targetPort: 80 }]),
    ],
    endpointSlices: [
      slice("web", "web-a", [{ name: "http", port: 3000 }, { name: "admin", port: 9090 }], [
        { addresses: ["10.0.0.1"] },
      ]),
      slice("other", "other-a", [{ name: "http", port: 80 }], [{ addresses: ["10.0.0.9"] }]),
    ],
  });
  assertEquals(endpointsOf(w, "by-number.test"), ["10.0.0.1 3000"]);
  assertEquals(endpointsOf(w, "by-name.test"), ["10.0.0.1 9090"]);
  expectAnswers(w, [["by-target.test", "/", "503 other"]]);
});

Deno.test("a named targetPort resolving to different numbers per pod uses each slice's own port", () => {
  // EndpointSlices group endpoints by their resolved ports: during a rollout that
  // renumbers the container port, one slice says 8080 and another 9090 for "http".
  const w = world({
    ingresses: [ingress("roll", { rules: [rule("roll.test", ["/", "Prefix", "web"])] })],
    services: [svc("web", [{ name: "http", port: 80, targetPort: "http" }])],
    endpointSlices: [
      slice("web", "web-old", [{ name: "http", port: 8080 }], [{ addresses: ["10.0.0.1"] }]),
      slice("web", "web-new", [{ name: "http", port: 9090 }], [{ addresses: ["10.0.0.2"] }]),
      // A slice carrying only another port of the Service holds no endpoint for this one.
      slice("web", "web-metrics", [{ name: "metrics", port: 9100 }], [{ addresses: ["10.0.0.3"] }]),
      // Same name over UDP: not HTTP.
      slice("web", "web-udp", [{ name: "http", port: 7000, protocol: "UDP" }], [{
        addresses: ["10.0.0.4"],
      }]),
    ],
  });
  assertEquals(endpointsOf(w, "roll.test"), ["10.0.0.1 8080", "10.0.0.2 9090"]);
});

Deno.test("endpoints of several slices, both address families, merge without duplicates", () => {
  const w = world({
    ingresses: [ingress("ds", { rules: [rule("ds.test", ["/", "Prefix", "web"])] })],
    services: [
      svc("web", [{ name: "http", port: 80, targetPort: 8080 }], { ipFamilies: ["IPv4", "IPv6"] }),
    ],
    endpointSlices: [
      slice("web", "web-v4-a", [{ name: "http", port: 8080 }], [
        { addresses: ["10.0.0.2"] },
        { addresses: ["10.0.0.1"] },
      ]),
      // The same endpoint in a second slice (slices being rebalanced) counts once.
      slice("web", "web-v4-b", [{ name: "http", port: 8080 }], [{ addresses: ["10.0.0.1"] }]),
      slice("web", "web-v6", [{ name: "http", port: 8080 }], [{ addresses: ["fd00::1"] }], "IPv6"),
      slice(
        "web",
        "web-fqdn",
        [{ name: "http", port: 8080 }],
        [{ addresses: ["web.example"] }],
        "FQDN",
      ),
    ],
  });
  assertEquals(endpointsOf(w, "ds.test"), ["10.0.0.1 8080", "10.0.0.2 8080", "fd00::1 8080"]);
});

Deno.test("endpoint conditions are read as kube-proxy reads them", () => {
  // EndpointConditions: ready nil means ready; serving nil means serving (kube-proxy);
  // serving+terminating endpoints are used only when nothing is ready.
  const rows: [string, EndpointSliceEndpoint["conditions"] | undefined, boolean, boolean][] = [
    // name, conditions, used beside a ready endpoint, used when alone
    ["conditions absent", undefined, true, true],
    ["ready absent", {}, true, true],
    ["ready true", { ready: true }, true, true],
    ["ready false", { ready: false }, false, false],
    ["ready false, serving true, not terminating", { ready: false, serving: true }, false, false],
    ["serving and terminating", { ready: false, serving: true, terminating: true }, false, true],
    ["terminating, serving absent", { ready: false, terminating: true }, false, true],
    ["terminating, not serving", { ready: false, serving: false, terminating: true }, false, false],
    // publishNotReadyAddresses: ready stays true while terminating.
    ["ready and terminating", { ready: true, serving: true, terminating: true }, true, true],
  ];
  const wrong: string[] = [];
  for (const [name, conditions, beside, alone] of rows) {
    for (const [withReady, expected] of [[true, beside], [false, alone]] as const) {
      const endpoints: EndpointSliceEndpoint[] = [
        { addresses: ["10.0.0.5"], ...(conditions === undefined ? {} : { conditions }) },
      ];
      if (withReady) endpoints.push({ addresses: ["10.0.0.9"], conditions: { ready: true } });
      const w = world({
        ingresses: [ingress("c", { rules: [rule("c.test", ["/", "Prefix", "web"])] })],
        services: [svc("web", [{ name: "http", port: 80 }])],
        endpointSlices: [slice("web", "web-1", [{ name: "http", port: 8080 }], endpoints)],
      });
      const used = endpointsOf(w, "c.test").includes("10.0.0.5 8080");
      if (used !== expected) wrong.push(`${name} (${withReady ? "beside a ready one" : "alone"})`);
    }
  }
  assertEquals(wrong, []);
});

Deno.test("a ready copy of an address wins over a terminating copy in another slice", () => {
  const w = world({
    ingresses: [ingress("dup", { rules: [rule("dup.test", ["/", "Prefix", "web"])] })],
    services: [svc("web", [{ name: "http", port: 80 }])],
    endpointSlices: [
      slice("web", "web-a", [{ name: "http", port: 8080 }], [
        { addresses: ["10.0.0.1"], conditions: { ready: false, serving: true, terminating: true } },
      ]),
      slice("web", "web-b", [{ name: "http", port: 8080 }], [
        { addresses: ["10.0.0.1"], conditions: { ready: true } },
        { addresses: ["10.0.0.2"], conditions: { ready: false, serving: true, terminating: true } },
      ]),
    ],
  });
  assertEquals(endpointsOf(w, "dup.test"), ["10.0.0.1 8080"]);
});

Deno.test("an unnamed single Service port matches unnamed slice ports by number or by omission", () => {
  const w = world({
    ingresses: [ingress("u", { rules: [rule("u.test", ["/", "Prefix", "web"])] })],
    services: [svc("web", [{ port: 80, targetPort: 8080 }])],
    endpointSlices: [
      slice("web", "web-a", [{ port: 8080 }], [{ addresses: ["10.0.0.1"] }]),
      slice("web", "web-b", [{ name: "", port: 8080 }], [{ addresses: ["10.0.0.2"] }]),
    ],
  });
  assertEquals(endpointsOf(w, "u.test"), ["10.0.0.1 8080", "10.0.0.2 8080"]);
});

// ---------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------

const TLS_DIR = new URL("../../tests/fixtures/tls/", import.meta.url);
function tlsSecret(namespace: string, name: string, base: string): Secret {
  const read = (file: string) => btoa(Deno.readTextFileSync(new URL(file, TLS_DIR)));
  return {
    metadata: { namespace, name },
    type: "kubernetes.io/tls",
    data: { "tls.crt": read(`${base}.crt`), "tls.key": read(`${base}.key`) },
  };
}

Deno.test("a wildcard TLS entry covers exactly one extra label, for redirects and for SNI", () => {
  // IngressTLS.hosts use the rule host format: *.example.com is one label.
  const w = world({
    ingresses: [ingress("wild-tls", {
      tls: [{ hosts: ["*.example.com"], secretName: "wildcard" }],
      rules: [rule("", ["/", "Prefix", "web"])],
    })],
    secrets: [tlsSecret(NS, "wildcard", "wildcard")],
  });
  assertEquals(w.issues(), []);
  const rows: [string, boolean, string][] = [
    ["a.example.com", true, `${NS}/wildcard`],
    ["A.Example.COM", true, `${NS}/wildcard`],
    ["a.example.com.", true, `${NS}/wildcard`],
    ["example.com", false, "sluice/self-signed"],
    ["a.b.example.com", false, "sluice/self-signed"],
  ];
  for (const [host, tls, certificate] of rows) {
    assertEquals(w.tls(host), tls, `tls for ${host}`);
    assertEquals(w.certificateFor(host), certificate, `certificate for ${host}`);
  }
  assertEquals(w.certificateFor(undefined), "sluice/self-signed");
});

Deno.test("SNI picks an exact TLS host over a wildcard one, whatever the case", () => {
  const w = world({
    ingresses: [ingress("both", {
      tls: [
        { hosts: ["*.example.com"], secretName: "wildcard" },
        { hosts: ["Shop.Example.com"], secretName: "shop" },
      ],
      rules: [rule("shop.example.com", ["/", "Prefix", "web"])],
    })],
    secrets: [tlsSecret(NS, "wildcard", "wildcard"), tlsSecret(NS, "shop", "shop")],
  });
  assertEquals(w.certificateFor("SHOP.example.com"), `${NS}/shop`);
  assertEquals(w.certificateFor("www.example.com"), `${NS}/wildcard`);
});

Deno.test("a TLS entry without hosts serves its Secret to the Ingress's rule hosts its certificate covers", () => {
  // IngressTLS.hosts: "Defaults to the wildcard host setting for the loadbalancer
  // controller". As ingress-nginx: the Ingress's rule hosts the certificate covers get it
  // (and the redirect); a rule host it does not cover stays plain. (Was reported and unused:
  // a migration trap, those hosts got the default certificate and no redirect.)
  const w = world({
    ingresses: [ingress("nohosts", {
      tls: [{ secretName: "shop" }],
      rules: [
        rule("shop.example.com", ["/", "Prefix", "web"]),
        rule("other.test", ["/", "Prefix", "web"]),
      ],
    })],
    secrets: [tlsSecret(NS, "shop", "shop")],
  });
  assertEquals(w.tls("shop.example.com"), true);
  assertEquals(w.certificateFor("shop.example.com"), `${NS}/shop`);
  assertEquals(w.tls("other.test"), false);
  assertEquals(w.certificateFor("other.test"), "sluice/self-signed");
  assertEquals(w.issues(), []);
  const none = world({
    ingresses: [ingress("nohosts", {
      tls: [{ secretName: "shop" }],
      rules: [rule("other.test", ["/", "Prefix", "web"])],
    })],
    secrets: [tlsSecret(NS, "shop", "shop")],
  });
  assertEquals(none.tls("other.test"), false);
  assertEquals(none.issues(), [
    `${NS}/nohosts spec.tls[0].hosts: Cannot serve TLS Secret "${NS}/shop" without hosts: ` +
    "its certificate covers none of this Ingress's rule hosts; list the hosts it serves in hosts",
  ]);
});

Deno.test("a TLS Secret of another namespace is never used, whatever the secretName says", () => {
  const w = world({
    ingresses: [ingress("cross", {
      tls: [
        { hosts: ["shop.example.com"], secretName: "shop" },
        { hosts: ["www.shop.example.com"], secretName: "certs/shop" },
        { hosts: ["x.example.com"], secretName: "../certs/shop" },
      ],
      rules: [rule("", ["/", "Prefix", "web"])],
    })],
    // Only the other namespace holds a Secret named "shop".
    secrets: [tlsSecret("certs", "shop", "shop"), tlsSecret("certs", "wildcard", "wildcard")],
  });
  for (const host of ["shop.example.com", "www.shop.example.com", "x.example.com"]) {
    assertEquals(w.certificateFor(host), "sluice/self-signed", host);
    // Listed in spec.tls: still redirected to HTTPS, served with the default certificate.
    assertEquals(w.tls(host), true, host);
  }
  assertEquals(w.translation.certificates, []);
  assertEquals(w.issues().length, 3);
});

Deno.test("a TLS host of one Ingress is redirected whichever Ingress routes it", () => {
  // ingress-nginx decides redirects per server (host); so does Sluice.
  const w = world({
    ingresses: [
      ingress("routes", { rules: [rule("shop.example.com", ["/", "Prefix", "web"])] }),
      ingress("certs", {
        tls: [{ hosts: ["shop.example.com"], secretName: "shop" }],
        rules: [rule("shop.example.com", ["/admin", "Prefix", "admin"])],
      }),
    ],
    secrets: [tlsSecret(NS, "shop", "shop")],
  });
  assertEquals(w.tls("shop.example.com", "/"), true);
  assertEquals(w.tls("shop.example.com", "/admin"), true);
  assertEquals(w.certificateFor("shop.example.com"), `${NS}/shop`);
});
