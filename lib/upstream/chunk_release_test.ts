/**
 * The release of streamed chunks (`releaseTakenChunk` and `releaseWrittenChunk`
 * in `deno_internal.ts`, used by `upstream_client.ts` with the handler's
 * default `releaseBodyChunks: true`): `sendUpstream()` releases a response chunk
 * once the next is asked for and a request body's chunks once written, only
 * with the option; and every path by which a proxied body reaches a client,
 * with clients that stall, trickle, reset and abort and backends that frame and
 * write bodies every way they can, delivers every byte (SHA-256 of the pattern).
 *
 * @module
 */
import { createHash } from "node:crypto";
import { assert, assertEquals, assertStrictEquals } from "../../tests/support/assert.ts";
import { patternBytes, patternSha256, startEchoBackend } from "../../tests/support/echo_backend.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import {
  H1Reader,
  type PatternBackend,
  type ReadBody,
  type ReleaseWorld,
  startPatternBackend,
  startReleaseWorld,
  StarvedH2,
  untilStalled,
} from "../../tests/support/release_world.ts";
import { connectTo } from "../../tests/support/raw_h2.ts";
import { createProxyHandler, type ProxyHandlerOptions } from "../proxy/proxy_handler.ts";
import { staticSnapshot } from "../../tests/support/static_snapshot.ts";
import { ECHO_HOST } from "../../tests/support/echo_proxy.ts";
import { UpstreamPool } from "./upstream_pool.ts";
import { sendUpstream } from "./upstream_client.ts";
import { backendGet, bodyText } from "../../tests/support/upstream_backends.ts";

const KIB = 1024;
const MIB = 1024 * 1024;

async function withWorld(
  fn: (world: ReleaseWorld, backend: PatternBackend) => Promise<void>,
  options: { noDelay?: boolean; proxy?: Partial<Omit<ProxyHandlerOptions, "snapshot">> } = {},
): Promise<void> {
  const backend = startPatternBackend({ noDelay: options.noDelay ?? false });
  try {
    const world = await startReleaseWorld(backend.port, options.proxy);
    try {
      await fn(world, backend);
    } finally {
      await world.close();
    }
  } finally {
    await backend.close();
  }
}

function get(target: string, extra = ""): string {
  return `GET ${target} HTTP/1.1\r\nHost: a.test\r\n${extra}\r\n`;
}

function assertPattern(body: ReadBody, n: number, what = "body"): void {
  assertEquals(body.status, 200, `${what}: status`);
  assertEquals(body.complete, true, `${what}: ended as framed (got ${body.length} of ${n})`);
  assertEquals(body.length, n, `${what}: length`);
  assertEquals(body.sha256, patternSha256(n), `${what}: bytes differ from the backend's`);
}

/**
 * One GET on a new connection whose client reads the first `pauseAt` bytes, then
 * reads nothing until the whole path from the backend is full, then reads the rest.
 */
async function stalledGet(
  port: number,
  target: string,
  backend: PatternBackend,
  options: {
    tls?: { caCert: string; alpn: string };
    pauseAt?: number;
    readBytes?: number;
    minBytes?: number;
  } = {},
): Promise<ReadBody> {
  const tls = options.tls;
  const conn = await connectTo(
    port,
    tls === undefined ? undefined : { caCerts: [tls.caCert], alpn: tls.alpn },
  );
  const reader = new H1Reader(conn, { readBytes: options.readBytes ?? 64 * KIB });
  try {
    await reader.send(get(target));
    return await within(
      25_000,
      `the response to ${target}`,
      reader.read({
        pauseAt: options.pauseAt ?? 1,
        pause: () =>
          untilStalled(() => backend.written, { minBytes: options.minBytes ?? 512 * KIB }),
      }),
    );
  } finally {
    reader.close();
  }
}

// -------------------------------------------------------------------------------------------
// HTTP/1.1, plain listener
// -------------------------------------------------------------------------------------------

Deno.test("a client that stalls mid-body on the plain listener then reads gets every byte of an 8 MiB Content-Length body", async () => {
  await withWorld(async (world, backend) => {
    const n = 8 * MIB;
    const body = await stalledGet(world.httpPort, `/?n=${n}`, backend);
    assertPattern(body, n);
    await waitFor("the access entry", () => world.accessLog.length === 1);
    assertEquals(world.accessLog[0]!.bytes, n);
    assertEquals(world.accessLog[0]!.error, undefined);
  });
});

