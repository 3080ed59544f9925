/**
 * `sendUpstream()` on its own: a refused port fails fast with `connect-failed`,
 * and a response is read exactly to its framing, its connection pooled only
 * after a well-framed exchange. Its retries, streaming, chunk release, client
 * signal and request framing are in the behaviour files of this folder.
 *
 * @module
 */
import {
  assert,
  assertEquals,
  assertRejects,
  assertStrictEquals,
} from "../../tests/support/assert.ts";
import { patternBytes } from "../../tests/support/echo_backend.ts";
import { concatBytes, latin1 } from "../../tests/support/raw_http.ts";
import { startScriptedBackend } from "../../tests/support/scripted_backend.ts";
import { sendUpstream } from "./upstream_client.ts";
import { UpstreamError } from "./upstream_error.ts";
import { UpstreamPool } from "./upstream_pool.ts";
import { backendGet, bodyText, scriptedServer } from "../../tests/support/upstream_backends.ts";

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

Deno.test("clientSignal: asked for before a new connection, never by a fast exchange on a pooled one", async () => {
  const server = scriptedServer(async (io) => {
    while ((await io.nextHead()) !== null) {
      await io.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    }
  });
  // A check interval no exchange on loopback comes near: "fast" is certain.
  const pool = new UpstreamPool({ clientCheckMs: 60_000 });
  const endpoint = { address: "127.0.0.1", port: server.port };
  let asked = 0;
  const request = {
    ...backendGet("/"),
    clientSignal: () => {
      asked++;
      return new AbortController().signal;
    },
  };
  try {
    assertStrictEquals(await bodyText((await sendUpstream(pool, endpoint, request)).body), "ok");
    assertStrictEquals(asked, 1, "a new connection asks for the signal before connecting");
    for (let i = 0; i < 3; i++) {
      assertStrictEquals(await bodyText((await sendUpstream(pool, endpoint, request)).body), "ok");
    }
    assertStrictEquals(asked, 1, "a fast exchange on a pooled connection asked for the signal");
    assertStrictEquals(server.accepted, 1);
  } finally {
    pool.close();
    await server.close();
  }
});

Deno.test("clientSignal: an exchange still waiting watches the client, and its leaving closes the backend connection", async () => {
  const cases: { name: string; signal: (controller: AbortController) => AbortSignal }[] = [
    { name: "aborted once watched", signal: (controller) => controller.signal },
    {
      name: "already aborted when asked for",
      signal: (controller) => {
        controller.abort();
        return controller.signal;
      },
    },
    {
      name: "request closed when asked for (the getter throws)",
      signal: () => {
        throw new TypeError("Request closed");
      },
    },
  ];
  for (const { name, signal } of cases) {
    let backendSawClose = false;
    const server = scriptedServer(async (io) => {
      await io.nextHead();
      await io.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
      await io.nextHead();
      // Never answers the second request: waits for the proxy to hang up.
      backendSawClose = (await io.nextHead()) === null;
    });
    const pool = new UpstreamPool({ clientCheckMs: 20 });
    const endpoint = { address: "127.0.0.1", port: server.port };
    const controller = new AbortController();
    let asked = 0;
    try {
      // The first request leaves a pooled connection behind.
      assertStrictEquals(
        await bodyText((await sendUpstream(pool, endpoint, backendGet("/"))).body),
        "ok",
      );
      const failure = sendUpstream(pool, endpoint, {
        ...backendGet("/slow"),
        clientSignal: () => {
          asked++;
          return signal(controller);
        },
      }).then(() => undefined, (error: unknown) => error);
      await waitUntil(() => asked === 1);
      controller.abort();
      const error = await failure;
      assert(error instanceof UpstreamError && error.kind === "aborted", `${name}: ${error}`);
      await waitUntil(() => backendSawClose);
      assertStrictEquals(asked, 1, name);
      assertStrictEquals(pool.stats().active, 0, name);
    } finally {
      pool.close();
      await server.close();
    }
  }
});
