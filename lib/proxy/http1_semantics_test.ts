/**
 * HTTP/1.x semantics on the client-facing path, as real clients, CDNs and load
 * balancers use them: `Expect: 100-continue`, HTTP/1.0 clients, pipelining
 * across Sluice's own refusals, `Connection: close` either way, range and
 * conditional requests, HEAD, close-delimited, interim (1xx) and
 * trailer-carrying backend answers, and 205. Raw `Deno.connect` clients against
 * the real HTTP listener (`lib/server/http_listener.ts`) and
 * the real handler, in front of a scripted backend that logs the exact bytes it
 * received (`tests/support/http1_world.ts`).
 *
 * @module
 */
import { assert, assertEquals, assertStringIncludes } from "../../tests/support/assert.ts";
import {
  headerValue,
  headerValues,
  latin1,
  parseResponses,
  RawConnection,
  type RawResponse,
} from "../../tests/support/raw_http.ts";
import {
  HTTP1_HOST,
  type Http1Answer,
  overPlainListener,
  targetOf,
  withHttp1World,
} from "../../tests/support/http1_world.ts";
import { echoOf, type RuleSketch, worldRunner } from "../../tests/support/echo_world.ts";

function get(target: string, extra = "", version = "1.1"): string {
  return `GET ${target} HTTP/${version}\r\nHost: ${HTTP1_HOST}\r\n${extra}\r\n`;
}

/** The connection answers a next request in step (a desynced one answers it with leftovers). */
async function assertInStep(conn: RawConnection, message: string): Promise<void> {
  await conn.send(get("/after"));
  assertEquals(text(await conn.readResponse()), "/after", message);
}

function text(response: RawResponse): string {
  return latin1(response.body);
}

/** Splits raw response bytes into the head (through CRLF CRLF) and what follows. */
function splitHead(bytes: Uint8Array): [string, string] {
  const all = latin1(bytes);
  const end = all.indexOf("\r\n\r\n");
  return end === -1 ? [all, ""] : [all.slice(0, end + 4), all.slice(end + 4)];
}

Deno.test("Expect: 100-continue reaches the backend as a request with its body exactly once and without Expect", async () => {
  for (const size of [10, 70_000, 300_000]) {
    await overPlainListener({}, async (world, mode) => {
      const body = "b".repeat(size);
      using conn = await RawConnection.open(world.port);
      await conn.send(
        `PUT /put HTTP/1.1\r\nHost: ${HTTP1_HOST}\r\nExpect: 100-Continue\r\nContent-Length: ${size}\r\n\r\n`,
      );
      const interim = await conn.readResponse();
      assertEquals(interim.status, 100, `${mode} ${size}`);
      await conn.send(body);
      const response = await conn.readResponse();
      assertEquals([response.status, text(response)], [200, "/put"]);
      assertEquals(world.received.length, 1);
      const got = world.received[0]!;
      assertEquals([got.body.length, got.whole], [size, true], `${mode} ${size}`);
      assert(!/\r\nexpect:/i.test(got.head), got.head);
    });
  }
});

Deno.test("Expect: 100-continue on a chunked upload: the body reaches the backend whole, once", async () => {
  await overPlainListener({}, async (world, mode) => {
    using conn = await RawConnection.open(world.port);
    await conn.send(
      `POST /chunked HTTP/1.1\r\nHost: ${HTTP1_HOST}\r\nExpect: 100-continue\r\n` +
        "Transfer-Encoding: chunked\r\n\r\n",
    );
    assertEquals((await conn.readResponse()).status, 100, mode);
    const part = "k".repeat(40_000);
    for (let i = 0; i < 3; i++) await conn.send(`${part.length.toString(16)}\r\n${part}\r\n`);
    await conn.send("0\r\n\r\n");
    const response = await conn.readResponse();
    assertEquals(text(response), "/chunked", mode);
    assertEquals(world.received.length, 1, mode);
    assertEquals([world.received[0]!.body.length, world.received[0]!.whole], [120_000, true]);
  });
});

