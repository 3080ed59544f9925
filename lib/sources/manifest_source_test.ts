/**
 * `ManifestSource` (`--manifests`): .yaml and .yml files loaded and reloaded as
 * they change, appear or disappear; a broken file's last good objects kept and
 * its path and line reported; and hostile directories (invalid UTF-8, a file over
 * 16 MiB, alias bombs, an object defined twice, symlink loops, 2,000 documents in
 * one file) survived with a bounded store.
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
import { waitFor, within } from "../../tests/support/wait.ts";
import { captureLogs } from "../../tests/support/captured_logs.ts";
import { ObjectStore } from "../store/object_store.ts";
import { Controller } from "../control/controller.ts";
import { createCertificateInspector } from "../tls/certificate_inspector.ts";
import { translate } from "../translate/translate.ts";
import type { Translation } from "../translate/translation.ts";
import {
  loadedSource,
  names,
  service,
  SERVICE_A,
  SERVICE_B,
  withDirectory,
} from "../../tests/support/manifest_texts.ts";
import { ManifestSource } from "./manifest_source.ts";

Deno.test("ManifestSource loads .yaml and .yml files and ignores others", async () => {
  await withDirectory(async (dir) => {
    await Deno.writeTextFile(join(dir, "a.yaml"), SERVICE_A);
    await Deno.writeTextFile(join(dir, "b.yml"), SERVICE_B);
    await Deno.writeTextFile(join(dir, "c.json"), "{}");
    await Deno.writeTextFile(join(dir, ".hidden.yaml"), SERVICE_A.replace("name: a", "name: h"));
    using logs = captureLogs();
    const { store, source } = await loadedSource(dir, logs.logger, { watch: false });
    assertEquals(names(store), ["shop/a", "shop/b"]);
    assertEquals(source.status().files, 2);
    await source.stop();
  });
});

Deno.test("ManifestSource reloads when a file changes, appears or disappears", async () => {
  await withDirectory(async (dir) => {
    await Deno.writeTextFile(join(dir, "a.yaml"), SERVICE_A);
    using logs = captureLogs();
    const { store, source } = await loadedSource(dir, logs.logger, { debounceMs: 20 });
    assertEquals(names(store), ["shop/a"]);

    await Deno.writeTextFile(join(dir, "b.yaml"), SERVICE_B);
    await waitFor("b to appear", () => names(store).includes("shop/b"));

    await Deno.writeTextFile(join(dir, "a.yaml"), SERVICE_A.replace("name: a", "name: a2"));
    await waitFor("a renamed to a2", () => names(store).join() === "shop/a2,shop/b");

    await Deno.remove(join(dir, "b.yaml"));
    await waitFor("b to go", () => names(store).join() === "shop/a2");
    await source.stop();
  });
});

Deno.test("ManifestSource keeps a broken file's last good objects and reports its path and line", async () => {
  await withDirectory(async (dir) => {
    const path = join(dir, "a.yaml");
    await Deno.writeTextFile(path, SERVICE_A);
    await Deno.writeTextFile(join(dir, "b.yaml"), SERVICE_B);
    using logs = captureLogs();
    const { store, source } = await loadedSource(dir, logs.logger, { watch: false });

    await Deno.writeTextFile(path, `${SERVICE_A}---\nkind: Service\nmetadata: {name: [broken\n`);
    await Deno.writeTextFile(join(dir, "b.yaml"), SERVICE_B.replace("port: 80", "port: 81"));
    await source.reload();
    assertEquals(names(store), ["shop/a", "shop/b"]);
    assertEquals(source.status().failedFiles, [path]);
    // The good file's change was taken.
    assertEquals(
      (store.get("Service", "shop/b") as { spec: { ports: { port: number }[] } }).spec.ports[0]!
        .port,
      81,
    );
    const error = logs.lines().find((l) => l.startsWith("error:"));
    assert(error !== undefined, `no error logged: ${logs.lines().join("\n")}`);
    assertStringIncludes(error, path);
    // The parser notices the unclosed "[" at the end of the file.
    assertMatch(error, /line [67], column \d+: Flow sequence/);

    await Deno.writeTextFile(path, SERVICE_B.replace("name: b", "name: c"));
    await source.reload();
    assertEquals(names(store), ["shop/b", "shop/c"]);
    assertEquals(source.status().failedFiles, []);
    await source.stop();
  });
});

Deno.test("ManifestSource reports objects of unknown kinds and skips them", async () => {
  await withDirectory(async (dir) => {
    await Deno.writeTextFile(
      join(dir, "mixed.yaml"),
      `kind: ConfigMap\nmetadata: {name: cm}\n---\n${SERVICE_A}`,
    );
    using logs = captureLogs();
    const { store, source } = await loadedSource(dir, logs.logger, { watch: false });
    assertEquals(names(store), ["shop/a"]);
    assertEquals(source.status().skippedDocuments, 1);
    assert(logs.lines().some((l) => l.includes("ConfigMap") && l.includes("mixed.yaml")));
    await source.stop();
  });
});

Deno.test("ManifestSource waits for a missing directory and loads it once it exists", async () => {
  await withDirectory(async (parent) => {
    const dir = join(parent, "later");
    using logs = captureLogs();
    const store = new ObjectStore();
    const source = new ManifestSource({
      directory: dir,
      logger: logs.logger,
      retryMs: 20,
      debounceMs: 20,
    });
    source.start(store);
    await waitFor(
      "an error about the directory",
      () => logs.lines().some((l) => l.startsWith("error:")),
    );
    assert(!source.isSynced);
    await Deno.mkdir(dir);
    await Deno.writeTextFile(join(dir, "a.yaml"), SERVICE_A);
    await within(5_000, "the first load", source.synced);
    assertEquals(names(store), ["shop/a"]);
    await source.stop();
  });
});

Deno.test("ManifestSource feeds a Controller: routes published, a broken file keeps the last good ones", async () => {
  await withDirectory(async (dir) => {
    const path = join(dir, "site.yaml");
    const site = (host: string) =>
      `kind: IngressClass
metadata: {name: sluice}
spec: {controller: sluice.dev/ingress-controller}
---
kind: Ingress
metadata: {name: web, namespace: shop}
spec:
  ingressClassName: sluice
  rules:
  - host: ${host}
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
`;
    await Deno.writeTextFile(path, site("a.test"));
    using logs = captureLogs();
    const published: Translation[] = [];
    const controller = new Controller({
      sources: [new ManifestSource({ directory: dir, logger: logs.logger, debounceMs: 20 })],
      settings: {},
      inspectCertificate: createCertificateInspector(),
      publish: (t) => {
        published.push(t);
      },
      logger: logs.logger,
    });
    controller.start();
    try {
      await within(5_000, "readiness", controller.whenReady);
      assertEquals(published.at(-1)?.routes.map((r) => r.host), ["a.test"]);

      await Deno.writeTextFile(path, site("b.test"));
      await waitFor("b.test", () => published.at(-1)?.routes[0]?.host === "b.test");

      const count = published.length;
      await Deno.writeTextFile(path, `${site("c.test")}  - {broken: [\n`);
      await waitFor(
        "the parse error",
        () => logs.lines().some((l) => l.includes("Cannot load manifest")),
      );
      assertEquals(published.length, count);
      assertEquals(controller.published?.routes.map((r) => r.host), ["b.test"]);
    } finally {
      await controller.stop();
    }
  });
});

Deno.test("ManifestSource loads the example manifests without a problem", async () => {
  using logs = captureLogs();
  const store = new ObjectStore();
  const directory = new URL("../../examples/manifests/", import.meta.url).pathname;
  const source = new ManifestSource({ directory, logger: logs.logger, watch: false });
  source.start(store);
  await within(5_000, "the first load", source.synced);
  await source.stop();
  const status = source.status();
  assertEquals([status.failedFiles, status.skippedDocuments], [[], 0]);
  const translation = translate(store.objects(), {
    now: Date.now(),
    inspectCertificate: createCertificateInspector(),
  });
  assertEquals(
    translation.routes.map((r) => `${r.host}${r.path} ${r.pathType} ${r.backend}`),
    [
      "*.apps.localhost/ Prefix demo/apps:80",
      "down.localhost/ Prefix demo/maintenance:80",
      "secure.localhost/ Prefix demo/web:http",
      "shop.localhost/ Prefix demo/web:http",
      "shop.localhost/api/health Exact demo/api:http",
    ],
  );
  // Every Service has its one loopback endpoint but "maintenance", which shows a 503.
  assertEquals(
    translation.backends.filter((b) => b.endpoints.length !== 1).map((b) => b.key),
    ["demo/maintenance:80"],
  );
  // Issues: that Service's missing endpoints, and the Secret the demo generates.
  assertEquals(translation.issues.map((i) => `${i.namespace}/${i.name}`), [
    "demo/down",
    "demo/secure",
  ]);
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
