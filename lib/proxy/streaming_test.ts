/**
 * Streamed bodies: server-sent events reach the client as the backend writes
 * them (latency measured), 64 MiB downloads and uploads arrive whole, and an
 * unread body stops the proxy reading the backend (backpressure). Real
 * handler on `Deno.serve` or `sendUpstream()` itself, real loopback backends.
 *
 * @module
 */
import { ECHO_HOST, echoJson, withEchoProxy } from "../../tests/support/echo_proxy.ts";
import { assert, assertEquals, assertStrictEquals } from "../../tests/support/assert.ts";
import {
  closeQuietly,
  headerValue,
  headerValues,
  RawConnection,
} from "../../tests/support/raw_http.ts";
import { createHash } from "node:crypto";
import { patternBytes, patternSha256 } from "../../tests/support/echo_backend.ts";
import { backendGet, scriptedServer } from "../../tests/support/upstream_backends.ts";
import { UpstreamPool } from "./upstream_pool.ts";
import { sendUpstream } from "./upstream_client.ts";
import { SseProbe } from "../../tests/support/sse_probe.ts";
import { startScriptedBackend } from "../../tests/support/scripted_backend.ts";
import { startProxy } from "../../tests/support/proxy_harness.ts";
import { waitFor } from "../../tests/support/wait.ts";

Deno.test("proxy streams SSE events to the client before the stream ends", async () => {
  await withEchoProxy(async ({ proxy, backend }) => {
    // Two events an hour apart: only a streaming proxy delivers the first one in time.
    const response = await fetch(`${proxy.url}/sse?n=2&interval=3600000`);
    assertStrictEquals(headerValue([...response.headers], "content-type"), "text/event-stream");
    const reader = response.body!.getReader();
    const first = await reader.read();
    assertStrictEquals(new TextDecoder().decode(first.value), "id: 0\ndata: event 0\n\n");
    // Leaving mid-stream closes the backend connection too.
    await reader.cancel();
    await backend.waitFor(() => backend.connectionsOpen === 0);
  });
});

Deno.test("proxy streams a 64 MiB download and a 64 MiB upload with matching hashes", async () => {
  const size = 64 * 1024 * 1024;
  await withEchoProxy(async ({ proxy, backend }) => {
    for (const chunked of [false, true]) {
      const response = await fetch(`${proxy.url}/bytes?n=${size}${chunked ? "&chunked=1" : ""}`);
      const hash = createHash("sha256");
      let length = 0;
      for await (const chunk of response.body!) {
        hash.update(chunk);
        length += chunk.length;
      }
      assertEquals([length, hash.digest("hex")], [size, patternSha256(size)]);
    }
    // Chunked upload (a stream of unknown length).
    let offset = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (offset >= size) return controller.close();
        controller.enqueue(patternBytes(offset, 256 * 1024));
        offset += 256 * 1024;
      },
    });
    const response = await fetch(`${proxy.url}/upload`, { method: "POST", body });
    const echo = await response.json();
    assertEquals(echo.body, { length: size, sha256: patternSha256(size) });
    assertEquals(headerValues(echo.headers, "transfer-encoding"), ["chunked"]);
    // Content-Length upload, written raw so the length is declared.
    const conn = await RawConnection.open(proxy.port);
    try {
      await conn.send(
        `PUT /upload HTTP/1.1\r\nHost: ${ECHO_HOST}\r\nContent-Length: ${size}\r\n\r\n`,
      );
      for (let at = 0; at < size; at += 1024 * 1024) await conn.send(patternBytes(at, 1024 * 1024));
      const declared = echoJson(await conn.readResponse({ timeoutMs: 60_000 }));
      assertEquals(declared.body, { length: size, sha256: patternSha256(size) });
      assertEquals(headerValues(declared.headers, "content-length"), [String(size)]);
      assertEquals(headerValues(declared.headers, "transfer-encoding"), []);
    } finally {
      conn.close();
    }
    assertStrictEquals(backend.requests.filter((r) => r.error !== undefined).length, 0);
  });
});

Deno.test("response bodies stream with backpressure: an unread body stops reading the backend", async () => {
  const size = 64 * 1024 * 1024;
  let written = 0;
  const server = scriptedServer(async (io) => {
    await io.nextHead();
    await io.write(`HTTP/1.1 200 OK\r\nContent-Length: ${size}\r\n\r\n`);
    const block = new Uint8Array(64 * 1024);
    while (written < size) {
      await io.write(block);
      written += block.length;
    }
  });
  const pool = new UpstreamPool();
  try {
    const response = await sendUpstream(
      pool,
      { address: "127.0.0.1", port: server.port },
      backendGet("/"),
    );
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    // Wait until the backend is blocked (no progress for 200 ms), then check how far it got.
    let last = -1;
    await waitUntil(async () => {
      const now = written;
      const stable = now === last;
      last = now;
      if (!stable) await new Promise((resolve) => setTimeout(resolve, 200));
      return stable;
    }, 10_000);
    assert(written < 16 * 1024 * 1024, `backend wrote ${written} bytes into an unread stream`);
    let total = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.length;
    }
    assert(total >= size - 64 * 1024, `read ${total}`);
    assertEquals((await response.done).complete, true);
  } finally {
    pool.close();
    await server.close();
  }
});

async function waitUntil(
  predicate: () => boolean | Promise<boolean>,
  timeoutMs = 5_000,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await predicate())) {
    if (performance.now() > deadline) throw new Error("Condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const H = "Host: shop.example.com\r\n";

Deno.test("over plain HTTP each SSE event reaches the client promptly after the backend writes it (latency measured)", async () => {
  const probe = new SseProbe(6);
  const backend = startScriptedBackend((conn) => probe.serve(conn), { noDelay: true });
  const proxy = await startProxy({
    routes: [{ endpoints: [{ address: "127.0.0.1", port: backend.port }] }],
  });
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: proxy.port });
  try {
    await conn.write(new TextEncoder().encode(`GET /sse HTTP/1.1\r\n${H}\r\n`));
    await probe.readFrom(conn);
    await waitFor("the stream to end", () => backend.open === 0);
  } finally {
    closeQuietly(conn);
    await proxy.close();
    await backend.close();
  }
  // deno-lint-ignore no-console
  console.log(`SSE event latency over HTTP: ${probe.summary()}`);
  // Not a speed target: a bound a buffering proxy cannot meet (the next event waits for this one).
  assert(probe.median < 250, `SSE latencies ${probe.latencies.join(", ")} ms`);
});
