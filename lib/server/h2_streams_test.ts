/**
 * HTTP/2 streams through the data plane: routing on :authority (and without
 * one, with userinfo, or empty), CONNECT and extended CONNECT refused, streams
 * served concurrently on one connection, a stream reset mid-upload or
 * mid-download (the backend never gets a complete request, the connection is not
 * reused), HEAD, 204 and 304 without DATA, large responses byte for byte, and the
 * backend's response fields as an HTTP/2 client gets them. The proxy handler
 * behind the real HTTPS listener (TLS relayed into the inner `Deno.serve`, h2 by
 * ALPN) and the real HTTP listener (h2c with prior knowledge), raw HTTP/2 frames
 * (`tests/support/raw_h2.ts`) so a test can send what polite clients refuse to,
 * and scripted or echo backends that record exactly what reached them. A
 * comment starting "Was a bug" marks a test pinning a fix; one test pins a Deno
 * 2.9.6 limitation (an h2 GET's DATA is invisible).
 *
 * @module
 */
import { createHash } from "node:crypto";
import { assert, assertEquals } from "../../tests/support/assert.ts";
import { patternSha256 } from "../../tests/support/echo_backend.ts";
import { waitFor } from "../../tests/support/wait.ts";
import {
  type ScriptedBackend,
  startScriptedBackend,
} from "../../tests/support/scripted_backend.ts";
import {
  backendRequestsSince,
  h2Exchange,
  type H2Fields,
  h2Get,
  h2Post,
  openH2,
  statusOf,
  textOf,
  withH2Echo,
  withH2World,
} from "../../tests/support/raw_h2.ts";
import { bigBackend, routeTo, uploadSink } from "../../tests/support/stream_backends.ts";

const enc = new TextEncoder();

/** Both ways a client speaks h2 to Sluice: TLS with ALPN h2, and h2c with prior knowledge. */
const TRANSPORTS = ["tls", "h2c"] as const;

Deno.test("h2: a request routes on :authority, and the Host and X-Forwarded-Host the backend sees are that authority, whatever a host field says", async () => {
  await withH2Echo(async (world, backends) => {
    for (const transport of TRANSPORTS) {
      const cases: [H2Fields, string, string][] = [
        // [request fields, service reached, Host (and X-Forwarded-Host) the backend sees]
        [h2Get("a.test"), "a", "a.test"],
        [h2Get("a.test", "/x", [["host", "b.test"]]), "a", "a.test"],
        [h2Get("b.test", "/x", [["host", "a.test"]]), "b", "b.test"],
        [h2Get("a.test", "/x", [["host", "a.test:444"]]), "a", "a.test"],
        [h2Get("a.test:8443", "/x", [["host", "b.test:9"]]), "a", "a.test:8443"],
        // No :authority: the host field names the target (RFC 9113 section 8.3.1).
        [h2Get(undefined, "/x", [["host", "b.test"]]), "b", "b.test"],
        // Two host fields reach the handler over h2 and h2c: the backend still gets one Host.
        [h2Get("a.test", "/x", [["host", "b.test"], ["host", "b.test"]]), "a", "a.test"],
        [h2Get(undefined, "/x", [["host", "b.test"], ["host", "a.test"]]), "b", "b.test"],
        // Uppercase authority routes like lowercase; the backend gets it as sent.
        [h2Get("A.TEST"), "a", "A.TEST"],
      ];
      for (const [headers, service, host] of cases) {
        const marks = backends.map((b) => b.requests.length);
        const stream = await h2Exchange(world, transport, headers);
        const what = `${transport} ${JSON.stringify(headers.slice(2))}`;
        assertEquals(statusOf(stream), 200, what);
        const seen = backendRequestsSince(backends, marks);
        assertEquals(seen.map((s) => s.service), [service], what);
        assertEquals(
          seen[0]!.headers.filter(([n]) => /^(host|x-forwarded-host)$/i.test(n)),
          [["host", host], ["X-Forwarded-Host", host]],
          what,
        );
      }
    }
  });
});

Deno.test("h2: no :authority and no host is routed host-less (404 here); an authority with userinfo gets 400; an empty one is reset; none reaches a backend", async () => {
  await withH2Echo(async (world, backends) => {
    for (const transport of TRANSPORTS) {
      const marks = backends.map((b) => b.requests.length);
      // RFC 9113 8.3.1 allows a request with no authority to convey: like HTTP/1.0 without Host,
      // it may reach only rules without a host, and this world has none.
      assertEquals(statusOf(await h2Exchange(world, transport, h2Get(undefined))), 404);
      assertEquals(statusOf(await h2Exchange(world, transport, h2Get("evil@a.test"))), 400);
      const empty = await h2Exchange(world, transport, h2Get("", "/x", [["host", "b.test"]]));
      assertEquals([statusOf(empty), empty.reset], [undefined, 1]);
      assertEquals(backendRequestsSince(backends, marks), []);
    }
  });
});

