/**
 * Adversarial robustness of translation: objects a real API server accepts, or a
 * stale or partial cache (or a hand-written manifest) could hold — fields missing
 * or null, wrong JSON types, huge values, odd hosts and paths, conflicting
 * Ingresses, class edge cases, odd EndpointSlices and Services. For each one
 * `translate()` must not throw, must report what it drops, and must keep a good
 * Ingress's route beside it. Ends with a seeded mutation fuzz of a valid cluster.
 *
 * Complements `translate_test.ts` (random structural garbage) and the golden
 * fixtures (`tests/fixtures/`): nothing here repeats a fixture's case.
 *
 * @module
 */

import { assert, assertEquals, assertMatch } from "../../tests/support/assert.ts";
import { webIngressSpec } from "../../tests/support/fixture_objects.ts";
import { seededRandom } from "../../tests/support/seeded_random.ts";
import type { EndpointSlice, Ingress, IngressClass, Secret, Service } from "../k8s/objects.ts";
import { compileRouteTable } from "../routing/route_table.ts";
import { translate } from "./translate.ts";
import type {
  ClusterObjects,
  InspectCertificate,
  Issue,
  TranslateOptions,
  Translation,
} from "./translation.ts";
import { createTranslationMemo } from "./translation_memo.ts";

// ---------------------------------------------------------------------------
// The good cluster every case runs beside
// ---------------------------------------------------------------------------

const NOW = Date.parse("2030-01-01T00:00:00Z");
/** Accepts every certificate except one whose PEM says "garbage" (then throws, as a broken parser might). */
const INSPECT: InspectCertificate = (pems) => {
  if (pems.certPem?.includes("garbage")) throw new Error("inspector exploded");
  if (pems.certPem === undefined || pems.keyPem === undefined) {
    return { ok: false, reason: "tls.crt or tls.key is missing" };
  }
  return {
    ok: true,
    notBefore: "2024-01-01T00:00:00Z",
    notAfter: "2124-01-01T00:00:00Z",
    dnsNames: [],
    fingerprint: "f",
  };
};
const OPTIONS: TranslateOptions = { now: NOW, inspectCertificate: INSPECT };

const OUR_CLASS: IngressClass = {
  metadata: { name: "sluice" },
  spec: { controller: "sluice.dev/ingress-controller" },
};

const GOOD_INGRESS: Ingress = {
  metadata: { namespace: "good", name: "web", creationTimestamp: "2024-01-01T00:00:00Z" },
  spec: webIngressSpec("good.test"),
};
const GOOD_SERVICE: Service = {
  metadata: { namespace: "good", name: "web" },
  spec: { ports: [{ port: 80 }] },
};
const GOOD_SLICE: EndpointSlice = {
  metadata: { namespace: "good", name: "web-1", labels: { "kubernetes.io/service-name": "web" } },
  addressType: "IPv4",
  ports: [{ port: 80 }],
  endpoints: [{ addresses: ["10.0.0.1"] }],
};

/** Collections of extra objects, typed loosely on purpose: they are what a cache could hold. */
interface Extra {
  readonly ingresses?: readonly unknown[];
  readonly ingressClasses?: readonly unknown[];
  readonly services?: readonly unknown[];
  readonly endpointSlices?: readonly unknown[];
  readonly secrets?: readonly unknown[];
}

/** The good cluster plus `extra`; classes replace ours only when given `replaceClasses`. */
function cluster(extra: Extra, replaceClasses = false): ClusterObjects {
  return {
    ingresses: [GOOD_INGRESS, ...(extra.ingresses ?? [])] as Ingress[],
    ingressClasses: [
      ...(replaceClasses ? [] : [OUR_CLASS]),
      ...(extra.ingressClasses ?? []),
    ] as IngressClass[],
    services: [GOOD_SERVICE, ...(extra.services ?? [])] as Service[],
    endpointSlices: [GOOD_SLICE, ...(extra.endpointSlices ?? [])] as EndpointSlice[],
    secrets: [...(extra.secrets ?? [])] as Secret[],
  };
}

/**
 * Translates the good cluster plus `extra` and checks what must hold for any
 * input: no throw, the good route intact, plain JSON data, deterministic,
 * the same with a memo, and a compilable table.
 */
