import {
  assert,
  assertEquals,
  assertRejects,
  assertStrictEquals,
} from "../../tests/support/assert.ts";
import { patternBytes, patternSha256, startEchoBackend } from "../../tests/support/echo_backend.ts";
import { concatBytes, latin1 } from "../../tests/support/raw_http.ts";
import { startScriptedBackend } from "../../tests/support/scripted_backend.ts";
import { waitFor } from "../../tests/support/wait.ts";
import { sendUpstream, type UpstreamRequest } from "./upstream_client.ts";
import { UpstreamError } from "./upstream_error.ts";
import { UpstreamPool } from "./upstream_pool.ts";

const get = (target: string): UpstreamRequest => ({
  method: "GET",
  target,
  headers: [["Host", "backend.test"]],
  body: null,
});

async function text(body: Uint8Array | ReadableStream<Uint8Array> | null): Promise<string> {
  if (body === null) return "";
  if (body instanceof Uint8Array) return new TextDecoder().decode(body);
  return await new Response(body).text();
}

/**
 * A scripted backend: `script` runs once per accepted connection with a reader of request
 * heads and a writer; faults the echo backend cannot produce on demand.
 */
function scriptedServer(
  script: (
    io: {
      nextHead(): Promise<string | null>;
      write(s: string | Uint8Array): Promise<void>;
      close(): void;
    },
    index: number,
  ) => Promise<void>,
) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const tasks: Promise<void>[] = [];
  const conns = new Set<Deno.Conn>();
  let accepted = 0;
  const loop = (async () => {
    for (;;) {
      let conn: Deno.Conn;
      try {
        conn = await listener.accept();
      } catch {
        return;
      }
      conns.add(conn);
      const index = accepted++;
      let pending = "";
      const buf = new Uint8Array(65536);
      const io = {
        async nextHead(): Promise<string | null> {
          for (;;) {
            const end = pending.indexOf("\r\n\r\n");
            if (end !== -1) {
              const head = pending.slice(0, end + 4);
              pending = pending.slice(end + 4);
              return head;
            }
            const n = await conn.read(buf).catch(() => null);
            if (n === null) return null;
            pending += new TextDecoder().decode(buf.subarray(0, n));
          }
        },
        async write(s: string | Uint8Array) {
          const bytes = typeof s === "string" ? new TextEncoder().encode(s) : s;
          let offset = 0;
          while (offset < bytes.length) offset += await conn.write(bytes.subarray(offset));
        },
        close() {
          conns.delete(conn);
          try {
            conn.close();
          } catch {
            // Already closed.
          }
        },
      };
      tasks.push(script(io, index).catch(() => {}).finally(() => io.close()));
    }
  })();
  return {
    port: (listener.addr as Deno.NetAddr).port,
    get accepted() {
      return accepted;
    },
    async close() {
      listener.close();
      for (const conn of conns) conn.close();
      await loop;
      await Promise.all(tasks);
    },
  };
}

Deno.test("sendUpstream() replays an idempotent request when a reused connection was closed under it", async () => {
  const server = scriptedServer(async (io, index) => {
    await io.nextHead();
    await io.write("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst");
    if (index === 0) {
      // Take the next request, then hang up without a byte: a stale keep-alive connection.
      await io.nextHead();
      return;
    }
  });
  const pool = new UpstreamPool();
  const endpoint = { address: "127.0.0.1", port: server.port };
  try {
    assertStrictEquals(await text((await sendUpstream(pool, endpoint, get("/1"))).body), "first");
    const second = await sendUpstream(pool, endpoint, get("/2"));
    assertStrictEquals(await text(second.body), "first");
    assertStrictEquals(server.accepted, 2);
  } finally {
    pool.close();
    await server.close();
  }
});

