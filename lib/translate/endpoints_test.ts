/**
 * Table of EndpointSlice reading cases (conditions, ports, address types).
 *
 * @module
 */

import { assertEquals } from "../../tests/support/assert.ts";
import type { EndpointSlice, ServicePort } from "../k8s/objects.ts";
import { collectEndpoints, findServicePort } from "./endpoints.ts";

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