Deno.test("a stalled client gets every byte of a chunked body whose chunk sizes make copied, direct and split reads", async () => {
  await withWorld(async (world, backend) => {
    const n = 6 * MIB;
    // Sizes around the read buffer (256 KiB) and its half: a read under half is copied out
    // and the buffer kept as the spare for the next one; a chunk over it is read in parts.
    const chunks = [1, 100, 4096, 65_536, 100_000, 131_071, 131_073, 262_143, 262_144, 300_000];
    const body = await stalledGet(
      world.httpPort,
      `/?n=${n}&framing=chunked&chunks=${chunks.join(",")}&piece=${200 * KIB}`,
      backend,
    );
    assertPattern(body, n);
  });
});

Deno.test("a stalled client gets every byte of a close-delimited 8 MiB body", async () => {
  await withWorld(async (world, backend) => {
    const n = 8 * MIB;
    const body = await stalledGet(world.httpPort, `/?n=${n}&framing=close`, backend);
    assertPattern(body, n);
  });
});

Deno.test("a stalled client gets every byte of a body relayed as thousands of chunks of 1 to 64 bytes", async () => {
  // Each tiny chunk is its own stream chunk, copied out of the read buffer into a typed
  // array small enough for V8 to keep on its heap; hundreds wait in Deno while the client
  // stalls, every one released.
  await withWorld(async (world, backend) => {
    const n = 384 * KIB;
    const sizes = Array.from({ length: 64 }, (_, i) => i + 1).join(",");
    const body = await stalledGet(
      world.httpPort,
      `/?n=${n}&framing=chunked&chunks=${sizes}&piece=512`,
      backend,
      { pauseAt: 1, readBytes: 1024, minBytes: 64 * KIB },
    );
    assertPattern(body, n);
  }, { noDelay: true });
});

Deno.test("a stalled client gets every byte of a Content-Length body its backend trickles in 1000-byte writes", async () => {
  // Small socket reads of a large body are copied out of a read buffer the connection keeps
  // for its next read: only the copies are released, never the kept buffer.
  await withWorld(async (world, backend) => {
    const n = 2 * MIB + 333;
    const body = await stalledGet(world.httpPort, `/?n=${n}&piece=1000`, backend, {
      pauseAt: 100_000,
      readBytes: 4096,
      minBytes: 256 * KIB,
    });
    assertPattern(body, n);
  }, { noDelay: true });
});

Deno.test("an HTTP/1.0 client gets every byte of a large body, delimited by the close", async () => {
  await withWorld(async (world, backend) => {
    const reader = new H1Reader(await connectTo(world.httpPort));
    try {
      const n = 4 * MIB + 1;
      await reader.send(`GET /?n=${n}&framing=chunked HTTP/1.0\r\nHost: a.test\r\n\r\n`);
      const body = await within(
        15_000,
        "the body",
        reader.read({
          pauseAt: 1,
          pause: () => untilStalled(() => backend.written, { minBytes: 256 * KIB }),
        }),
      );
      assertPattern(body, n);
    } finally {
      reader.close();
    }
  });
});

Deno.test("bodies ending exactly at, one before and one past 256 KiB boundaries arrive whole on one keep-alive connection", async () => {
  await withWorld(async (world, backend) => {
    const conn = await connectTo(world.httpPort);
    const reader = new H1Reader(conn, { readBytes: 256 * KIB });
    try {
      const sizes = [
        4 * 256 * KIB,
        4 * 256 * KIB - 1,
        4 * 256 * KIB + 1,
        64 * KIB + 1,
        256 * KIB,
        256 * KIB + 1,
        3 * MIB + 7,
      ];
      for (const n of sizes) {
        for (const piece of [256 * KIB, 4 * KIB + 3]) {
          await reader.send(get(`/?n=${n}&piece=${piece}`));
          assertPattern(await within(10_000, `${n} bytes`, reader.read()), n, `${n}/${piece}`);
          await reader.send(get(`/?n=${n}&framing=chunked&chunks=${256 * KIB}&piece=${piece}`));
          assertPattern(await within(10_000, `${n} bytes`, reader.read()), n, `${n} chunked`);
        }
      }
      // One backend connection served them all: each exchange left it reusable.
      assertEquals(backend.connections.length, 1);
    } finally {
      reader.close();
    }
  });
});

