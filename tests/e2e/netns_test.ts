/**
 * The test hosts themselves (`tests/support/netns.ts`): each has its own
 * address reachable from the root namespace, is removed on `close()`, and a
 * later run sweeps what a crashed one left behind.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 tools/deno task test tests/e2e/netns_test.ts
 *
 * @module
 */
import { assert, assertEquals, assertNotEquals } from "../support/assert.ts";
import { createTestHost, sweepStaleHosts } from "../support/netns.ts";

async function ip(args: string[]): Promise<{ code: number; stdout: string }> {
  const out = await new Deno.Command("ip", { args, stdout: "piped", stderr: "null" }).output();
  return { code: out.code, stdout: new TextDecoder().decode(out.stdout) };
}

async function namespaces(): Promise<string[]> {
  return (await ip(["netns", "list"])).stdout.split("\n").map((l) => l.split(" ")[0] ?? "");
}

/** A pid that no process has now: one of a child that has exited. */
async function deadPid(): Promise<number> {
  const child = new Deno.Command("true", { stdout: "null", stderr: "null" }).spawn();
  await child.status;
  return child.pid;
}

Deno.test("createTestHost gives each host its own address reachable from the root namespace, and close() removes it", async () => {
  const a = await createTestHost({ name: "a" });
  const b = await createTestHost({ name: "b" });
  try {
    assertNotEquals(a.address, b.address);
    assert(a.address.startsWith("10.244.") && b.address.startsWith("10.244."));
    const [backendA, backendB] = await Promise.all([
      a.startEchoBackend({ port: 8080, service: "web", pod: "pod-a" }),
      b.startEchoBackend({ port: 8080, service: "web", pod: "pod-b" }),
    ]);
    for (const [backend, pod] of [[backendA, "pod-a"], [backendB, "pod-b"]] as const) {
      const response = await fetch(`${backend.url}/hello`);
      assertEquals((await response.json()).pod, pod);
    }
    // Inside, the host sees its own address and nothing of the root namespace's.
    const inside = await a.run(["ip", "-4", "-o", "addr", "show"]);
    assertEquals(inside.code, 0);
    assert(inside.stdout.includes(`inet ${a.address}/30`), inside.stdout);
    assert(!inside.stdout.includes(b.address), inside.stdout);
  } finally {
    await a.close();
    await b.close();
  }
  const left = await namespaces();
  assert(!left.includes(a.namespace) && !left.includes(b.namespace), left.join());
  assert(!(await ip(["-4", "-o", "addr", "show"])).stdout.includes(a.gateway));
});

Deno.test("sweepStaleHosts() removes the namespaces and veths of runs that are gone, and only those", async () => {
  const pid = await deadPid();
  const stale = `sluice-${pid}-0`;
  const veth = `sl${pid}h0`;
  await using mine = await createTestHost({ name: "mine" });
  assertEquals((await ip(["netns", "add", stale])).code, 0);
  assertEquals(
    (await ip(["link", "add", veth, "type", "veth", "peer", "name", `sl${pid}p0`])).code,
    0,
  );
  try {
    const removed = await sweepStaleHosts();
    assertEquals(removed, [stale]);
    assert(!(await namespaces()).includes(stale));
    assertNotEquals((await ip(["link", "show", veth])).code, 0);
    assert((await namespaces()).includes(mine.namespace), "this run's host stays");
  } finally {
    await ip(["netns", "del", stale]);
    await ip(["link", "del", veth]);
  }
});
