/**
 * Sluice started as a process (`main.ts`, and the start task's command line):
 * a bad command line exits 2 with one `sluice:` line and starts nothing (also
 * for ranges and ports only checked at start), `--help` and `--version` exit 0,
 * Deno itself prints nothing on start, and a kubeconfig with an exec credential
 * plugin works under the start permissions or is refused in Sluice's words.
 *
 * @module
 */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { assert, assertEquals, assertMatch } from "../../tests/support/assert.ts";
import { freePort, freePorts, startFlags } from "../../tests/support/sluice_process.ts";
import { writeManifestDir } from "../../tests/support/manifest_dir.ts";
import { generateSelfSignedCertificate } from "../tls/self_signed.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import { FLAGS } from "./config.ts";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** Output lines of a run, less Deno's notice about permissions in deno.json. */
function outputLines(bytes: Uint8Array): string[] {
  return new TextDecoder().decode(bytes).split("\n").filter((l) =>
    l !== "" && !/^Warning Permissions in the config file/.test(l)
  );
}

/**
 * Runs main.ts with exactly the start task's flags and `args` (no other flag added, so no
 * flag is ever given twice) until it exits by itself, killing it after `ms`.
 */
async function runMain(
  args: string[],
  options: { env?: Record<string, string>; ms?: number } = {},
) {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", ...await startFlags(), join(ROOT, "main.ts"), ...args],
    cwd: ROOT,
    env: { NO_COLOR: "1", ...options.env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const output = child.output();
  try {
    const out = await within(options.ms ?? 20_000, `main.ts ${args.join(" ")} to exit`, output);
    return { code: out.code, stdout: outputLines(out.stdout), stderr: outputLines(out.stderr) };
  } catch (e) {
    child.kill("SIGKILL");
    await output;
    throw e;
  }
}

Deno.test("main.ts exits 2 with one 'sluice:' line and starts nothing for a bad command line", async () => {
  const cases: [string[], Record<string, string>, RegExp][] = [
    [["--bogus"], {}, /^sluice: Unknown flag '--bogus'; see --help$/],
    [["--http-port=0"], {}, /^sluice: Invalid value "0" for --http-port: /],
    [["--publish-service=sluice"], {}, /for --publish-service: expected namespace\/name$/],
    [[], { SLUICE_WORKERS: "0" }, /for SLUICE_WORKERS: /],
    [["--manifests=x", "--kubeconfig=y"], {}, /serves files instead of one$/],
  ];
  for (const [args, env, pattern] of cases) {
    const r = await runMain(args, { env });
    const what = JSON.stringify(args);
    assertEquals(r.code, 2, what);
    assertEquals(r.stdout, [], `${what}: nothing on standard output`);
    assertEquals(r.stderr.length, 1, `${what}: one line: ${r.stderr.join(" | ")}`);
    assertMatch(r.stderr[0]!, pattern);
  }
});

Deno.test("main.ts --help exits 0 and lists every flag on standard output", async () => {
  const r = await runMain(["--help"]);
  assertEquals(r.code, 0);
  assertEquals(r.stderr, []);
  for (const f of FLAGS) assert(r.stdout.some((l) => l.startsWith(`  --${f.name}`)), f.name);
});

Deno.test("main.ts --version exits 0 and prints Sluice's version from deno.json and the runtime's", async () => {
  const r = await runMain(["--version"]);
  assertEquals([r.code, r.stderr], [0, []]);
  const { version } = JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json")));
  assertEquals(r.stdout, [`sluice ${version} (Deno ${Deno.version.deno}, ${Deno.build.target})`]);
});

// Was a bug: every `deno task start` began with Deno's "Warning Permissions in the config file is
// an experimental feature" (printed whenever -P names a permission set; -q silences it).
Deno.test("the start task's command line writes nothing of Deno's own on start", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", ...await startFlags(), join(ROOT, "main.ts"), "--version"],
    cwd: ROOT,
    env: { NO_COLOR: "1" },
    stdin: "null",
  }).output();
  assertEquals(new TextDecoder().decode(out.stderr), "");
  assertEquals(out.code, 0);
});

/** Loopback ports for a run: `same` names the flags that share one port. */
function ports(same: readonly string[] = []): string[] {
  const [shared, ...own] = freePorts(4) as [number, ...number[]];
  return ["http-port", "https-port", "health-port"].map((flag, i) =>
    `--${flag}=${same.includes(flag) ? shared : own[i]}`
  );
}

