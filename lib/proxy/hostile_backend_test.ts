/**
 * Hostile and broken backends behind the real proxy: a raw `Deno.listen`
 * server writes exact bytes, the proxy handler runs behind a real
 * `Deno.serve`, and a raw client checks what reaches it. The main class:
 * nothing a backend sends outside a well-framed answer to the request it got
 * may ever reach another client through a pooled connection.
 *
 * @module
 */
import { assert, assertEquals } from "../../tests/support/assert.ts";
import {
  type HarnessOptions,
  type ProxyHarness,
  startProxy,
} from "../../tests/support/proxy_harness.ts";
import {
  headerValue,
  latin1,
  latin1Bytes,
  parseResponses,
  RawConnection,
  rawExchange,
  rawRequest,
  type RawResponse,
} from "../../tests/support/raw_http.ts";
import {
  type ScriptedBackend,
  type ScriptedConn,
  startScriptedBackend,
} from "../../tests/support/scripted_backend.ts";
import { waitFor } from "../../tests/support/wait.ts";
import { sendUpstream, type UpstreamRequest } from "./upstream_client.ts";
import { UpstreamPool } from "./upstream_pool.ts";

const HOST = "shop.example.com";

type Script = (conn: ScriptedConn) => Promise<void>;

/** Runs `fn` with a proxy in front of `backend` (every host routes to it). */
async function withProxy(
  backend: ScriptedBackend,
  fn: (proxy: ProxyHarness) => Promise<void>,
  options: Partial<Omit<HarnessOptions, "routes">> = {},
): Promise<void> {
  const proxy = await startProxy({
    routes: [{ endpoints: [{ address: "127.0.0.1", port: backend.port }] }],
    readTimeoutMs: 3_000,
    ...options,
  });
  try {
    await fn(proxy);
  } finally {
    await proxy.close();
    await backend.close();
  }
}

/** One request on a fresh client connection; one response read. */
function request(
  proxy: ProxyHarness,
  target: string,
  options: { method?: string; timeoutMs?: number } = {},
): Promise<RawResponse> {
  const method = options.method ?? "GET";
  return rawRequest(proxy.port, `${method} ${target} HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`, {
    head: method === "HEAD",
    timeoutMs: options.timeoutMs ?? 10_000,
  });
}

/** One request on a fresh client connection; every byte until the proxy closes it. */
async function requestToEnd(proxy: ProxyHarness, target: string, method = "GET"): Promise<string> {
  const text = `${method} ${target} HTTP/1.1\r\nHost: ${HOST}\r\nConnection: close\r\n\r\n`;
  return latin1(await rawExchange(proxy.port, text));
}

/** A well-framed 200 with `body`. */
function ok(body: string, extra = ""): string {
  return `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n${extra}\r\n${body}`;
}

/** A raw answer, or a function that writes one (and may close the connection). */
type Answer = string | ((conn: ScriptedConn) => Promise<void>);

/**
 * A backend script: `/fresh` gets `ok("fresh")`, any other target gets
 * `answers[target]`, on any connection, any number of times. When the proxy
 * closes a connection, `closed` records, under each target answered on it,
 * the request lines the proxy sent on it after that answer (none expected
 * after a misframed answer: the proxy must not reuse such a connection). An
 * answer given as a function writes what it likes (and may close).
 */
function serve(answers: Record<string, Answer>, closed: Map<string, string[]>): Script {
  return async (conn) => {
    const after = new Map<string, string[]>();
    try {
      for (;;) {
        const head = await conn.readHead();
        if (head === null) return;
        const line = head.slice(0, head.indexOf("\r\n"));
        for (const later of after.values()) later.push(line);
        const target = line.split(" ")[1] ?? "";
        if (target === "/fresh") {
          await conn.write(ok("fresh"));
          continue;
        }
        const answer = answers[target] ?? "garbage\r\n\r\n";
        after.set(target, []);
        if (typeof answer === "string") await conn.write(answer);
        else await answer(conn);
      }
    } finally {
      for (const [target, later] of after) closed.set(target, later);
    }
  };
}