function run(extra: Extra, options: Partial<TranslateOptions> = {}, what = ""): Translation {
  const objects = cluster(extra);
  const all = { ...OPTIONS, ...options };
  const translation = translate(objects, all);
  const table = compileRouteTable(translation);
  const match = table.lookup("good.test", "/x");
  assertEquals(match?.backend.key, "good/web:80", `good route lost ${what}`);
  assertEquals(match?.backend.endpoints, [{ address: "10.0.0.1", port: 80 }], what);
  assertEquals(JSON.parse(JSON.stringify(translation)), structuredClone(translation), what);
  const again = JSON.stringify(translate(cluster(extra), all));
  assertEquals(again, JSON.stringify(translation), `not deterministic ${what}`);
  const memo = createTranslationMemo();
  translate(objects, { ...all, memo });
  assertEquals(JSON.stringify(translate(objects, { ...all, memo })), again, `memo differs ${what}`);
  return translation;
}

/** An Ingress of ours in namespace `bad` with the given spec (class set unless `spec` is not an object). */
function bad(name: string, spec: unknown, metadata: Record<string, unknown> = {}): unknown {
  const withClass = spec !== null && typeof spec === "object" && !Array.isArray(spec)
    ? { ingressClassName: "sluice", ...spec }
    : spec;
  return {
    metadata: {
      namespace: "bad",
      name,
      creationTimestamp: "2020-01-01T00:00:00Z",
      annotations: { "kubernetes.io/ingress.class": "sluice" },
      ...metadata,
    },
    spec: withClass,
  };
}

/** One rule for `bad.test` with one path. */
function onePath(
  path: Record<string, unknown>,
  host: unknown = "bad.test",
): Record<string, unknown> {
  return { rules: [{ host, http: { paths: [path] } }] };
}

const SVC = (port: unknown, name: unknown = "web") => ({ service: { name, port } });
const PREFIX = (backend: unknown, path: unknown = "/") => ({ path, pathType: "Prefix", backend });

function issuesOf(translation: Translation, namespace: string, name: string): Issue[] {
  return translation.issues.filter((i) => i.namespace === namespace && i.name === name);
}

function routesOf(translation: Translation, ingress: string) {
  return translation.routes.filter((r) => r.ingress === ingress);
}

// ---------------------------------------------------------------------------
// Part A.1 — malformed Ingresses: each reported, nothing thrown, others intact
// ---------------------------------------------------------------------------

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
    const translation = run({ ingresses: [bad("x", spec)], services: [] }, {}, name);
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
  const translation = run({
    ingresses: [bad("mixed", { rules: [{ host: "mixed.test", http: { paths } }] })],
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
    const translation = run({ ingresses: [ingress] }, {}, what);
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
      const translation = run({ ingresses: [bad("empty", spec)] }, {}, what);
      assertEquals(routesOf(translation, "bad/empty").length, 0, what);
      assert(issuesOf(translation, "bad", "empty").length > 0, `silently dropped: ${what}`);
    }
  },
});

// ---------------------------------------------------------------------------
// Part A.2 — hosts and paths that are valid but odd
// ---------------------------------------------------------------------------

Deno.test("translate() routes odd but valid hosts in their normal form and a request finds them", () => {
  const cases: [raw: string, normal: string, request: string][] = [
    ["SHOP.Example.COM", "shop.example.com", "shop.example.com"],
    ["shop.example.com.", "shop.example.com", "Shop.Example.com.:8443"],
    ["*.Wild.Test.", "*.wild.test", "a.wild.test"],
    ["xn--bcher-kva.test", "xn--bcher-kva.test", "XN--BCHER-KVA.test"],
    ["*.1.2.3", "*.1.2.3", "a.1.2.3"],
    ["1.2.3.4.example", "1.2.3.4.example", "1.2.3.4.example"],
    [`${"a".repeat(63)}.${"b".repeat(63)}.${"c".repeat(63)}.${"d".repeat(61)}`, "", ""],
  ];
  for (const [raw, normalIn, requestIn] of cases) {
    const normal = normalIn === "" ? raw : normalIn;
    const request = requestIn === "" ? raw : requestIn;
    const translation = run(
      {
        ingresses: [bad("odd", onePath(PREFIX(SVC({ number: 80 }), "/"), raw))],
      },
      {},
      raw,
    );
    assertEquals(routesOf(translation, "bad/odd").map((r) => r.host), [normal], raw);
    const match = compileRouteTable(translation).lookup(request, "/");
    assertEquals(match?.ingress, "bad/odd", raw);
  }
});

