/**
 * No Docker engine runs here and `deno compile` cannot download its `denort`
 * runtime, so the image and the binary are checked by reading: what the
 * Dockerfile, deno.json and the program promise each other.
 */
import { assert, assertEquals, assertMatch } from "../support/assert.ts";
import { LIBC_PATHS } from "../../lib/server/native_socket.ts";

const root = new URL("../../", import.meta.url);
const dockerfile = await Deno.readTextFile(new URL("Dockerfile", root));
const denoJson = JSON.parse(await Deno.readTextFile(new URL("deno.json", root))) as {
  tasks: Record<string, string>;
  permissions: Record<string, unknown>;
};
const toolchain = JSON.parse(
  await Deno.readTextFile(new URL("tools/toolchain/package.json", root)),
) as { devDependencies: { deno: string } };

const froms = [...dockerfile.matchAll(/^FROM\s+(\S+)(?:\s+AS\s+(\S+))?/gim)].map((m) => m[1]!);

/**
 * The flags of a `deno run`/`deno compile` command line that decide what the
 * program may do and how its runtime behaves (permissions, unstable APIs, V8).
 */
function permissionFlags(command: string): string[] {
  return command.split(/\s+/).filter((w) =>
    /^(-P|--permission-set|--allow-|--deny-|-A$|--unstable-|--v8-flags=)/.test(w)
  )
    .sort();
}

Deno.test("the Dockerfile builds with the pinned Deno and runs on distroless cc, both pinned by tag", () => {
  assertEquals(froms.length, 2);
  assertEquals(froms[0], `denoland/deno:${toolchain.devDependencies.deno}`);
  assertEquals(froms[1], "gcr.io/distroless/cc-debian12:nonroot");
  for (const image of froms) assertMatch(image, /:[\w.-]+$/, `${image} is pinned by tag`);
});

Deno.test("deno task compile grants exactly the permissions and V8 flags deno task start runs with, and never -A", () => {
  const start = permissionFlags(denoJson.tasks.start!);
  const compile = permissionFlags(denoJson.tasks.compile!);
  assertEquals(compile, start);
  assert(!compile.includes("-A") && !compile.some((f) => f.startsWith("--allow-all")), "no -A");
  assert(start.includes("-P=sluice"), "the permission set named in deno.json");
  assert(start.some((f) => f.startsWith("--v8-flags=")), "the V8 flags are compared too");
  assert("sluice" in denoJson.permissions, "deno.json defines the permission set");
});

Deno.test("the image's entrypoint is the binary deno task compile writes", () => {
  const output = denoJson.tasks.compile!.match(/--output\s+(\S+)/)?.[1];
  assertEquals(output, "dist/sluice");
  assertMatch(dockerfile, /COPY --from=build \/src\/dist\/sluice \/sluice/);
  assertMatch(dockerfile, /^ENTRYPOINT \["\/sluice"\]$/m);
  assertMatch(
    dockerfile,
    /^RUN --mount=type=bind,target=\/context \\\n.*\n\s+&& deno task compile$/m,
  );
});

Deno.test("a denort binary given as DENORT_BIN reaches the compile step, and only the program's files enter the build", async () => {
  assertMatch(dockerfile, /^ARG DENORT_BIN$/m);
  // The path is taken inside the mounted build context, and left unset when not given
  // (deno compile would otherwise read an empty path).
  assertMatch(
    dockerfile,
    /export DENORT_BIN="\/context\/\$\{DENORT_BIN\}"; else unset DENORT_BIN; fi/,
  );
  const ignore = (await Deno.readTextFile(new URL(".dockerignore", root))).split("\n")
    .filter((line) => line !== "" && !line.startsWith("#"));
  assertEquals(ignore, ["*", "!deno.json", "!deno.lock", "!main.ts", "!lib/", "!denort*"]);
  for (const copied of dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)) {
    for (const source of copied[1]!.split(" ")) {
      assert(
        ignore.includes(`!${source}`) || ignore.includes(`!${source}/`),
        `${source} is admitted`,
      );
    }
  }
});

