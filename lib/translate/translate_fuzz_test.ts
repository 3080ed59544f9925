/**
 * `translate()` under random and mutated input: it never throws, and a good
 * Ingress keeps its routes beside random structural garbage (300 seeds) and
 * beside 400 seeded mutations of a valid cluster (hostile values put in every
 * field, fields dropped, types changed).
 *
 * @module
 */
import type { ClusterObjects, InspectCertificate, TranslateOptions } from "./translation.ts";
import type { Ingress } from "../k8s/objects.ts";
import { seededRandom } from "../../tests/support/seeded_random.ts";
import { translate } from "./translate.ts";
import { compileRouteTable } from "../routing/route_table.ts";
import { assert, assertEquals } from "../../tests/support/assert.ts";
import { type ExtraObjects, runBesideGood, SVC } from "../../tests/support/good_cluster.ts";

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

/** A valid cluster in namespace `m` using every feature translation reads. */
function validCluster(): ExtraObjects {
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
    const extra = world as ExtraObjects;
    const translation = runBesideGood(extra, {
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