// BUG (Deno 2.9.6, not Sluice's code): Deno.serve answers an HTTP/1.0 request's `Expect:
// 100-continue` with "HTTP/1.1 100 Continue" once the body is read (measured with a bare
// Deno.serve too), where RFC 9110 section 10.1.1 says to ignore the expectation and section 15.2
// forbids any 1xx to an HTTP/1.0 client. Sluice cannot see the request's version; only a relay
// (lib/server/_relay_server.ts) could drop `Expect` from HTTP/1.0 heads. Low impact: Expect is
// an HTTP/1.1 feature; to be listed in README "Known limitations" or reported upstream.
Deno.test({
  name: "an HTTP/1.0 client's Expect: 100-continue gets no 100 (RFC 9110 section 10.1.1)",
  ignore: true,
}, async () => {
  await withHttp1World({}, async (world) => {
    using conn = await RawConnection.open(world.port);
    await conn.send(
      `POST /old HTTP/1.0\r\nHost: ${HTTP1_HOST}\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc`,
    );
    const all = parseResponses(await conn.readToEnd(5_000));
    assertEquals(all.map((r) => r.status), [200]);
    assertEquals(world.received[0]?.body, "abc");
  });
});

// --- HTTP/1.0 clients. ---

Deno.test("an HTTP/1.0 client never gets chunked framing: a chunked backend answer reaches it whole, then the connection closes", async () => {
  const big = "z".repeat(150_000);
  const chunked = (body: string) =>
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
    `${body.length.toString(16)}\r\n${body}\r\n0\r\nX-Trailer: t\r\n\r\n`;
  await overPlainListener(
    { "/small": chunked("small"), "/big": chunked(big) },
    async (world, mode) => {
      for (const [target, expected] of [["/small", "small"], ["/big", big]] as const) {
        for (const extra of ["", "Connection: keep-alive\r\n"]) {
          using conn = await RawConnection.open(world.port);
          await conn.send(get(target, extra, "1.0"));
          const bytes = await conn.readUntilQuiet(2_000, 10_000);
          const [head, body] = splitHead(bytes);
          const where = `${mode} ${target} ${JSON.stringify(extra)}`;
          assert(head.startsWith("HTTP/1."), where);
          assert(!/\r\ntransfer-encoding:/i.test(head), `${where}: ${head}`);
          const length = /\r\ncontent-length: *(\d+)/i.exec(head);
          if (length === null) {
            // Close-delimited: the server must close after it.
            assertEquals(body, expected, where);
            assert(await conn.closedByPeer(1), `${where}: not closed after a close-delimited body`);
          } else {
            assertEquals(body.slice(0, Number(length[1])), expected, where);
          }
        }
      }
    },
  );
});

Deno.test("an HTTP/1.0 client keeps its connection only when it asked for keep-alive", async () => {
  await overPlainListener({}, async (world, mode) => {
    const plain = await RawConnection.open(world.port);
    try {
      await plain.send(get("/a", "", "1.0"));
      const response = await plain.readResponse();
      assertEquals(text(response), "/a");
      assert(
        await plain.closedByPeer(5_000),
        `${mode}: an HTTP/1.0 connection without keep-alive stayed open`,
      );
    } finally {
      plain.close();
    }
    using kept = await RawConnection.open(world.port);
    for (const target of ["/b", "/c"]) {
      await kept.send(get(target, "Connection: keep-alive\r\n", "1.0"));
      const response = await kept.readResponse();
      assertEquals(text(response), target, mode);
      assertStringIncludes(
        (headerValue(response.headers, "connection") ?? "").toLowerCase(),
        "keep-alive",
        mode,
      );
    }
  });
});

// --- Pipelining. ---

