/**
 * Backends: the table of backend parsing cases and backend keys, and through
 * `translate()` every ExternalName spelling that reaches loopback refused.
 *
 * @module
 */
import { assertEquals, assertMatch } from "../../tests/support/assert.ts";
import { backendKey, parseBackend } from "./backends.ts";
import { onePath, PREFIX, runBesideGood, SVC } from "../../tests/support/good_cluster.ts";

Deno.test("parseBackend() accepts a service with a port number or name, or a resource", () => {
  const cases: [unknown, string][] = [
    [{ service: { name: "web", port: { number: 80 } } }, "shop/web:80"],
    [{ service: { name: "web", port: { name: "http" } } }, "shop/web:http"],
    [{ resource: { kind: "Bucket", name: "b" } }, "shop/b (Bucket)"],
    [{ resource: { apiGroup: "x.io", kind: "Bucket", name: "b" } }, "shop/b (Bucket.x.io)"],
    [undefined, "error "],
    [{}, "error "],
    [
      { service: { name: "web", port: { number: 80 } }, resource: { kind: "B", name: "b" } },
      "error ",
    ],
    [{ resource: { name: "b" } }, "error resource"],
    [{ service: { port: { number: 80 } } }, "error service.name"],
    [{ service: { name: "web" } }, "error service.port"],
    [{ service: { name: "web", port: { number: 80, name: "http" } } }, "error service.port"],
    [{ service: { name: "web", port: { number: 0 } } }, "error service.port.number"],
    [{ service: { name: "web", port: { number: "80" } } }, "error service.port.number"],
    [{ service: { name: "web", port: { name: "HTTP" } } }, "error service.port.name"],
  ];
  for (const [raw, expected] of cases) {
    const result = parseBackend(raw, "shop");
    assertEquals(
      result.ok ? backendKey(result.ref) : `error ${result.field}`,
      expected,
      JSON.stringify(raw),
    );
  }
});

/** An Ingress `shop/app` routing `app.test` to Service `shop/app` port `port`. */
function appIngress(port: unknown = { number: 80 }): unknown {
  return {
    metadata: { namespace: "shop", name: "app", creationTimestamp: "2024-01-01T00:00:00Z" },
    spec: { ingressClassName: "sluice", ...onePath(PREFIX(SVC(port, "app")), "app.test") },
  };
}

// Was a bug: numeric IPv4 spellings the resolver accepts ("127.1", "2130706433", "0x7f.1",
// "0177.0.0.1", "0") slipped past the loopback refusal; Deno.connect reaches 127.0.0.1 with each.
Deno.test({
  name: "translate() refuses every ExternalName spelling that reaches loopback",
  fn() {
    for (
      const name of ["127.1", "127.0.1", "2130706433", "0x7f.1", "0x7f000001", "0177.0.0.1", "0"]
    ) {
      const translation = runBesideGood(
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