/** Waits until the proxy closed the connection that answered `target`; fails if it sent more on it. */
async function assertClosedUnused(closed: Map<string, string[]>, target: string): Promise<void> {
  const later = await waitFor(
    `the proxy to close the connection of ${target}`,
    () => closed.get(target),
  );
  assertEquals(later, [], `requests sent on the connection after ${target}`);
}

/** What {@linkcode withAnswers} hands a test. */
interface Served {
  readonly proxy: ProxyHarness;
  readonly backend: ScriptedBackend;
  /** Filled by {@linkcode serve} as the proxy closes connections. */
  readonly closed: Map<string, string[]>;
}

/** Runs `fn` with a proxy in front of a backend answering with {@linkcode serve}`(answers)`. */
function withAnswers(
  answers: Record<string, Answer>,
  fn: (served: Served) => Promise<void>,
  options: Partial<Omit<HarnessOptions, "routes">> = {},
): Promise<void> {
  const closed = new Map<string, string[]>();
  const backend = startScriptedBackend(serve(answers, closed));
  return withProxy(backend, (proxy) => fn({ proxy, backend, closed }), options);
}

/** An answer written a character at a time, `ms` apart. */
function trickle(text: string, ms: number): Answer {
  return async (conn) => {
    for (const char of text) {
      await conn.write(char);
      await new Promise((resolve) => setTimeout(resolve, ms));
    }
  };
}

/** Streamed (over the 64 KiB read-whole limit); its tail is read by `#fill` into the read buffer. */
const BIG = "y".repeat(70_000);
/**
 * Streamed; after the first 64 KiB read its remaining ~34 KB (over the 16 KiB direct-read
 * threshold) is read by one exact-size read, so bytes sent after it stay in the kernel.
 */
const HUGE = "z".repeat(100_000);

Deno.test("bytes a backend sends past a response never reach the next client, and its connection is closed", async () => {
  const cases: { target: string; method?: string; answer: string; status: number; body: string }[] =
    [
      { target: "/appended", answer: ok("first") + ok("evil"), status: 200, body: "first" },
      {
        target: "/longer-than-length",
        answer: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst-and-more",
        status: 200,
        body: "first",
      },
      { target: "/streamed-appended", answer: ok(BIG) + ok("evil"), status: 200, body: BIG },
      { target: "/direct-read-appended", answer: ok(HUGE) + ok("evil"), status: 200, body: HUGE },
      { target: "/empty-appended", answer: ok("") + ok("evil"), status: 200, body: "" },
      {
        target: "/chunked-appended",
        answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n0\r\n\r\n" +
          ok("evil"),
        status: 200,
        body: "first",
      },
      {
        target: "/head-with-body",
        method: "HEAD",
        answer: "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil",
        status: 200,
        body: "",
      },
      {
        target: "/204-with-body",
        answer: "HTTP/1.1 204 No Content\r\n\r\n" + ok("evil"),
        status: 204,
        body: "",
      },
      {
        target: "/304-with-chunked-body",
        answer:
          "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nevil\r\n0\r\n\r\n",
        status: 304,
        body: "",
      },
    ];
  const answers = Object.fromEntries(cases.map((c) => [c.target, c.answer]));
  await withAnswers(answers, async ({ proxy, closed }) => {
    for (const c of cases) {
      const first = await request(proxy, c.target, { method: c.method ?? "GET" });
      assertEquals([first.status, latin1(first.body)], [c.status, c.body], c.target);
      const next = await request(proxy, "/fresh");
      assertEquals(
        [next.status, latin1(next.body)],
        [200, "fresh"],
        `the request after ${c.target}`,
      );
      await assertClosedUnused(closed, c.target);
    }
  });
});