Deno.test("pipelined requests are answered in order, also around Sluice's own refusals", async () => {
  const cases: [string, string[], number[]][] = [
    ["404 first", [
      `GET /x HTTP/1.1\r\nHost: nowhere.test\r\n\r\n`,
      get("/a"),
      get("/b"),
    ], [404, 200, 200]],
    ["404 in the middle", [get("/a"), `GET /x HTTP/1.1\r\nHost: nowhere.test\r\n\r\n`, get("/b")], [
      200,
      404,
      200,
    ]],
    ["404 with a body", [
      `POST /x HTTP/1.1\r\nHost: nowhere.test\r\nContent-Length: ${get("/hidden").length}\r\n\r\n${
        get("/hidden")
      }`,
      get("/a"),
    ], [404, 200]],
    ["501 GET with a body", [
      `GET /x HTTP/1.1\r\nHost: ${HTTP1_HOST}\r\nContent-Length: ${get("/hidden").length}\r\n\r\n${
        get("/hidden")
      }`,
      get("/a"),
    ], [501, 200]],
    ["400 ambiguous path", [get("/a/%2F../b"), get("/a")], [400, 200]],
    ["a streamed answer then a small one", [get("/big"), get("/a")], [200, 200]],
    ["Expect to no route, its body, then GET", [
      `POST /x HTTP/1.1\r\nHost: nowhere.test\r\nExpect: 100-continue\r\nContent-Length: ${
        get("/hidden").length
      }\r\n\r\n${get("/hidden")}`,
      get("/a"),
    ], [404, 200]],
    ["POST then GET", [
      `POST /p HTTP/1.1\r\nHost: ${HTTP1_HOST}\r\nContent-Length: 5\r\n\r\nhello`,
      get("/a"),
      get("/b", "Connection: close\r\n"),
    ], [200, 200, 200]],
  ];
  const big = "B".repeat(200_000);
  const answers = { "/big": `HTTP/1.1 200 OK\r\nContent-Length: ${big.length}\r\n\r\n${big}` };
  await overPlainListener(answers, async (world, mode) => {
    for (const [name, requests, statuses] of cases) {
      const before = world.received.length;
      using conn = await RawConnection.open(world.port);
      await conn.send(requests.join(""));
      const responses = parseResponses(await conn.readUntilQuiet(500, 5_000))
        .filter((r) => r.status >= 200);
      const where = `${mode}: ${name}`;
      // In order; a server may close after a refusal, but never answers out of order.
      assert(responses.length > 0, where);
      assertEquals(responses.map((r) => r.status), statuses.slice(0, responses.length), where);
      const targets = requests.map((r) => r.split(" ")[1]!);
      responses.forEach((r, i) => {
        if (r.status === 200) {
          assertEquals(text(r), targets[i] === "/big" ? big : targets[i], where);
        }
      });
      const seen = world.received.slice(before).map((r) => targetOf(r.head));
      assert(!seen.includes("/hidden"), `${where}: a body became a request`);
      // Fewer answers than requests only after an answer that announced the close.
      if (responses.length < statuses.length) {
        assertEquals(headerValue(responses.at(-1)!.headers, "connection"), "close", where);
      }
    }
  });
});

// --- Connection: close, either way. ---

Deno.test("Connection: close from the client ends its connection after the answer, small or streamed", async () => {
  const big = "q".repeat(200_000);
  await overPlainListener({
    "/big": `HTTP/1.1 200 OK\r\nContent-Length: ${big.length}\r\n\r\n${big}`,
  }, async (world, mode) => {
    for (const target of ["/small", "/big"]) {
      using conn = await RawConnection.open(world.port);
      await conn.send(get(target, "Connection: close\r\n") + get("/after"));
      const responses = parseResponses(await conn.readToEnd(5_000));
      assertEquals(responses.length, 1, `${mode} ${target}`);
      assertEquals(text(responses[0]!).length, target === "/big" ? big.length : target.length);
      assertEquals(
        (headerValue(responses[0]!.headers, "connection") ?? "").toLowerCase(),
        "close",
        mode,
      );
    }
    assert(!world.received.some((r) => targetOf(r.head) === "/after"), mode);
    // Hop-by-hop: the backend never sees the client's close, and its connection is reused.
    assert(world.received.every((r) => !/\r\nconnection:/i.test(r.head)), mode);
    assertEquals(world.received.map((r) => r.conn), [0, 0], mode);
  });
});

Deno.test("a backend's Connection: close ends only the backend connection: the client's stays open, the next request gets a new backend connection", async () => {
  await overPlainListener({
    "/bye": "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbye",
    "/bye10": "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nbye10",
  }, async (world, mode) => {
    using conn = await RawConnection.open(world.port);
    for (const target of ["/bye", "/next", "/bye10", "/last"]) {
      await conn.send(get(target));
      const response = await conn.readResponse();
      assertEquals(
        text(response),
        target.slice(1) === "bye" || target === "/bye10" ? target.slice(1) : target,
        mode,
      );
      assertEquals(headerValue(response.headers, "connection"), undefined, `${mode} ${target}`);
    }
    const conns = world.received.map((r) => r.conn);
    assertEquals(conns[1] !== conns[0], true, `${mode}: reused after Connection: close`);
    assertEquals(conns[3] !== conns[2], true, `${mode}: reused after an HTTP/1.0 answer`);
  });
});