Deno.test("h2: CONNECT gets 501 and extended CONNECT (:protocol) is reset; neither reaches a backend", async () => {
  await withH2Echo(async (world, backends) => {
    for (const transport of TRANSPORTS) {
      const marks = backends.map((b) => b.requests.length);
      const connect = await h2Exchange(world, transport, [
        [":method", "CONNECT"],
        [":authority", "a.test:443"],
      ]);
      assertEquals(statusOf(connect), 501);
      // Deno does not announce SETTINGS_ENABLE_CONNECT_PROTOCOL, so RFC 8441 requests are malformed.
      const extended = await h2Exchange(world, transport, [
        [":method", "CONNECT"],
        [":protocol", "websocket"],
        [":scheme", "https"],
        [":authority", "a.test"],
        [":path", "/ws"],
        ["sec-websocket-version", "13"],
      ]);
      assertEquals([statusOf(extended), extended.reset], [undefined, 1]);
      assertEquals(backendRequestsSince(backends, marks), []);
    }
  });
});

Deno.test("h2: a stream reset mid-upload with content-length never reaches the backend complete, and its connection is not reused", async () => {
  const sink = uploadSink();
  try {
    await withH2World([routeTo("a.test", sink.port, "t/sink")], async (world) => {
      for (const transport of TRANSPORTS) {
        const before = sink.log.length;
        const readBefore = sink.connections.reduce((n, c) => n + c.read, 0);
        const h2 = await openH2(world, transport);
        try {
          const id = await h2.request(h2Post("/reset", [["content-length", "1000000"]]), false);
          await h2.data(id, new Uint8Array(100_000));
          await waitFor(
            "the upload to reach the backend",
            () => sink.connections.reduce((n, c) => n + c.read, 0) > readBefore + 50_000,
          );
          await h2.reset(id);
          await waitFor("the upstream connection to close", () => sink.open === 0);
          const next = await h2.request(h2Post("/after", [["content-length", "3"]]), false);
          await h2.data(next, enc.encode("abc"), true);
          const answer = await h2.finished(next);
          assertEquals([statusOf(answer), textOf(answer)], [200, "3"]);
        } finally {
          await h2.close();
        }
        const records = sink.log.slice(before);
        assertEquals(records.map((r) => [r.target, r.complete]), [["/reset", false], [
          "/after",
          true,
        ]]);
        assert(records[1]!.connection !== records[0]!.connection, "a fresh connection");
      }
    });
  } finally {
    await sink.close();
  }
});

Deno.test({
  name:
    "h2: a stream reset mid-upload without content-length never reaches the backend as a complete request",
  // Was a bug: on RST_STREAM Deno ends an h2 body cleanly before req.signal aborts, and the last
  // chunk went out (every TLS round); the end of an h2 body of unknown length now waits for it.
  fn: async () => {
    const sink = uploadSink();
    try {
      await withH2World([routeTo("a.test", sink.port, "t/sink")], async (world) => {
        for (let round = 0; round < 20; round++) {
          const h2 = await openH2(world, round % 2 === 0 ? "tls" : "h2c");
          try {
            // A pooled upstream connection is ready (no connect to wait for), then a stream
            // sends a little DATA and is reset at once.
            const warm = await h2.request(h2Post("/warm", [["content-length", "0"]]));
            assertEquals(statusOf(await h2.finished(warm)), 200);
            const id = await h2.request(h2Post(`/cut-${round}`), false);
            await h2.data(id, new Uint8Array(1_000));
            await h2.reset(id);
            await waitFor("the access log", () => world.accessLog.length === 2 * (round + 1));
          } finally {
            await h2.close();
          }
        }
        await waitFor("every upstream connection to close", () => sink.open === 0);
        const complete = sink.log.filter((r) => r.complete && r.target !== "/warm");
        assertEquals(complete, [], `${complete.length} cut uploads reached the backend complete`);
      });
    } finally {
      await sink.close();
    }
  },
});

// Deno 2.9.6 limitation, pinned (README, "Known limitations"): an h2 GET's DATA is invisible to
// the handler (req.body is null, no Content-Length), so the backend gets the GET without it where
// HTTP/1.1 gets 501. If this fails, Deno changed: refuse such a GET as over HTTP/1.1.
Deno.test("h2: Deno 2.9.6 hides the DATA of a GET without content-length, so the backend gets the GET alone", async () => {
  await withH2Echo(async (world, backends) => {
    const marks = backends.map((b) => b.requests.length);
    const stream = await h2Exchange(world, "tls", h2Get("a.test", "/search"), enc.encode("{}"));
    assertEquals(statusOf(stream), 200);
    const seen = backendRequestsSince(backends, marks);
    assertEquals(seen.map((r) => [r.method, r.target, r.bodyLength]), [["GET", "/search", 0]]);
  });
});