Deno.test("deno task compile embeds the Web Worker module the program starts, and writes no code cache", async () => {
  const compile = denoJson.tasks.compile!;
  const included = [...compile.matchAll(/--include[= ](\S+)/g)].map((m) => m[1]!);
  const sluice = await Deno.readTextFile(new URL("lib/app/sluice.ts", root));
  const modules = [...sluice.matchAll(/module: new URL\("([^"]+)", import\.meta\.url\)/g)]
    .map((m) => new URL(m[1]!, new URL("lib/app/", root)).href);
  assert(modules.length > 0, "sluice.ts names its worker module");
  for (const module of modules) {
    assert(
      included.some((path) => new URL(path, root).href === module),
      `${module} is included in the binary (${included.join(", ")})`,
    );
  }
  assertMatch(compile, /--no-code-cache/);
});

Deno.test("the arm64 compile task differs from compile only by its target and output", () => {
  const arm = denoJson.tasks["compile:arm64"]!;
  const strip = (command: string) =>
    command.replace(/--target \S+ /, "").replace(/--output \S+/, "--output OUT");
  assertMatch(arm, /--target aarch64-unknown-linux-gnu /);
  assertEquals(strip(arm), strip(denoJson.tasks.compile!));
});

Deno.test("the permission set grants only the sys information the program reads", () => {
  const set = denoJson.permissions.sluice as Record<string, unknown>;
  // Measured with DENO_AUDIT_PERMISSIONS: Deno.hostname() (no POD_NAME) and the kubeconfig
  // lookup's home directory (uid). Every end-to-end test runs the program with this set.
  assertEquals(set.sys, ["hostname", "uid"]);
  assert(!("write" in set) && !("run" in set), "no write or run");
  // FFI only to glibc (lib/server/native_socket.ts): setsockopt() for TCP_NODELAY on TLS
  // connections, getsockopt() for TCP_INFO, and shutdown() for the connection reaper.
  assertEquals(set.ffi, Object.values(LIBC_PATHS));
});

Deno.test("the image is read-only-root friendly: no cache written, no update check", () => {
  assertMatch(dockerfile, /^ENV .*DENO_DIR=\/tmp\/deno/m);
  assertMatch(dockerfile, /^ENV .*DENO_NO_UPDATE_CHECK=1/m);
});

Deno.test("the image runs as a non-root user and exposes the HTTP, HTTPS and health ports", () => {
  const user = dockerfile.match(/^USER\s+(\S+)/m)?.[1];
  assert(user !== undefined && !/^(0|root)(:|$)/.test(user), `USER ${user}`);
  assertMatch(dockerfile, /^EXPOSE 8080 8443 10254$/m);
});

/** Repository paths of the modules the program loads by URL at run time (Web Worker entries). */
async function runtimeModules(): Promise<string[]> {
  const found = new Set<string>();
  const scan = async (dir: URL) => {
    for await (const entry of Deno.readDir(dir)) {
      const url = new URL(entry.name + (entry.isDirectory ? "/" : ""), dir);
      if (entry.isDirectory) await scan(url);
      else if (/(?<!_test|_bench)\.ts$/.test(entry.name)) {
        const text = await Deno.readTextFile(url);
        for (const m of text.matchAll(/new URL\("([^"]+\.ts)", import\.meta\.url\)/g)) {
          found.add(new URL(m[1]!, url).pathname.slice(root.pathname.length));
        }
      }
    }
  };
  await scan(new URL("lib/", root));
  return [...found].sort();
}

Deno.test("deno task compile includes every module the program starts as a Web Worker", async () => {
  const modules = await runtimeModules();
  assert(modules.includes("lib/workers/sluice_worker.ts"), modules.join(", "));
  assert(modules.includes("lib/k8s/kube_config_worker.ts"), modules.join(", "));
  for (const task of ["compile", "compile:arm64"]) {
    const included = [...denoJson.tasks[task]!.matchAll(/--include\s+(\S+)/g)].map((m) => m[1]!)
      .sort();
    assertEquals(included, modules, `deno task ${task}`);
  }
});