Deno.test("sixteen concurrent 4 MiB responses, half of them to clients that stall, all arrive byte for byte", async () => {
  await withWorld(async (world, backend) => {
    const n = 4 * MIB;
    const results = await Promise.all(Array.from({ length: 16 }, async (_, i) => {
      const conn = await connectTo(world.httpPort);
      const reader = new H1Reader(conn, { readBytes: (i % 4 + 1) * 16 * KIB });
      try {
        const framing = ["length", "chunked", "close", "length"][i % 4];
        await reader.send(get(`/?n=${n}&framing=${framing}&piece=${(i + 1) * 8 * KIB}`));
        return await within(
          25_000,
          `response ${i}`,
          reader.read(
            i % 2 === 0 ? {} : {
              pauseAt: i * 100 * KIB,
              pause: () => untilStalled(() => backend.written, { minBytes: 1 }),
            },
          ),
        );
      } finally {
        reader.close();
      }
    }));
    results.forEach((body, i) => assertPattern(body, n, `response ${i}`));
  });
});

Deno.test("a HEAD of a large resource sends no body and the next GET on the connection gets all of it", async () => {
  await withWorld(async (world) => {
    const conn = await connectTo(world.httpPort);
    const reader = new H1Reader(conn);
    try {
      const n = 2 * MIB;
      await reader.send(`HEAD /?n=${n} HTTP/1.1\r\nHost: a.test\r\n\r\n`);
      const head = await within(5_000, "the HEAD answer", reader.read({ head: true }));
      assertEquals(head.status, 200);
      assertEquals(head.headers.find(([k]) => k === "content-length")?.[1], String(n));
      for (const framing of ["length", "chunked"]) {
        await reader.send(get(`/?n=${n}&framing=${framing}`));
        assertPattern(await within(10_000, "the GET", reader.read()), n, framing);
      }
    } finally {
      reader.close();
    }
  });
});

Deno.test("a client that leaves mid-body cuts only its own exchange: its backend connection is closed, later bodies arrive whole", async () => {
  await withWorld(async (world, backend) => {
    const n = 8 * MIB;
    const first = new H1Reader(await connectTo(world.httpPort));
    try {
      await first.send(get(`/?n=${n}`));
      const cut = await within(10_000, "the first MiB", first.read({ stopAt: MIB }));
      assert(cut.length >= MIB && cut.length < n, `read ${cut.length}`);
      assertEquals(cut.sha256, patternSha256(cut.length), "the first MiB's bytes");
    } finally {
      first.close();
    }
    await waitFor(
      "the cut exchange's backend connection to close",
      () => backend.connections[0]?.closed === true,
    );
    await waitFor("the access entry of the cut response", () => world.accessLog.length === 1);
    assertEquals(world.accessLog[0]!.error, "aborted");
    for (let i = 0; i < 3; i++) {
      const reader = new H1Reader(await connectTo(world.httpPort));
      try {
        await reader.send(get(`/?n=${n}&framing=${i === 1 ? "chunked" : "length"}`));
        assertPattern(await within(15_000, `response ${i}`, reader.read()), n, `response ${i}`);
      } finally {
        reader.close();
      }
    }
  });
});

Deno.test("extra bytes a backend sends past Content-Length are not relayed, and its connection is not reused", async () => {
  await withWorld(async (world, backend) => {
    const reader = new H1Reader(await connectTo(world.httpPort));
    try {
      const n = MIB + 3;
      await reader.send(get(`/?n=${n}&extra=9`));
      assertPattern(await within(10_000, "the first body", reader.read()), n);
      await reader.send(get(`/?n=${n}`));
      assertPattern(await within(10_000, "the second body", reader.read()), n);
      assertEquals(backend.connections.length, 2);
    } finally {
      reader.close();
    }
  });
});

