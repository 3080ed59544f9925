import { assert, assertEquals, assertStringIncludes } from "../../tests/support/assert.ts";
import { parseManifest } from "./manifests.ts";

Deno.test("parseManifest() reads every document of the kinds Sluice reads", () => {
  const parsed = parseManifest(`
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: shop}
---
kind: IngressClass
metadata: {name: sluice}
spec: {controller: sluice.dev/ingress-controller}
---
kind: Service
metadata: {name: web}
---
kind: EndpointSlice
metadata: {name: web-1, namespace: shop}
---
kind: Secret
type: kubernetes.io/tls
metadata: {name: tls, namespace: shop}
stringData: {tls.crt: x, tls.key: y}
`);
  assert(parsed.ok);
  assertEquals(parsed.problems, []);
  assertEquals(
    parsed.objects.map((o) => [o.kind, o.object.metadata?.namespace, o.object.metadata?.name]),
    [
      ["Ingress", "shop", "web"],
      ["IngressClass", undefined, "sluice"],
      ["Service", "default", "web"],
      ["EndpointSlice", "shop", "web-1"],
      ["Secret", "shop", "tls"],
    ],
  );
});

Deno.test("parseManifest() flattens a List and skips empty documents", () => {
  const parsed = parseManifest(`
---
apiVersion: v1
kind: List
items:
- {kind: Service, metadata: {name: a, namespace: x}}
- {kind: Service, metadata: {name: b, namespace: x}}
---
`);
  assert(parsed.ok);
  assertEquals(parsed.objects.map((o) => o.object.metadata?.name), ["a", "b"]);
});

Deno.test("parseManifest() reports and skips other kinds, nameless objects and non-TLS Secrets", () => {
  const parsed = parseManifest(`kind: Deployment
metadata: {name: web}
---
kind: Service
metadata: {namespace: shop}
---
kind: Secret
metadata: {name: opaque}
data: {a: Yg==}
---
- just
- a list
---
kind: Service
metadata: {name: kept}
`);
  assert(parsed.ok);
  assertEquals(parsed.objects.map((o) => o.object.metadata?.name), ["kept"]);
  assertEquals(parsed.problems.length, 4);
  assertStringIncludes(parsed.problems[0]!, `document 1 (line 1): kind "Deployment" is not one`);
  assertStringIncludes(parsed.problems[1]!, "document 2 (line 4)");
  assertStringIncludes(parsed.problems[1]!, "metadata.name is missing");
  assertStringIncludes(parsed.problems[2]!, `type must be "kubernetes.io/tls"`);
  assertStringIncludes(parsed.problems[3]!, "not an object");
});

Deno.test("parseManifest() gives the line and column of a syntax error, without quoting the text", () => {
  const parsed = parseManifest(`kind: Secret
metadata: {name: tls}
type: kubernetes.io/tls
data:
  tls.key: [c2VjcmV0LWtleS1tYXRlcmlhbA==
  tls.crt: abc
`);
  assert(!parsed.ok);
  assertEquals(parsed.line, 6);
  assert(parsed.column >= 1);
  assert(!parsed.message.includes("c2VjcmV0"), `message quotes the text: ${parsed.message}`);
  assert(!parsed.message.includes("\n"));
});

Deno.test("parseManifest() of an empty file gives no objects", () => {
  assertEquals(parseManifest(""), { ok: true, objects: [], problems: [] });
  assertEquals(parseManifest("# only a comment\n"), { ok: true, objects: [], problems: [] });
});
