/**
 * Sluice as a process over its life, attacked: start-up (ports taken,
 * broken kubeconfigs, an apiserver that is not there yet), readiness,
 * graceful shutdown under in-flight streams, keep-alive connections and
 * WebSockets, and signals arriving at awkward moments. Every test runs
 * `main.ts` with exactly the permissions of `deno task start`
 * (`tests/support/sluice_process.ts`): cluster-free ones on `--manifests`,
 * the others against the suite's real apiserver, through a loopback relay
 * where the network has to fail.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/e2e/hostile_lifecycle_test.ts
 *
 * @module
 */
import {
  assert,
  assertEquals,
  assertMatch,
  assertRejects,
  assertStringIncludes,
} from "../support/assert.ts";
import { headerValue, latin1, RawConnection } from "../support/raw_http.ts";
import {
  freePort,
  freePorts,
  type SluiceProcess,
  spawnSluice,
  startFlags,
} from "../support/sluice_process.ts";
import { echoSite, siteYaml } from "../support/manifest_dir.ts";
import { waitFor, within } from "../support/wait.ts";
import {
  lifecycleRecords,
  type ManifestSite,
  messages,
  relayedKubeconfig,
  spawnOnManifests,
  status,
  tempDir,
  TLS_HOST,
} from "../support/hostile_lifecycle_support.ts";
import { type RelayMode, startRelay } from "../support/apiserver_relay.ts";
import { type E2EWorld, e2eWorld } from "./cluster_fixture.ts";
import { writeKubeconfig } from "../support/kube.ts";
import type { Lease } from "../../lib/publish/leader_election.ts";
import { LEASES } from "../../lib/k8s/resources.ts";
import { SAME_STOP_WINDOW_MS } from "../../lib/app/stop_signals.ts";

/**
 * {@linkcode spawnOnManifests} with `--workers`, `--shutdown-delay` and
 * `--shutdown-timeout` (then `options.args`), once `/readyz` answers 200.
 */
async function readySite(
  drain: { workers: number; delay: string; timeout: string },
  options: { host?: string; args?: readonly string[] } = {},
): Promise<ManifestSite> {
  const site = await spawnOnManifests([
    `--workers=${drain.workers}`,
    `--shutdown-delay=${drain.delay}`,
    `--shutdown-timeout=${drain.timeout}`,
    ...(options.args ?? []),
  ], options);
  try {
    await site.sluice.ready();
  } catch (error) {
    await site[Symbol.asyncDispose]();
    throw error;
  }
  return site;
}

/** A fresh {@linkcode e2eWorld}; disposing it closes it. */
async function lifecycleWorld(): Promise<E2EWorld & AsyncDisposable> {
  const world = await e2eWorld("e2e-lifecycle");
  return { ...world, [Symbol.asyncDispose]: () => world.close() };
}

/** Sluice as `world`'s controller through `kubeconfig`, one worker, `args` added. */
function spawnController(
  world: E2EWorld,
  kubeconfig: string,
  args: readonly string[],
): Promise<SluiceProcess> {
  return spawnSluice([
    `--kubeconfig=${kubeconfig}`,
    `--controller-name=${world.controllerName}`,
    `--election-namespace=${world.ns}`,
    "--workers=1",
    ...args,
  ]);
}

/**
 * A fresh world, a relay in front of its apiserver (in `mode`), and Sluice as
 * its controller reaching the apiserver only through the relay, with `args`
 * added; disposing it stops them all.
 */
async function behindRelay(mode: RelayMode, args: readonly string[]) {
  const stack = new AsyncDisposableStack();
  try {
    const world = stack.use(await lifecycleWorld());
    const relay = stack.use(startRelay(world.admin.access.server));
    relay.setMode(mode);
    const kubeconfig = stack.use(
      await relayedKubeconfig(world.credentials.kubeconfig, relay.server),
    );
    const sluice = stack.use(await spawnController(world, kubeconfig.path, args));
    return { relay, sluice, [Symbol.asyncDispose]: () => stack.disposeAsync() };
  } catch (error) {
    await stack.disposeAsync();
    throw error;
  }
}

