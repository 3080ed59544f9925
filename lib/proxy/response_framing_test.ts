/**
 * What a backend's answer may be and how it reaches the client: heads the proxy
 * cannot relay (502), odd but valid heads, interim answers, duplicate
 * Content-Lengths, HEAD, 204 and 304, chunked bodies with broken framing,
 * extensions or trailers, bodies cut short or delimited by the close, HTTP/1.0
 * answers, and heads up to the 64 KiB read buffer. A raw `Deno.listen` backend
 * writes exact bytes, the proxy handler runs behind a real `Deno.serve`, and a
 * raw client checks what reaches it. What a backend sends outside a well-framed
 * answer (response desync) is in `smuggling_test.ts`; timeouts in
 * `upstream_timeouts_test.ts`.
 *
 * @module
 */
import {
  assert,
  assertEquals,
  assertRejects,
  assertStrictEquals,
} from "../../tests/support/assert.ts";
import {
  headerValue,
  headerValues,
  latin1,
  latin1Bytes,
  parseResponses,
  RawConnection,
  type RawResponse,
} from "../../tests/support/raw_http.ts";
import { waitFor } from "../../tests/support/wait.ts";
import {
  type Answer,
  assertClosedUnused,
  BIG,
  ok,
  request,
  requestToEnd,
  trickle,
  withAnswers,
} from "../../tests/support/scripted_proxy_world.ts";
import { HTTP1_HOST, overPlainListener } from "../../tests/support/http1_world.ts";
import { ECHO_HOST, echoJson, sendRaw, withEchoProxy } from "../../tests/support/echo_proxy.ts";

Deno.test("proxy answers 502 to heads it cannot relay, and closes their connections", async () => {
  const answers: Record<string, string> = {
    "/status-000": "HTTP/1.1 000 Zero\r\nContent-Length: 2\r\n\r\nok",
    "/status-two-digits": "HTTP/1.1 99 Low\r\nContent-Length: 2\r\n\r\nok",
    "/status-600": "HTTP/1.1 600 High\r\nContent-Length: 2\r\n\r\nok",
    "/status-999": "HTTP/1.1 999 High\r\nContent-Length: 2\r\n\r\nok",
    "/version-1.2": "HTTP/1.2 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "/lowercase-version": "http/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "/two-spaces": "HTTP/1.1  200 OK\r\nContent-Length: 2\r\n\r\nok",
    "/101-without-upgrade":
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\nok",
    "/1xx-with-body": "HTTP/1.1 100 Continue\r\nContent-Length: 5\r\n\r\nhello" + ok("after"),
    "/empty-name": "HTTP/1.1 200 OK\r\n: x\r\nContent-Length: 2\r\n\r\nok",
    "/non-token-name": "HTTP/1.1 200 OK\r\nX-\xc4: v\r\nContent-Length: 2\r\n\r\nok",
    "/tab-before-colon": "HTTP/1.1 200 OK\r\nContent-Length\t: 2\r\n\r\nok",
    "/lf-in-value": "HTTP/1.1 200 OK\r\nContent-Length: 2\nX-Smuggled: 1\r\n\r\nok",
    "/te-identity": "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\nok",
    "/te-chunked-twice": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
    "/cl-list-conflict": "HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nok!",
    "/cl-16-digits": "HTTP/1.1 200 OK\r\nContent-Length: 0000000000000002\r\n\r\nok",
  };
  await withAnswers(answers, async ({ proxy, closed }) => {
    for (const target of Object.keys(answers)) {
      const response = await request(proxy, target);
      assertEquals([response.status, latin1(response.body)], [502, "Bad Gateway\n"], target);
      // A well-framed answer with a status Deno cannot send may stay pooled; anything else may not.
      if (target !== "/status-600" && target !== "/status-999") {
        await assertClosedUnused(closed, target);
      }
    }
  });
});

