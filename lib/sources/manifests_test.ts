/**
 * `parseManifest()`: every document of the kinds Sluice reads, Lists flattened,
 * other kinds and nameless objects reported, syntax errors located without
 * quoting the text, and hostile YAML (billion-laughs aliases, self-containing
 * Lists, alias cycles, nesting deep enough to overflow the parser) reported
 * instead of thrown.
 *
 * @module
 */
import {
  assert,
  assertEquals,
  assertMatch,
  assertStringIncludes,
} from "../../tests/support/assert.ts";
import { parseManifest } from "./manifests.ts";
import { service, SERVICE_A, SERVICE_B } from "../../tests/support/manifest_texts.ts";

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

Deno.test("parseManifest() reports and skips other kinds, nameless objects and Secrets neither TLS nor Opaque", () => {
  const parsed = parseManifest(`kind: Deployment
metadata: {name: web}
---
kind: Service
metadata: {namespace: shop}
---
kind: Secret
metadata: {name: docker}
type: kubernetes.io/dockerconfigjson
data: {a: Yg==}
---
kind: Secret
metadata: {name: users}
data: {auth: Yg==}
---
- just
- a list
---
kind: Service
metadata: {name: kept}
`);
  assert(parsed.ok);
  // An Opaque Secret (the default type) is read: it may hold an auth-secret's users.
  assertEquals(parsed.objects.map((o) => o.object.metadata?.name), ["users", "kept"]);
  assertEquals(parsed.problems.length, 4);
  assertStringIncludes(parsed.problems[0]!, `document 1 (line 1): kind "Deployment" is not one`);
  assertStringIncludes(parsed.problems[1]!, "document 2 (line 4)");
  assertStringIncludes(parsed.problems[1]!, "metadata.name is missing");
  assertStringIncludes(parsed.problems[2]!, `type must be "kubernetes.io/tls" or "Opaque"`);
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

/** A billion-laughs document: 10 levels of 10 aliases each of the one before. */
function aliasBomb(): string {
  let text =
    "kind: Service\nmetadata: {name: bomb, namespace: shop}\nspec:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  let previous = "a";
  for (let i = 0; i < 9; i++) {
    const name = `b${i}`;
    text += `  ${name}: &${name} [${Array(10).fill(`*${previous}`).join(", ")}]\n`;
    previous = name;
  }
  return text;
}

Deno.test("parseManifest() skips a billion-laughs document with a problem and keeps the others", () => {
  const parsed = parseManifest(`${SERVICE_A}---\n${aliasBomb()}---\n${SERVICE_B}`);
  assert(parsed.ok);
  assertEquals(parsed.objects.map((o) => o.object.metadata?.name), ["a", "b"]);
  assertEquals(parsed.problems.length, 1);
  assertStringIncludes(parsed.problems[0]!, "document 2 (line 5)");
  assertStringIncludes(parsed.problems[0]!, "alias");
});

Deno.test("parseManifest() reports documents that are a scalar or a list and skips them", () => {
  const parsed = parseManifest(`just a string\n---\n- a\n- b\n---\n42\n---\n${SERVICE_A}`);
  assert(parsed.ok);
  assertEquals(parsed.objects.map((o) => o.object.metadata?.name), ["a"]);
  assertEquals(parsed.problems, [
    "Cannot use document 1 (line 1): it is not an object",
    "Cannot use document 2 (line 3): it is not an object",
    "Cannot use document 3 (line 6): it is not an object",
  ]);
});

Deno.test("parseManifest() turns nesting deep enough to overflow the parser's stack into an error", () => {
  const deep = `kind: Service\nmetadata: {name: x}\nspec: ${"[".repeat(20_000)}${
    "]".repeat(20_000)
  }\n`;
  const parsed = parseManifest(deep);
  assert(!parsed.ok);
  assertEquals(parsed.line, 3);
});

// Was a bug: a List that contains itself through an alias made collect() recurse until the stack
// overflowed.
Deno.test({
  name: "parseManifest() reports a List that contains itself through an alias instead of throwing",

  fn() {
    const parsed = parseManifest(`&list\nkind: List\nitems:\n  - *list\n---\n${SERVICE_A}`);
    assert(parsed.ok);
    assertEquals(parsed.objects.map((o) => o.object.metadata?.name), ["a"]);
    assertEquals(parsed.problems.length, 1);
  },
});

// Was a bug: an alias cycle inside an object reached the store as a cyclic JS object.
Deno.test({
  name: "parseManifest() rejects an object whose aliases form a cycle",

  fn() {
    const parsed = parseManifest(
      `kind: Service\nmetadata: &m {name: loop, namespace: shop, self: *m}\n---\n${SERVICE_A}`,
    );
    assert(parsed.ok);
    assertEquals(parsed.objects.map((o) => o.object.metadata?.name), ["a"]);
    assertEquals(parsed.problems.length, 1);
    // Whatever is kept must survive being serialised (status endpoints, logs, the store).
    JSON.stringify(parsed.objects);
  },
});

// Was a bug: each document's line was found by scanning the text from its start, so N documents
// cost O(N * size) (16,000 documents took about 30 s). Lines now come from one scan and a binary
// search; the time is not asserted here (no timed unit tests), the lines are.
Deno.test("parseManifest() names the right line for a document far into a long file", () => {
  const text = Array.from({ length: 8_000 }, (_, i) => service(i)).join("---\n") + "---\n42\n";
  const lines = text.split("\n");
  const parsed = parseManifest(text);
  assert(parsed.ok);
  assertEquals(parsed.objects.length, 8_000);
  assertEquals(parsed.problems.length, 1);
  assertMatch(
    parsed.problems[0]!,
    new RegExp(`document 8001 \\(line ${lines.indexOf("42") + 1}\\)`),
  );
});