Deno.test("two pipelined large GETs are answered in order, each byte for byte", async () => {
  await withWorld(async (world, backend) => {
    const reader = new H1Reader(await connectTo(world.httpPort));
    try {
      await reader.send(get(`/?n=${3 * MIB}&framing=chunked`) + get(`/?n=${2 * MIB + 5}`));
      assertPattern(
        await within(
          15_000,
          "the first",
          reader.read({
            pauseAt: 1,
            pause: () => untilStalled(() => backend.written, { minBytes: 1 }),
          }),
        ),
        3 * MIB,
        "first",
      );
      assertPattern(await within(15_000, "the second", reader.read()), 2 * MIB + 5, "second");
    } finally {
      reader.close();
    }
  });
});

Deno.test("a 64 MiB body read at full speed arrives byte for byte", async () => {
  await withWorld(async (world) => {
    const reader = new H1Reader(await connectTo(world.httpPort), { readBytes: 256 * KIB });
    try {
      const n = 64 * MIB;
      await reader.send(get(`/?n=${n}&piece=${256 * KIB}`));
      assertPattern(await within(25_000, "64 MiB", reader.read()), n);
    } finally {
      reader.close();
    }
  });
});

Deno.test("a client accepting gzip gets a compressible streamed body exactly as the backend sent it", async () => {
  await withWorld(async (world, backend) => {
    const reader = new H1Reader(await connectTo(world.httpPort));
    try {
      const n = 4 * MIB;
      await reader.send(
        get(`/?n=${n}&type=text/plain`, "Accept-Encoding: gzip, br\r\n"),
      );
      const body = await within(
        15_000,
        "the body",
        reader.read({
          pauseAt: 1,
          pause: () => untilStalled(() => backend.written, { minBytes: 1 }),
        }),
      );
      assertEquals(body.headers.find(([k]) => k === "content-encoding"), undefined);
      assertPattern(body, n);
    } finally {
      reader.close();
    }
  });
});

// -------------------------------------------------------------------------------------------
// The HTTPS listener, HTTP/1.1
// -------------------------------------------------------------------------------------------

Deno.test("a stalled HTTPS (HTTP/1.1) client gets every byte of an 8 MiB body through the TLS relay", async () => {
  await withWorld(async (world, backend) => {
    const n = 8 * MIB;
    const tls = { caCert: world.caCert, alpn: "http/1.1" };
    assertPattern(await stalledGet(world.httpsPort, `/?n=${n}`, backend, { tls }), n);
    assertPattern(
      await stalledGet(world.httpsPort, `/?n=${n}&framing=close`, backend, { tls }),
      n,
      "close-delimited",
    );
  });
});

// -------------------------------------------------------------------------------------------
// HTTP/2
// -------------------------------------------------------------------------------------------

Deno.test("four concurrent 4 MiB HTTP/2 streams on one connection (fetch) arrive byte for byte", async () => {
  await withWorld(async (world) => {
    const client = Deno.createHttpClient({ caCerts: [world.caCert], http1: false, http2: true });
    try {
      const n = 4 * MIB;
      const framings = ["length", "chunked", "close", "length"];
      const bodies = await within(
        25_000,
        "four h2 bodies",
        Promise.all(framings.map(async (framing, i) => {
          const response = await fetch(
            `https://localhost:${world.httpsPort}/?n=${n}&framing=${framing}&piece=${
              (i + 1) * 16 * KIB
            }`,
            { client },
          );
          return { status: response.status, bytes: new Uint8Array(await response.arrayBuffer()) };
        })),
      );
      for (const [i, body] of bodies.entries()) {
        assertEquals(body.status, 200);
        assertEquals(body.bytes.length, n, `stream ${i}`);
        assertEquals(
          createHash("sha256").update(body.bytes).digest("hex"),
          patternSha256(n),
          `stream ${i}`,
        );
      }
    } finally {
      client.close();
    }
  });
});

/**
 * Opens `streams` GETs of `n` bytes on one starved h2 connection (stream windows 0: the
 * server may send nothing), waits for the data path to fill, then grants credit in small
 * steps, stream by stream in turn, until each ended; returns the streams.
 */
