/**
 * Graceful shutdown end to end: Sluice as a process (`--manifests`, two
 * workers) under a bounded concurrent load, some requests slow, gets
 * SIGTERM. `/readyz` answers 503 at once; requests keep being served for
 * `--shutdown-delay`; every request that had started finishes; the process
 * exits 0 well within `--shutdown-delay` + `--shutdown-timeout`.
 *
 * @module
 */
import { assert, assertEquals } from "../support/assert.ts";
import { echoSite } from "../support/manifest_dir.ts";
import { spawnSluice } from "../support/sluice_process.ts";
import { waitFor, within } from "../support/wait.ts";

Deno.test("SIGTERM under load: not ready at once, keeps serving, fails no started request, exits 0", async () => {
  const site = await echoSite({ name: "web" });
  const { dir } = site;
  const delayMs = 1_500;
  const timeoutMs = 10_000;
  const sluice = await spawnSluice([
    `--manifests=${dir.path}`,
    "--workers=2",
    `--shutdown-delay=${delayMs}ms`,
    `--shutdown-timeout=${timeoutMs}ms`,
  ]);
  using client = Deno.createHttpClient({ allowHost: true });
  const outcomes: { status: number | string; slow: boolean; issuedAfterSignal: boolean }[] = [];
  let signalledAt: number | undefined;
  let issuing = true;
  try {
    await sluice.ready();
    const send = async (n: number, slow: boolean) => {
      const issuedAfterSignal = signalledAt !== undefined;
      const url = `http://127.0.0.1:${sluice.httpPort}/load?n=${n}${slow ? "&delay=2000" : ""}`;
      try {
        const r = await fetch(url, { headers: { host: "shop.test" }, client });
        await r.arrayBuffer();
        outcomes.push({ status: r.status, slow, issuedAfterSignal });
      } catch (error) {
        outcomes.push({ status: String(error), slow, issuedAfterSignal });
      }
    };
    const loop = async (id: number) => {
      // One request in five is slow: it is still running when the listeners stop accepting.
      for (let i = 0; issuing && i < 500; i++) await send(i, (i + id) % 5 === 0);
    };
    const loops = Array.from({ length: 16 }, (_, id) => loop(id));
    await waitFor("some load", () => outcomes.length >= 50);

    signalledAt = performance.now();
    const exited = sluice.stop("SIGTERM");
    await waitFor("/readyz to answer 503", async () => {
      const r = await fetch(`http://127.0.0.1:${sluice.healthPort}/readyz`);
      await r.body?.cancel();
      return r.status === 503;
    }, { timeoutMs: 500, intervalMs: 5 });
    // The loops move in step (their slow requests start together), so all of them may be
    // inside a slow request for the whole window below: send one fast and one slow request
    // now, so that requests issued after the signal exist whatever the timing.
    loops.push(send(-1, false), send(-2, true));
    // Keep sending during the first part of the delay (a load balancer still would), then stop.
    await waitFor("half the shutdown delay", () => performance.now() - signalledAt! > delayMs / 2);
    issuing = false;
    await within(timeoutMs, "the load loops", Promise.all(loops));
    const code = await within(delayMs + timeoutMs + 5_000, "Sluice to exit", exited);
    const tookMs = performance.now() - signalledAt;

    assertEquals(code, 0);
    // In-flight slow requests (2 s) end about delay + 2 s after the signal, far before the timeout.
    assert(tookMs < delayMs + 2_000 + 3_000, `exited after ${Math.round(tookMs)} ms`);
    const failed = outcomes.filter((o) => o.status !== 200);
    assertEquals(failed, [], "every request that had started succeeded");
    assert(outcomes.some((o) => o.issuedAfterSignal), "requests were served after SIGTERM");
    assert(outcomes.some((o) => o.slow && o.issuedAfterSignal), "slow requests finished");
    const stopped = sluice.records().find((r) => String(r.message ?? "").startsWith("Stopped"));
    assert(stopped !== undefined, "the last log line was written before exiting");
  } finally {
    issuing = false;
    await sluice.stop();
    await site.close();
  }
});

Deno.test("SIGHUP is logged and ignored: Sluice keeps serving and stays ready, and SIGTERM still drains and exits 0", async () => {
  const site = await echoSite({ name: "web" });
  const { dir } = site;
  const sluice = await spawnSluice([
    `--manifests=${dir.path}`,
    "--workers=1",
    "--shutdown-delay=0s",
  ]);
  using client = Deno.createHttpClient({ allowHost: true });
  const get = async () => {
    const r = await fetch(`http://127.0.0.1:${sluice.httpPort}/`, {
      headers: { host: "shop.test" },
      client,
    });
    await r.arrayBuffer();
    return r.status;
  };
  try {
    await sluice.ready();
    assertEquals(await get(), 200);
    let exited = false;
    void sluice.exited.then(() => exited = true);
    Deno.kill(sluice.pid, "SIGHUP");
    await waitFor(
      "the SIGHUP log line",
      () => sluice.records().some((r) => String(r.message ?? "").includes("SIGHUP")),
    );
    assertEquals(exited, false);
    assertEquals(await get(), 200);
    await sluice.ready(5_000);
    assertEquals(await within(20_000, "the exit after SIGTERM", sluice.stop("SIGTERM")), 0);
  } finally {
    await sluice.stop("SIGKILL");
    await site.close();
  }
});