// --- Ranges and conditional requests. ---

Deno.test("range and conditional fields reach the backend verbatim; 206, multipart 206, 304 and 416 reach the client byte for byte", async () => {
  const boundary = "3d6b6a416f9b5";
  const multipart =
    `--${boundary}\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-4/1000\r\n\r\n` +
    `hello\r\n--${boundary}\r\nContent-Type: text/plain\r\nContent-Range: bytes 10-14/1000\r\n\r\n` +
    `world\r\n--${boundary}--\r\n`;
  const bigPart = "r".repeat(100_000);
  const answers: Record<string, string> = {
    "/single": 'HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-4/1000\r\nETag: "e1"\r\n' +
      "Accept-Ranges: bytes\r\nContent-Length: 5\r\n\r\nhello",
    "/multi":
      `HTTP/1.1 206 Partial Content\r\nContent-Type: multipart/byteranges; boundary=${boundary}\r\n` +
      `Content-Length: ${multipart.length}\r\n\r\n${multipart}`,
    "/multi-chunked":
      `HTTP/1.1 206 Partial Content\r\nContent-Type: multipart/byteranges; boundary=${boundary}\r\n` +
      `Transfer-Encoding: chunked\r\n\r\n${
        multipart.length.toString(16)
      }\r\n${multipart}\r\n0\r\n\r\n`,
    "/big-range": "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-99999/200000\r\n" +
      `Content-Length: ${bigPart.length}\r\n\r\n${bigPart}`,
    "/not-modified": 'HTTP/1.1 304 Not Modified\r\nETag: "e1"\r\nCache-Control: max-age=60\r\n' +
      "Last-Modified: Wed, 21 Oct 2015 07:28:00 GMT\r\n\r\n",
    "/unsatisfiable": "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */1000\r\n" +
      "Content-Length: 0\r\n\r\n",
  };
  const conditional = 'Range: bytes=0-4,10-14\r\nIf-Range: "e1"\r\n' +
    'If-None-Match: W/"a", "b"\r\nIf-None-Match: "c"\r\n' +
    "If-Modified-Since: Wed, 21 Oct 2015 07:28:00 GMT\r\nIf-Match: *\r\n" +
    "If-Unmodified-Since: Wed, 21 Oct 2015 07:28:00 GMT\r\n";
  await overPlainListener(answers, async (world, mode) => {
    using conn = await RawConnection.open(world.port);
    for (const target of Object.keys(answers)) {
      await conn.send(get(target, conditional));
      const response = await conn.readResponse();
      const sent = latin1(new TextEncoder().encode(answers[target]!));
      const sentBody = sent.slice(sent.indexOf("\r\n\r\n") + 4);
      const where = `${mode} ${target}`;
      assertEquals(response.status, Number(sent.slice(9, 12)), where);
      for (
        const name of ["content-range", "content-type", "etag", "last-modified", "cache-control"]
      ) {
        const sentHead = sent.slice(0, sent.indexOf("\r\n\r\n") + 2);
        const expected = new RegExp(`\r\n${name}: ([^\r]*)`, "i").exec(sentHead)?.[1];
        assertEquals(headerValue(response.headers, name), expected, `${where} ${name}`);
      }
      const expectedBody = target === "/multi-chunked"
        ? multipart
        : target === "/not-modified"
        ? ""
        : sentBody;
      assertEquals(text(response), expectedBody, where);
      const got = world.received.at(-1)!;
      for (const line of conditional.split("\r\n").filter((l) => l !== "")) {
        assertStringIncludes(got.head, `\r\n${line}\r\n`, where);
      }
    }
  });
});