Deno.test("a backend sending interim answers without end gets 502 after 1,000 of them", async () => {
  const interim = "HTTP/1.1 100 Continue\r\n\r\n";
  const answers: Record<string, string> = {
    "/1000-1xx": interim.repeat(1_000) + ok("ok"),
    "/1001-1xx": interim.repeat(1_001) + ok("ok"),
  };
  await withAnswers(answers, async ({ proxy, closed }) => {
    const last = await request(proxy, "/1000-1xx");
    assertEquals([last.status, latin1(last.body)], [200, "ok"]);
    const endless = await request(proxy, "/1001-1xx");
    assertEquals([endless.status, latin1(endless.body)], [502, "Bad Gateway\n"]);
    await assertClosedUnused(closed, "/1001-1xx");
  });
});

Deno.test("proxy relays odd but valid heads: a status without reason, an unknown 2xx, obs-text, many interim answers", async () => {
  const answers: Record<string, string> = {
    "/no-reason": "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok",
    "/status-299": "HTTP/1.1 299 Odd\r\nContent-Length: 2\r\n\r\nok",
    "/obs-text": "HTTP/1.1 200 OK\r\nX-Obs: caf\xe9\r\nContent-Length: 2\r\n\r\nok",
    "/many-1xx": "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n".repeat(500) +
      "HTTP/1.1 100 Continue\r\n\r\n" + ok("ok"),
    "/3000-fields": "HTTP/1.1 200 OK\r\n" +
      Array.from({ length: 3000 }, (_, i) => `X-F${i}: v${i}\r\n`).join("") +
      "Content-Length: 2\r\n\r\nok",
  };
  await withAnswers(answers, async ({ proxy }) => {
    const status = (target: string) => request(proxy, target);
    assertEquals((await status("/no-reason")).status, 200);
    assertEquals((await status("/status-299")).status, 299);
    assertEquals(headerValue((await status("/obs-text")).headers, "x-obs"), "caf\xe9");
    const many = await status("/many-1xx");
    assertEquals([many.status, latin1(many.body)], [200, "ok"]);
    const fields = await status("/3000-fields");
    assertEquals(fields.headers.filter(([name]) => name.startsWith("X-F")).length, 3000);
    assertEquals(headerValue(fields.headers, "X-F2999"), "v2999");
  });
});

// Was a bug: a CTL byte (0x01-0x08, 0x0B-0x1F, 0x7F) in a response header value passed
// parseResponseHead and made Deno's HTTP/1 writer panic, killing the whole process.
Deno.test({
  name: "proxy answers 502 to control characters in a backend header value",
  fn: async () => {
    const answers: Record<string, string> = {
      "/soh": "HTTP/1.1 200 OK\r\nX-Ctl: a\x01b\r\nContent-Length: 2\r\n\r\nok",
      "/esc": "HTTP/1.1 200 OK\r\nX-Ctl: a\x1bb\r\nContent-Length: 2\r\n\r\nok",
      "/del": "HTTP/1.1 200 OK\r\nX-Ctl: a\x7fb\r\nContent-Length: 2\r\n\r\nok",
      "/vt-in-cookie": "HTTP/1.1 200 OK\r\nSet-Cookie: a=\x0bb\r\nContent-Length: 2\r\n\r\nok",
    };
    await withAnswers(answers, async ({ proxy }) => {
      for (const target of Object.keys(answers)) {
        const response = await request(proxy, target);
        assertEquals([response.status, latin1(response.body)], [502, "Bad Gateway\n"], target);
      }
    });
  },
});

Deno.test("duplicate or listed equal Content-Lengths reach the client as one", async () => {
  const answers: Record<string, string> = {
    "/dup": "HTTP/1.1 200 OK\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\nhello",
    "/list": "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello",
    "/big-dup":
      `HTTP/1.1 200 OK\r\nContent-Length: ${BIG.length}\r\nContent-Length: ${BIG.length}\r\n\r\n${BIG}`,
    "/big-list": `HTTP/1.1 200 OK\r\nContent-Length: ${BIG.length}, ${BIG.length}\r\n\r\n${BIG}`,
  };
  await withAnswers(answers, async ({ proxy }) => {
    for (
      const [target, expected] of [
        ["/dup", "hello"],
        ["/list", "hello"],
        ["/big-dup", BIG],
        ["/big-list", BIG],
      ] as const
    ) {
      const response = await request(proxy, target);
      assertEquals(latin1(response.body), expected, target);
      const lengths = response.headers.filter(([name]) => name.toLowerCase() === "content-length");
      assert(lengths.length <= 1, `${target}: ${JSON.stringify(lengths)}`);
      if (lengths.length === 1) assertEquals(lengths[0]?.[1], String(expected.length), target);
    }
  });
});

