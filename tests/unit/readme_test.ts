/**
 * The README documents every flag and every metric: both lists are read
 * from the code (`FLAGS`, the metrics registries), so adding one without
 * documenting it fails here, and so does documenting a flag that is gone.
 * And the README's links into `docs/`, and the `docs/` pages' links to each
 * other, lead to a file and heading that exist.
 */
import { assert, assertEquals } from "../support/assert.ts";
import { envName, FLAGS } from "../../lib/config/config.ts";
import { ControlPlaneMetrics } from "../../lib/metrics/control_plane_metrics.ts";
import { DataPlaneMetrics } from "../../lib/metrics/data_plane_metrics.ts";

const root = new URL("../../", import.meta.url);
const readme = await Deno.readTextFile(new URL("README.md", root));

Deno.test("the README lists every flag with its environment variable", () => {
  const missing = FLAGS.filter((f) =>
    !readme.includes(`\`--${f.name}\``) || !readme.includes(`\`${envName(f.name)}\``)
  ).map((f) => f.name);
  assert(missing.length === 0, `README lacks flags: ${missing.join(", ")}`);
});

Deno.test("every flag the README lists exists", () => {
  const listed = [...readme.matchAll(/^\| `--([a-z0-9-]+)`/gm)].map((m) => m[1]!);
  assert(listed.length >= 20, `${listed.length} flags found in the README`);
  const unknown = listed.filter((name) => !FLAGS.some((f) => f.name === name));
  assert(unknown.length === 0, `README lists flags that do not exist: ${unknown.join(", ")}`);
});

Deno.test("the README lists every metric Sluice exposes", async () => {
  const names = [
    ...await new DataPlaneMetrics().registry.getMetricsAsJSON(),
    ...await new ControlPlaneMetrics().registry.getMetricsAsJSON(),
  ].map((m) => m.name);
  assert(names.length >= 15, `${names.length} metrics found`);
  const missing = names.filter((name) => !readme.includes(`\`${name}\``));
  assert(missing.length === 0, `README lacks metrics: ${missing.join(", ")}`);
});

/** The targets of a Markdown text's inline links (`[text](target)`), code spans and blocks left out. */
function linkTargets(markdown: string): string[] {
  const prose = markdown.replace(/^```[^\n]*\n[\s\S]*?^```/gm, "").replace(/`[^`\n]*`/g, "");
  return [...prose.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!);
}

/** The anchors GitHub gives a Markdown text's headings (`## A b` → `a-b`; repeats get `-1`, `-2`). */
function headingAnchors(markdown: string): Set<string> {
  const prose = markdown.replace(/^```[^\n]*\n[\s\S]*?^```/gm, "");
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const [, heading] of prose.matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const slug = heading!.replace(/\[([^\]]*)\]\([^)]*\)/g, "$1").toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "").replace(/ /g, "-");
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return anchors;
}

/** Links of `from` (a path under the root) to Markdown pages under `docs/` that lead nowhere. */
async function brokenDocsLinks(from: string): Promise<string[]> {
  const page = new URL(from, root);
  const docs = new URL("docs/", root).pathname;
  const broken: string[] = [];
  for (const target of linkTargets(await Deno.readTextFile(page))) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
    const [path, anchor] = target.split("#", 2) as [string, string | undefined];
    const file = new URL(path, page);
    if (!file.pathname.startsWith(docs) || !file.pathname.endsWith(".md")) continue;
    let linked: string;
    try {
      linked = await Deno.readTextFile(file);
    } catch {
      broken.push(`${target} (no such file)`);
      continue;
    }
    if (anchor !== undefined && !headingAnchors(linked).has(anchor)) {
      broken.push(`${target} (no such heading)`);
    }
  }
  return broken;
}

Deno.test("the README's links to docs/ pages lead to files and headings that exist", async () => {
  assert(
    linkTargets(readme).filter((t) => t.startsWith("docs/")).length >= 5,
    "the README links to the docs/ pages",
  );
  assertEquals(await brokenDocsLinks("README.md"), []);
});

Deno.test("the docs/ pages' links to each other lead to files and headings that exist", async () => {
  for await (const entry of Deno.readDir(new URL("docs/", root))) {
    if (entry.isFile && entry.name.endsWith(".md")) {
      assertEquals(await brokenDocsLinks(`docs/${entry.name}`), [], entry.name);
    }
  }
});

Deno.test("headingAnchors() and linkTargets() read Markdown as GitHub does", () => {
  const page = [
    "# Title",
    "## `TCP_NODELAY` on TLS, through FFI",
    "## Plain HTTP's client timeouts",
    "## HTTP/1.x framing",
    "## Title",
    "```sh",
    "# not a heading",
    "```",
    "See [a](docs/a.md#x) and `[b](docs/b.md)`, [c](https://example.com/).",
  ].join("\n");
  assertEquals([...headingAnchors(page)], [
    "title",
    "tcp_nodelay-on-tls-through-ffi",
    "plain-https-client-timeouts",
    "http1x-framing",
    "title-1",
  ]);
  assertEquals(linkTargets(page), ["docs/a.md#x", "https://example.com/"]);
});
