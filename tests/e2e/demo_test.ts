/**
 * `deno task demo`, run exactly as the task says (on free ports), with no
 * cluster: every command it prints is replayed in order (curl with fetch, a
 * TLS connection carrying the SNI and trusting the printed `--cacert` file,
 * or a raw WebSocket upgrade with the printed fields; the manifest edit with
 * `sh`) and must answer what the demo says it answers; then Ctrl-C (SIGINT)
 * stops everything and removes the demo's temporary directory.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/e2e/demo_test.ts
 *
 * @module
 */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { assert, assertEquals, assertMatch } from "../support/assert.ts";
import { headerValue, latin1, latin1Bytes, RawConnection } from "../support/raw_http.ts";
import { collectLines, freePorts } from "../support/sluice_process.ts";
import { encodeFrame, FrameDecoder, OP_TEXT } from "../../lib/websocket/ws_frame.ts";
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

/** One printed step: the command and what it promises. */
interface Printed {
  readonly command: string;
  /** The expectation as printed, after the arrow. */
  readonly expect: string;
}

function parseExamples(lines: readonly string[]): Printed[] {
  const out: Printed[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (!line.startsWith("curl ") && !line.startsWith("sed ")) continue;
    const expect = (lines[i + 1] ?? "").trim();
    assert(expect.startsWith("→ "), `an expectation after "${line}", got "${expect}"`);
    out.push({ command: line, expect: expect.slice(2) });
  }
  return out;
}

/** What a printed expectation checks. */
type Expectation =
  | {
    readonly kind: "status";
    readonly status: number;
    readonly service: string | undefined;
    readonly location: string | undefined;
  }
  | { readonly kind: "prints"; readonly prefix: string }
  | { readonly kind: "silent" };

function expectation(text: string): Expectation {
  const status = text.match(
    /^(\d{3})(?: Switching Protocols, then a WebSocket to Service ([a-z0-9-]+)\b.*| from Service ([a-z0-9-]+))?(?: Location: (\S+))?$/,
  );
  if (status !== null) {
    return {
      kind: "status",
      status: Number(status[1]),
      service: status[2] ?? status[3],
      location: status[4],
    };
  }
  if (text.startsWith("no output")) return { kind: "silent" };
  // What the output starts with: the first word, up to an ellipsis.
  const prefix = text.split(" ")[0]!.split("…")[0]!;
  assert(prefix.length >= 2, `an expectation the test knows: "${text}"`);
  return { kind: "prints", prefix };
}

/** Shell words of a printed command: spaces separate, single quotes group. */
function shellWords(command: string): string[] {
  const words: string[] = [];
  for (const m of command.matchAll(/'([^']*)'|(\S+)/g)) words.push(m[1] ?? m[2]!);
  return words;
}

/** What a replayed command showed. */
interface Shown {
  readonly status: number | undefined;
  readonly service: string | undefined;
  readonly location: string | undefined;
  /** Output lines (after the printed `| grep`, if any). */
  readonly lines: string[];
}

const WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/**
 * A WebSocket upgrade as the printed curl sends it (same fields), then one
 * text message each way: the echo backend's answer proves the tunnel is a
 * WebSocket to it. The service is the echo pod's (`X-Echo-Pod: web-1`).
 */
