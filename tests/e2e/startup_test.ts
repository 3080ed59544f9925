/**
 * Sluice's start-up as a process: `/readyz` answers 200 only once every worker
 * serves the routes; a taken port or a missing, empty or broken kubeconfig
 * stops start-up with exit 1 and one line naming it; a kubeconfig token file
 * authenticates; and with the apiserver unreachable at start Sluice stays up,
 * live and unready, and becomes ready once it appears. Every test runs
 * `main.ts` with exactly the permissions of `deno task start`
 * (`tests/support/sluice_process.ts`): cluster-free ones on `--manifests`, the
 * others against the suite's real apiserver, through a loopback relay where the
 * network has to fail (`tests/support/lifecycle.ts`).
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/e2e/startup_test.ts
 *
 * @module
 */
import { assert, assertEquals, assertStringIncludes } from "../support/assert.ts";
import { freePort, type SluiceProcess, spawnSluice } from "../support/sluice_process.ts";
import { waitFor, within } from "../support/wait.ts";
import {
  lifecycleRecords,
  messages,
  relayedKubeconfig,
  spawnOnManifests,
  status,
  tempDir,
} from "../support/lifecycle.ts";
import { type RelayMode, startRelay } from "../support/apiserver_relay.ts";
import { type E2EWorld, e2eWorld } from "./cluster_fixture.ts";
import { writeKubeconfig } from "../support/kube.ts";

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