Deno.test("translate() keeps ImplementationSpecific paths that look like regexes literal", () => {
  const paths = ["/api/(.*)", "/v[0-9]+/", "/files/*", "/a|b", "/x$", "/(?<name>.)"].map((
    path,
  ) => ({ path, pathType: "ImplementationSpecific", backend: SVC({ number: 80 }) }));
  const translation = run({
    ingresses: [bad("regex", { rules: [{ host: "re.test", http: { paths } }] })],
  });
  assertEquals(routesOf(translation, "bad/regex").map((r) => `${r.pathType} ${r.path}`).sort(), [
    "Prefix /(?<name>.)",
    "Prefix /api/(.*)",
    "Prefix /a|b",
    "Prefix /files/*",
    "Prefix /v[0-9]+/",
    "Prefix /x$",
  ]);
  const table = compileRouteTable(translation);
  // Taken literally: none of them matches what a regex would.
  assertEquals(table.lookup("re.test", "/api/v1"), undefined);
  assertEquals(table.lookup("re.test", "/v1/"), undefined);
  assertEquals(table.lookup("re.test", "/files/a"), undefined);
  assertEquals(table.lookup("re.test", "/a"), undefined);
  assertEquals(table.lookup("re.test", "/files/*/a")?.path, "/files/*");
  assertEquals(table.lookup("re.test", "/x$")?.path, "/x$");
});

Deno.test("translate() routes 10,000 paths of one Ingress and a 1 MB Exact path", () => {
  const paths: unknown[] = Array.from(
    { length: 10_000 },
    (_, i) => PREFIX(SVC({ number: 80 }), `/p${i}`),
  );
  const long = `/${"a".repeat(1 << 20)}`;
  paths.push({ path: long, pathType: "Exact", backend: SVC({ number: 80 }) });
  const translation = run({
    ingresses: [bad("many", { rules: [{ host: "many.test", http: { paths } }] })],
    services: [{ metadata: { namespace: "bad", name: "web" }, spec: { ports: [{ port: 80 }] } }],
  });
  assertEquals(routesOf(translation, "bad/many").length, 10_001);
  const table = compileRouteTable(translation);
  assertEquals(table.lookup("many.test", "/p9999/x")?.path, "/p9999");
  assertEquals(table.lookup("many.test", long)?.pathType, "Exact");
  assertEquals(table.lookup("many.test", `${long}/`), undefined);
  // One issue for the backend without endpoints, not one per path.
  assertEquals(issuesOf(translation, "bad", "many").length, 1);
});

Deno.test("translate() keeps one of 10,000 identical paths of one Ingress and reports the rest", () => {
  const paths = Array.from({ length: 10_000 }, () => PREFIX(SVC({ number: 80 }), "/same"));
  const translation = run({
    ingresses: [bad("dup", { rules: [{ host: "dup.test", http: { paths } }] })],
  });
  assertEquals(routesOf(translation, "bad/dup").map((r) => r.path), ["/same"]);
  const conflicts = issuesOf(translation, "bad", "dup").filter((i) =>
    i.message.includes("of the same Ingress comes first")
  );
  assertEquals(conflicts.length, 9_999);
});

// ---------------------------------------------------------------------------
// Part A.3 — several Ingresses: duplicates, conflicts across namespaces
// ---------------------------------------------------------------------------

Deno.test("translate() never lets a later Ingress in another namespace take a live host's path", () => {
  const claim = (namespace: string, name: string, created: string | undefined) => ({
    metadata: {
      namespace,
      name,
      ...(created === undefined ? {} : { creationTimestamp: created }),
    },
    spec: { ingressClassName: "sluice", ...onePath(PREFIX(SVC({ number: 80 }))) },
  });
  const translation = run({
    ingresses: [
      claim("zz", "late", "2025-01-01T00:00:00Z"),
      claim("aa", "undated", undefined),
      claim("aa", "garbled", "yesterday"),
      claim("mm", "first", "2021-01-01T00:00:00Z"),
    ],
  });
  assertEquals(
    translation.routes.filter((r) => r.host === "bad.test").map((r) => r.ingress),
    ["mm/first"],
  );
  const losers = translation.issues.filter((i) => i.message.includes('Ingress "mm/first"'));
  assertEquals(losers.map((i) => `${i.namespace}/${i.name}`).sort(), [
    "aa/garbled",
    "aa/undated",
    "zz/late",
  ]);
});

Deno.test("translate() keeps the first of two cached copies of one Ingress", () => {
  const first = bad("twin", onePath(PREFIX(SVC({ number: 80 }), "/first")));
  const second = bad("twin", onePath(PREFIX(SVC({ number: 80 }), "/second")));
  const translation = run({ ingresses: [first, second] });
  assertEquals(routesOf(translation, "bad/twin").map((r) => r.path), ["/first"]);
});

