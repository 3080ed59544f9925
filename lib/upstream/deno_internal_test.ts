import { assertEquals, assertStrictEquals } from "../../tests/support/assert.ts";
import { createHash } from "node:crypto";
import {
  lastHeaderListSource,
  releaseTakenChunk,
  releaseWrittenChunk,
  requestHeaderList,
} from "./deno_internal.ts";
import { patternBytes, patternSha256 } from "../../tests/support/echo_backend.ts";
import { concatBytes, latin1, RawConnection } from "../../tests/support/raw_http.ts";
import { generateSelfSignedCertificate } from "../tls/self_signed.ts";
import { waitFor } from "../../tests/support/wait.ts";

// Canary: if this fails after a Deno upgrade, the proxy still works (it falls back to the
// public, sorted and combined `req.headers`) but loses header order and case fidelity.
// Re-check `deno_internal.ts` against the new Deno's ext/http/00_serve.ts.
Deno.test("requestHeaderList() reads Deno.serve's wire-order header list (Deno 2.9.6 internals)", async () => {
  assertStrictEquals(
    Deno.version.deno,
    "2.9.6",
    "Deno changed: re-check lib/upstream/deno_internal.ts",
  );
  let seen: [string, string][] = [];
  let source = "";
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    seen = requestHeaderList(req);
    source = lastHeaderListSource();
    return new Response("ok");
  });
  const conn = await RawConnection.open(server.addr.port);
  try {
    await conn.send(
      "GET / HTTP/1.1\r\nHost: a.example\r\nZeta: 1\r\nX-Dup: one\r\nAlpha: 2\r\nx-dup: two\r\n" +
        "X-Obs: caf\xc3\xa9\r\nConnection: close\r\n\r\n",
    );
    const response = await conn.readResponse();
    assertEquals(latin1(response.body), "ok");
  } finally {
    conn.close();
    await server.shutdown();
  }
  assertStrictEquals(
    source,
    "internal",
    "Deno's inner request changed shape; header fidelity is lost",
  );
  assertEquals(seen, [
    ["Host", "a.example"],
    ["Zeta", "1"],
    ["X-Dup", "one"],
    ["Alpha", "2"],
    ["x-dup", "two"],
    ["X-Obs", "caf\xc3\xa9"],
    ["Connection", "close"],
  ]);
});

Deno.test("requestHeaderList() falls back to req.headers for a constructed Request", () => {
  const req = new Request("http://a.example/", { headers: [["B", "1"], ["A", "2"]] });
  const list = requestHeaderList(req);
  // Either source is acceptable here; both must carry the same fields.
  assertEquals(list.map(([k, v]) => [k.toLowerCase(), v]).sort(), [["a", "2"], ["b", "1"]]);
});

const CHUNK = 256 * 1024;
const CHUNKS = 64;

/**
 * A body streamed as `upstream_client.ts` streams one: fresh chunks, a high-water
 * mark of 1, and each chunk released once the next pull has awaited (here only a
 * microtask: the least any pull awaits). `stalled` turns true once a chunk stayed
 * queued, that is once the server stopped taking chunks because its client did
 * not read (the path where Deno awaits room before taking the next one).
 */
function releasingBody(): { body: ReadableStream<Uint8Array>; state: { stalled: boolean } } {
  const state = { stalled: false };
  let index = 0;
  let taken: Uint8Array<ArrayBuffer> | undefined;
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      await Promise.resolve();
      if (taken !== undefined) releaseTakenChunk(taken);
      if (index === CHUNKS) {
        controller.close();
        return;
      }
      const chunk = patternBytes(index++ * CHUNK, CHUNK) as Uint8Array<ArrayBuffer>;
      controller.enqueue(chunk);
      taken = chunk;
      if ((controller.desiredSize ?? 1) <= 0) state.stalled = true;
    },
  }, new CountQueuingStrategy({ highWaterMark: 1 }));
  return { body, state };
}

function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

// Canary for `releaseTakenChunk`: if a Deno upgrade made Deno.serve hold chunks in
// JavaScript before handing them to Rust, released chunks would go out empty and these
// bodies would come out short. Re-check ext/web/06_streams.js `resourceForReadableStream`.
Deno.test("releaseTakenChunk(): Deno.serve sends every released chunk whole to a client that stalled (HTTP/1.1)", async () => {
  assertStrictEquals(
    Deno.version.deno,
    "2.9.6",
    "Deno changed: re-check lib/upstream/deno_internal.ts",
  );
  let state = { stalled: false };
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, () => {
    const made = releasingBody();
    state = made.state;
    return new Response(made.body);
  });
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
  try {
    await conn.write(
      new TextEncoder().encode("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"),
    );
    // Read nothing until the server had to hold a chunk back: the socket and Deno's
    // channel are full, and several released chunks are still waiting in Rust.
    await waitFor("the server to stop taking chunks", () => state.stalled, { timeoutMs: 20_000 });
    const received: Uint8Array[] = [];
    const buf = new Uint8Array(64 * 1024);
    for (let n = await conn.read(buf); n !== null; n = await conn.read(buf)) {
      received.push(buf.slice(0, n));
    }
    const all = concatBytes(received);
    const text = latin1(all.subarray(0, 4096));
    const headEnd = text.indexOf("\r\n\r\n") + 4;
    assertStrictEquals(text.slice(0, 15), "HTTP/1.1 200 OK");
    const body = dechunk(all.subarray(headEnd));
    assertStrictEquals(body.length, CHUNK * CHUNKS);
    assertStrictEquals(sha256(body), patternSha256(CHUNK * CHUNKS));
  } finally {
    conn.close();
    await server.shutdown();
  }
});

