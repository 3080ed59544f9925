/**
 * Rotation of the HTTPS listener's generations: a renewed certificate served to
 * new connections (after `refresh()` or when a handshake sees a new certificate
 * table), a new generation after `maxServerNames` distinct names (also under a
 * flood of random names), connections and WebSockets opened before a rotation
 * served after it, renewals under load failing no request, and a stalled body
 * across a rotation ending the old generation's drain when its client leaves.
 * Real HTTPS listener, real TLS clients.
 *
 * @module
 */

import type { HttpsListener } from "./https_listener.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import {
  assert,
  assertEquals,
  assertRejects,
  assertStringIncludes,
} from "../../tests/support/assert.ts";
import {
  certA,
  certA2,
  certA3,
  certA4,
  certDefault,
  certWild,
  echoWebSocket,
  leafIs,
  pairA,
  pairWild,
  secretsTable,
  serves,
  tableCell,
  withHttpsListener,
  withTlsListener,
} from "../../tests/support/tls_world.ts";
import { probeCertificate } from "../../tests/support/tls_material.ts";
import { wssConnect } from "../../tests/support/tls_client.ts";
import {
  GET,
  listen,
  openClient,
  PROMPT_MS,
  proxyTo,
  readUntil,
  send,
  stallingBackend,
  tearDown,
} from "../../tests/support/stalled_body_world.ts";

Deno.test("a stalled body in flight across an HTTPS rotation: the client leaving closes the backend connection and ends the old generation's drain at once", async () => {
  const world = stallingBackend();
  world.answer();
  const proxy = proxyTo(world.backend.port);
  const listener = listen("https", proxy) as HttpsListener;
  const client = await openClient("https", listener.addr.port);
  try {
    await send(client, GET);
    await readUntil(client, "hello");
    listener.rotate();
    await within(PROMPT_MS, "the old socket to close", listener.settled());
    assertEquals(listener.stats.draining, 1);
    client.close();
    await within(PROMPT_MS, "the backend connection to close", world.closed);
    await waitFor("the old generation to drain", () => listener.stats.draining === 0, {
      timeoutMs: PROMPT_MS,
    });
    await waitFor("the pool to give the connection back", () => proxy.pool.stats().active === 0, {
      timeoutMs: PROMPT_MS,
    });
    assertEquals(listener.stats.requests, 0);
  } finally {
    await tearDown(client, listener, proxy, world);
  }
});

Deno.test("a flood of random server names rotates generations and keeps each one's names bounded", async () => {
  const table = secretsTable();
  const maxServerNames = 50;
  await withTlsListener(() => table, { maxServerNames }, async (listener, port) => {
    let refused = 0;
    let highest = 0;
    for (let batch = 0; batch < 20; batch++) {
      const flights = await Promise.all(
        Array.from(
          { length: 25 },
          (_, i) =>
            probeCertificate(port, { serverName: `r${batch}-${i}-${crypto.randomUUID()}.w.test` })
              .catch(() => undefined),
        ),
      );
      for (const flight of flights) {
        if (flight === undefined || !leafIs(flight, pairWild!)) refused++;
      }
      highest = Math.max(highest, listener.stats.serverNames);
    }
    // 500 names; a generation rotates on its 51st, but names of a concurrent batch may land on it
    // before the rotation: at most 75 per generation, so at least 6 rotations.
    assert(listener.stats.rotations >= 6, JSON.stringify(listener.stats));
    assert(highest <= maxServerNames + 25, `a generation held ${highest} names`);
    await waitFor("the replaced generations to close", () => listener.stats.draining === 0);
    // A connection queued on a socket as it closes may be reset (documented; tcp_migrate_req=0).
    assert(refused <= 25, `${refused} of 500 handshakes failed`);
    assert(leafIs(await probeCertificate(port, { serverName: "a.test" }), pairA!));
  });
});

Deno.test("refresh() serves a renewed certificate to new connections", async () => {
  const cell = tableCell(certA);
  await withHttpsListener({ table: cell.get }, async (listener, port) => {
    await serves(port, "a.test", certA);
    assertEquals(listener.refresh(), false, "nothing changed yet");
    cell.set(certA2);
    assertEquals(listener.refresh(), true);
    await listener.settled();
    await serves(port, "a.test", certA2);
    await assertRejects(() => serves(port, "a.test", certA), Error, "invalid peer certificate");
    assertEquals(listener.stats.generation, 2);
  });
});

Deno.test("listenHttps() rotates when a handshake sees a new certificate table without refresh()", async () => {
  const cell = tableCell(certA);
  await withHttpsListener({ table: cell.get }, async (listener, port) => {
    await serves(port, "a.test", certA);
    cell.set(certA2);
    // a.test is cached by the first generation; a name it has not seen makes it look at the table.
    await serves(port, "x.w.test", certWild);
    await waitFor("a new generation", () => listener.stats.generation === 2);
    await listener.settled();
    await serves(port, "a.test", certA2);
  });
});

Deno.test("listenHttps() opens a new generation after maxServerNames distinct names", async () => {
  await withHttpsListener({ maxServerNames: 5 }, async (listener, port) => {
    for (let i = 0; i < 30; i++) {
      await serves(port, `n${i}.rand.test`, certDefault);
      // One name at a time lands on the accepting generation: wait out each rotation.
      await listener.settled();
    }
    await waitFor("the replaced generations to close", () => listener.stats.draining === 0);
    const { generation, serverNames, rotations } = listener.stats;
    // The sixth name a generation resolves replaces it: 30 names, 5 rotations.
    assertEquals([generation, rotations, serverNames], [6, 5, 0]);
  });
});