// Was a bug: for a bodyless HEAD answer Deno wrote "content-length: 0" in place of the backend's
// chunked framing or Content-Length list.
Deno.test({
  name: "HEAD answers never tell the client a length the backend did not",
  fn: async () => {
    const answers: Record<string, string> = {
      "/chunked": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
      "/list": "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
      "/not-modified": 'HTTP/1.1 304 Not Modified\r\nETag: "a"\r\n\r\n',
      "/no-content": "HTTP/1.1 204 No Content\r\n\r\n",
    };
    await withAnswers(answers, async ({ proxy }) => {
      const chunked = await request(proxy, "/chunked", { method: "HEAD" });
      assertEquals(chunked.status, 200);
      assertEquals(headerValue(chunked.headers, "content-length"), undefined);
      const list = await request(proxy, "/list", { method: "HEAD" });
      assertEquals(headerValue(list.headers, "content-length"), "5");
      // A conditional HEAD answered without any length (a regression once: 502).
      assertEquals((await request(proxy, "/not-modified", { method: "HEAD" })).status, 304);
      assertEquals((await request(proxy, "/no-content", { method: "HEAD" })).status, 204);
    });
  },
});

/** Parses a raw exchange; the response's body if it was complete on the wire, else undefined. */
function completeBody(raw: string): string | undefined {
  const responses = parseResponses(latin1Bytes(raw));
  return responses.length === 1 ? latin1((responses[0] as RawResponse).body) : undefined;
}

Deno.test("a chunked body with broken framing is cut short, never ended cleanly, and its connection closed", async () => {
  const head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n";
  const answers: Record<string, Answer> = {
    "/size-overflow": head + "10000000000000005\r\nhello\r\n0\r\n\r\n",
    "/size-13-digits": head + "0000000000005\r\nhello\r\n0\r\n\r\n",
    "/size-negative": head + "-5\r\nhello\r\n0\r\n\r\n",
    "/size-0x": head + "0x5\r\nhello\r\n0\r\n\r\n",
    "/size-empty": head + "\r\nhello\r\n0\r\n\r\n",
    "/data-longer-than-size": head + "3\r\nhello\r\n0\r\n\r\n",
    "/bare-lf-after-size": head + "5\nhello\r\n0\r\n\r\n",
    "/bare-lf-after-data": head + "5\r\nhello\n0\r\n\r\n",
    "/nul-in-extension": head + "5;a=\0\r\nhello\r\n0\r\n\r\n",
    "/too-many-trailers": head + "0\r\n" + "X-T: 1\r\n".repeat(200) + "\r\n",
    "/huge-size-then-close": async (conn) => {
      await conn.write(head + "ffffffffffff\r\nhello");
      conn.close();
    },
    "/close-in-data": async (conn) => {
      await conn.write(head + "5\r\nhel");
      conn.close();
    },
    "/close-between-chunks": async (conn) => {
      await conn.write(head);
      conn.close();
    },
    "/close-after-last-chunk-size": async (conn) => {
      await conn.write(head + "0\r\n");
      conn.close();
    },
    "/close-in-trailers": async (conn) => {
      await conn.write(head + "0\r\nX-T: 1\r\n");
      conn.close();
    },
  };
  await withAnswers(answers, async ({ proxy, closed }) => {
    for (const target of Object.keys(answers)) {
      const raw = await requestToEnd(proxy, target);
      assert(
        raw.startsWith("HTTP/1.1 200 OK\r\n"),
        `${target}: ${JSON.stringify(raw.slice(0, 80))}`,
      );
      assertEquals(
        completeBody(raw),
        undefined,
        `${target} looked complete: ${JSON.stringify(raw)}`,
      );
      await assertClosedUnused(closed, target);
    }
    // And the next request is served normally.
    assertEquals(latin1((await request(proxy, "/fresh")).body), "fresh");
  });
});

