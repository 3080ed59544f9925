/**
 * Adversarial tests of the `--manifests` source: alias bombs and cycles,
 * many documents, bytes that are not UTF-8, documents that are not objects,
 * duplicates across files and symlink loops. Each must give a diagnostic,
 * stay bounded, and keep the other files' (and the last good) objects.
 *
 * @module
 */
import { join } from "node:path";
import {
  assert,
  assertEquals,
  assertMatch,
  assertStringIncludes,
} from "../../tests/support/assert.ts";
import { within } from "../../tests/support/wait.ts";
import { captureLogs } from "../../tests/support/captured_logs.ts";
import { ObjectStore } from "../store/object_store.ts";
import {
  loadedSource,
  names,
  service,
  SERVICE_A,
  SERVICE_B,
  withDirectory,
} from "../../tests/support/manifest_texts.ts";
import { ManifestSource } from "./manifest_source.ts";
import { parseManifest } from "./manifests.ts";

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

// Was a bug: such a file made #load() reject, which poisoned the #loading chain: the source never
// synced and never reloaded again.
Deno.test({
  name: "ManifestSource survives a file whose List contains itself and still loads the other files",

  async fn() {
    await withDirectory(async (dir) => {
      await Deno.writeTextFile(join(dir, "a.yaml"), SERVICE_A);
      await Deno.writeTextFile(join(dir, "loop.yaml"), "&list\nkind: List\nitems:\n  - *list\n");
      using logs = captureLogs();
      const { store, source } = await loadedSource(dir, logs.logger, { watch: false });
      assertEquals(names(store), ["shop/a"]);
      // Fixing the file is picked up by the next reload.
      await Deno.writeTextFile(join(dir, "loop.yaml"), SERVICE_B);
      await within(5_000, "a reload", source.reload());
      assertEquals(names(store), ["shop/a", "shop/b"]);
      await source.stop();
    });
  },
});

// Was a bug: Deno.readTextFile() decodes lossily, so a file that is not UTF-8 loaded with U+FFFD
// in names and values and no diagnostic.
Deno.test({
  name: "ManifestSource reports a file that is not valid UTF-8 and keeps its last good objects",

  async fn() {
    await withDirectory(async (dir) => {
      const path = join(dir, "a.yaml");
      await Deno.writeTextFile(path, SERVICE_A);
      using logs = captureLogs();
      const { store, source } = await loadedSource(dir, logs.logger, { watch: false });
      const bytes = new TextEncoder().encode(SERVICE_A.replace("name: a", "name: a\xff"));
      // Replace the encoded U+00FF (c3 bf) by a lone 0xff byte.
      const at = bytes.indexOf(0xc3);
      await Deno.writeFile(
        path,
        Uint8Array.from([...bytes.slice(0, at), 0xff, ...bytes.slice(at + 2)]),
      );
      await source.reload();
      assertEquals(names(store), ["shop/a"]);
      assertEquals(source.status().failedFiles, [path]);
      assert(logs.lines().some((l) => l.startsWith("error:") && l.includes(path)));
      await source.stop();
    });
  },
});

Deno.test("ManifestSource refuses a file over 16 MiB without reading it, and keeps its last good objects", async () => {
  await withDirectory(async (dir) => {
    const path = join(dir, "a.yaml");
    await Deno.writeTextFile(path, SERVICE_A);
    using logs = captureLogs();
    const { store, source } = await loadedSource(dir, logs.logger, { watch: false });
    await Deno.writeTextFile(path, SERVICE_A + `# ${"x".repeat(1022)}\n`.repeat(17 * 1024));
    await source.reload();
    assertEquals(names(store), ["shop/a"]);
    assertEquals(source.status().failedFiles, [path]);
    assert(logs.lines().some((l) => l.includes("larger than 16777216 bytes")), logs.lines().join());
    await source.stop();
  });
});

Deno.test("ManifestSource keeps a file's other documents when one is a billion-laughs bomb", async () => {
  await withDirectory(async (dir) => {
    const path = join(dir, "a.yaml");
    await Deno.writeTextFile(path, `${SERVICE_A}---\n${aliasBomb()}`);
    using logs = captureLogs();
    const { store, source } = await loadedSource(dir, logs.logger, { watch: false });
    assertEquals(names(store), ["shop/a"]);
    assertEquals(source.status().skippedDocuments, 1);
    assert(logs.lines().some((l) => l.startsWith("warning:") && l.includes("alias")));
    await source.stop();
  });
});

Deno.test("ManifestSource lets the later file win for an object defined twice and warns once", async () => {
  await withDirectory(async (dir) => {
    await Deno.writeTextFile(join(dir, "a.yaml"), SERVICE_A);
    await Deno.writeTextFile(join(dir, "b.yaml"), SERVICE_A.replace("port: 80", "port: 81"));
    using logs = captureLogs();
    const { store, source } = await loadedSource(dir, logs.logger, { watch: false });
    const port = () =>
      (store.get("Service", "shop/a") as { spec: { ports: { port: number }[] } }).spec.ports[0]!
        .port;
    assertEquals(port(), 81);
    await Deno.writeTextFile(join(dir, "c.yaml"), SERVICE_B);
    await source.reload();
    await source.reload();
    const warnings = logs.lines().filter((l) => l.includes("defined in both"));
    assertEquals(warnings.length, 1, warnings.join("\n"));
    assertStringIncludes(warnings[0]!, join(dir, "a.yaml"));
    assertStringIncludes(warnings[0]!, join(dir, "b.yaml"));
    assertEquals(port(), 81);
    await source.stop();
  });
});

Deno.test("ManifestSource skips a symlink loop and a dangling symlink and loads the rest", async () => {
  await withDirectory(async (dir) => {
    await Deno.writeTextFile(join(dir, "a.yaml"), SERVICE_A);
    await Deno.symlink(join(dir, "loop.yaml"), join(dir, "loop.yaml"));
    await Deno.symlink(join(dir, "ping.yaml"), join(dir, "pong.yaml"));
    await Deno.symlink(join(dir, "pong.yaml"), join(dir, "ping.yaml"));
    await Deno.symlink(join(dir, "missing"), join(dir, "dangling.yaml"));
    using logs = captureLogs();
    const { store, source } = await loadedSource(dir, logs.logger, { watch: false });
    assertEquals(names(store), ["shop/a"]);
    assertEquals(source.status().files, 1);
    assertEquals(source.status().failedFiles, []);
    await source.stop();
  });
});

Deno.test("ManifestSource loads 2,000 documents from one file with a bounded store", async () => {
  await withDirectory(async (dir) => {
    const text = Array.from({ length: 2_000 }, (_, i) => service(i)).join("---\n");
    await Deno.writeTextFile(join(dir, "many.yaml"), text);
    using logs = captureLogs();
    const store = new ObjectStore();
    const source = new ManifestSource({ directory: dir, logger: logs.logger, watch: false });
    source.start(store);
    await within(30_000, "the first load", source.synced);
    assertEquals(store.list("Service").length, 2_000);
    // A reload of the unchanged file does not parse it again or change the store.
    const before = source.status().loads;
    await source.reload();
    assertEquals(source.status().loads, before + 1);
    assertEquals(store.list("Service").length, 2_000);
    await source.stop();
  });
});
