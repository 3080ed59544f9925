/**
 * `deno task demo`, run exactly as the task says (on free ports), with no
 * cluster: every curl command it prints is replayed (with fetch, or a TLS
 * connection carrying the SNI and trusting the printed `--cacert` file) and
 * must answer what the demo says it answers; then Ctrl-C (SIGINT) stops
 * everything and removes the demo's temporary directory.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/e2e/demo_test.ts
 *
 * @module
 */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { assert, assertEquals, assertMatch } from "../support/assert.ts";
import { collectLines, freePorts } from "../support/sluice_process.ts";
import { waitFor, within } from "../support/wait.ts";
import { type Answer, HostClient, tlsGet } from "./cluster_fixture.ts";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The `demo` task's command line, with `deno` replaced by this Deno. */
async function demoCommand(): Promise<string[]> {
  const denoJson = JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json"))) as {
    tasks: Record<string, string>;
  };
  const words = denoJson.tasks.demo!.split(/\s+/);
  assertEquals(words[0], "deno");
  return words.slice(1);
}

/** One printed example: the command and the answer it promises. */
interface Printed {
  readonly command: string;
  readonly status: number;
  readonly service: string | undefined;
  readonly location: string | undefined;
}

function parseExamples(lines: readonly string[]): Printed[] {
  const out: Printed[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (!line.startsWith("curl ")) continue;
    const expect = (lines[i + 1] ?? "").trim();
    const m = expect.match(/^→ (\d{3})(?: from Service (\S+))?(?: Location: (\S+))?$/);
    assert(m !== null, `an expectation after "${line}", got "${expect}"`);
    out.push({ command: line, status: Number(m[1]), service: m[2], location: m[3] });
  }
  return out;
}

/** Replays a printed curl command: `--resolve host:port:addr`, `--cacert`, `| grep 'x'`. */
async function replay(http: HostClient, command: string): Promise<Answer & { grep?: boolean }> {
  const [curl, grep] = command.split(" | ");
  const words = curl!.split(" ").slice(1);
  let cacert: string | undefined;
  let url: URL | undefined;
  const resolved = new Map<string, string>();
  for (let i = 0; i < words.length; i++) {
    const word = words[i]!;
    if (word === "--resolve") {
      const [host, port, address] = words[++i]!.split(":");
      resolved.set(`${host}:${port}`, address!);
    } else if (word === "--cacert") {
      cacert = words[++i];
    } else if (word.startsWith("http://") || word.startsWith("https://")) {
      url = new URL(word);
    } else {
      assert(["-s", "-si"].includes(word), `a curl flag the test knows: "${word}"`);
    }
  }
  assert(url !== undefined, `a URL in "${command}"`);
  const port = Number(url.port);
  if (url.hostname !== "127.0.0.1") {
    assertEquals(resolved.get(`${url.hostname}:${port}`), "127.0.0.1", "resolved to loopback");
  }
  const path = url.pathname + url.search;
  if (url.protocol === "https:") {
    assert(cacert !== undefined, "HTTPS examples verify the certificate");
    const ca = await Deno.readTextFile(cacert);
    return await tlsGet(port, url.hostname, { caCerts: [ca], path });
  }
  const answer = await http.get(port, url.host, path);
  if (grep === undefined) return answer;
  const pattern = grep.match(/^grep '\^(.+)'$/)?.[1];
  assert(pattern !== undefined, `a grep the test knows: "${grep}"`);
  return { ...answer, grep: answer.body.split("\n").some((l) => l.startsWith(pattern)) };
}

Deno.test("deno task demo prints curl commands that answer as printed, and Ctrl-C stops it cleanly", async () => {
  const free = freePorts(6);
  const ports = {
    http: free[0]!,
    https: free[1]!,
    health: free[2]!,
    backends: free.slice(3),
  };
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      ...await demoCommand(),
      "--http-port",
      String(ports.http),
      "--https-port",
      String(ports.https),
      "--health-port",
      String(ports.health),
      "--backend-ports",
      ports.backends.join(","),
    ],
    cwd: ROOT,
    env: { NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const lines: string[] = [];
  const output = Promise.all([
    collectLines(child.stdout, lines),
    collectLines(child.stderr, lines),
  ]);
  let exited: number | undefined;
  const status = child.status.then((s) => exited = s.code);
  using http = new HostClient();
  try {
    await waitFor("the demo to print its commands", () => {
      if (exited !== undefined) {
        throw new Error(`The demo exited with ${exited}:\n${lines.join("\n")}`);
      }
      return lines.some((l) => l.startsWith("Press Ctrl-C to stop."));
    }, { timeoutMs: 60_000, intervalMs: 100 });

    const examples = parseExamples(lines);
    assert(examples.length >= 8, `examples printed: ${examples.length}`);
    for (const example of examples) {
      const answer = await replay(http, example.command);
      const got = {
        status: answer.status,
        service: example.service === undefined ? undefined : answer.service,
        location: example.location === undefined ? undefined : answer.location ?? undefined,
        grep: answer.grep ?? true,
      };
      assertEquals(got, {
        status: example.status,
        service: example.service,
        location: example.location,
        grep: true,
      }, example.command);
    }
    // The behaviours the demo is for are all among them.
    const shown = examples.map((e) => `${e.status} ${e.service ?? ""}`.trim());
    for (const expected of ["200 web", "200 api", "200 apps", "404", "503", "308"]) {
      assert(shown.includes(expected), `an example answering ${expected}: ${shown.join(", ")}`);
    }
    assert(examples.some((e) => e.command.includes("https://") && e.status === 200));
    assert(examples.some((e) => e.command.includes("/metrics") && e.status === 200));

    const dir = lines.map((l) => l.match(/manifests: (\S+) \(edit/)?.[1]).find((d) => d);
    assert(dir !== undefined, "the demo names its directory");
    assertMatch(dir, /sluice-demo-/);

    child.kill("SIGINT");
    assertEquals(await within(20_000, "the demo to stop after SIGINT", status), 0);
    await output;
    assert(lines.includes("demo: stopped."), lines.slice(-10).join("\n"));
    let removed = false;
    try {
      await Deno.stat(dir);
    } catch (error) {
      removed = error instanceof Deno.errors.NotFound;
    }
    assert(removed, `the demo removed ${dir}`);
    // Everything it started is gone: its ports are free again.
    for (const port of [ports.http, ports.https, ports.health, ...ports.backends]) {
      Deno.listen({ hostname: "0.0.0.0", port }).close();
    }
  } finally {
    if (exited === undefined) {
      // SIGTERM lets the demo stop Sluice and its backends; SIGKILL only if it hangs.
      const kill = (signal: Deno.Signal) => {
        try {
          child.kill(signal);
        } catch {
          // Already exited.
        }
      };
      kill("SIGTERM");
      const timer = setTimeout(() => kill("SIGKILL"), 10_000);
      await status;
      clearTimeout(timer);
    }
    await status;
    await output;
  }
});