Deno.test("a chunked body with extensions, odd sizes and trailers is relayed whole, without the trailers", async () => {
  const answers: Record<string, string> = {
    "/odd": "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nTrailer: X-Sum\r\n\r\n" +
      '2;a=b;q="x;y"\r\nok\r\n00A\r\n0123456789\r\n5 \r\nhello\r\n0;end\r\nX-Sum: 1\r\nX-Two: 2\r\n\r\n',
  };
  await withAnswers(answers, async ({ proxy, backend }) => {
    const response = await request(proxy, "/odd");
    assertEquals([response.status, latin1(response.body)], [200, "ok0123456789hello"]);
    assertEquals(response.trailers, []);
    assertEquals(headerValue(response.headers, "trailer"), undefined);
    // A well-framed exchange: the connection is reused.
    assertEquals(latin1((await request(proxy, "/fresh")).body), "fresh");
    assertEquals(backend.connections.length, 1);
  });
});

Deno.test("a streamed Content-Length body cut short by the backend is never relayed as complete", async () => {
  const answers: Record<string, Answer> = {
    "/short": async (conn) => {
      await conn.write(`HTTP/1.1 200 OK\r\nContent-Length: ${BIG.length}\r\n\r\n${BIG.slice(10)}`);
      conn.close();
    },
    "/head-only": async (conn) => {
      await conn.write(`HTTP/1.1 200 OK\r\nContent-Length: ${BIG.length}\r\n\r\n`);
      conn.close();
    },
  };
  await withAnswers(answers, async ({ proxy }) => {
    for (const target of Object.keys(answers)) {
      const raw = await requestToEnd(proxy, target);
      assert(raw.startsWith("HTTP/1.1 200 OK\r\n"), target);
      assertEquals(completeBody(raw), undefined, `${target} looked complete`);
    }
    await waitFor("two access entries", () => proxy.accessLog.length === 2);
    for (const entry of proxy.accessLog) assertEquals(entry.error, "reset", entry.target);
  });
});

Deno.test("a body without framing is relayed whole up to the backend's close", async () => {
  const answers: Record<string, Answer> = {
    "/unframed": async (conn) => {
      await conn.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end");
      conn.close();
    },
    // HTTP/1.0 with keep-alive but no length: still close-delimited.
    "/unframed-1.0-keep-alive": async (conn) => {
      await conn.write("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\nold and long");
      conn.close();
    },
  };
  await withAnswers(answers, async ({ proxy }) => {
    for (
      const [target, body] of [
        ["/unframed", "until the end"],
        ["/unframed-1.0-keep-alive", "old and long"],
      ]
    ) {
      const raw = await requestToEnd(proxy, target as string);
      assertEquals(completeBody(raw), body, target);
    }
    await waitFor("two access entries", () => proxy.accessLog.length === 2);
    for (const entry of proxy.accessLog) assertEquals(entry.error, undefined, entry.target);
  });
});

// An HTTP/1.0 response with Transfer-Encoding has faulty framing (RFC 9112 section 6.1): relayed as
// chunked, but its connection is closed even with "Connection: keep-alive".
Deno.test({
  name: "an HTTP/1.0 response with Transfer-Encoding never leaves its connection in the pool",
  fn: async () => {
    const answers: Record<string, string> = {
      "/te-1.0": "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n" +
        "2\r\nok\r\n0\r\n\r\n",
    };
    await withAnswers(answers, async ({ proxy, closed }) => {
      assertEquals(latin1((await request(proxy, "/te-1.0")).body), "ok");
      assertEquals(proxy.handler.pool.stats().idle, 0);
      await assertClosedUnused(closed, "/te-1.0");
    });
  },
});

/** `n` bytes of a pattern that is unlikely to line up with any framing by chance. */
function pattern(n: number, seed: number): string {
  let out = "";
  for (let i = 0; i < n; i++) out += String.fromCharCode((i * 31 + seed) % 251);
  return out;
}