Deno.test("h2: many streams on one connection are served concurrently: a fast one completes while slow ones wait on the backend", async () => {
  const gate = Promise.withResolvers<void>();
  const backend = startScriptedBackend(async (conn) => {
    while (true) {
      const head = await conn.readHead();
      if (head === null) return;
      const target = head.split(" ")[1]!;
      if (target.startsWith("/slow")) await gate.promise;
      // UTF-8, as this backend always wrote text (the others here write ASCII only).
      await conn.write(
        enc.encode(`HTTP/1.1 200 OK\r\nContent-Length: ${target.length}\r\n\r\n${target}`),
      );
    }
  }, { noDelay: true });
  try {
    await withH2World([routeTo("a.test", backend.port, "t/slow")], async (world) => {
      const h2 = await openH2(world);
      try {
        const slow: number[] = [];
        for (let i = 0; i < 16; i++) slow.push(await h2.request(h2Get("a.test", `/slow/${i}`)));
        await waitFor("16 upstream connections", () => backend.connections.length === 16);
        const fast = await h2.request(h2Get("a.test", "/fast"));
        const answer = await h2.finished(fast, 5_000);
        assertEquals([statusOf(answer), textOf(answer)], [200, "/fast"]);
        assert(slow.every((id) => h2.stream(id).heads.length === 0), "slow streams still waiting");
        gate.resolve();
        for (const [i, id] of slow.entries()) {
          const stream = await h2.finished(id);
          assertEquals([statusOf(stream), textOf(stream)], [200, `/slow/${i}`]);
        }
      } finally {
        gate.resolve();
        await h2.close();
      }
    });
  } finally {
    await backend.close();
  }
});

Deno.test("h2: a stream reset mid-download aborts the upstream exchange and its connection is not reused", async () => {
  const backend = bigBackend();
  try {
    await withH2World([routeTo("a.test", backend.port, "t/big")], async (world) => {
      for (const transport of TRANSPORTS) {
        const first = backend.log.length;
        const h2 = await openH2(world, transport);
        try {
          const id = await h2.request(h2Get("a.test", "/big"));
          await h2.until(
            id,
            "1 MiB of the body",
            (s) => s.data.reduce((n, d) => n + d.length, 0) >= 1 << 20,
          );
          await h2.reset(id);
          await waitFor("the upstream connection to close", () => backend.open === 0);
          const next = await h2.request(h2Get("a.test", "/small"));
          const answer = await h2.finished(next);
          assertEquals([statusOf(answer), textOf(answer)], [200, "ok"]);
        } finally {
          await h2.close();
        }
        const [big, small] = backend.log.slice(first);
        assertEquals([big?.[0], small?.[0]], ["/big", "/small"]);
        assert(big![1] !== small![1], "/small went out on another connection than /big");
        assert(backend.connections[big![1]]!.closed, "the /big connection is closed");
      }
      await waitFor("the access log", () => world.accessLog.length === 4);
      assertEquals(
        world.accessLog.filter((e) => e.target === "/big").map((e) => [e.status, e.error]),
        [[200, "aborted"], [200, "aborted"]],
      );
    });
  } finally {
    await backend.close();
  }
});

Deno.test("h2: HEAD, 204 and 304 answers carry no DATA; HEAD keeps the backend's content-length", async () => {
  await withH2Echo(async (world) => {
    for (const transport of TRANSPORTS) {
      const head = await h2Exchange(world, transport, [
        [":method", "HEAD"],
        [":scheme", "https"],
        [":authority", "a.test"],
        [":path", "/bytes?n=12345"],
      ]);
      assertEquals([statusOf(head), head.data.length, head.ended], [200, 0, true]);
      assertEquals(head.heads[0]!.filter(([n]) => n === "content-length"), [[
        "content-length",
        "12345",
      ]]);
      for (const status of [204, 304]) {
        const stream = await h2Exchange(world, transport, h2Get("a.test", `/?status=${status}`));
        assertEquals([statusOf(stream), stream.data.length, stream.ended], [status, 0, true]);
      }
    }
  });
});

Deno.test("h2: a 24 MiB response, Content-Length or chunked from the backend, arrives byte for byte", async () => {
  const size = 24 * 1024 * 1024;
  await withH2Echo(async (world) => {
    for (const [transport, chunked] of [["tls", false], ["h2c", true]] as const) {
      const stream = await h2Exchange(
        world,
        transport,
        h2Get("a.test", `/bytes?n=${size}${chunked ? "&chunked=1" : ""}`),
      );
      const hash = createHash("sha256");
      let length = 0;
      for (const part of stream.data) {
        hash.update(part);
        length += part.length;
      }
      assertEquals([statusOf(stream), stream.ended, length, hash.digest("hex")], [
        200,
        true,
        size,
        patternSha256(size),
      ]);
    }
  });
});

