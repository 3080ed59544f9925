/**
 * Import rules for the pure core: nothing in `lib/translate/` or
 * `lib/routing/` touches I/O, the clock, randomness or outside packages.
 *
 * - `lib/translate/` imports nothing from `lib/routing/`: routing compiles
 *   translations; `Backend`/`Endpoint` live in `lib/translate/backend.ts`.
 * - Imports must be relative and stay inside `lib/translate/` and
 *   `lib/routing/`, except type-only imports of `lib/k8s/objects.ts`,
 *   imports of the constants-only `lib/k8s/labels.ts`, and of the pure
 *   address parsing of `lib/net/cidr.ts` (itself held to the same rules).
 *   No `node:`, `npm:`, `jsr:`, URL or bare specifiers; no dynamic `import()`.
 * - Code (comments and string literals removed) must not use `Deno`,
 *   `fetch(`, `Date.now(`, `new Date()`, `performance.now(`, `Math.random(`,
 *   `setTimeout(`, `setInterval(` or `console`.
 *
 * Tests and benchmarks beside the code (`*_test.ts`, `*_bench.ts`) are exempt:
 * they read fixtures and measure time.
 *
 * Boundaries for all of `lib/` (statically imported modules and modules loaded
 * by `new URL("…", import.meta.url)`, such as worker entries):
 *
 * - Product code does not depend on test code: a file under `lib/` other than
 *   a test or benchmark imports nothing under `tests/`, and no `*_test.ts` or
 *   `*_bench.ts` file. (Tests and benchmarks beside the code may use
 *   `tests/support/`.)
 * - A leading `_` means private to the folder: a file under `lib/` whose name
 *   starts with `_` (other than its own test) is imported only from its folder
 *   and the folders below it, wherever the importer lives.
 *
 * The data plane's three rooms import in one direction: the handler
 * (`lib/proxy/`) uses the WebSocket relay (`lib/websocket/`) and the upstream
 * client (`lib/upstream/`); the relay uses the client; the client uses neither.
 *
 * @module
 */

import { assertEquals } from "./support/assert.ts";

const ROOT = new URL("../", import.meta.url);
const PURE_FOLDERS = ["lib/translate/", "lib/routing/"];
const TYPE_ONLY_ALLOWED = ["lib/k8s/objects.ts"];
/** Constants-only modules (no imports, no I/O) the pure folders may import values from. */
const VALUE_ALLOWED = ["lib/k8s/labels.ts", "lib/net/cidr.ts"];

/** Replaces comments and the contents of string and template literals with spaces. */
export function stripCommentsAndStrings(source: string): string {
  let out = "";
  let i = 0;
  const templateDepth: number[] = []; // brace depth at which each open template's `${` began
  let braces = 0;
  const blank = (text: string) => text.replace(/[^\n]/g, " ");
  while (i < source.length) {
    const c = source[i]!;
    const next = source[i + 1];
    if (c === "/" && next === "/") {
      const end = source.indexOf("\n", i);
      const stop = end < 0 ? source.length : end;
      out += blank(source.slice(i, stop));
      i = stop;
    } else if (c === "/" && next === "*") {
      const end = source.indexOf("*/", i + 2);
      const stop = end < 0 ? source.length : end + 2;
      out += blank(source.slice(i, stop));
      i = stop;
    } else if (c === '"' || c === "'") {
      let j = i + 1;
      while (j < source.length && source[j] !== c && source[j] !== "\n") {
        j += source[j] === "\\" ? 2 : 1;
      }
      out += c + blank(source.slice(i + 1, j)) + c;
      i = j + 1;
    } else if (c === "`" || (c === "}" && templateDepth.at(-1) === braces)) {
      // Template text runs until the closing backtick or the next `${`.
      if (c === "}") {
        templateDepth.pop();
      }
      let j = i + 1;
      while (
        j < source.length && source[j] !== "`" && !(source[j] === "$" && source[j + 1] === "{")
      ) {
        j += source[j] === "\\" ? 2 : 1;
      }
      out += c + blank(source.slice(i + 1, j));
      if (source[j] === "$") {
        templateDepth.push(braces);
        out += "${";
        i = j + 2;
      } else {
        out += "`";
        i = j + 1;
      }
    } else {
      if (c === "{") braces++;
      if (c === "}") braces--;
      out += c;
      i++;
    }
  }
  return out;
}

/** One static import or re-export. */
interface ImportStatement {
  readonly specifier: string;
  readonly typeOnly: boolean;
}