Deno.test("a response a backend sends on an idle pooled connection is dropped with the connection", async () => {
  const { promise: clientGotIt, resolve: clientGot } = Promise.withResolvers<void>();
  const answers: Record<string, Answer> = {
    "/idle": async (conn) => {
      await conn.write(ok("first"));
      await clientGotIt;
      await conn.write(ok("unsolicited"));
    },
  };
  await withAnswers(answers, async ({ proxy, closed }) => {
    assertEquals(latin1((await request(proxy, "/idle")).body), "first");
    clientGot();
    // The idle probe notices the bytes and closes the connection before anyone reuses it.
    await assertClosedUnused(closed, "/idle");
    assertEquals(proxy.handler.pool.stats().idle, 0);
    assertEquals(latin1((await request(proxy, "/fresh")).body), "fresh");
  });
});

// Was a bug: a body read with exact-size reads left the appended response in the kernel, and the
// next exchange on the pooled connection took it as its answer (the last body read now goes
// through the read buffer, so the extra bytes are seen and the connection is closed).
Deno.test({
  name:
    "a response already waiting on a pooled connection is never taken as the answer to the next request",
  fn: async () => {
    // The streamed body is read with exact-size reads, so the appended response stays in the
    // kernel; the connection is parked with its probe read pending, and taken again at once.
    const backend = startScriptedBackend(async (conn) => {
      for (;;) {
        const head = await conn.readHead();
        if (head === null) return;
        await conn.write(head.startsWith("GET /big ") ? ok(HUGE) + ok("evil") : ok("fresh"));
      }
    });
    const pool = new UpstreamPool();
    const endpoint = { address: "127.0.0.1", port: backend.port };
    const get = (target: string): UpstreamRequest => ({
      method: "GET",
      target,
      headers: [["Host", HOST]],
      body: null,
    });
    try {
      const first = await sendUpstream(pool, endpoint, get("/big"));
      const reader = (first.body as ReadableStream<Uint8Array>).getReader();
      let length = 0;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        length += value.length;
      }
      assertEquals(length, HUGE.length);
      // The next request of any client, in the same turn of the event loop.
      const second = await sendUpstream(pool, endpoint, get("/fresh"));
      const body = second.body instanceof Uint8Array
        ? latin1(second.body)
        : await new Response(second.body).text();
      assertEquals(body, "fresh");
      await second.done;
    } finally {
      pool.close();
      await backend.close();
    }
  },
});

Deno.test("a backend that answers before reading the request body never gets another request on that connection", async () => {
  await withAnswers({ "/upload": ok("early") }, async ({ proxy, closed }) => {
    const conn = await RawConnection.open(proxy.port);
    try {
      // Only part of the declared body: the proxy is still forwarding it when the answer is complete.
      await conn.send(
        `POST /upload HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: ${256 * 1024}\r\n\r\n`,
      );
      await conn.send(new Uint8Array(1024).fill(97));
      const response = await conn.readResponse();
      assertEquals([response.status, latin1(response.body)], [200, "early"]);
    } finally {
      conn.close();
    }
    assertEquals(latin1((await request(proxy, "/fresh")).body), "fresh");
    await assertClosedUnused(closed, "/upload");
  });
});

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

Deno.test("a backend that goes silent inside its head or a small body gets 504 after the read timeout", async () => {
  const answers: Record<string, string> = {
    "/half-head": "HTTP/1.1 200 OK\r\nContent-Le",
    "/half-body": "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nonly",
  };
  await withAnswers(answers, async ({ proxy, closed }) => {
    for (const target of Object.keys(answers)) {
      const response = await request(proxy, target);
      assertEquals([response.status, latin1(response.body)], [504, "Gateway Timeout\n"], target);
      await assertClosedUnused(closed, target);
    }
    assertEquals(proxy.accessLog.map((entry) => entry.error), ["timeout", "timeout"]);
  }, { readTimeoutMs: 200 });
});

Deno.test("a backend trickling its answer a byte at a time is not cut off by the idle timeout", async () => {
  // Each byte comes well within the 250 ms idle timeout; the whole answer takes far longer.
  await withAnswers({ "/trickle": trickle(ok("trickled"), 30) }, async ({ proxy }) => {
    const started = performance.now();
    const response = await request(proxy, "/trickle");
    assertEquals([response.status, latin1(response.body)], [200, "trickled"]);
    assert(performance.now() - started > 250 * 2, "the answer took longer than the timeout");
  }, { readTimeoutMs: 250 });
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