async function upgrade(port: number, host: string, path: string, fields: string[]) {
  using conn = await RawConnection.open(port);
  await conn.send(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\n${fields.join("\r\n")}\r\n\r\n`);
  const response = await conn.readResponse({ timeoutMs: 5_000 });
  if (response.status !== 101) return { status: response.status, service: undefined };
  const key = fields.find((f) => /^sec-websocket-key:/i.test(f))!.split(":")[1]!.trim();
  const digest = await crypto.subtle.digest(
    "SHA-1",
    new TextEncoder().encode(key + WEBSOCKET_GUID),
  );
  const accept = btoa(String.fromCharCode(...new Uint8Array(digest)));
  assertEquals(headerValue(response.headers, "sec-websocket-accept"), accept);
  await conn.send(encodeFrame(OP_TEXT, latin1Bytes("hello"), { mask: true }));
  const decoder = new FrameDecoder({ maxPayload: 1024, expectMasked: false });
  decoder.push(await conn.readUntilQuiet(300, 5_000));
  assertEquals(latin1(decoder.next()?.payload ?? new Uint8Array()), "hello", "the echo");
  const pod = headerValue(response.headers, "x-echo-pod");
  return { status: 101, service: pod?.replace(/-\d+$/, "") };
}

/**
 * Replays a printed command: curl with `-s`/`-si`, `--max-time`, `-H`,
 * `--resolve host:port:addr`, `--cacert` and `| grep 'x'`; or a `sed -i`
 * run as printed.
 */
async function replay(http: HostClient, command: string): Promise<Shown> {
  const [first, grep] = command.split(" | ");
  if (command.startsWith("sed ")) {
    const out = await new Deno.Command("sh", { args: ["-c", command], stdin: "null" }).output();
    assert(out.success, `${command}: ${new TextDecoder().decode(out.stderr)}`);
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    return { status: undefined, service: undefined, location: undefined, lines: lines(text) };
  }
  const words = shellWords(first!).slice(1);
  let cacert: string | undefined;
  let url: URL | undefined;
  const fields: string[] = [];
  const resolved = new Map<string, string>();
  for (let i = 0; i < words.length; i++) {
    const word = words[i]!;
    if (word === "--resolve") {
      const [host, port, address] = words[++i]!.split(":");
      resolved.set(`${host}:${port}`, address!);
    } else if (word === "--cacert") {
      cacert = words[++i];
    } else if (word === "-H") {
      fields.push(words[++i]!);
    } else if (word === "--max-time") {
      assertMatch(words[++i]!, /^\d+$/);
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
  let answer: Answer;
  if (fields.some((f) => /^upgrade: websocket$/i.test(f))) {
    const shown = await upgrade(port, url.host, path, fields);
    return { ...shown, location: undefined, lines: [] };
  } else if (url.protocol === "https:") {
    assert(cacert !== undefined, "HTTPS examples verify the certificate");
    const ca = await Deno.readTextFile(cacert);
    answer = await tlsGet(port, url.hostname, { caCerts: [ca], path });
  } else {
    assertEquals(fields, [], "header fields only for the upgrade");
    answer = await http.get(port, url.host, path);
  }
  let body = lines(answer.body);
  if (grep !== undefined) {
    const pattern = grep.match(/^grep '\^(.+)'$/)?.[1];
    assert(pattern !== undefined, `a grep the test knows: "${grep}"`);
    body = body.filter((l) => l.startsWith(pattern));
  }
  return {
    status: answer.status,
    service: answer.service,
    location: answer.location ?? undefined,
    lines: body,
  };
}

function lines(text: string): string[] {
  return text.split("\n").filter((l) => l !== "");
}

/** Whether `shown` is what `expected` promises; a message saying what differs if not. */
function mismatch(expected: Expectation, shown: Shown): string | undefined {
  switch (expected.kind) {
    case "status": {
      const got = {
        status: shown.status,
        service: expected.service === undefined ? undefined : shown.service,
        location: expected.location === undefined ? undefined : shown.location,
      };
      const want = {
        status: expected.status,
        service: expected.service,
        location: expected.location,
      };
      return JSON.stringify(got) === JSON.stringify(want)
        ? undefined
        : `got ${JSON.stringify(got)}, printed ${JSON.stringify(want)}`;
    }
    case "prints":
      return shown.lines.some((l) => l.startsWith(expected.prefix))
        ? undefined
        : `no line starts with ${expected.prefix}: ${shown.lines.slice(0, 5).join(" | ")}`;
    case "silent":
      return shown.lines.length === 0 ? undefined : `output: ${shown.lines.join(" | ")}`;
  }
}

Deno.test("deno task demo prints commands (routing, TLS, a WebSocket, a live reload, health, metrics) that answer as printed, and Ctrl-C stops it cleanly", async () => {
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
    // In order, as a person would: a command after an edit may see the routes change late (the
    // directory is reloaded within about 100 ms), so it is retried for a few seconds.
    let afterEdit = false;
    for (const example of examples) {
      const expected = expectation(example.expect);
      let problem: string | undefined;
      const deadline = performance.now() + (afterEdit ? 5_000 : 0);
      do {
        problem = mismatch(expected, await replay(http, example.command));
      } while (problem !== undefined && performance.now() < deadline);
      assert(problem === undefined, `${example.command}: ${problem}`);
      afterEdit = example.command.startsWith("sed ");
    }
    // The behaviours the demo is for are all among them.
    const shown = examples.map((e) => {
      const x = expectation(e.expect);
      return x.kind === "status" ? `${x.status} ${x.service ?? ""}`.trim() : x.kind;
    });
    for (const expected of ["200 web", "200 api", "200 apps", "404", "503", "308", "101 web"]) {
      assert(shown.includes(expected), `an example answering ${expected}: ${shown.join(", ")}`);
    }
    const commands = examples.map((e) => e.command);
    assert(examples.some((e) => e.command.includes("https://") && e.expect.startsWith("200")));
    for (const path of ["/healthz", "/readyz", "/metrics"]) {
      assert(commands.some((c) => c.includes(`:${ports.health}${path}`)), `an example of ${path}`);
    }
    // Was a bug: the metrics example promised "→ 200", not what it prints.
    const metrics = examples.find((e) => e.command.includes("/metrics"))!;
    assertEquals(expectation(metrics.expect).kind, "prints", metrics.expect);
    // Live reload: an edit of a manifest, and the same request answered differently after it.
    const edit = commands.findIndex((c) => c.startsWith("sed -i"));
    assert(edit > 0 && edit < commands.length - 1, "an edit between two requests");
    assertEquals(commands[edit - 1], commands[edit + 1]);
    assert(examples[edit - 1]!.expect !== examples[edit + 1]!.expect, "the answer changes");

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
