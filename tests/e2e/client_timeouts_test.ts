/**
 * Client timeouts of a real Sluice process (run from a `--manifests` directory,
 * no cluster): clients stalled in their TLS handshake are disconnected at
 * `--client-first-bytes-timeout` and Sluice's descriptors go back; over plain
 * HTTP, silent and idle connections are closed at the client timeouts while a
 * quiet stream and a quiet WebSocket are not.
 *
 * @module
 */
import { assert, assertEquals } from "../support/assert.ts";
import { startEchoBackend } from "../support/echo_backend.ts";
import { writeManifestDir } from "../support/manifest_dir.ts";
import { RawConnection } from "../support/raw_http.ts";
import { spawnSluice } from "../support/sluice_process.ts";
import { waitFor, within } from "../support/wait.ts";
import { clientHello } from "../support/tls_material.ts";

/** `sluice_client_timeouts_total` from `/metrics`, by `listener/reason`. */
async function clientTimeouts(healthPort: number): Promise<Record<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${healthPort}/metrics`)).text();
  const counts: Record<string, number> = {};
  for (const match of text.matchAll(/^sluice_client_timeouts_total\{(.*)\} (\d+)$/gm)) {
    const labels = Object.fromEntries(
      [...match[1]!.matchAll(/(\w+)="([^"]*)"/g)].map(([, name, value]) => [name, value]),
    );
    counts[`${labels.listener}/${labels.reason}`] = Number(match[2]);
  }
  return counts;
}

/** How many descriptors `pid` holds. */
function descriptors(pid: number): number {
  return [...Deno.readDirSync(`/proc/${pid}/fd`)].length;
}

// Was a limitation: Deno 2.9.6 does not close a TLS connection whose handshake is pending, so a
// client could hold any number of Sluice's descriptors by connecting to the HTTPS port and sending
// nothing. Sluice now shuts such sockets down through FFI, which this checks with exactly the
// binary's permissions.
Deno.test("--client-first-bytes-timeout: clients stalled in their TLS handshake are disconnected and Sluice's descriptors go back", async () => {
  const dir = await writeManifestDir([]);
  const sluice = await spawnSluice([
    `--manifests=${dir.path}`,
    "--workers=2",
    "--shutdown-delay=0s",
    "--client-first-bytes-timeout=500ms",
  ]);
  const conns: Deno.Conn[] = [];
  try {
    await sluice.ready();
    const before = descriptors(sluice.pid);
    for (let i = 0; i < 100; i++) {
      conns.push(await Deno.connect({ hostname: "127.0.0.1", port: sluice.httpsPort }));
    }
    // One sends a whole ClientHello and then nothing: the server's flight comes, then the end.
    await conns[0]!.write(clientHello({ serverName: "stalled.test" }));
    await waitFor("Sluice to accept them", () => descriptors(sluice.pid) >= before + 100);
    const buffer = new Uint8Array(16 * 1024);
    const ends = await within(
      20_000,
      "every stalled client's end",
      Promise.all(conns.map(async (conn) => {
        try {
          while ((await conn.read(buffer)) !== null) { /* the server's flight, for the one */ }
        } catch {
          // A reset ends it too.
        }
        return true;
      })),
    );
    assertEquals(ends.length, 100);
    await waitFor("Sluice's descriptors to go back", () => descriptors(sluice.pid) <= before + 2);
    assertEquals(
      await clientTimeouts(sluice.healthPort),
      {
        "https/tls-handshake": 100,
        "http/first-bytes": 0,
        "http/idle": 0,
        "http/head": 0,
        "http/send": 0,
      },
      "counted in /metrics, both workers summed",
    );
    assertEquals(
      sluice.logs.filter((line) => line.includes("keep their socket")),
      [],
      "shutting the sockets down works with the binary's permissions",
    );
  } finally {
    for (const conn of conns) conn.close();
    await sluice.stop("SIGKILL");
    await dir.remove();
  }
});

// Was a limitation: Deno.serve closes no plain-HTTP connection on its own, so a client could hold
// any number of silent or idle connections. The main thread's connection reaper now closes them,
// through FFI, with the binary's permissions; what the workers report keeps busy connections open
// however quiet they are.
Deno.test("plain HTTP: silent and idle connections are closed at the client timeouts; a quiet stream and a quiet WebSocket are not", async () => {
  const backend = await startEchoBackend({ name: "shop/web" });
  const dir = await writeManifestDir([
    { namespace: "shop", name: "web", host: "localhost", port: backend.port },
  ]);
  const sluice = await spawnSluice([
    `--manifests=${dir.path}`,
    "--workers=2",
    "--shutdown-delay=0s",
    "--client-first-bytes-timeout=500ms",
    "--client-idle-timeout=1s",
  ]);
  let ws: WebSocket | undefined;
  try {
    await sluice.ready();
    ws = new WebSocket(`ws://localhost:${sluice.httpPort}/ws`);
    using stream = await RawConnection.open(sluice.httpPort);
    await within(5_000, "the WebSocket to open", new Promise((resolve) => ws!.onopen = resolve));
    // Two events 4 s apart: in between, a response in flight with no byte either way.
    await stream.send("GET /sse?n=2&interval=4000 HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assertEquals((await stream.readResponse({ head: true })).status, 200);
    using silent = await RawConnection.open(sluice.httpPort);
    assert(await silent.closedByPeer(10_000), "a connection that sent nothing was closed");
    using idle = await RawConnection.open(sluice.httpPort);
    await idle.send("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assertEquals((await idle.readResponse()).status, 200);
    assert(await idle.closedByPeer(10_000), "an idle keep-alive connection was closed");
    assertEquals(await clientTimeouts(sluice.healthPort), {
      "http/first-bytes": 1,
      "http/idle": 1,
      "http/head": 0,
      "http/send": 0,
    });
    // By now the WebSocket has been quiet for longer than both timeouts.
    const echoed = new Promise((resolve) => ws!.onmessage = (event) => resolve(event.data));
    ws.send("still here");
    assertEquals(await within(5_000, "the echo", echoed), "still here");
    const events = new TextDecoder().decode(await stream.readToEnd(10_000));
    assertEquals(events.match(/^data: /gm)?.length, 2, events);
    assertEquals(sluice.logs.filter((line) => line.includes("get no client timeouts")), []);
  } finally {
    ws?.close();
    await sluice.stop("SIGKILL");
    await backend.close();
    await dir.remove();
  }
});