Deno.test("releaseTakenChunk(): Deno.serve sends every released chunk whole over HTTP/2", async () => {
  const cert = await generateSelfSignedCertificate({ hostnames: ["localhost"] });
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, cert: cert.certPem, key: cert.keyPem, onListen() {} },
    () => new Response(releasingBody().body),
  );
  // HTTP/2 only: a server that did not agree to h2 fails the request.
  const client = Deno.createHttpClient({ caCerts: [cert.certPem], http1: false, http2: true });
  try {
    const response = await fetch(`https://localhost:${server.addr.port}/`, { client });
    const body = new Uint8Array(await response.arrayBuffer());
    assertStrictEquals(body.length, CHUNK * CHUNKS);
    assertStrictEquals(sha256(body), patternSha256(CHUNK * CHUNKS));
  } finally {
    client.close();
    await server.shutdown();
  }
});

Deno.test("releaseTakenChunk(): a body read in JavaScript loses the released chunks (why it is for Deno.serve only)", async () => {
  // The collector keeps the chunks it read and copies them at the end: by then all
  // but the last were released.
  const error = await new Response(releasingBody().body).arrayBuffer().then(
    () => undefined,
    (e: unknown) => e,
  );
  assertStrictEquals(error instanceof TypeError, true, `expected a TypeError, got ${error}`);
  assertStrictEquals(String(error).includes("detached"), true, String(error));
});

/** Decodes an HTTP/1.1 chunked body (the test's own response, so well-formed). */
function dechunk(data: Uint8Array): Uint8Array {
  const parts: Uint8Array[] = [];
  let at = 0;
  while (true) {
    let lineEnd = at;
    while (!(data[lineEnd] === 13 && data[lineEnd + 1] === 10)) lineEnd++;
    const size = parseInt(latin1(data.subarray(at, lineEnd)), 16);
    at = lineEnd + 2;
    if (size === 0) break;
    parts.push(data.subarray(at, at + size));
    at += size + 2;
  }
  return concatBytes(parts);
}

/**
 * Reads `body` as the proxy's request pump does (each chunk released once done with) and
 * returns the hash of what it read and whether any two chunks shared a buffer.
 */
async function readReleasing(
  body: ReadableStream<Uint8Array>,
): Promise<{ length: number; sha256: string; shared: boolean }> {
  const hash = createHash("sha256");
  const buffers = new Set<ArrayBufferLike>();
  let length = 0;
  let shared = false;
  const reader = body.getReader();
  for (let next = await reader.read(); !next.done; next = await reader.read()) {
    const chunk = next.value as Uint8Array<ArrayBuffer>;
    if (buffers.has(chunk.buffer)) shared = true;
    buffers.add(chunk.buffer);
    hash.update(chunk);
    length += chunk.length;
    releaseWrittenChunk(chunk);
  }
  return { length, sha256: hash.digest("hex"), shared };
}

// Canary for `releaseWrittenChunk`: if a Deno upgrade made request body chunks views of a
// shared buffer, releasing one would cut the ones after it, and uploads through Sluice would
// arrive corrupted. Re-check ext/web/06_streams.js `readableStreamForRid`.
Deno.test("releaseWrittenChunk(): Deno.serve hands out every request body chunk in a buffer of its own (HTTP/1.1 and HTTP/2)", async () => {
  const size = 8 * 1024 * 1024 + 12_345;
  const seen: { length: number; sha256: string; shared: boolean }[] = [];
  const cert = await generateSelfSignedCertificate({ hostnames: ["localhost"] });
  const handler = async (req: Request) => {
    seen.push(await readReleasing(req.body!));
    return new Response("ok");
  };
  const plain = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, handler);
  const tls = Deno.serve(
    { hostname: "127.0.0.1", port: 0, cert: cert.certPem, key: cert.keyPem, onListen() {} },
    handler,
  );
  const client = Deno.createHttpClient({ caCerts: [cert.certPem], http1: false, http2: true });
  const upload = () =>
    new ReadableStream<Uint8Array>({
      start(controller) {
        for (let offset = 0; offset < size; offset += 100_000) {
          controller.enqueue(patternBytes(offset, Math.min(100_000, size - offset)));
        }
        controller.close();
      },
    });
  try {
    // HTTP/1.1 with a Content-Length, HTTP/1.1 chunked, HTTP/2.
    const withLength = await fetch(`http://127.0.0.1:${plain.addr.port}/`, {
      method: "PUT",
      body: patternBytes(0, size) as Uint8Array<ArrayBuffer>,
    });
    assertStrictEquals(await withLength.text(), "ok");
    const chunked = await fetch(`http://127.0.0.1:${plain.addr.port}/`, {
      method: "PUT",
      body: upload(),
    });
    assertStrictEquals(await chunked.text(), "ok");
    const h2 = await fetch(`https://localhost:${tls.addr.port}/`, {
      method: "PUT",
      body: upload(),
      client,
    });
    assertStrictEquals(await h2.text(), "ok");
  } finally {
    client.close();
    await plain.shutdown();
    await tls.shutdown();
  }
  const expected = { length: size, sha256: patternSha256(size), shared: false };
  assertEquals(seen, [expected, expected, expected]);
});

Deno.test("releaseWrittenChunk(): chunks that share a buffer are caught (why the canary above can fail)", async () => {
  const whole = patternBytes(0, 4 * 100_000);
  const result = await readReleasing(
    new ReadableStream<Uint8Array>({
      start(controller) {
        for (let offset = 0; offset < whole.length; offset += 100_000) {
          controller.enqueue(whole.subarray(offset, offset + 100_000));
        }
        controller.close();
      },
    }),
  );
  // Releasing the first chunk took the buffer from the three after it.
  assertEquals([result.shared, result.length], [true, 100_000]);
});
