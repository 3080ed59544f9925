/**
 * Table of backend parsing cases and backend keys.
 *
 * @module
 */

import { assertEquals } from "../../tests/support/assert.ts";
import { backendKey, parseBackend } from "./backends.ts";

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