Deno.test("sendUpstream() does not replay a POST after a reused connection failed", async () => {
  const server = scriptedServer(async (io) => {
    await io.nextHead();
    await io.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    await io.nextHead();
  });
  const pool = new UpstreamPool();
  const endpoint = { address: "127.0.0.1", port: server.port };
  try {
    await text((await sendUpstream(pool, endpoint, get("/1"))).body);
    const post: UpstreamRequest = {
      ...get("/2"),
      method: "POST",
      body: new TextEncoder().encode("x"),
    };
    const error = await assertRejects(() => sendUpstream(pool, endpoint, post), UpstreamError);
    assertEquals([error.kind, error.staleConnection], ["reset", true]);
    assertStrictEquals(server.accepted, 1);
  } finally {
    pool.close();
    await server.close();
  }
});

Deno.test("pool drops a pooled connection as soon as the backend closes it while idle", async () => {
  let hangUp: () => void = () => {};
  const hungUp = new Promise<void>((resolve) => hangUp = resolve);
  const server = scriptedServer(async (io) => {
    await io.nextHead();
    await io.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    await hungUp;
  });
  const pool = new UpstreamPool();
  try {
    await text(
      (await sendUpstream(pool, { address: "127.0.0.1", port: server.port }, get("/"))).body,
    );
    assertStrictEquals(pool.stats().idle, 1);
    hangUp();
    await waitUntil(() => pool.stats().idle === 0);
  } finally {
    pool.close();
    await server.close();
  }
});