/**
 * Waits for `sluice` to exit with 1 and checks that it wrote exactly one
 * FATAL line (`label` names the case); returns that line's message.
 */
async function fatalExit(sluice: SluiceProcess, label?: string): Promise<string> {
  const what = label === undefined ? "Sluice to exit" : `Sluice to exit (${label})`;
  assertEquals(await within(20_000, what, sluice.exited), 1);
  const fatal = lifecycleRecords(sluice).filter((r) => r.level === "FATAL");
  assertEquals(fatal.length, 1, label);
  return String(fatal[0]!.message);
}

// ---------------------------------------------------------------------------
// Readiness and the shutdown delay
// ---------------------------------------------------------------------------

Deno.test("/readyz answers 200 only once every worker serves the routes (fresh connections after it never get 503)", async () => {
  await using site = await spawnOnManifests(["--workers=2"]);
  const { sluice } = site;
  // Poll as fast as the health port answers: the first 200 is the moment that matters.
  await waitFor("/readyz to answer 200", async () => (await status(sluice, "/readyz")) === 200, {
    timeoutMs: 30_000,
    intervalMs: 1,
  });
  const answers = await Promise.all(
    Array.from({ length: 16 }, () => site.get("/ready-race")),
  );
  assertEquals(answers.map((a) => a.status), Array(16).fill(200));
  assert(answers.every((a) => a.service === "web"), "every answer came from the backend");
});

Deno.test("during --shutdown-delay /readyz is 503, /healthz stays 200, and new connections are accepted and served", async () => {
  await using site = await readySite({ workers: 2, delay: "3s", timeout: "5s" });
  const { sluice } = site;
  const signalled = performance.now();
  const exited = sluice.stop("SIGTERM");
  await waitFor("/readyz to answer 503", async () => (await status(sluice, "/readyz")) === 503, {
    timeoutMs: 500,
    intervalMs: 5,
  });
  // kube-proxy and load balancers still send new connections for a while: they must be served.
  let served = 0;
  while (performance.now() - signalled < 1_500) {
    const answer = await site.get(`/during-delay?n=${served}`);
    assertEquals(answer.status, 200);
    served++;
    // Liveness must not fail while draining: the kubelet would kill the pod mid-drain.
    assertEquals(await status(sluice, "/healthz"), 200);
  }
  assert(served > 3, `served ${served} requests during the delay`);
  assertEquals(await within(10_000, "Sluice to exit", exited), 0);
  const tookMs = performance.now() - signalled;
  assert(tookMs >= 3_000 && tookMs < 3_000 + 3_000, `exited after ${Math.round(tookMs)} ms`);
});

Deno.test("routes changed during --shutdown-delay are still served: the sources keep running while Sluice drains", async () => {
  await using site = await readySite({ workers: 2, delay: "4s", timeout: "2s" });
  const { sluice } = site;
  assertEquals((await site.get("/", { host: "late.test" })).status, 404);
  const exited = sluice.stop("SIGTERM");
  await waitFor("/readyz to answer 503", async () => (await status(sluice, "/readyz")) === 503, {
    timeoutMs: 1_000,
    intervalMs: 5,
  });
  await Deno.writeTextFile(
    `${site.directory}/late.yaml`,
    siteYaml({ namespace: "late", name: "web", host: "late.test", port: site.backend.port }),
  );
  const answer = await waitFor("late.test to be served", async () => {
    const a = await site.get("/", { host: "late.test" });
    return a.status === 200 ? a : undefined;
  }, { timeoutMs: 3_000 });
  assertEquals(answer.service, "web");
  assertEquals(await within(10_000, "Sluice to exit", exited), 0);
});

// ---------------------------------------------------------------------------
// Draining
// ---------------------------------------------------------------------------