Deno.test("bodies framed around the read-buffer and direct-read sizes are relayed byte for byte", async () => {
  const sizes = [1, 16_383, 16_384, 16_385, 65_535, 65_536, 65_537, 200_000, 3];
  const chunks = sizes.map((n, i) => pattern(n, i));
  const chunkedBody = chunks.join("");
  const answers: Record<string, string> = {
    "/chunked": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
      chunks.map((c) => `${c.length.toString(16)}\r\n${c}\r\n`).join("") + "0\r\n\r\n",
  };
  for (const n of [65_536, 65_537, 100_000]) answers[`/length-${n}`] = ok(pattern(n, n));
  await withAnswers(answers, async ({ proxy, backend }) => {
    const chunked = await request(proxy, "/chunked");
    assert(latin1(chunked.body) === chunkedBody, "the chunked body differs");
    for (const n of [65_536, 65_537, 100_000]) {
      const response = await request(proxy, `/length-${n}`);
      assert(latin1(response.body) === pattern(n, n), `the ${n}-byte body differs`);
    }
    // All well framed: one connection carried everything.
    assertEquals(backend.connections.length, 1);
  });
});

Deno.test("answers arriving a byte per segment are parsed the same as whole ones", async () => {
  const answers: Record<string, string> = {
    "/length": ok("hello"),
    "/chunked": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
      "3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n",
    "/interim": "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + ok("after"),
  };
  const trickled = Object.fromEntries(
    Object.entries(answers).map(([target, text]) => [target, trickle(text, 1)]),
  );
  await withAnswers(trickled, async ({ proxy, backend }) => {
    for (
      const [target, body] of [["/length", "hello"], ["/chunked", "abcde"], ["/interim", "after"]]
    ) {
      const response = await request(proxy, target as string);
      assertEquals([response.status, latin1(response.body)], [200, body], target);
    }
    assertEquals(backend.connections.length, 1);
  });
});

Deno.test("a response head may fill the 64 KiB read buffer exactly, also after an interim answer, but not exceed it", async () => {
  const headOf = (total: number) => {
    const start = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Pad: ";
    return start + "p".repeat(total - start.length - 4) + "\r\n\r\n";
  };
  const interim = `HTTP/1.1 103 Early Hints\r\nLink: </${"l".repeat(4_000)}>\r\n\r\n`;
  const answers: Record<string, string> = {
    "/exact": headOf(64 * 1024) + "ok",
    "/interim-then-exact": interim + headOf(64 * 1024) + "ok",
    "/one-over": headOf(64 * 1024 + 1) + "ok",
  };
  await withAnswers(answers, async ({ proxy }) => {
    const exact = await request(proxy, "/exact");
    assertEquals([exact.status, latin1(exact.body)], [200, "ok"]);
    const afterInterim = await request(proxy, "/interim-then-exact");
    assertEquals([afterInterim.status, latin1(afterInterim.body)], [200, "ok"]);
    assertEquals((await request(proxy, "/one-over")).status, 502);
  });
});

function h1Get(target: string, extra = "", version = "1.1"): string {
  return `GET ${target} HTTP/${version}\r\nHost: ${HTTP1_HOST}\r\n${extra}\r\n`;
}