// Was a bug: an all-digit port name ("80", not an IANA_SVC_NAME) shared the backend key of port
// number 80, so one Ingress's bad name turned another's good backend into 503.
Deno.test({
  name: "translate() keeps a port name that looks like a number apart from that port number",
  fn() {
    const byNumber = {
      metadata: { namespace: "shop", name: "by-number", creationTimestamp: "2024-06-01T00:00:00Z" },
      spec: { ingressClassName: "sluice", ...onePath(PREFIX(SVC({ number: 80 })), "n.test") },
    };
    const byName = {
      metadata: { namespace: "shop", name: "by-name", creationTimestamp: "2024-01-01T00:00:00Z" },
      spec: { ingressClassName: "sluice", ...onePath(PREFIX(SVC({ name: "80" })), "s.test") },
    };
    const translation = run({
      ingresses: [byNumber, byName],
      services: [{ metadata: { namespace: "shop", name: "web" }, spec: { ports: [{ port: 80 }] } }],
      endpointSlices: [{
        metadata: {
          namespace: "shop",
          name: "web-1",
          labels: { "kubernetes.io/service-name": "web" },
        },
        addressType: "IPv4",
        ports: [{ port: 8080 }],
        endpoints: [{ addresses: ["10.1.0.1"] }],
      }],
    });
    const match = compileRouteTable(translation).lookup("n.test", "/");
    assertEquals(match?.backend.endpoints, [{ address: "10.1.0.1", port: 8080 }]);
    // And the name "80" (no letter) is reported rather than used as a port name.
    assert(issuesOf(translation, "shop", "by-name").some((i) => i.field.endsWith("port.name")));
  },
});

// ---------------------------------------------------------------------------
// Part A.4 — IngressClass edge cases
// ---------------------------------------------------------------------------

Deno.test("translate() decides odd IngressClass combinations without throwing or reporting foreign Ingresses", () => {
  const foreign = (name: string, extra: Record<string, unknown> = {}) => ({
    metadata: { name, ...extra },
    spec: { controller: "example.com/other" },
  });
  const ours = (name: string, extra: Record<string, unknown> = {}) => ({
    metadata: { name, ...extra },
    spec: { controller: "sluice.dev/ingress-controller" },
  });
  const DEFAULT = { annotations: { "ingressclass.kubernetes.io/is-default-class": "true" } };
  const ingress = (spec: Record<string, unknown>, annotations: Record<string, string> = {}) => ({
    metadata: { namespace: "c", name: "i", annotations },
    spec: { defaultBackend: SVC({ number: 80 }), ...spec },
  });
  const cases: [string, unknown[], unknown, boolean][] = [
    [
      "two default classes, ours among them",
      [foreign("other", DEFAULT), ours("s", DEFAULT)],
      ingress({}),
      true,
    ],
    [
      "two default classes, both foreign",
      [foreign("a", DEFAULT), foreign("b", DEFAULT)],
      ingress({}),
      false,
    ],
    [
      "our class name held by another controller",
      [foreign("sluice")],
      ingress({ ingressClassName: "sluice" }),
      false,
    ],
    [
      "spec.ingressClassName wins over our annotation",
      [ours("sluice"), foreign("other")],
      ingress({ ingressClassName: "other" }, { "kubernetes.io/ingress.class": "sluice" }),
      false,
    ],
    [
      "spec.ingressClassName ours beats a foreign annotation",
      [ours("sluice")],
      ingress({ ingressClassName: "sluice" }, { "kubernetes.io/ingress.class": "nginx" }),
      true,
    ],
    [
      'is-default-class not exactly "true"',
      [ours("sluice", { annotations: { "ingressclass.kubernetes.io/is-default-class": "True" } })],
      ingress({}),
      false,
    ],
    [
      "is-default-class a boolean",
      [ours("sluice", { annotations: { "ingressclass.kubernetes.io/is-default-class": true } })],
      ingress({}),
      false,
    ],
    [
      "class with null spec and null metadata",
      [{ metadata: null, spec: null }, { metadata: { name: "x" }, spec: null }, ours("sluice")],
      ingress({ ingressClassName: "x" }),
      false,
    ],
    [
      "ingressClassName a number falls back to the annotation",
      [ours("sluice")],
      ingress({ ingressClassName: 5 }, { "kubernetes.io/ingress.class": "sluice" }),
      true,
    ],
    [
      "two classes of one name in a stale cache: the last wins",
      [ours("dup"), foreign("dup")],
      ingress({ ingressClassName: "dup" }),
      false,
    ],
  ];
  for (const [what, classes, ingressObject, expected] of cases) {
    const objects = cluster({ ingresses: [ingressObject], ingressClasses: classes }, true);
    // The good Ingress names "sluice": keep it routable where "sluice" is not ours.
    const translation = translate(objects, OPTIONS);
    const routes = routesOf(translation, "c/i");
    assertEquals(routes.length > 0, expected, what);
    if (!expected) assertEquals(issuesOf(translation, "c", "i"), [], what);
  }
});