// Was a bug: a response written after the listeners stopped accepting carried no
// `Connection: close`, then the connection was closed: a keep-alive client's next request (a POST
// is not retried) failed. Once the drain begins every response says `Connection: close`, as nginx
// and Envoy do.
for (const scheme of ["http", "https"] as const) {
  Deno.test({
    name:
      `a response finished during the drain says Connection: close before the connection closes (${scheme})`,
    fn: async () => {
      await using site = await readySite({ workers: 1, delay: "0s", timeout: "10s" });
      const { sluice } = site;
      const conn = await site.open(scheme);
      try {
        const host = scheme === "http" ? "shop.test" : TLS_HOST;
        await conn.send(`GET /slow?delay=1500 HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
        await waitFor("the backend to get the request", () => site.backend.requests.length > 0);
        const exited = sluice.stop("SIGTERM");
        const response = await conn.readResponse({ timeoutMs: 10_000 });
        assertEquals(response.status, 200);
        assertEquals(headerValue(response.headers, "connection")?.toLowerCase(), "close");
        assert(await conn.closedByPeer(5_000), "the connection was closed after the response");
        assertEquals(await within(10_000, "Sluice to exit", exited), 0);
      } finally {
        conn.close();
      }
    },
  });
}

Deno.test("idle keep-alive connections, half-sent requests and stalled TLS handshakes do not hold the drain: Sluice exits at once", async () => {
  await using site = await readySite({ workers: 1, delay: "0s", timeout: "20s" });
  const { sluice } = site;
  const idle = await site.open("http");
  const half = await site.open("http");
  const silent = await site.open("http");
  const idleTls = await site.open("https");
  // TCP to the HTTPS port, then nothing, or the first bytes of a ClientHello.
  const silentTls = await RawConnection.open(sluice.httpsPort);
  const halfHello = await RawConnection.open(sluice.httpsPort);
  const all = [idle, half, silent, idleTls, silentTls, halfHello];
  try {
    for (const [conn, host] of [[idle, "shop.test"], [idleTls, TLS_HOST]] as const) {
      await conn.send(`GET /first HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
      assertEquals((await conn.readResponse()).status, 200);
    }
    await half.send("GET /never-finished HTTP/1.1\r\nHost: sho");
    await halfHello.send("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03");
    const signalled = performance.now();
    const code = await within(10_000, "Sluice to exit", sluice.stop("SIGTERM"));
    const tookMs = performance.now() - signalled;
    assertEquals(code, 0);
    assert(tookMs < 3_000, `exited after ${Math.round(tookMs)} ms, not at the 20 s timeout`);
    for (const conn of all) assert(await conn.closedByPeer(2_000), "the connection was closed");
    const stopped = messages(sluice).find((m) => m.startsWith("Stopped"));
    assertStringIncludes(stopped ?? "", "every request finished");
  } finally {
    for (const conn of all) conn.close();
  }
});

// Was a bug: the last line said "0 connections cut" after a stream was cut at the deadline (the
// plain-HTTP listener counted nothing); it now says requests were cut whatever the count.
Deno.test("a stream still running at --shutdown-timeout is cut visibly, new connections are refused meanwhile, and Sluice exits on time saying requests were cut", async () => {
  await using site = await readySite({ workers: 1, delay: "200ms", timeout: "2s" });
  const { sluice } = site;
  const conn = await site.open("http");
  try {
    // 1,000 events 50 ms apart: far longer than the timeout.
    await conn.send("GET /sse?n=1000&interval=50 HTTP/1.1\r\nHost: shop.test\r\n\r\n");
    await waitFor("the stream to start", () => site.backend.requests.length > 0);
    const signalled = performance.now();
    const exited = sluice.stop("SIGTERM");
    // Past the delay the ports are closed: a new connection is refused at once, not left hanging.
    await waitFor("the delay to pass", () => performance.now() - signalled > 500);
    for (const port of [sluice.httpPort, sluice.httpsPort]) {
      await assertRejects(
        () => Deno.connect({ hostname: "127.0.0.1", port }),
        Deno.errors.ConnectionRefused,
      );
    }
    const bytes = latin1(await conn.readToEnd(10_000));
    const code = await within(10_000, "Sluice to exit", exited);
    const tookMs = performance.now() - signalled;
    assertEquals(code, 0);
    assert(
      tookMs >= 2_000 && tookMs < 200 + 2_000 + 2_500,
      `exited after ${Math.round(tookMs)} ms`,
    );
    assertStringIncludes(bytes, "HTTP/1.1 200");
    assertStringIncludes(bytes, "data: event 3");
    // Cut, not ended: a client must not take a cut stream for a complete one.
    assert(!bytes.endsWith("0\r\n\r\n"), "the chunked body has no last chunk");
    const stopped = messages(sluice).find((m) => m.startsWith("Stopped"));
    assert(stopped !== undefined, "the last line was written");
    assert(!stopped.includes("every request finished"), stopped);
    assert(!/\b0 connections/.test(stopped), stopped);
    assertMatch(stopped, /cut/);
  } finally {
    conn.close();
  }
});

Deno.test("requests in flight at SIGTERM are all answered and all written to the access log before the exit", async () => {
  await using site = await readySite({ workers: 2, delay: "0s", timeout: "10s" }, {
    args: ["--access-log=true"],
  });
  const { sluice } = site;
  const n = 20;
  const answers = Promise.all(
    Array.from({ length: n }, (_, i) => site.get(`/in-flight-${i}?delay=${400 + i * 20}`)),
  );
  await waitFor("every request to reach the backend", () => site.backend.requests.length === n);
  assertEquals(await within(10_000, "Sluice to exit", sluice.stop("SIGTERM")), 0);
  assertEquals((await answers).map((a) => a.status), Array(n).fill(200));
  const logged = sluice.records().filter((r) =>
    r.component === "access" && String(r.path).startsWith("/in-flight-")
  );
  assertEquals(logged.length, n, "one access line per request, none lost at the exit");
});

Deno.test("an HTTP/2 (h2c) stream in flight at SIGTERM is answered whole before Sluice exits", async () => {
  // No host in the rule: HTTP/2 routes on :authority, here 127.0.0.1.
  await using site = await readySite({ workers: 1, delay: "0s", timeout: "10s" }, { host: "" });
  const { sluice } = site;
  using client = Deno.createHttpClient({ http1: false, http2: true });
  const get = async (path: string) => {
    const r = await fetch(`http://127.0.0.1:${sluice.httpPort}${path}`, { client });
    return [r.status, r.headers.get("x-echo-service"), (await r.text()).length > 0] as const;
  };
  assertEquals(await get("/first"), [200, "web", true]);
  const slow = get("/slow?delay=1500");
  await waitFor("the slow request to reach the backend", () => site.backend.requests.length > 1);
  const signalled = performance.now();
  const exited = sluice.stop("SIGTERM");
  assertEquals(await within(10_000, "the slow answer", slow), [200, "web", true]);
  assertEquals(await within(10_000, "Sluice to exit", exited), 0);
  assert(performance.now() - signalled < 5_000, "exited once the stream was answered");
});

Deno.test("SIGTERM closes an open WebSocket with 1001 and Sluice exits without waiting for the timeout", async () => {
  await using site = await readySite({ workers: 1, delay: "0s", timeout: "20s" }, {
    host: "localhost",
  });
  const { sluice } = site;
  const ws = new WebSocket(`ws://localhost:${sluice.httpPort}/ws`);
  const closed = new Promise<CloseEvent>((resolve) => ws.onclose = resolve);
  const opened = new Promise<void>((resolve, reject) => {
    ws.onopen = () => resolve();
    ws.onerror = () => reject(new Error("WebSocket error"));
  });
  const echoed = new Promise<string>((resolve) => ws.onmessage = (e) => resolve(String(e.data)));
  try {
    await within(5_000, "the WebSocket to open", opened);
    ws.send("hello");
    assertEquals(await within(5_000, "the echo", echoed), "hello");
    const signalled = performance.now();
    const exited = sluice.stop("SIGTERM");
    const event = await within(5_000, "the close", closed);
    assertEquals(event.code, 1001);
    assertEquals(await within(10_000, "Sluice to exit", exited), 0);
    const tookMs = performance.now() - signalled;
    assert(tookMs < 5_000, `exited after ${Math.round(tookMs)} ms`);
    await site.backend.waitFor(() => site.backend.requests[0]?.wsClose !== undefined, 5_000);
    assertEquals(site.backend.requests[0]?.wsClose?.code, 1001);
  } finally {
    ws.close();
    await closed;
  }
});

// ---------------------------------------------------------------------------
// Signals
// ---------------------------------------------------------------------------

// Was a bug: the process exited without flushing its logs, so the line saying why was lost.
for (
  const [first, second] of [["SIGTERM", "SIGTERM"], ["SIGTERM", "SIGINT"], [
    "SIGINT",
    "SIGTERM",
  ]] as const
) {
  Deno.test(`a second signal (${first} then ${second}) during the drain exits at once with 1 and says why`, async () => {
    await using site = await readySite({ workers: 1, delay: "10s", timeout: "10s" });
    const { sluice } = site;
    const exited = sluice.stop(first);
    const firstAt = performance.now();
    await waitFor(
      "the shutdown to begin",
      () => messages(sluice).some((m) => m.startsWith("Shutting down")),
    );
    // Sooner, it is the first signal delivered again (see the next test): this wait is the
    // subject, not synchronisation.
    const repeatWindowLeft = SAME_STOP_WINDOW_MS - (performance.now() - firstAt) + 50;
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, repeatWindowLeft)));
    const signalled = performance.now();
    const code = await within(5_000, "Sluice to exit", sluice.stop(second));
    assertEquals(code, 1);
    assert(performance.now() - signalled < 2_000, "exited at once");
    assertEquals(await exited, 1);
    const line = messages(sluice).find((m) => m.startsWith("Second"));
    assert(line !== undefined, `no line says why:\n${sluice.logs.slice(-5).join("\n")}`);
    assertStringIncludes(line, second);
  });
}