// --- The backend's answer as an HTTP/2 client gets it. ---

/** A backend answering each target with the bytes given; 200 "ok" for any other. */
function answeringBackend(answers: Record<string, string>): ScriptedBackend {
  return startScriptedBackend(async (conn) => {
    while (true) {
      const head = await conn.readHead();
      if (head === null) return;
      const length = /\r\ncontent-length: *(\d+)/i.exec(head);
      if (length !== null) await conn.readLength(Number(length[1]), () => {});
      const target = head.split(" ")[1]!;
      await conn.write(answers[target] ?? "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    }
  });
}

async function withFetchH2(
  answers: Record<string, string>,
  fn: (get: (path: string) => Promise<Response>, backend: ScriptedBackend) => Promise<void>,
): Promise<void> {
  const backend = answeringBackend(answers);
  try {
    await withH2World([{
      host: "localhost",
      endpoints: [{ address: "127.0.0.1", port: backend.port }],
      service: "t/a",
    }], async (world) => {
      using client = Deno.createHttpClient({ http1: false, http2: true, caCerts: [world.caCert] });
      await fn((path) => fetch(`https://localhost:${world.httpsPort}${path}`, { client }), backend);
    });
  } finally {
    await backend.close();
  }
}

Deno.test("h2: a backend's hop-by-hop response fields never reach an HTTP/2 client, and obs-text arrives byte for byte", async () => {
  await withFetchH2({
    "/hop": "HTTP/1.1 200 OK\r\nConnection: x-secret\r\nX-Secret: 1\r\nKeep-Alive: timeout=5\r\n" +
      "Proxy-Connection: keep-alive\r\nUpgrade: h2c\r\nTE: trailers\r\nTrailer: x-t\r\n" +
      "HTTP2-Settings: AAMAAABkAAQAAP__\r\nX-Obs: caf\xe9 \xff\r\nTransfer-Encoding: chunked\r\n\r\n" +
      "2\r\nok\r\n0\r\nx-t: 1\r\n\r\n",
  }, async (get) => {
    const response = await get("/hop");
    assertEquals([response.status, await response.text()], [200, "ok"]);
    assertEquals(
      [...response.headers].filter(([name]) => name !== "date"),
      [["x-obs", "caf\xe9 \xff"]],
    );
  });
});

// Was a bug: the backend's Content-Length on a 204 reached HTTP/2 clients (Deno drops it only
// towards HTTP/1.1 ones); RFC 9110 section 8.6 forbids it, and nginx removes it.
Deno.test("h2: a 204 carries no content-length to an HTTP/2 client; a 304 keeps the backend's", async () => {
  await withFetchH2({
    "/204": "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
    "/304": 'HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\nETag: "e"\r\n\r\n',
  }, async (get) => {
    const none = await get("/204");
    assertEquals([none.status, none.headers.get("content-length"), await none.text()], [
      204,
      null,
      "",
    ]);
    const notModified = await get("/304");
    assertEquals(
      [notModified.status, notModified.headers.get("content-length"), await notModified.text()],
      [304, "5", ""],
    );
    // The pooled connection is in step afterwards.
    const after = await get("/after");
    assertEquals([after.status, await after.text()], [200, "ok"]);
  });
});

Deno.test("h2: a backend response head with CR, LF, obs-fold or conflicting framing gets 502, and the next request is answered by its own response", async () => {
  const broken: Record<string, string> = {
    "/bare-cr": "HTTP/1.1 200 OK\r\nX-A: a\rSet-Cookie: evil=1\r\nContent-Length: 2\r\n\r\nok",
    "/bare-lf": "HTTP/1.1 200 OK\r\nX-A: a\nSet-Cookie: evil=1\r\nContent-Length: 2\r\n\r\nok",
    "/fold": "HTTP/1.1 200 OK\r\nX-A: a\r\n Set-Cookie: evil=1\r\nContent-Length: 2\r\n\r\nok",
    "/cl-te": "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n" +
      "2\r\nok\r\n0\r\n\r\n",
    "/cl-cl": "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\nok",
    "/nul": "HTTP/1.1 200 OK\r\nX-A: a\0b\r\nContent-Length: 2\r\n\r\nok",
  };
  await withFetchH2(broken, async (get) => {
    for (const path of Object.keys(broken)) {
      const response = await get(path);
      await response.body?.cancel();
      assertEquals([response.status, response.headers.get("set-cookie")], [502, null], path);
      const after = await get("/after");
      assertEquals([after.status, await after.text()], [200, "ok"], `after ${path}`);
    }
  });
});