// ---------------------------------------------------------------------------
// Part A.5 — EndpointSlices and Services
// ---------------------------------------------------------------------------

/** An Ingress `shop/app` routing `app.test` to Service `shop/app` port `port`. */
function appIngress(port: unknown = { number: 80 }): unknown {
  return {
    metadata: { namespace: "shop", name: "app", creationTimestamp: "2024-01-01T00:00:00Z" },
    spec: { ingressClassName: "sluice", ...onePath(PREFIX(SVC(port, "app")), "app.test") },
  };
}

function appSlice(name: string, fields: Record<string, unknown>): unknown {
  return {
    metadata: { namespace: "shop", name, labels: { "kubernetes.io/service-name": "app" } },
    addressType: "IPv4",
    ports: [{ port: 8080 }],
    endpoints: [{ addresses: ["10.2.0.1"] }],
    ...fields,
  };
}

const APP_SERVICE = {
  metadata: { namespace: "shop", name: "app" },
  spec: { ports: [{ port: 80 }] },
};

Deno.test("translate() reads odd EndpointSlices as Kubernetes means them, reporting a backend left empty", () => {
  const cases: [string, unknown[], string[]][] = [
    ["ports absent", [appSlice("s", { ports: undefined })], []],
    ["ports null", [appSlice("s", { ports: null })], []],
    ["ports empty", [appSlice("s", { ports: [] })], []],
    ["port number null (all ports)", [appSlice("s", { ports: [{ port: null }] })], []],
    ["port number a string", [appSlice("s", { ports: [{ port: "8080" }] })], []],
    ["port name null matches the unnamed Service port", [
      appSlice("s", { ports: [{ name: null, port: 8080 }] }),
    ], ["10.2.0.1:8080"]],
    ["ready null is ready", [
      appSlice("s", { endpoints: [{ addresses: ["10.2.0.1"], conditions: { ready: null } }] }),
    ], ["10.2.0.1:8080"]],
    ["conditions null is ready", [
      appSlice("s", { endpoints: [{ addresses: ["10.2.0.1"], conditions: null }] }),
    ], ["10.2.0.1:8080"]],
    ["conditions a string", [
      appSlice("s", { endpoints: [{ addresses: ["10.2.0.1"], conditions: "Ready" }] }),
    ], ["10.2.0.1:8080"]],
    ["addresses empty", [appSlice("s", { endpoints: [{ addresses: [] }] })], []],
    ["endpoints null", [appSlice("s", { endpoints: null })], []],
    ["FQDN slice ignored", [
      appSlice("s", { addressType: "FQDN", endpoints: [{ addresses: ["app.example.com"] }] }),
    ], []],
    ["addressType absent ignored", [appSlice("s", { addressType: undefined })], []],
    ["IPv6 slice", [
      appSlice("s", { addressType: "IPv6", endpoints: [{ addresses: ["fd00::1"] }] }),
    ], [
      "fd00::1:8080",
    ]],
    ["duplicates across slices merged", [
      appSlice("s1", { endpoints: [{ addresses: ["10.2.0.1", "10.2.0.2"] }] }),
      appSlice("s2", { endpoints: [{ addresses: ["10.2.0.2", "10.2.0.1"] }] }),
      appSlice("s3", { endpoints: [{ addresses: ["10.2.0.1"] }] }),
    ], ["10.2.0.1:8080", "10.2.0.2:8080"]],
    ["slice of the same Service name in another namespace ignored", [{
      ...appSlice("s", {}) as object,
      metadata: { namespace: "other", name: "s", labels: { "kubernetes.io/service-name": "app" } },
    }], []],
    ["slice without the service-name label ignored", [{
      ...appSlice("s", {}) as object,
      metadata: { namespace: "shop", name: "s", labels: null },
    }], []],
    ["UDP slice port ignored", [appSlice("s", { ports: [{ port: 8080, protocol: "UDP" }] })], []],
  ];
  for (const [what, slices, expected] of cases) {
    const translation = run(
      {
        ingresses: [appIngress()],
        services: [APP_SERVICE],
        endpointSlices: slices,
      },
      {},
      what,
    );
    const backend = translation.backends.find((b) => b.key === "shop/app:80");
    assertEquals(backend?.endpoints.map((e) => `${e.address}:${e.port}`), expected, what);
    const issues = issuesOf(translation, "shop", "app");
    if (expected.length === 0) {
      assertEquals(issues.map((i) => i.field), ["spec.rules[0].http.paths[0].backend"], what);
      assertMatch(backend?.unavailable ?? "", /no ready endpoints/, what);
    } else {
      assertEquals(issues, [], what);
    }
  }
});