// Was a bug: a terminal's Ctrl-C reaches the program twice at once, as SIGINT and SIGINT again
// under `deno task` (which forwards it), as SIGINT and SIGTERM under `deno run --watch`; the
// repeat counted as a second signal, so one Ctrl-C logged "Second SIGTERM: exiting now" and
// exited 1 without draining.
for (const [first, second] of [["SIGINT", "SIGINT"], ["SIGINT", "SIGTERM"]] as const) {
  Deno.test(`one Ctrl-C delivered twice (${first} then ${second} at once) drains once and exits 0`, async () => {
    await using site = await readySite({ workers: 1, delay: "0s", timeout: "10s" });
    const { sluice } = site;
    const slow = site.get("/slow?delay=800").then((a) => a.status, (error) => String(error));
    await waitFor("the slow request to reach the backend", () => site.backend.requests.length > 0);
    Deno.kill(sluice.pid, first);
    // Once the first is taken (two pending SIGINTs would merge into one), as `deno task`'s copy
    // comes about 3 ms after the terminal's.
    await waitFor(
      "the first signal to be taken",
      () => messages(sluice).some((m) => m.startsWith("Received")),
    );
    Deno.kill(sluice.pid, second);
    assertEquals(await within(10_000, "Sluice to exit", sluice.exited), 0);
    assertEquals(await slow, 200, "the request in flight was answered");
    const said = messages(sluice);
    assertEquals(said.filter((m) => m.startsWith("Received")).length, 1, said.join("\n"));
    assert(!said.some((m) => m.startsWith("Second")), said.join("\n"));
    assert(said.some((m) => m.startsWith("Stopped")), said.join("\n"));
  });
}