Deno.test("HEAD of a chunked and of a large resource answers with no body and the connection stays in step", async () => {
  await overPlainListener({
    "/chunked": 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: "h"\r\n\r\n',
    "/large": "HTTP/1.1 200 OK\r\nContent-Length: 5000000\r\n\r\n",
  }, async (world, mode) => {
    using conn = await RawConnection.open(world.port);
    for (const target of ["/chunked", "/large"]) {
      await conn.send(`HEAD ${target} HTTP/1.1\r\nHost: ${HTTP1_HOST}\r\n\r\n`);
      const response = await conn.readResponse({ head: true });
      assertEquals(response.status, 200, mode);
      if (target === "/large") {
        assertEquals(headerValue(response.headers, "content-length"), "5000000");
      }
    }
    await assertInStep(conn, mode);
  });
});

// --- Close-delimited, 1xx and trailers from the backend. ---

Deno.test("a close-delimited backend answer reaches an HTTP/1.1 client whole and framed, and its connection stays usable", async () => {
  const big = "c".repeat(300_000);
  await overPlainListener({
    "/eof-small": async (conn) => {
      await conn.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\neof body");
      conn.close();
    },
    "/eof-big": async (conn) => {
      await conn.write(`HTTP/1.0 200 OK\r\n\r\n${big}`);
      conn.close();
    },
  }, async (world, mode) => {
    using conn = await RawConnection.open(world.port);
    for (const [target, body] of [["/eof-small", "eof body"], ["/eof-big", big]] as const) {
      await conn.send(get(target));
      const response = await conn.readResponse();
      assertEquals(text(response), body, `${mode} ${target}`);
      assert(
        response.chunked || headerValue(response.headers, "content-length") !== undefined,
        `${mode} ${target}: not framed`,
      );
    }
    await assertInStep(conn, mode);
  });
});

Deno.test("103 Early Hints and 100 before the answer: the client gets the final answer in step", async () => {
  await overPlainListener({
    "/hints": "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" +
      "HTTP/1.1 100 Continue\r\n\r\n" +
      "HTTP/1.1 200 OK\r\nLink: </a.css>; rel=preload\r\nContent-Length: 5\r\n\r\nfinal",
  }, async (world, mode) => {
    using conn = await RawConnection.open(world.port);
    await conn.send(get("/hints"));
    let response = await conn.readResponse();
    while (response.status < 200) response = await conn.readResponse();
    assertEquals([response.status, text(response)], [200, "final"], mode);
    assertEquals(headerValue(response.headers, "link"), "</a.css>; rel=preload");
    await assertInStep(conn, mode);
  });
});

Deno.test("a chunked backend answer with trailers reaches the client with its whole body, and both connections stay in step", async () => {
  const long = "v".repeat(7_000);
  await overPlainListener({
    "/trailers": "HTTP/1.1 200 OK\r\nTrailer: X-Checksum\r\nTransfer-Encoding: chunked\r\n\r\n" +
      "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Checksum: abc\r\nX-Long: " + long + "\r\n\r\n",
  }, async (world, mode) => {
    using conn = await RawConnection.open(world.port);
    await conn.send(get("/trailers"));
    const response = await conn.readResponse();
    assertEquals(text(response), "hello world", mode);
    assertEquals(headerValues(response.headers, "trailer"), [], mode);
    await assertInStep(conn, mode);
    assertEquals(
      world.received.map((r) => r.conn),
      [0, 0],
      `${mode}: backend connection not reused`,
    );
  });
});

// --- 205 Reset Content. ---

// Was a bug: a 205 whose body was framed by chunking (an empty chunked body) or by the close
// reached the client as 502: Deno refuses any body on a 205, and Sluice handed it a stream.
Deno.test("a 205 reaches the client as 205 whatever framing the backend gave its empty body; a connection left unread is not reused", async () => {
  const answers: Record<string, Http1Answer> = {
    "/205-chunked": "HTTP/1.1 205 Reset Content\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "/205-length-0": "HTTP/1.1 205 Reset Content\r\nContent-Length: 0\r\n\r\n",
    "/205-close": async (conn) => {
      await conn.write("HTTP/1.1 205 Reset Content\r\n\r\n");
      conn.close();
    },
    "/205-with-body": "HTTP/1.1 205 Reset Content\r\nContent-Length: 3\r\n\r\nabc",
  };
  await overPlainListener(answers, async (world, mode) => {
    for (const target of Object.keys(answers)) {
      const before = world.received.length;
      const conn = await RawConnection.open(world.port);
      try {
        await conn.send(get(target));
        // Read as bodiless: Deno 2.9.6 writes a 205 without any framing (see below).
        const response = await conn.readResponse({ head: true });
        assertEquals(response.status, 205, `${mode} ${target}`);
        assertEquals(headerValue(response.headers, "content-length"), undefined);
        await assertInStep(conn, `${mode} ${target}`);
      } finally {
        conn.close();
      }
      const [answered, after] = world.received.slice(before).map((r) => r.conn);
      assertEquals(
        answered === after,
        target === "/205-length-0",
        `${mode} ${target}: backend connection reuse`,
      );
    }
  });
});