/** Finds `import … from "x"`, `import "x"`, `export … from "x"` statements. */
export function findImports(source: string): ImportStatement[] {
  const imports: ImportStatement[] = [];
  const pattern =
    /(?:^|[;}\n])\s*(import|export)\s+(type\s+)?([^;'"`]*?)\s*\bfrom\s*(["'])([^"']+)\4/g;
  for (const match of source.matchAll(pattern)) {
    const clause = match[3] ?? "";
    const named = /^\{([\s\S]*)\}$/.exec(clause.trim());
    const allNamedAreTypes = named !== null &&
      named[1]!.split(",").map((s) => s.trim()).filter((s) => s !== "").every((s) =>
        s.startsWith("type ")
      );
    imports.push({ specifier: match[5]!, typeOnly: match[2] !== undefined || allNamedAreTypes });
  }
  for (const match of source.matchAll(/(?:^|[;\n])\s*import\s*(["'])([^"']+)\1/g)) {
    imports.push({ specifier: match[2]!, typeOnly: false });
  }
  return imports;
}

const FORBIDDEN_CODE: [RegExp, string][] = [
  [/\bDeno\b/, "Deno APIs"],
  [/\bfetch\s*\(/, "fetch("],
  [/\bimport\s*\(/, "dynamic import()"],
  [/\bDate\.now\s*\(/, "Date.now() (pass `now` in)"],
  [/\bnew\s+Date\s*\(\s*\)/, "new Date() (pass `now` in)"],
  [/\bperformance\.now\s*\(/, "performance.now()"],
  [/\bMath\.random\s*\(/, "Math.random()"],
  [/\bset(?:Timeout|Interval)\s*\(/, "timers"],
  [/\bconsole\b/, "console"],
];

/** Checks one file's source; `path` is relative to the repository root. Returns violations. */
export function checkSource(path: string, source: string): string[] {
  const problems: string[] = [];
  for (const { specifier, typeOnly } of findImports(source)) {
    if (!specifier.startsWith("./") && !specifier.startsWith("../")) {
      problems.push(`${path}: imports "${specifier}" (only relative imports are allowed)`);
      continue;
    }
    const target = new URL(specifier, new URL(path, "file:///repo/")).pathname.replace(
      /^\/repo\//,
      "",
    );
    if (PURE_FOLDERS.some((folder) => target.startsWith(folder))) continue;
    if (TYPE_ONLY_ALLOWED.includes(target) && typeOnly) continue;
    if (VALUE_ALLOWED.includes(target)) continue;
    problems.push(
      `${path}: imports "${specifier}" (${target})` +
        (TYPE_ONLY_ALLOWED.includes(target)
          ? " without `import type`"
          : ", outside the pure folders"),
    );
  }
  const code = stripCommentsAndStrings(source);
  for (const [pattern, what] of FORBIDDEN_CODE) {
    const match = pattern.exec(code);
    if (match !== null) {
      const line = code.slice(0, match.index).split("\n").length;
      problems.push(`${path}:${line}: uses ${what}`);
    }
  }
  return problems;
}

/** `new URL("./x.ts", import.meta.url)`: a module loaded by URL (a worker entry, a subprocess). */
export function findModuleUrls(source: string): string[] {
  const urls: string[] = [];
  for (
    const match of source.matchAll(
      /new\s+URL\(\s*(["'])(\.{1,2}\/[^"']+)\1\s*,\s*import\.meta\.url/g,
    )
  ) {
    urls.push(match[2]!);
  }
  return urls;
}

const TEST_OR_BENCH = /_(test|bench)\.ts$/;

/**
 * Checks the boundaries of one file (`path` relative to the repository root):
 * product code under `lib/` importing test code, and `_` files of `lib/`
 * imported from outside their folder. Returns violations.
 */
export function checkBoundaries(path: string, source: string): string[] {
  const problems: string[] = [];
  const specifiers = [
    ...findImports(source).map((i) => i.specifier),
    ...findModuleUrls(source),
  ].filter((s) => s.startsWith("./") || s.startsWith("../"));
  const productCode = path.startsWith("lib/") && !TEST_OR_BENCH.test(path);
  const folder = path.slice(0, path.lastIndexOf("/") + 1);
  for (const specifier of specifiers) {
    const target = new URL(specifier, new URL(path, "file:///repo/")).pathname.replace(
      /^\/repo\//,
      "",
    );
    if (productCode && (target.startsWith("tests/") || TEST_OR_BENCH.test(target))) {
      problems.push(`${path}: imports "${specifier}" (${target}), test code, from product code`);
    }
    const name = target.slice(target.lastIndexOf("/") + 1);
    const targetFolder = target.slice(0, target.lastIndexOf("/") + 1);
    if (
      target.startsWith("lib/") && name.startsWith("_") && !TEST_OR_BENCH.test(name) &&
      !folder.startsWith(targetFolder)
    ) {
      problems.push(`${path}: imports "${specifier}" (${target}), private to ${targetFolder}`);
    }
  }
  return problems;
}

function listSources(folder: string): string[] {
  const files: string[] = [];
  for (const entry of Deno.readDirSync(new URL(folder, ROOT))) {
    const path = `${folder}${entry.name}`;
    if (entry.isDirectory) files.push(...listSources(`${path}/`));
    else if (entry.isFile && path.endsWith(".ts") && !/_(test|bench)\.ts$/.test(path)) {
      files.push(path);
    }
  }
  return files.sort();
}

/** Folders product code of a data-plane room must not import from. */
const ROOM_FORBIDDEN: readonly [room: string, forbidden: readonly string[]][] = [
  ["lib/upstream/", ["lib/proxy/", "lib/websocket/"]],
  ["lib/websocket/", ["lib/proxy/"]],
];

/** Imports by product code of `path` that go against the rooms' direction. */
export function checkRooms(path: string, source: string): string[] {
  if (TEST_OR_BENCH.test(path)) return [];
  const forbidden = ROOM_FORBIDDEN.find(([room]) => path.startsWith(room))?.[1] ?? [];
  return findImports(source)
    .map(({ specifier }) => new URL(specifier, new URL(path, "file:///repo/")).pathname.slice(6))
    .filter((target) => forbidden.some((folder) => target.startsWith(folder)))
    .map((target) => `${path}: imports ${target}`);
}

Deno.test("the upstream client imports neither the handler nor the WebSocket relay; the relay does not import the handler", () => {
  const files = [...listSources("lib/upstream/"), ...listSources("lib/websocket/")];
  const problems = files.flatMap((path) =>
    checkRooms(path, Deno.readTextFileSync(new URL(path, ROOT)))
  );
  assertEquals(problems, []);
  assertEquals(files.includes("lib/upstream/upstream_client.ts"), true);
  assertEquals(files.includes("lib/websocket/websocket_relay.ts"), true);
});

Deno.test("checkRooms() catches an import against the rooms' direction", () => {
  const cases: [string, string, number][] = [
    ['import { x } from "../proxy/proxy_handler.ts";', "lib/upstream/upstream_pool.ts", 1],
    ['import { x } from "../websocket/ws_frame.ts";', "lib/upstream/upstream_client.ts", 1],
    ['import { x } from "../proxy/forwarded_headers.ts";', "lib/websocket/websocket_relay.ts", 1],
    ['import { x } from "../upstream/http1.ts";', "lib/websocket/websocket_relay.ts", 0],
    ['import { x } from "../websocket/websocket_relay.ts";', "lib/proxy/proxy_handler.ts", 0],
    ['import { x } from "../proxy/proxy_handler.ts";', "lib/upstream/upstream_pool_test.ts", 0],
  ];
  for (const [source, path, count] of cases) {
    assertEquals(checkRooms(path, source).length, count, `${path}: ${source}`);
  }
});

Deno.test("nothing in lib/translate/ or lib/routing/ imports I/O, clocks or packages", () => {
  // The pure modules outside those folders that they may import are held to the same rules.
  const files = [...PURE_FOLDERS.flatMap(listSources), "lib/net/cidr.ts"];
  const problems = files.flatMap((path) =>
    checkSource(path, Deno.readTextFileSync(new URL(path, ROOT)))
  );
  assertEquals(problems, []);
  assertEquals(files.includes("lib/translate/translate.ts"), true);
  assertEquals(files.includes("lib/routing/route_table.ts"), true);
});

Deno.test("lib/translate/ imports nothing from lib/routing/ (routing compiles translations, not the reverse)", () => {
  const files = listSources("lib/translate/");
  const problems = files.flatMap((path) =>
    findImports(Deno.readTextFileSync(new URL(path, ROOT)))
      .map(({ specifier }) => new URL(specifier, new URL(path, "file:///repo/")).pathname)
      .filter((target) => target.startsWith("/repo/lib/routing/"))
      .map((target) => `${path}: imports ${target.slice("/repo/".length)}`)
  );
  assertEquals(problems, []);
  assertEquals(files.includes("lib/translate/backend.ts"), true);
});

Deno.test("checkSource() catches each forbidden import and use", () => {
  const cases: [string, string, number][] = [
    ['import { X509Certificate } from "node:crypto";', "lib/translate/x.ts", 1],
    ['import yaml from "npm:yaml@2";', "lib/translate/x.ts", 1],
    ['import { parse } from "yaml";', "lib/routing/x.ts", 1],
    ['import type { Ingress } from "../k8s/objects.ts";', "lib/translate/x.ts", 0],
    ['import { type Ingress, type Service } from "../k8s/objects.ts";', "lib/translate/x.ts", 0],
    ['import { Ingress } from "../k8s/objects.ts";', "lib/translate/x.ts", 1],
    ['import { SERVICE_NAME_LABEL } from "../k8s/labels.ts";', "lib/translate/x.ts", 0],
    ['import { KubeClient } from "../k8s/kube_client.ts";', "lib/translate/x.ts", 1],
    ['export * from "../tls/certificate_inspector.ts";', "lib/routing/x.ts", 1],
    ['import "../proxy/handler.ts";', "lib/routing/x.ts", 1],
    ['import { translate } from "../translate/translate.ts";', "lib/routing/x.ts", 0],
    ["const t = Deno.readTextFileSync(p);", "lib/routing/x.ts", 1],
    ["const r = await fetch (url);", "lib/routing/x.ts", 1],
    ["const m = await import('./x.ts');", "lib/routing/x.ts", 1],
    ["const now = Date.now();", "lib/translate/x.ts", 1],
    ["const now = new Date();", "lib/translate/x.ts", 1],
    ["const at = new Date(ms);", "lib/translate/x.ts", 0],
    ["console.log(1);", "lib/translate/x.ts", 1],
    [
      "// Deno.exit() and fetch() in a comment\nconst s = 'Deno.env'; const t = `fetch(${1})`;",
      "lib/translate/x.ts",
      0,
    ],
    ["const t = `${Deno.pid}`;", "lib/translate/x.ts", 1],
    ["const o = { a: `x${`y${1}`}` }; Math.random();", "lib/translate/x.ts", 1],
  ];
  for (const [source, path, count] of cases) {
    assertEquals(checkSource(path, source).length, count, source);
  }
});

/** Every `.ts` file under `folder` (tests and benchmarks included). */
function listAll(folder: string): string[] {
  const files: string[] = [];
  for (const entry of Deno.readDirSync(new URL(folder, ROOT))) {
    const path = `${folder}${entry.name}`;
    if (entry.isDirectory) {
      if (path !== "tests/fixtures" && path !== "tests/cluster") files.push(...listAll(`${path}/`));
    } else if (entry.isFile && path.endsWith(".ts")) files.push(path);
  }
  return files.sort();
}

Deno.test("product code under lib/ never imports tests/ or a test file, and lib/'s _ files are imported only from their folder", () => {
  const files = [...listAll("lib/"), ...listAll("tests/"), "main.ts"];
  const problems = files.flatMap((path) =>
    checkBoundaries(path, Deno.readTextFileSync(new URL(path, ROOT)))
  );
  assertEquals(problems, []);
  assertEquals(files.includes("lib/proxy/proxy_handler.ts"), true);
  assertEquals(files.includes("tests/support/stub_snapshot.ts"), true);
});

Deno.test("checkBoundaries() catches test code in product code and private files imported from elsewhere", () => {
  const cases: [string, string, number][] = [
    ['import { x } from "../../tests/support/stub_snapshot.ts";', "lib/workers/pool.ts", 1],
    ['import { x } from "../../tests/support/stub_snapshot.ts";', "lib/workers/pool_test.ts", 0],
    ['import { x } from "../../tests/support/world.ts";', "lib/routing/lookup_bench.ts", 0],
    ['import { x } from "./route_table_test.ts";', "lib/routing/x.ts", 1],
    ['const w = new URL("../../tests/support/worker.ts", import.meta.url);', "lib/app/x.ts", 1],
    ['const w = new URL("../workers/sluice_worker.ts", import.meta.url);', "lib/app/x.ts", 0],
    ['import { x } from "../server/_generation.ts";', "lib/proxy/x.ts", 1],
    ['import { x } from "./_generation.ts";', "lib/server/https_listener.ts", 0],
    ['import { x } from "../_order.ts";', "lib/translate/gateway/x.ts", 0],
    ['import { x } from "../../lib/k8s/_backoff.ts";', "tests/support/x.ts", 1],
    ['import { x } from "./_backoff_test.ts";', "lib/k8s/x_test.ts", 0],
    ['import { x } from "../../lib/server/_relay_server.ts";', "tests/bench/x.ts", 1],
    [
      'import { releaseTakenChunk } from "../../lib/upstream/deno_internal.ts";',
      "tests/bench/x.ts",
      0,
    ],
    ['import { x } from "./_helper.ts";', "tests/support/x.ts", 0],
  ];
  for (const [source, path, count] of cases) {
    assertEquals(checkBoundaries(path, source).length, count, `${path}: ${source}`);
  }
});
