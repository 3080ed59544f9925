/**
 * Endpoints: the table of EndpointSlice reading cases (conditions, ports,
 * address types), and through `translate()` odd EndpointSlices and Services read
 * as Kubernetes means them (a backend left empty or a reported 503), and a port
 * name that looks like a number kept apart from that number.
 *
 * @module
 */
import { assert, assertEquals, assertMatch } from "../../tests/support/assert.ts";
import type { EndpointSlice, ServicePort } from "../k8s/objects.ts";
import { collectEndpoints, findServicePort } from "./endpoints.ts";
import {
  issuesOf,
  onePath,
  PREFIX,
  routesOf,
  runBesideGood,
  SVC,
} from "../../tests/support/good_cluster.ts";
import { compileRouteTable } from "../routing/route_table.ts";

function slice(partial: Partial<EndpointSlice>): EndpointSlice {
  return { addressType: "IPv4", ports: [{ name: "http", port: 8080 }], ...partial };
}

const HTTP: ServicePort = { name: "http", port: 80, targetPort: "web" };

Deno.test("collectEndpoints() applies ready, serving and terminating as kube-proxy does", () => {
  const cases: [name: string, slices: EndpointSlice[], expected: string[]][] = [
    ["absent conditions are ready", [slice({ endpoints: [{ addresses: ["10.0.0.1"] }] })], [
      "10.0.0.1:8080",
    ]],
    ["not ready is skipped", [
      slice({ endpoints: [{ addresses: ["10.0.0.1"], conditions: { ready: false } }] }),
    ], []],
    [
      "serving+terminating only when nothing is ready",
      [slice({
        endpoints: [
          {
            addresses: ["10.0.0.1"],
            conditions: { ready: false, serving: true, terminating: true },
          },
          { addresses: ["10.0.0.2"], conditions: { ready: true } },
        ],
      })],
      ["10.0.0.2:8080"],
    ],
    [
      "serving+terminating as last resort",
      [slice({
        endpoints: [
          {
            addresses: ["10.0.0.1"],
            conditions: { ready: false, serving: true, terminating: true },
          },
          {
            addresses: ["10.0.0.3"],
            conditions: { ready: false, serving: false, terminating: true },
          },
        ],
      })],
      ["10.0.0.1:8080"],
    ],
    [
      "IPv6 kept, FQDN ignored",
      [
        slice({ addressType: "IPv6", endpoints: [{ addresses: ["fd00::1"] }] }),
        slice({ addressType: "FQDN", endpoints: [{ addresses: ["a.example"] }] }),
      ],
      ["fd00::1:8080"],
    ],
    [
      "slice port matched by the Service port's name",
      [slice({
        ports: [{ name: "metrics", port: 9090 }, { name: "http", port: 8081 }],
        endpoints: [{ addresses: ["10.0.0.1"] }],
      })],
      ["10.0.0.1:8081"],
    ],
    ["a slice without the port is skipped", [
      slice({ ports: [{ name: "metrics", port: 9090 }], endpoints: [{ addresses: ["10.0.0.1"] }] }),
    ], []],
    [
      "an endpoint with several addresses counts once, by its first (as kube-proxy)",
      [slice({
        endpoints: [{ addresses: ["10.0.0.5", "10.0.0.6"] }, { addresses: ["10.0.0.7"] }],
      })],
      ["10.0.0.5:8080", "10.0.0.7:8080"],
    ],
    [
      "deduplicated and sorted across slices",
      [
        slice({ endpoints: [{ addresses: ["10.0.0.2", "10.0.0.1"] }] }),
        slice({ endpoints: [{ addresses: ["10.0.0.1"] }] }),
      ],
      ["10.0.0.1:8080", "10.0.0.2:8080"],
    ],
  ];
  for (const [name, slices, expected] of cases) {
    assertEquals(
      collectEndpoints(slices, HTTP).map((e) => `${e.address}:${e.port}`),
      expected,
      name,
    );
  }
});

Deno.test("collectEndpoints() matches an unnamed Service port to unnamed slice ports", () => {
  const endpoints = collectEndpoints([
    slice({ ports: [{ port: 8080 }], endpoints: [{ addresses: ["10.0.0.1"] }] }),
  ], {
    port: 80,
  });
  assertEquals(endpoints, [{ address: "10.0.0.1", port: 8080 }]);
});

Deno.test("findServicePort() finds by number or by name, never by target port", () => {
  const service = {
    spec: { ports: [{ name: "http", port: 80, targetPort: 8080 }, { name: "admin", port: 81 }] },
  };
  assertEquals(findServicePort(service, 80)?.name, "http");
  assertEquals(findServicePort(service, "admin")?.port, 81);
  assertEquals(findServicePort(service, 8080), undefined);
  assertEquals(findServicePort({}, 80), undefined);
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
    const translation = runBesideGood({
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
    const translation = runBesideGood(
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
    const translation = runBesideGood(
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