Deno.test("translate() resolves odd Services to endpoints or to a reported 503", () => {
  const service = (spec: unknown) => ({ metadata: { namespace: "shop", name: "app" }, spec });
  const cases: [string, unknown, unknown, RegExp | string[]][] = [
    ["spec null", service(null), { number: 80 }, /no such port/],
    ["spec a string", service("ClusterIP"), { number: 80 }, /no such port/],
    ["ports an object", service({ ports: { port: 80 } }), { number: 80 }, /no such port/],
    ["port a string", service({ ports: [{ port: "80" }] }), { number: 80 }, /no such port/],
    ["only a UDP port", service({ ports: [{ port: 80, protocol: "UDP" }] }), { number: 80 }, /TCP/],
    ["headless (clusterIP None)", service({ clusterIP: "None", ports: [{ port: 80 }] }), {
      number: 80,
    }, ["10.2.0.1:8080"]],
    [
      "named port with a named targetPort",
      service({
        ports: [{ name: "web", port: 80, targetPort: "http" }],
      }),
      { name: "web" },
      [],
    ],
    [
      "two TCP ports with the same number: the first",
      service({
        ports: [{ port: 80, name: "" }, { port: 80, name: "again" }],
      }),
      { number: 80 },
      ["10.2.0.1:8080"],
    ],
    [
      "ExternalName without externalName",
      service({ type: "ExternalName" }),
      { number: 80 },
      /is empty/,
    ],
    ["ExternalName a number", service({ type: "ExternalName", externalName: 5 }), {
      number: 80,
    }, /is empty/],
    [
      "ExternalName with a scheme",
      service({
        type: "ExternalName",
        externalName: "http://evil.test",
      }),
      { number: 80 },
      /not a valid DNS name/,
    ],
    [
      "ExternalName with a path",
      service({
        type: "ExternalName",
        externalName: "evil.test/../x",
      }),
      { number: 80 },
      /not a valid DNS name/,
    ],
    ["ExternalName an IPv6 loopback", service({ type: "ExternalName", externalName: "::1" }), {
      number: 80,
    }, /not a valid DNS name/],
    [
      "ExternalName of 300 characters",
      service({
        type: "ExternalName",
        externalName: `${"a".repeat(60)}.`.repeat(5) + "test",
      }),
      { number: 80 },
      /not a valid DNS name/,
    ],
    [
      "ExternalName localhost in capitals",
      service({
        type: "ExternalName",
        externalName: "LOCALHOST",
      }),
      { number: 80 },
      /loopback/,
    ],
    [
      "ExternalName by a named port the Service lacks",
      service({
        type: "ExternalName",
        externalName: "api.example.com",
      }),
      { name: "https" },
      /no such port/,
    ],
    [
      "ExternalName by number needs no Service port",
      service({
        type: "ExternalName",
        externalName: "API.example.com.",
      }),
      { number: 443 },
      ["api.example.com:443"],
    ],
  ];
  for (const [what, svc, port, expected] of cases) {
    const translation = run(
      {
        ingresses: [appIngress(port)],
        services: [svc],
        endpointSlices: [appSlice("s", {})],
      },
      {},
      what,
    );
    const [route] = routesOf(translation, "shop/app");
    assert(route !== undefined, `the route stays (and answers 503): ${what}`);
    const backend = translation.backends.find((b) => b.key === route.backend);
    const issues = issuesOf(translation, "shop", "app");
    if (expected instanceof RegExp) {
      assertEquals(backend?.endpoints, [], what);
      assertMatch(backend?.unavailable ?? "", expected, what);
      assertEquals(issues.length, 1, what);
    } else if (expected.length > 0) {
      assertEquals(backend?.endpoints.map((e) => `${e.address}:${e.port}`), expected, what);
      assertEquals(issues, [], what);
    } else {
      // Slices name the port after the Service port: "web" here, and this slice's port is unnamed.
      assertMatch(backend?.unavailable ?? "", /no ready endpoints/, what);
    }
  }
});