// Was a bug: until start-up finished no signal listener existed, so SIGTERM killed the process
// (143) without a word; a start-up stuck on a kubeconfig that never reads (a FIFO here) could
// only be killed.
Deno.test("SIGTERM during start-up exits promptly with 0 and says so", async () => {
  await using dir = await tempDir("sluice-lifecycle-");
  const fifo = `${dir.path}/kubeconfig`;
  const made = await new Deno.Command("mkfifo", { args: [fifo] }).output();
  assert(made.success, "mkfifo");
  await using sluice = await spawnSluice([`--kubeconfig=${fifo}`, "--workers=1"]);
  // Start-up is stuck reading the kubeconfig: the data plane listens, nothing more.
  await waitFor(
    "the workers to listen",
    () => messages(sluice).some((m) => m.startsWith("Serving")),
    { timeoutMs: 20_000 },
  );
  // The health port answers, but neither live nor ready: a start-up that never ends fails
  // the startup probe, and the kubelet restarts the pod.
  assertEquals(await status(sluice, "/healthz"), 503);
  assertEquals(await status(sluice, "/readyz"), 503);
  const signalled = performance.now();
  const code = await within(5_000, "Sluice to exit", sluice.stop("SIGTERM"));
  assertEquals(code, 0);
  assert(performance.now() - signalled < 2_000, "exited promptly");
  assert(messages(sluice).some((m) => m.includes("SIGTERM")), "a line names the signal");
});