Deno.test("pool keeps at most maxIdlePerEndpoint idle connections and closes idle ones after idleTimeoutMs", async () => {
  const backend = await startEchoBackend();
  const pool = new UpstreamPool({ maxIdlePerEndpoint: 2, idleTimeoutMs: 300 });
  const endpoint = { address: "127.0.0.1", port: backend.port };
  try {
    const responses = await Promise.all(
      Array.from({ length: 4 }, (_, i) => sendUpstream(pool, endpoint, get(`/?delay=50&i=${i}`))),
    );
    await Promise.all(responses.map((r) => text(r.body)));
    assertStrictEquals(backend.connectionsAccepted, 4);
    assertStrictEquals(pool.stats().idle, 2);
    await backend.waitFor(() => backend.connectionsOpen === 2);
    await waitUntil(() => pool.stats().idle === 0, 5_000);
    await backend.waitFor(() => backend.connectionsOpen === 0);
  } finally {
    pool.close();
    await backend.close();
  }
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
      get("/"),
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

Deno.test("sendUpstream() fails fast with connect-failed on a refused port and the pool closes cleanly", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  const pool = new UpstreamPool();
  try {
    const error = await assertRejects(
      () => sendUpstream(pool, { address: "127.0.0.1", port }, get("/")),
      UpstreamError,
    );
    assertEquals(error.kind, "connect-failed");
  } finally {
    pool.close();
  }
  const afterClose = await assertRejects(
    () => sendUpstream(pool, { address: "127.0.0.1", port }, get("/")),
    UpstreamError,
  );
  assertEquals(afterClose.kind, "connect-failed");
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

Deno.test("releaseBodyChunks: a streamed response chunk is released once the next is asked for, and only with the option", async () => {
  const backend = await startEchoBackend();
  const pool = new UpstreamPool();
  const endpoint = { address: "127.0.0.1", port: backend.port };
  const size = 4 * 1024 * 1024;
  try {
    for (const releaseBodyChunks of [true, false]) {
      const response = await sendUpstream(pool, endpoint, {
        ...get(`/bytes?n=${size}`),
        releaseBodyChunks,
      });
      const reader = (response.body as ReadableStream<Uint8Array>).getReader();
      const first = await reader.read();
      assert(!first.done && first.value.length > 0);
      const firstLength = first.value.length;
      // Reading until two more chunks arrived means the stream was pulled again after
      // handing out the first (with a high-water mark of 1, a pull follows each read).
      let total = firstLength;
      for (let i = 0; i < 2; i++) {
        const next = await reader.read();
        assert(!next.done);
        total += next.value.length;
      }
      assertStrictEquals(
        first.value.length,
        releaseBodyChunks ? 0 : firstLength,
        releaseBodyChunks ? "the first chunk was not released" : "a chunk was released unasked",
      );
      for (let next = await reader.read(); !next.done; next = await reader.read()) {
        total += next.value.length;
      }
      assertStrictEquals(total, size);
      assertStrictEquals((await response.done).complete, true);
    }
  } finally {
    pool.close();
    await backend.close();
  }
});

Deno.test("releaseBodyChunks: a streamed request body's chunks are released once written, and only with the option", async () => {
  const backend = await startEchoBackend();
  const pool = new UpstreamPool();
  const endpoint = { address: "127.0.0.1", port: backend.port };
  try {
    for (const releaseBodyChunks of [true, false]) {
      for (const contentLength of [3 * 100_000, undefined]) {
        const chunks = [0, 1, 2].map((i) => patternBytes(i * 100_000, 100_000));
        const response = await sendUpstream(pool, endpoint, {
          method: "PUT",
          target: "/upload",
          headers: [["Host", "backend.test"]],
          body: new ReadableStream<Uint8Array>({
            start(controller) {
              for (const chunk of chunks) controller.enqueue(chunk);
              controller.close();
            },
          }),
          contentLength,
          releaseBodyChunks,
        });
        const echoed = JSON.parse(await text(response.body));
        const what = `release ${releaseBodyChunks}, length ${contentLength}`;
        assertEquals(echoed.body, { length: 300_000, sha256: patternSha256(300_000) }, what);
        assertEquals(
          chunks.map((chunk) => chunk.length),
          releaseBodyChunks ? [0, 0, 0] : [100_000, 100_000, 100_000],
          what,
        );
      }
    }
  } finally {
    pool.close();
    await backend.close();
  }
});

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
    ...get("/"),
    clientSignal: () => {
      asked++;
      return new AbortController().signal;
    },
  };
  try {
    assertStrictEquals(await text((await sendUpstream(pool, endpoint, request)).body), "ok");
    assertStrictEquals(asked, 1, "a new connection asks for the signal before connecting");
    for (let i = 0; i < 3; i++) {
      assertStrictEquals(await text((await sendUpstream(pool, endpoint, request)).body), "ok");
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
      assertStrictEquals(await text((await sendUpstream(pool, endpoint, get("/"))).body), "ok");
      const failure = sendUpstream(pool, endpoint, {
        ...get("/slow"),
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
        ...get("/first"),
        method: method ?? "GET",
      });
      assertEquals(await readBody(first.body), body, name);
      assertEquals((await first.done).complete, !body.failed, name);
      const second = await sendUpstream(pool, endpoint, get("/second"));
      assertEquals(await readBody(second.body), { text: "next", failed: false }, name);
      assertEquals(backend.connections.length, reused ? 1 : 2, `${name}: connections used`);
    } finally {
      pool.close();
      await backend.close();
    }
  }
});