// Was a bug: numeric IPv4 spellings the resolver accepts ("127.1", "2130706433", "0x7f.1",
// "0177.0.0.1", "0") slipped past the loopback refusal; Deno.connect reaches 127.0.0.1 with each.
Deno.test({
  name: "translate() refuses every ExternalName spelling that reaches loopback",
  fn() {
    for (
      const name of ["127.1", "127.0.1", "2130706433", "0x7f.1", "0x7f000001", "0177.0.0.1", "0"]
    ) {
      const translation = run(
        {
          ingresses: [appIngress()],
          services: [{
            metadata: { namespace: "shop", name: "app" },
            spec: { type: "ExternalName", externalName: name, ports: [{ port: 80 }] },
          }],
        },
        {},
        name,
      );
      const backend = translation.backends.find((b) => b.key === "shop/app:80");
      assertEquals(backend?.endpoints, [], `${name} is routed to`);
      assertMatch(backend?.unavailable ?? "", /loopback/, name);
    }
  },
});

// ---------------------------------------------------------------------------
// Part A.6 — broken TLS Secrets and options
// ---------------------------------------------------------------------------

Deno.test("translate() reports broken TLS Secrets and serves the default certificate for their hosts", () => {
  const secret = (name: string, fields: Record<string, unknown>) => ({
    metadata: { namespace: "bad", name },
    ...fields,
  });
  const cases: [string, unknown, RegExp][] = [
    ["data null", secret("s", { data: null }), /missing/],
    ["data a string", secret("s", { data: "tls.crt" }), /missing/],
    [
      "tls.crt not base64",
      secret("s", { data: { "tls.crt": "%%%", "tls.key": "a2V5" } }),
      /base64/,
    ],
    ["tls.key a number", secret("s", { data: { "tls.crt": "Y2VydA==", "tls.key": 5 } }), /missing/],
    [
      "inspector throws",
      secret("s", { stringData: { "tls.crt": "garbage", "tls.key": "k" } }),
      /could not be inspected/,
    ],
    ["no such Secret", secret("other", {}), /no such Secret/],
  ];
  for (const [what, s, reason] of cases) {
    const translation = run(
      {
        ingresses: [bad("tls", {
          tls: [{ hosts: ["tls.test"], secretName: "s" }],
          ...onePath(PREFIX(SVC({ number: 80 })), "tls.test"),
        })],
        secrets: [s],
      },
      {},
      what,
    );
    assertEquals(translation.certificates, [], what);
    assertEquals(translation.tlsHosts, ["tls.test"], what);
    const [issue] = issuesOf(translation, "bad", "tls").filter((i) =>
      i.field.startsWith("spec.tls")
    );
    assertMatch(issue?.message ?? "", reason, what);
    assertEquals(routesOf(translation, "bad/tls").length, 1, what);
  }
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
    const translation = run({}, options, what);
    assert(translation.issues.some((i) => i.name === name || i.name.startsWith("a")), what);
    assertEquals(translation.defaultCertificate, undefined, what);
  }
});

// ---------------------------------------------------------------------------
// Part A.7 — seeded mutations of a valid cluster
// ---------------------------------------------------------------------------

/** A valid cluster in namespace `m` using every feature translation reads. */
function validCluster(): Extra {
  return {
    ingresses: [{
      metadata: {
        namespace: "m",
        name: "full",
        creationTimestamp: "2023-01-01T00:00:00Z",
        annotations: { "kubernetes.io/ingress.class": "sluice" },
      },
      spec: {
        ingressClassName: "sluice",
        defaultBackend: { service: { name: "web", port: { name: "http" } } },
        tls: [{ hosts: ["m.test", "*.m.test"], secretName: "tls" }],
        rules: [
          {
            host: "m.test",
            http: {
              paths: [
                { path: "/", pathType: "Prefix", backend: SVC({ number: 80 }) },
                { path: "/exact", pathType: "Exact", backend: SVC({ name: "http" }) },
                {
                  path: "/impl",
                  pathType: "ImplementationSpecific",
                  backend: SVC({ number: 443 }, "ext"),
                },
                {
                  path: "/res",
                  pathType: "Prefix",
                  backend: { resource: { apiGroup: "x.io", kind: "Bucket", name: "b" } },
                },
              ],
            },
          },
          {
            host: "*.m.test",
            http: { paths: [{ path: "/w", pathType: "Prefix", backend: SVC({ number: 80 }) }] },
          },
          { http: { paths: [{ path: "/any", pathType: "Prefix", backend: SVC({ number: 80 }) }] } },
        ],
      },
    }],
    ingressClasses: [{
      metadata: {
        name: "m",
        annotations: { "ingressclass.kubernetes.io/is-default-class": "true" },
      },
      spec: { controller: "sluice.dev/ingress-controller" },
    }],
    services: [
      {
        metadata: { namespace: "m", name: "web" },
        spec: {
          ports: [{ name: "http", port: 80, targetPort: "http" }, {
            name: "dns",
            port: 53,
            protocol: "UDP",
          }],
        },
      },
      {
        metadata: { namespace: "m", name: "ext" },
        spec: { type: "ExternalName", externalName: "api.example.com" },
      },
    ],
    endpointSlices: [
      {
        metadata: {
          namespace: "m",
          name: "web-a",
          labels: { "kubernetes.io/service-name": "web" },
        },
        addressType: "IPv4",
        ports: [{ name: "http", port: 8080, protocol: "TCP" }],
        endpoints: [
          { addresses: ["10.3.0.1"], conditions: { ready: true } },
          {
            addresses: ["10.3.0.2"],
            conditions: { ready: false, serving: true, terminating: true },
          },
        ],
      },
      {
        metadata: {
          namespace: "m",
          name: "web-b",
          labels: { "kubernetes.io/service-name": "web" },
        },
        addressType: "IPv6",
        ports: [{ name: "http", port: 8080 }],
        endpoints: [{ addresses: ["fd00::3"] }],
      },
    ],
    secrets: [{
      metadata: { namespace: "m", name: "tls" },
      type: "kubernetes.io/tls",
      stringData: { "tls.crt": "cert", "tls.key": "key" },
    }],
  };
}