Deno.test("a malformed --trusted-proxy-cidrs range stops Sluice at start with exit 2, naming the flag and the range", async () => {
  const dir = await writeManifestDir([]);
  try {
    const r = await runMain([
      ...ports(),
      `--manifests=${dir.path}`,
      "--workers=1",
      "--trusted-proxy-cidrs=10.0.0.0/8,::/129",
    ]);
    assertEquals(r.code, 2, r.stderr.join("\n"));
    assertMatch(r.stderr.join("\n"), /--trusted-proxy-cidrs: Cannot parse CIDR range "::\/129"/);
  } finally {
    await dir.remove();
  }
});

Deno.test("the same port for HTTP and health stops Sluice at start with exit 2, naming both flags", async () => {
  const dir = await writeManifestDir([]);
  try {
    const r = await runMain([
      ...ports(["http-port", "health-port"]),
      `--manifests=${dir.path}`,
      "--workers=1",
    ]);
    assertEquals(r.code, 2, r.stderr.join("\n"));
    assertMatch(r.stderr.join("\n"), /Cannot use port \d+ for both --http-port and --health-port/);
  } finally {
    await dir.remove();
  }
});

// Was a bug: nothing compared --http-port with --https-port; Sluice became ready and each
// connection landed on HTTP or TLS at random.
Deno.test({
  name: "the same port for HTTP and HTTPS stops Sluice at start with a non-zero exit",
  async fn() {
    const dir = await writeManifestDir([]);
    try {
      const r = await runMain([
        ...ports(["http-port", "https-port"]),
        `--manifests=${dir.path}`,
        "--workers=1",
      ], { ms: 10_000 });
      assert(r.code !== 0, `exit ${r.code}`);
    } finally {
      await dir.remove();
    }
  },
});

// Was a bug: under the shipped permissions (no run) an exec credential plugin failed with Deno's
// "--allow-run" advice, which the compiled binary cannot follow; now refused in Sluice's words.
Deno.test({
  name:
    "a kubeconfig with an exec credential plugin works under the start permissions, or is refused in Sluice's words",
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "sluice-exec-kubeconfig-" });
    const ca = await generateSelfSignedCertificate({ hostnames: ["localhost"], commonName: "ca" });
    const credential = JSON.stringify({
      apiVersion: "client.authentication.k8s.io/v1",
      kind: "ExecCredential",
      status: { token: "t0ken" },
    });
    const kubeconfig = join(dir, "kubeconfig");
    await Deno.writeTextFile(
      kubeconfig,
      `apiVersion: v1
kind: Config
clusters:
  - name: c
    cluster:
      server: https://127.0.0.1:${freePort()}
      certificate-authority-data: ${btoa(ca.certPem)}
users:
  - name: u
    user:
      exec:
        apiVersion: client.authentication.k8s.io/v1
        command: /bin/sh
        args: ["-c", ${JSON.stringify(`echo '${credential}'`)}]
        interactiveMode: Never
contexts:
  - name: c
    context: { cluster: c, user: u }
current-context: c
`,
    );
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        ...await startFlags(),
        join(ROOT, "main.ts"),
        ...ports(),
        `--kubeconfig=${kubeconfig}`,
        "--workers=1",
        "--shutdown-delay=0s",
      ],
      cwd: ROOT,
      env: { NO_COLOR: "1", POD_NAME: "p", POD_NAMESPACE: "default" },
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    const lines: string[] = [];
    const collected = (async () => {
      for await (const text of child.stderr.pipeThrough(new TextDecoderStream())) lines.push(text);
    })();
    try {
      // Past the credentials: the API address is logged, or Sluice gave up in its own words.
      // Normally about a second; once (of many CI runs) it took over 20 s, cause unknown: the
      // timeout error carries what Sluice had written by then.
      await waitFor("Sluice to get past its credentials", () => {
        const all = lines.join("");
        if (/Using the Kubernetes API|"level":"FATAL"/.test(all)) return true;
        throw new Error(`its standard error so far: ${all.slice(-4000) || "(nothing)"}`);
      }, { timeoutMs: 45_000 });
      const all = lines.join("");
      assert(!/--allow-run|Requires run access/.test(all), all);
    } finally {
      try {
        child.kill("SIGKILL");
      } catch {
        // exited already
      }
      await child.status;
      await collected;
      await Deno.remove(dir, { recursive: true });
    }
  },
});