Deno.test("sendUpstream() refuses a request whose framing fields disagree with its body, and the backend never gets it whole", async () => {
  const bytes = (text: string) => new TextEncoder().encode(text);
  const stream = (...chunks: string[]) =>
    new ReadableStream<Uint8Array>({
      start(controller) {
        for (const chunk of chunks) controller.enqueue(bytes(chunk));
        controller.close();
      },
    });
  const post = (headers: [string, string][], body: UpstreamRequest["body"], length?: number) => ({
    method: "POST",
    target: "/upload",
    headers: [["Host", "backend.test"], ...headers] as [string, string][],
    body,
    contentLength: length,
  });
  // [name, request, what reaches the backend: nothing at all, or a head and part of its body]
  const cases: [string, UpstreamRequest, "nothing" | "partial"][] = [
    ["3 bytes, Content-Length 5", post([["Content-Length", "5"]], bytes("abc")), "nothing"],
    ["5 bytes, Content-Length 3", post([["Content-Length", "3"]], bytes("abcde")), "nothing"],
    ["no body, Content-Length 5", post([["Content-Length", "5"]], null), "nothing"],
    ["a listed Content-Length", post([["Content-Length", "3, 5"]], bytes("abc")), "nothing"],
    [
      "two Content-Lengths that disagree",
      post([["Content-Length", "3"], ["Content-Length", "5"]], bytes("abc")),
      "nothing",
    ],
    [
      "a stream declared 5, Content-Length 6",
      post([["Content-Length", "6"]], stream("abcde"), 5),
      "nothing",
    ],
    [
      "a stream of unknown length, Content-Length 5",
      post([["Content-Length", "5"]], stream("abcde")),
      "nothing",
    ],
    [
      "Transfer-Encoding from the caller",
      post([["Transfer-Encoding", "chunked"]], stream("abcde")),
      "nothing",
    ],
    ["a stream declared 5 that ends after 3", post([], stream("abc"), 5), "partial"],
    ["a stream declared 5 that goes on to 7", post([], stream("abc", "defg"), 5), "partial"],
  ];
  for (const [name, request, reached] of cases) {
    const bodies: { declared: number; got: number }[] = [];
    const backend = startScriptedBackend(async (conn) => {
      for (let head = await conn.readHead(); head !== null; head = await conn.readHead()) {
        const declared = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
        const got = await conn.readLength(declared, () => {});
        bodies.push({ declared, got });
        if (got < declared) return;
        await conn.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
      }
    });
    const pool = new UpstreamPool({ ioTimeoutMs: FRAMING_IO_TIMEOUT_MS });
    try {
      const error = await assertRejects(
        () => sendUpstream(pool, { address: "127.0.0.1", port: backend.port }, request),
        UpstreamError,
        undefined,
        name,
      );
      assertEquals(error.kind, "client-body", name);
      if (reached === "nothing") {
        assertEquals(backend.connections.length, 0, `${name}: a connection was opened`);
      } else {
        await waitFor(`${name}: the backend to see the cut`, () => bodies.length === 1);
        assert(bodies[0]!.got < bodies[0]!.declared, `${name}: ${JSON.stringify(bodies)}`);
      }
    } finally {
      pool.close();
      await backend.close();
    }
  }
});

Deno.test("sendUpstream() sends a streamed body of unknown length as chunks a backend reads whole, on both sides of the 64 KiB coalescing size", async () => {
  const sizes = [1, 5, 65_535, 65_536, 65_537, 100_000];
  const chunks = sizes.map((size, i) => patternBytes(i * 100_000, size));
  const sent = concatBytes(chunks);
  const received: Uint8Array[] = [];
  let whole: boolean | undefined;
  const backend = startScriptedBackend(async (conn) => {
    const head = await conn.readHead();
    if (head === null || !/\r\ntransfer-encoding: chunked\r\n/i.test(head)) return;
    whole = await conn.readChunked((data) => received.push(data.slice()));
    await conn.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  });
  const pool = new UpstreamPool({ ioTimeoutMs: FRAMING_IO_TIMEOUT_MS });
  try {
    const response = await sendUpstream(pool, { address: "127.0.0.1", port: backend.port }, {
      method: "PUT",
      target: "/upload",
      headers: [["Host", "backend.test"]],
      body: new ReadableStream<Uint8Array>({
        start(controller) {
          for (const chunk of chunks) controller.enqueue(chunk.slice());
          controller.close();
        },
      }),
    });
    assertEquals(await readBody(response.body), { text: "ok", failed: false });
    assertEquals(whole, true, "the chunked framing ended cleanly");
    assertEquals(concatBytes(received), sent);
  } finally {
    pool.close();
    await backend.close();
  }
});