const HOSTILE_VALUES: unknown[] = [
  undefined,
  null,
  "",
  0,
  -1,
  70000,
  1.5,
  true,
  [],
  {},
  "x".repeat(70_000),
  "/",
  "//",
  "*",
  "*.*.m.test",
  "M.TEST.",
  "127.1",
  "localhost",
  "ImplementationSpecific",
  "ExternalName",
  "FQDN",
  "IPv6",
  "::1",
  "é",
  "\u0000",
  "\ud800",
  "%2F",
  "__proto__",
  { __proto__: null },
  [null],
  ["*"],
];

type Node = Record<string, unknown> | unknown[];

/** Every object or array inside `root`, with `root` first. */
function containers(root: unknown, out: Node[] = []): Node[] {
  if (root === null || typeof root !== "object") return out;
  out.push(root as Node);
  for (const value of Object.values(root)) containers(value, out);
  return out;
}

/** One random change inside the collections of `root`: delete, null, replace or duplicate a field. */
function mutate(root: unknown, next: () => number): void {
  const nodes = containers(root);
  // Not the root itself: the collections stay lists (their items may become anything).
  const node = nodes[1 + Math.floor(next() * (nodes.length - 1))]!;
  const keys = Object.keys(node);
  if (keys.length === 0) {
    if (Array.isArray(node)) node.push(HOSTILE_VALUES[Math.floor(next() * HOSTILE_VALUES.length)]);
    return;
  }
  const key = keys[Math.floor(next() * keys.length)]!;
  const record = node as Record<string, unknown>;
  const roll = next();
  if (roll < 0.2) {
    if (Array.isArray(node)) node.splice(Number(key), 1);
    else delete record[key];
  } else if (roll < 0.3) {
    record[key] = null;
  } else if (roll < 0.75) {
    record[key] = structuredClone(HOSTILE_VALUES[Math.floor(next() * HOSTILE_VALUES.length)]);
  } else if (roll < 0.9 && Array.isArray(node)) {
    // Duplicate an element (duplicate rules, paths, endpoints, ports).
    node.push(structuredClone(node[Number(key)]));
  } else {
    // Swap in another part of the cluster (an object where a string belongs, and so on).
    const other = nodes[Math.floor(next() * nodes.length)]!;
    record[key] = structuredClone(other);
  }
}

Deno.test("translate() never throws on 400 seeded mutations of a valid cluster and keeps the good route", () => {
  for (let seed = 1; seed <= 400; seed++) {
    const next = seededRandom(seed);
    const world = structuredClone(validCluster()) as Record<string, unknown[]>;
    const mutations = 1 + Math.floor(next() * 6);
    for (let i = 0; i < mutations; i++) mutate(world, next);
    const extra = world as Extra;
    const translation = run(extra, {
      defaultBackendService: next() < 0.5 ? "m/web:http" : "m/ext",
      defaultSslCertificate: "m/tls",
    }, `seed ${seed}`);
    // Every Issue is well-formed, and lookups on the compiled table never throw.
    for (const issue of translation.issues) {
      assert(typeof issue.message === "string" && issue.message !== "", `seed ${seed}`);
      assert(typeof issue.field === "string", `seed ${seed}`);
    }
    const table = compileRouteTable(translation);
    for (
      const [host, path] of [["m.test", "/exact"], ["a.m.test", "/w/x"], ["x", "/any"], [
        "M.TEST.",
        "/impl/%2F",
      ]]
    ) {
      table.lookup(host!, path!);
    }
  }
});