// Was a bug: once standard error was a broken pipe (the log reader gone: journald restarted,
// `| head`), the next line the main thread logged rejected inside LogTape's stream sink,
// unhandled, and the process died with 1: SIGTERM then cut every request in flight, no drain.
// Failed writes to standard error are now dropped.
Deno.test({
  name:
    "a standard error nobody reads any more does not kill Sluice: SIGTERM still drains and exits 0",
  fn: async () => {
    const site = await echoSite({ name: "web" });
    const { backend, dir } = site;
    const [httpPort, httpsPort, healthPort] = freePorts(3) as [number, number, number];
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        ...await startFlags(),
        "main.ts",
        `--manifests=${dir.path}`,
        `--http-port=${httpPort}`,
        `--https-port=${httpsPort}`,
        `--health-port=${healthPort}`,
        "--workers=1",
        "--shutdown-delay=0s",
      ],
      cwd: new URL("../..", import.meta.url),
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    using client = Deno.createHttpClient({ allowHost: true });
    try {
      await waitFor("/readyz to answer 200", async () => {
        const r = await fetch(`http://127.0.0.1:${healthPort}/readyz`);
        await r.body?.cancel();
        return r.status === 200;
      }, { timeoutMs: 30_000 });
      await child.stdout.cancel();
      await child.stderr.cancel();
      const slow = fetch(`http://127.0.0.1:${httpPort}/slow?delay=1000`, {
        headers: { host: "shop.test" },
        client,
      }).then(async (r) => {
        await r.body?.cancel();
        return r.status;
      }, (error) => String(error));
      await waitFor("the slow request to reach the backend", () => backend.requests.length > 0);
      child.kill("SIGTERM");
      assertEquals(await within(10_000, "the slow request", slow), 200);
      assertEquals((await within(10_000, "Sluice to exit", child.status)).code, 0);
    } finally {
      try {
        child.kill("SIGKILL");
      } catch {
        // Exited.
      }
      await child.status;
      await site.close();
    }
  },
});

// ---------------------------------------------------------------------------
// Start-up failures
// ---------------------------------------------------------------------------

// Was a bug: the health port was bound last, after the workers, the watches and the leader
// election had started, and its error named no port ("Address already in use (os error 98)").
Deno.test("a taken health port stops start-up before anything serves, with an error naming the port", async () => {
  using taken = Deno.listen({ hostname: "0.0.0.0", port: freePort() });
  const port = (taken.addr as Deno.NetAddr).port;
  await using site = await spawnOnManifests(["--workers=1", `--health-port=${port}`]);
  const { sluice } = site;
  const message = await fatalExit(sluice);
  assertStringIncludes(message, `${port}`);
  assertStringIncludes(message, "health");
  assert(
    !messages(sluice).some((m) => m.startsWith("Serving HTTP")),
    "no worker started listening",
  );
});

// Was a bug: a taken HTTP or HTTPS port stopped start-up (exit 1) but the error named neither the
// port nor the listener: "Cannot start worker 0: Address already in use (os error 98)".
for (const listener of ["http", "https"] as const) {
  Deno.test({
    name: `a taken ${listener} port stops start-up with exit 1 and an error naming the port`,
    fn: async () => {
      using taken = Deno.listen({ hostname: "0.0.0.0", port: freePort() });
      const port = (taken.addr as Deno.NetAddr).port;
      await using site = await spawnOnManifests(["--workers=2", `--${listener}-port=${port}`]);
      assertStringIncludes(await fatalExit(site.sluice), `${port}`);
    },
  });
}