async function starvedStreams(
  port: number,
  backend: PatternBackend,
  options: { tls?: { caCert: string }; n: number; streams: number; step: number; path?: string },
) {
  const h2 = await StarvedH2.open(port, {
    initialWindow: 0,
    ...(options.tls === undefined ? {} : { tls: options.tls }),
  });
  try {
    const framings = ["length", "chunked", "close"];
    const ids: number[] = [];
    for (let i = 0; i < options.streams; i++) {
      ids.push(await h2.get(options.path ?? `/?n=${options.n}&framing=${framings[i % 3]}`));
    }
    await untilStalled(() => backend.written, { minBytes: 64 * KIB });
    for (const id of ids) assertEquals(h2.stream(id).received, 0, "DATA beyond the window");
    const deadline = performance.now() + 25_000;
    while (ids.some((id) => !h2.stream(id).ended)) {
      assert(performance.now() < deadline, "the starved streams did not finish in time");
      assert(!h2.closed, "the connection ended");
      for (const id of ids) {
        const stream = h2.stream(id);
        assertEquals(stream.reset, undefined, `stream ${id} was reset`);
        if (stream.ended) continue;
        const before = stream.received;
        await h2.grant(id, options.step);
        await waitFor(
          `stream ${id} to use its credit`,
          () => stream.received >= before + options.step || stream.ended,
          { intervalMs: 2, timeoutMs: 10_000 },
        );
      }
    }
    return ids.map((id) => h2.stream(id));
  } finally {
    await h2.close();
  }
}

Deno.test("HTTP/2 streams held at a zero window, then fed 64 KiB at a time, get every byte (TLS)", async () => {
  await withWorld(async (world, backend) => {
    const n = 3 * MIB;
    const streams = await starvedStreams(world.httpsPort, backend, {
      tls: { caCert: world.caCert },
      n,
      streams: 3,
      step: 64 * KIB,
    });
    for (const stream of streams) {
      assertEquals(stream.statusByte, 0x88, "status 200");
      assertEquals(stream.received, n);
      assertEquals(stream.hash.digest("hex"), patternSha256(n));
    }
  });
});

Deno.test("h2c streams held at a zero window, then fed a few KiB at a time, get every byte (plain listener)", async () => {
  await withWorld(async (world, backend) => {
    const n = MIB + 17;
    const streams = await starvedStreams(world.httpPort, backend, {
      n,
      streams: 2,
      step: 16 * KIB + 3,
    });
    for (const stream of streams) {
      assertEquals(stream.received, n);
      assertEquals(stream.hash.digest("hex"), patternSha256(n));
    }
  });
});

Deno.test("a starved HTTP/2 stream of tiny chunks gets every byte once fed", async () => {
  await withWorld(async (world, backend) => {
    const n = 256 * KIB;
    const sizes = Array.from({ length: 64 }, (_, i) => i + 1).join(",");
    const [stream] = await starvedStreams(world.httpsPort, backend, {
      tls: { caCert: world.caCert },
      n,
      streams: 1,
      step: 32 * KIB,
      path: `/?n=${n}&framing=chunked&chunks=${sizes}&piece=512`,
    });
    assertEquals(stream!.received, n);
    assertEquals(stream!.hash.digest("hex"), patternSha256(n));
  }, { noDelay: true });
});

