/**
 * `sendUpstream()` on its own: a refused port fails fast with `connect-failed`,
 * and a response is read exactly to its framing, its connection pooled only
 * after a well-framed exchange. Its retries, streaming, chunk release, client
 * signal and request framing are in the behaviour files of this folder.
 *
 * @module
 */
import { assertEquals, assertRejects } from "../../tests/support/assert.ts";
import { patternBytes } from "../../tests/support/echo_backend.ts";
import { concatBytes, latin1 } from "../../tests/support/raw_http.ts";
import { startScriptedBackend } from "../../tests/support/scripted_backend.ts";
import { sendUpstream } from "./upstream_client.ts";
import { UpstreamError } from "./upstream_error.ts";
import { UpstreamPool } from "./upstream_pool.ts";
import { backendGet } from "../../tests/support/upstream_backends.ts";

Deno.test("sendUpstream() fails fast with connect-failed on a refused port and the pool closes cleanly", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  const pool = new UpstreamPool();
  try {
    const error = await assertRejects(
      () => sendUpstream(pool, { address: "127.0.0.1", port }, backendGet("/")),
      UpstreamError,
    );
    assertEquals(error.kind, "connect-failed");
  } finally {
    pool.close();
  }
  const afterClose = await assertRejects(
    () => sendUpstream(pool, { address: "127.0.0.1", port }, backendGet("/")),
    UpstreamError,
  );
  assertEquals(afterClose.kind, "connect-failed");
});

// ---------------------------------------------------------------------------
// Framing, both ways, against a raw backend (tests/support/scripted_backend.ts)
// ---------------------------------------------------------------------------

/** Short enough that a framing bug that waits for bytes never sent fails fast instead of hanging. */
const FRAMING_IO_TIMEOUT_MS = 2_000;

/** A response body read to its end: the bytes that arrived (latin1), and whether it failed. */
async function readBody(
  body: Uint8Array | ReadableStream<Uint8Array> | null,
): Promise<{ text: string; failed: boolean }> {
  if (body === null) return { text: "", failed: false };
  if (body instanceof Uint8Array) return { text: latin1(body), failed: false };
  const parts: Uint8Array[] = [];
  const reader = body.getReader();
  try {
    for (let next = await reader.read(); !next.done; next = await reader.read()) {
      parts.push(next.value);
    }
    return { text: latin1(concatBytes(parts)), failed: false };
  } catch {
    return { text: latin1(concatBytes(parts)), failed: true };
  }
}

/** What the backend sends after the first answer, to any request on any connection. */
const NEXT = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext";

Deno.test("sendUpstream() reads a response exactly to its framing, and pools its connection only after a well-framed exchange", async () => {
  const big = latin1(patternBytes(0, 100_000));
  const cases: {
    name: string;
    method?: string;
    /** The backend's whole answer to the first request, written at once; the socket stays open. */
    answer: string;
    /** The body bytes relayed, and whether the body failed. */
    body: { text: string; failed: boolean };
    /** Whether the next request goes over the same connection. */
    reused: boolean;
  }[] = [
    {
      name: "Content-Length, read whole, with bytes past its end",
      answer: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA",
      body: { text: "hello", failed: false },
      reused: false,
    },
    {
      name: "Content-Length, streamed (over 64 KiB), with bytes past its end",
      answer: `HTTP/1.1 200 OK\r\nContent-Length: ${big.length}\r\n\r\n${big}EXTRA`,
      body: { text: big, failed: false },
      reused: false,
    },
    {
      name: "Content-Length, nothing past its end",
      answer: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
      body: { text: "hello", failed: false },
      reused: true,
    },
    {
      name: "chunked, with extensions and trailers",
      answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
        "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\nX-Other: 2\r\n\r\n",
      body: { text: "hello world", failed: false },
      reused: true,
    },
    {
      name: "chunked, without trailers",
      answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      body: { text: "hello", failed: false },
      reused: true,
    },
    {
      name: "chunked, chunk data longer than its size",
      answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n",
      body: { text: "hel", failed: true },
      reused: false,
    },
    {
      name: "chunked, chunk data not followed by CRLF",
      answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\n0\r\n\r\n",
      body: { text: "hello", failed: true },
      reused: false,
    },
    {
      name: "Connection: close, the socket left open",
      answer: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
      body: { text: "ok", failed: false },
      reused: false,
    },
    {
      name: "HTTP/1.0 without keep-alive, the socket left open",
      answer: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
      body: { text: "ok", failed: false },
      reused: false,
    },
    {
      name: "304 with the Content-Length of the representation, no body",
      answer: 'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\nContent-Length: 5\r\n\r\n',
      body: { text: "", failed: false },
      reused: true,
    },
    {
      name: "204 with a Content-Length, no body",
      answer: "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
      body: { text: "", failed: false },
      reused: true,
    },
    {
      name: "HEAD answered with the Content-Length a GET would get, no body",
      method: "HEAD",
      answer: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
      body: { text: "", failed: false },
      reused: true,
    },
  ];
  for (const { name, method, answer, body, reused } of cases) {
    let answered = 0;
    const backend = startScriptedBackend(async (conn) => {
      while ((await conn.readHead()) !== null) await conn.write(answered++ === 0 ? answer : NEXT);
    });
    const pool = new UpstreamPool({ ioTimeoutMs: FRAMING_IO_TIMEOUT_MS });
    const endpoint = { address: "127.0.0.1", port: backend.port };
    try {
      const first = await sendUpstream(pool, endpoint, {
        ...backendGet("/first"),
        method: method ?? "GET",
      });
      assertEquals(await readBody(first.body), body, name);
      assertEquals((await first.done).complete, !body.failed, name);
      const second = await sendUpstream(pool, endpoint, backendGet("/second"));
      assertEquals(await readBody(second.body), { text: "next", failed: false }, name);
      assertEquals(backend.connections.length, reused ? 1 : 2, `${name}: connections used`);
    } finally {
      pool.close();
      await backend.close();
    }
  }
});