Deno.test("a kubeconfig that is missing, empty or not YAML stops start-up with exit 1 and one line naming the file", async () => {
  await using dir = await tempDir("sluice-lifecycle-");
  await Deno.writeTextFile(`${dir.path}/empty`, "");
  await Deno.writeTextFile(`${dir.path}/garbage`, "{{{ not: [yaml");
  for (const name of ["missing", "empty", "garbage"]) {
    const path = `${dir.path}/${name}`;
    await using sluice = await spawnSluice([`--kubeconfig=${path}`, "--workers=1"]);
    assertStringIncludes(await fatalExit(sluice, name), path);
    // One line says what went wrong: no error about the workers stopped on the way out.
    assertEquals(lifecycleRecords(sluice).filter((r) => r.level === "ERROR"), [], name);
  }
});

// Was a bug: a kubeconfig user's `tokenFile` (client-go's field, `kubectl config set-credentials
// --token-file`) was ignored: client-node 2.0.1 reads only `token-file`, so Sluice ran as
// system:anonymous, warned "forbidden" forever, and a missing file went unnoticed. It is now read
// from the kubeconfig (relative to its directory) and re-read as it rotates.
Deno.test({
  name:
    "a kubeconfig user's tokenFile authenticates Sluice, and a missing one stops start-up naming the file",
  fn: async () => {
    await using world = await lifecycleWorld();
    const { dir, path } = await writeKubeconfig((d) => ({ tokenFile: `${d}/token` }), {
      namespace: world.ns,
    });
    try {
      {
        await using missing = await spawnSluice([`--kubeconfig=${path}`, "--workers=1"]);
        assertStringIncludes(await fatalExit(missing), `${dir}/token`);
      }
      await Deno.writeTextFile(`${dir}/token`, world.credentials.token);
      await using sluice = await spawnController(world, path, ["--shutdown-delay=0s"]);
      await sluice.ready(20_000);
      assert(!sluice.logs.some((l) => l.includes("system:anonymous")), "not anonymous");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

// Was a bug: with no --kubeconfig, no $KUBECONFIG, no ~/.kube/config and no in-cluster service
// account, start-up failed with a misleading line: `Cannot use kubeconfig "~/.kube/config": HTTP
// protocol is not allowed when skipTLSVerify is not set or false` (client-node's fallback cluster
// http://localhost:8080).
Deno.test({
  name: "with no kubeconfig anywhere and no cluster around, start-up stops with one line saying so",
  fn: async () => {
    await using home = await tempDir("sluice-lifecycle-home-");
    // The same Deno cache as now, not one under the empty home.
    const cache = Deno.env.get("DENO_DIR") ??
      `${Deno.env.get("XDG_CACHE_HOME") ?? `${Deno.env.get("HOME")}/.cache`}/deno`;
    await using sluice = await spawnSluice(["--workers=1"], {
      env: { HOME: home.path, KUBECONFIG: "", DENO_DIR: cache },
    });
    const message = await fatalExit(sluice);
    assertStringIncludes(message, "--kubeconfig");
    assert(!message.includes("HTTP protocol"), message);
  },
});

// ---------------------------------------------------------------------------
// An apiserver that is not there (yet), or stops answering
// ---------------------------------------------------------------------------

Deno.test("with the apiserver unreachable at start Sluice stays up, live and unready, says so, and becomes ready once it appears", async () => {
  await using run = await behindRelay("refuse", ["--shutdown-delay=0s", "--shutdown-timeout=2s"]);
  const { relay, sluice: s } = run;
  await waitFor("the health port", async () => (await status(s, "/healthz")) === 200, {
    timeoutMs: 20_000,
  });
  await waitFor(
    "a warning that the apiserver cannot be reached",
    () => lifecycleRecords(s).some((r) => r.level === "WARN" || r.level === "ERROR"),
    { timeoutMs: 15_000 },
  );
  for (let i = 0; i < 5; i++) {
    assertEquals(await status(s, "/readyz"), 503);
    assertEquals(await status(s, "/healthz"), 200);
  }
  // The data plane answers, 503, rather than hang or 404 while nothing is loaded.
  const early = await fetch(`http://127.0.0.1:${s.httpPort}/`);
  await early.body?.cancel();
  assertEquals(early.status, 503);
  assertEquals(await status(s, "/metrics"), 200);
  // Backing off, not hammering: a few attempts per reflector, not hundreds.
  const attempts = relay.accepted;
  assert(attempts < 100, `${attempts} connections in a few seconds`);

  relay.setMode("pass");
  await s.ready(45_000);
  assertEquals(await within(10_000, "Sluice to exit", s.stop("SIGTERM")), 0);
});

for (const mode of ["refuse", "drop"] as const) {
  Deno.test(`SIGTERM while the apiserver ${mode === "refuse" ? "refuses connections" : "answers nothing"} and Sluice never got ready exits promptly with 0`, async () => {
    await using run = await behindRelay(mode, ["--shutdown-delay=0s", "--shutdown-timeout=2s"]);
    const { relay, sluice: s } = run;
    await waitFor("the health port", async () => (await status(s, "/healthz")) === 200, {
      timeoutMs: 20_000,
    });
    await waitFor("the watches to reach the relay", () => relay.accepted >= 2, {
      timeoutMs: 15_000,
    });
    const signalled = performance.now();
    assertEquals(await within(10_000, "Sluice to exit", s.stop("SIGTERM")), 0);
    const tookMs = performance.now() - signalled;
    assert(tookMs < 4_000, `exited after ${Math.round(tookMs)} ms`);
  });
}

// Was a bug: the Lease release (bounded by the 10 s renew deadline) and the watches were stopped
// only after the drain, so a black-holed apiserver added up to 10 s to
// --shutdown-delay + --shutdown-timeout, past terminationGracePeriodSeconds' margin.
Deno.test("SIGTERM while the apiserver is black-holed exits within --shutdown-delay + --shutdown-timeout and a small margin", async () => {
  await using run = await behindRelay("pass", ["--shutdown-delay=500ms", "--shutdown-timeout=2s"]);
  const { relay, sluice: s } = run;
  await s.ready();
  await waitFor(
    "Sluice to lead",
    () => messages(s).some((m) => m.startsWith("Became the leader")),
    {
      timeoutMs: 20_000,
    },
  );
  // Every byte to and from the apiserver is dropped from now on; connections stay open.
  relay.setMode("drop");
  const signalled = performance.now();
  assertEquals(await within(20_000, "Sluice to exit", s.stop("SIGTERM")), 0);
  const tookMs = performance.now() - signalled;
  assert(tookMs < 500 + 2_000 + 2_500, `exited after ${Math.round(tookMs)} ms`);
  assert(messages(s).some((m) => m.startsWith("Stopped")), "the last line was written");
});

// Was a bug (with the one above): the Lease was released only after the drain, so for
// --shutdown-delay + --shutdown-timeout no replica wrote status or Events.
Deno.test("SIGTERM hands the Lease over at once, while the drain is still going", async () => {
  await using world = await lifecycleWorld();
  await using s = await spawnController(world, world.credentials.kubeconfig, [
    "--shutdown-delay=4s",
    "--shutdown-timeout=2s",
  ]);
  await s.ready();
  const holder = async () =>
    (await world.admin.client.get<Lease>(LEASES, { namespace: world.ns, name: "sluice-leader" }))
      .spec?.holderIdentity;
  await waitFor(
    "Sluice to lead",
    async () => (await holder()) !== "" && (await holder()) !== undefined,
    {
      timeoutMs: 20_000,
    },
  );
  const exited = s.stop("SIGTERM");
  await waitFor("the Lease to be released", async () => (await holder()) === "", {
    timeoutMs: 2_000,
  });
  // Still draining: the release did not wait for it.
  assertEquals(await status(s, "/readyz"), 503);
  assertEquals(await within(10_000, "Sluice to exit", exited), 0);
});