Deno.test("a connection that sent no request before a rotation is still served after it", async () => {
  const cell = tableCell(certA);
  await withHttpsListener({ table: cell.get }, async (listener, port) => {
    const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
    const conn = await Deno.startTls(tcp, { hostname: "a.test", caCerts: [certA.certPem] });
    try {
      await conn.handshake();
      cell.set(certA2);
      assert(listener.refresh());
      await within(5_000, "the old listener to close", listener.settled());
      await serves(port, "a.test", certA2);
      await conn.write(
        new TextEncoder().encode("GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"),
      );
      const answer = await within(5_000, "the answer", new Response(conn.readable).text());
      assertStringIncludes(answer, "HTTP/1.1 200");
      assert(answer.endsWith("\r\n\r\nok"), answer);
    } catch (error) {
      conn.close();
      throw error;
    }
  });
});

Deno.test("renewing the certificate under load fails no request", async () => {
  const cell = tableCell(certA);
  const renewals = [certA2, certA3, certA4];
  const concurrency = 16;
  await withHttpsListener({ table: cell.get }, async (listener, port) => {
    const client = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-net",
        new URL("../../tests/support/tls_load_client.ts", import.meta.url).pathname,
      ],
      stdin: "piped",
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    const writer = client.stdin.getWriter();
    await writer.write(new TextEncoder().encode(JSON.stringify({
      port,
      serverName: "a.test",
      caCerts: [certA, ...renewals].map((c) => c.certPem),
      concurrency,
      requests: 1_200,
      progressEvery: 100,
    })));
    await writer.close();
    let result:
      | {
        ok: number;
        failed: number;
        resets: number;
        unanswered: number;
        errors: Record<string, number>;
      }
      | undefined;
    const lines = client.stdout.pipeThrough(new TextDecoderStream()).pipeThrough(lineSplitter());
    for await (const line of lines) {
      const progress = /^progress (\d+)$/.exec(line);
      // Renew after 200, 500 and 800 requests, while 16 handshakes are in flight.
      if (progress && [200, 500, 800].includes(Number(progress[1]))) {
        cell.set(renewals.shift()!);
        assert(listener.refresh());
      } else if (line.startsWith("{")) {
        result = JSON.parse(line);
      }
    }
    assertEquals((await client.status).code, 0);
    assertEquals(renewals.length, 0, "all three renewals happened under load");
    assert(result !== undefined);
    const { ok, failed, resets } = result;
    assertEquals(ok + failed, 1_200);
    // Connections of the old generation carry on (relayed into the inner server), whatever state
    // they are in: none may fail.
    assertEquals(failed, 0, `no request fails: ${JSON.stringify(result)}`);
    // The only loss left: a connection the kernel queued on the old socket in the instant it
    // closes is reset before any TLS byte (no request was sent; clients retry).
    // net.ipv4.tcp_migrate_req=1 makes it impossible. Measured: 0 to 4 in 3 rotations on a quiet
    // machine, up to 10 on a loaded one; at most one per client per rotation can be queued.
    assert(
      resets <= 3 * concurrency,
      `${resets} connections reset by the kernel in 3 rotations`,
    );
    assertEquals(listener.stats.rotations, 3);
    await listener.settled();
    await serves(port, "a.test", certA4);
    await assertRejects(() => serves(port, "a.test", certA3), Error, "invalid peer certificate");
  });
});

const encoder = new TextEncoder();
const decoder = new TextDecoder();

Deno.test("a WebSocket opened before a rotation keeps relaying after it; new ones open on the new generation", async () => {
  const cell = tableCell(certA);
  await withHttpsListener({ handler: echoWebSocket, table: cell.get }, async (listener, port) => {
    const options = { serverName: "a.test", caCerts: [certA.certPem, certA2.certPem] };
    const old = await wssConnect(port, "/", options);
    try {
      cell.set(certA2);
      assert(listener.refresh());
      await listener.settled();
      assertEquals(listener.stats.accepting, 1);
      assertEquals(listener.stats.draining, 1, "the old generation still has the WebSocket");
      await old.send(1, encoder.encode("still here"));
      const echo = await within(5_000, "the old WebSocket's echo", old.receive());
      assertEquals([echo?.opcode, decoder.decode(echo?.payload)], [1, "still here"]);
      const fresh = await wssConnect(port, "/", { ...options, caCerts: [certA2.certPem] });
      try {
        await fresh.send(1, encoder.encode("again"));
        const again = await within(5_000, "the echo", fresh.receive());
        assertEquals(decoder.decode(again?.payload), "again");
      } finally {
        fresh.close();
      }
    } finally {
      old.close();
    }
  });
});

function lineSplitter(): TransformStream<string, string> {
  let buffer = "";
  return new TransformStream({
    transform(chunk, controller) {
      buffer += chunk;
      const lines = buffer.split("\n");
      buffer = lines.pop()!;
      for (const line of lines) controller.enqueue(line);
    },
    flush(controller) {
      if (buffer !== "") controller.enqueue(buffer);
    },
  });
}