Deno.test("an HTTP/2 stream reset mid-body leaves a starved sibling stream intact", async () => {
  await withWorld(async (world, backend) => {
    const h2 = await StarvedH2.open(world.httpsPort, {
      initialWindow: 0,
      tls: { caCert: world.caCert },
    });
    try {
      const n = 2 * MIB;
      const doomed = await h2.get(`/?n=${8 * MIB}`);
      const kept = await h2.get(`/?n=${n}&framing=chunked`);
      await untilStalled(() => backend.written, { minBytes: 256 * KIB });
      await h2.grant(doomed, 300 * KIB);
      await waitFor("the doomed stream's first bytes", () => h2.stream(doomed).received > 0);
      await h2.reset(doomed);
      await waitFor(
        "the doomed exchange's backend connection to close",
        () => backend.connections.some((c) => c.closed),
      );
      // One byte more than the body: hyper sends END_STREAM only with credit left.
      await h2.grant(kept, n + 1);
      const stream = await waitFor("the kept stream to end", () => {
        const s = h2.stream(kept);
        return s.ended || s.reset !== undefined || h2.closed ? s : undefined;
      }, { timeoutMs: 15_000 });
      assertEquals(stream.reset, undefined);
      assertEquals(stream.received, n);
      assertEquals(stream.hash.digest("hex"), patternSha256(n));
      // The connection still serves: a third stream, fed as it reads.
      const third = await h2.get(`/?n=${n}`);
      await h2.grant(third, n + 1);
      const last = await waitFor("the third stream to end", () => {
        const s = h2.stream(third);
        return s.ended || s.reset !== undefined || h2.closed ? s : undefined;
      }, { timeoutMs: 15_000 });
      assertEquals(last.received, n);
      assertEquals(last.hash.digest("hex"), patternSha256(n));
    } finally {
      await h2.close();
    }
  });
});

// -------------------------------------------------------------------------------------------
// A client that never reads again
// -------------------------------------------------------------------------------------------

Deno.test("a client that stops reading past the I/O timeout is cut without an unhandled error, and the next client gets a whole body", async () => {
  await withWorld(async (world, backend) => {
    const n = 16 * MIB;
    const stuck = new H1Reader(await connectTo(world.httpPort));
    try {
      await stuck.send(get(`/?n=${n}`));
      await untilStalled(() => backend.written, { minBytes: 512 * KIB });
      await waitFor(
        "the stalled response to be given up",
        () => world.accessLog.some((entry) => entry.error === "timeout"),
        { timeoutMs: 10_000 },
      );
      await waitFor("its backend connection to close", () => backend.connections[0]?.closed);
      // Whatever the stuck client reads now is a prefix of the pattern, then the cut.
      const partial = await within(10_000, "the rest of the cut body", stuck.read());
      assertEquals(partial.complete, false);
      assert(partial.length < n);
      assertEquals(partial.sha256, patternSha256(partial.length), "the cut body's bytes");
    } finally {
      stuck.close();
    }
    const reader = new H1Reader(await connectTo(world.httpPort));
    try {
      await reader.send(get(`/?n=${n}`));
      assertPattern(await within(15_000, "the next body", reader.read()), n);
    } finally {
      reader.close();
    }
  }, { proxy: { readTimeoutMs: 400 } });
});

// --- The option: the handler releases chunks by default; sendUpstream() only when told. ---

Deno.test("proxy releases streamed response chunks by default (its responses are for Deno.serve), not when told otherwise", async () => {
  const backend = await startEchoBackend();
  const endpoints = [{ address: "127.0.0.1", port: backend.port }];
  try {
    for (const releaseBodyChunks of [undefined, false]) {
      const handler = createProxyHandler({
        snapshot: () => staticSnapshot([{ host: ECHO_HOST, endpoints }]),
        ...(releaseBodyChunks === undefined ? {} : { releaseBodyChunks }),
      });
      try {
        const response = await handler(
          new Request(`http://${ECHO_HOST}/bytes?n=${4 * 1024 * 1024}`),
          {
            remoteAddr: { hostname: "127.0.0.1", port: 40000 },
            secure: false,
            localPort: 8080,
          },
        );
        const reader = response.body!.getReader();
        const first = await reader.read();
        assert(!first.done && first.value.length > 0);
        const length = first.value.length;
        await reader.read();
        await reader.read();
        assertStrictEquals(first.value.length, releaseBodyChunks === undefined ? 0 : length);
        await reader.cancel();
      } finally {
        handler.close();
      }
    }
  } finally {
    await backend.close();
  }
});

Deno.test("releaseBodyChunks: a streamed response chunk is released once the next is asked for, and only with the option", async () => {
  const backend = await startEchoBackend();
  const pool = new UpstreamPool();
  const endpoint = { address: "127.0.0.1", port: backend.port };
  const size = 4 * 1024 * 1024;
  try {
    for (const releaseBodyChunks of [true, false]) {
      const response = await sendUpstream(pool, endpoint, {
        ...backendGet(`/bytes?n=${size}`),
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
        const echoed = JSON.parse(await bodyText(response.body));
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