Deno.test("a response head over 64 KiB gets 502 and closes that backend connection; 200 fields and 100 Set-Cookie fields pass in order", async () => {
  const cookies = Array.from(
    { length: 100 },
    (_, i) => `Set-Cookie: c${i}=${"v".repeat(200)}; Path=/\r\n`,
  )
    .join("");
  const fields = Array.from({ length: 200 }, (_, i) => `X-F${i}: ${i}\r\n`).join("");
  await overPlainListener({
    "/huge": `HTTP/1.1 200 OK\r\nX-Huge: ${"h".repeat(100_000)}\r\nContent-Length: 2\r\n\r\nok`,
    "/cookies": `HTTP/1.1 200 OK\r\n${cookies}Content-Length: 2\r\n\r\nok`,
    "/fields": `HTTP/1.1 200 OK\r\n${fields}Content-Length: 2\r\n\r\nok`,
  }, async (world, mode) => {
    using conn = await RawConnection.open(world.port);
    await conn.send(h1Get("/huge"));
    assertEquals((await conn.readResponse()).status, 502, mode);
    await conn.send(h1Get("/cookies"));
    const withCookies = await conn.readResponse();
    assertEquals(
      headerValues(withCookies.headers, "set-cookie"),
      Array.from({ length: 100 }, (_, i) => `c${i}=${"v".repeat(200)}; Path=/`),
      mode,
    );
    await conn.send(h1Get("/fields"));
    const withFields = await conn.readResponse();
    assertEquals(
      withFields.headers.filter(([n]) => n.toLowerCase().startsWith("x-f")).map(([, v]) => v),
      Array.from({ length: 200 }, (_, i) => String(i)),
      mode,
    );
    const conns = world.received.map((r) => r.conn);
    assert(conns[1] !== conns[0], `${mode}: connection reused after an oversized head`);
  });
});

Deno.test("proxy answers HEAD, 204 and 304 without a body and keeps HEAD's Content-Length", async () => {
  await withEchoProxy(async ({ proxy }) => {
    const conn = await RawConnection.open(proxy.port);
    try {
      await conn.send(`HEAD /bytes?n=12345 HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`);
      const head = await conn.readResponse({ head: true });
      assertStrictEquals(head.status, 200);
      assertStrictEquals(headerValue(head.headers, "content-length"), "12345");
      for (const status of [204, 304]) {
        await conn.send(`GET /?status=${status} HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`);
        const response = await conn.readResponse();
        assertStrictEquals(response.status, status);
        assertStrictEquals(response.body.length, 0);
      }
      // The connection is still in sync after the bodiless answers.
      await conn.send(`GET /last HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`);
      assertStrictEquals(echoJson(await conn.readResponse()).target, "/last");
    } finally {
      conn.close();
    }
  });
});

Deno.test("proxy skips 1xx responses and relays close-delimited and HTTP/1.0 bodies", async () => {
  await withEchoProxy(async ({ proxy }) => {
    const early = await sendRaw(proxy, `GET /1xx HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`);
    assertEquals([early.status, latin1(early.body)], [200, "after 1xx\n"]);
    const closeDelimited = await sendRaw(
      proxy,
      `GET /close HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`,
    );
    assertStrictEquals(latin1(closeDelimited.body), "close-delimited body\n");
    const old = await sendRaw(proxy, `GET /http10 HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`);
    assertStrictEquals(latin1(old.body), "http/1.0 body\n");
  });
});

Deno.test("proxy answers 502 for malformed backend responses", async () => {
  const kinds = [
    "status",
    "cl-te",
    "cl-dup",
    "cl-bad",
    "fold",
    "space-colon",
    "te-gzip",
    "eof-head",
    "nul",
    "huge-head",
  ];
  await withEchoProxy(async ({ proxy }) => {
    for (const kind of kinds) {
      const response = await sendRaw(
        proxy,
        `GET /malformed?kind=${kind} HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`,
      );
      assertEquals([response.status, latin1(response.body)], [502, "Bad Gateway\n"], kind);
    }
    const dropped = await sendRaw(proxy, `GET /drop HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`);
    assertStrictEquals(dropped.status, 502);
  });
});

Deno.test("proxy ends the client body when the backend's chunking breaks mid-stream", async () => {
  await withEchoProxy(async ({ proxy }) => {
    const response = await fetch(`${proxy.url}/malformed?kind=chunk-bad`);
    assertStrictEquals(response.status, 200);
    // A broken chunked body must not look complete.
    await assertRejects(() => response.arrayBuffer());
  });
});

Deno.test("proxy answers 502 when a small Content-Length body is cut short", async () => {
  await withEchoProxy(async ({ proxy }) => {
    const response = await sendRaw(
      proxy,
      `GET /malformed?kind=eof-body HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`,
    );
    assertEquals([response.status, latin1(response.body)], [502, "Bad Gateway\n"]);
  });
});