// BUG (Deno 2.9.6, not Sluice's code): Deno.serve writes a 205 with neither Content-Length: 0
// nor chunking and keeps the connection open (also for `new Response(null, { status: 205 })`
// in a bare Deno.serve, with or without a Content-Length or Connection field set by the
// handler). RFC 9110 section 15.3.6 requires one of the three; curl 7.88 and Python's
// http.client wait for the close and time out. Sluice cannot set the framing of a null-body
// status; only a relay (lib/server/_connection_relay.ts) rewriting 205 heads could. To be
// listed in README "Known limitations" or reported upstream.
Deno.test({
  name:
    "a 205 reaches an HTTP/1.1 client framed as empty (Content-Length: 0), so a strict client does not wait for the close",
  ignore: true,
}, async () => {
  await withHttp1World(
    { "/205": "HTTP/1.1 205 Reset Content\r\nContent-Length: 0\r\n\r\n" },
    async (world) => {
      using conn = await RawConnection.open(world.port);
      await conn.send(get("/205"));
      const [head] = splitHead(await conn.readUntilQuiet(500, 5_000));
      assertStringIncludes(head.toLowerCase(), "\r\ncontent-length: 0\r\n");
    },
  );
});

// --- Expect: 100-continue as Deno answers it. ---

const SHOP = "shop.example.com";
const HOST_RULES: RuleSketch[] = [
  [SHOP, "/", "Prefix", "shop/public"],
  [SHOP, "/admin", "Prefix", "shop/admin"],
  [SHOP, "/über", "Exact", "shop/uber"],
  ["*.example.com", "/", "Prefix", "wild/web"],
  ["localhost", "/", "Prefix", "local/dev"],
  ["", "/", "Prefix", "any/web"],
];

const withHostsWorld = worldRunner(HOST_RULES);

Deno.test("Expect: 100-continue: Deno sends 100 itself, the body arrives whole, Expect is not forwarded, and an oversized one still gets 413", async () => {
  await withHostsWorld(
    async (world) => {
      const body = "e".repeat(200_000);
      const conn = await RawConnection.open(world.port);
      try {
        await conn.send(
          `PUT /upload HTTP/1.1\r\nHost: ${SHOP}\r\nExpect: 100-continue\r\n` +
            `Content-Length: ${body.length}\r\n\r\n`,
        );
        assertEquals((await conn.readResponse()).status, 100);
        await conn.send(body);
        const echo = echoOf(await conn.readResponse());
        assertEquals([echo.target, echo.body.length], ["/upload", body.length]);
        assertEquals(headerValues(echo.headers, "expect"), []);
      } finally {
        conn.close();
      }

      // Over the limit: Deno has already said 100 Continue before Sluice could refuse (Deno's
      // behaviour); the client still gets 413 with Connection: close, and no backend sees it.
      const seen = world.mark();
      const over = await RawConnection.open(world.port);
      try {
        await over.send(
          `PUT /upload HTTP/1.1\r\nHost: ${SHOP}\r\nExpect: 100-continue\r\n` +
            `Content-Length: 400000\r\n\r\n`,
        );
        const first = await over.readResponse();
        const refusal = first.status === 100 ? await over.readResponse() : first;
        assertEquals(refusal.status, 413);
        assert(
          headerValues(refusal.headers, "connection").some((v) => v.toLowerCase() === "close"),
        );
      } finally {
        over.close();
      }
      assertEquals(seen(), []);
    },
    HOST_RULES,
    { proxy: { maxBodyBytes: 300_000 } },
  );
});
