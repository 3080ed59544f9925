import { assertEquals } from "../../tests/support/assert.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import { StalledSockets } from "./_stalled_sockets.ts";

/** `n` connections to one loopback listener: the server ends, the client ends. */
async function connections(listener: Deno.TcpListener, n: number) {
  const pairs: { server: Deno.TcpConn; client: Deno.TcpConn }[] = [];
  for (let i = 0; i < n; i++) {
    const [client, server] = await Promise.all([
      Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port }),
      listener.accept(),
    ]);
    pairs.push({ server, client });
  }
  return pairs;
}

/** Resolves once the client end reads its end (EOF or reset). */
async function ended(client: Deno.Conn): Promise<true> {
  try {
    while ((await client.read(new Uint8Array(64))) !== null) { /* nothing is sent */ }
  } catch {
    // A reset ends it too.
  }
  return true;
}

Deno.test("connections queued together are shut down in one sweep; later ones in the next; flush() sweeps at once", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const pairs = await connections(listener, 26);
  const warnings: string[] = [];
  const stalled = new StalledSockets({
    minIntervalMs: 200,
    onUnavailable: (reason) => warnings.push(reason),
  });
  try {
    for (const { server } of pairs.slice(0, 20)) stalled.add(server);
    await waitFor("the first batch", () => stalled.stats.shut === 20);
    assertEquals(stalled.stats.sweeps, 1);
    stalled.add(pairs[20]!.server);
    await waitFor("the second batch", () => stalled.stats.shut === 21);
    assertEquals(stalled.stats.sweeps, 2);
    for (const { server } of pairs.slice(21)) stalled.add(server);
    await stalled.flush();
    assertEquals(stalled.stats, { queued: 26, shut: 26, missing: 0, sweeps: 3 });
    await within(5_000, "every client's end", Promise.all(pairs.map((p) => ended(p.client))));
    // Closed already: counted as missing, nothing else touched.
    pairs[0]!.server.close();
    stalled.add(pairs[0]!.server);
    await stalled.flush();
    assertEquals(stalled.stats, { queued: 27, shut: 26, missing: 1, sweeps: 4 });
    assertEquals(warnings, []);
  } finally {
    for (const [i, { server, client }] of pairs.entries()) {
      if (i > 0) server.close();
      client.close();
    }
    listener.close();
  }
});
