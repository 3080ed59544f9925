/**
 * Request smuggling and response desync. Smuggling probes (RFC 9112 sections
 * 6.1, 6.3, 7.1 and 11.2) sent as raw bytes to a real `Deno.serve` running the
 * proxy handler, with an echo backend that logs every request it parses. Each
 * probe has the answer it is expected to get and the requests the backend is
 * expected to see: never a request hidden inside another's body, and never a
 * framing error that would leave a pooled connection out of step. A sentinel
 * request after each probe (on the same client connection when it stays open)
 * proves both: its answer must be its own, and the backend must log it right
 * after the probe's requests. A stricter table checks the hidden request never
 * reaches the backend at all; requests hidden behind Sluice's own refusals
 * (413, Expect, HTTP/1.0 with Transfer-Encoding) reach nothing either. On the
 * backend side, nothing a backend sends outside a well-framed answer to the
 * request it got (bytes past a response, an answer on an idle pooled connection
 * or before reading the body) may ever reach another client through a pooled
 * connection.
 *
 * @module
 */
import { assert, assertEquals, assertStrictEquals } from "../../tests/support/assert.ts";
import { type EchoBackend, startEchoBackend } from "../../tests/support/echo_backend.ts";
import { type HarnessOptions, startProxy } from "../../tests/support/proxy_harness.ts";
import {
  headerValue,
  latin1,
  parseResponses,
  RawConnection,
  type RawResponse,
} from "../../tests/support/raw_http.ts";
import { type ScriptedConn, startScriptedBackend } from "../../tests/support/scripted_backend.ts";
import {
  type Answer,
  assertClosedUnused,
  BIG,
  HOST,
  ok,
  request,
  withAnswers,
} from "../../tests/support/scripted_proxy_world.ts";
import { UpstreamPool } from "../upstream/upstream_pool.ts";
import { sendUpstream, type UpstreamRequest } from "../upstream/upstream_client.ts";
import {
  HTTP1_HOST,
  overPlainListener,
  targetOf,
  withHttp1World,
} from "../../tests/support/http1_world.ts";
import {
  probe,
  type RuleSketch,
  type WorldOptions,
  worldRunner,
} from "../../tests/support/echo_world.ts";

const SMUGGLED = "GET /smuggled HTTP/1.1\r\nHost: shop.example.com\r\n\r\n";
const H = "Host: shop.example.com\r\n";

interface Probe {
  readonly name: string;
  readonly bytes: string;
  /** The statuses the client gets, in order. */
  readonly statuses: readonly number[];
  /** Whether the connection is closed after them, or stays open for the next request. */
  readonly then: "closed" | "open";
  /** The requests the backend gets, in order (each answered to the client). */
  readonly backend: readonly string[];
}

// As seen on Deno 2.9.6: Deno.serve answers 400 to CL+TE, TE+CL, conflicting, listed or signed
// lengths, obs-fold, "TE :", unknown codings, two Hosts, NUL and a tab in the request line; it
// closes the connection without an answer on broken chunking; Sluice answers 501 to a GET with
// a body; a trailer that looks like a field is just a trailer (the request after it is a genuine
// pipelined request, answered as such).
const PROBES: readonly Probe[] = [
  {
    name: "CL.TE",
    bytes: `POST /probe HTTP/1.1\r\n${H}Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n` +
      `0\r\n\r\n${SMUGGLED}`,
    statuses: [400],
    then: "closed",
    backend: [],
  },
  {
    name: "TE.CL",
    bytes: `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n` +
      `${SMUGGLED.length.toString(16)}\r\n${SMUGGLED}\r\n0\r\n\r\n`,
    statuses: [400],
    then: "closed",
    backend: [],
  },
  {
    name: "duplicate conflicting Content-Length",
    bytes: `POST /probe HTTP/1.1\r\n${H}Content-Length: 0\r\n` +
      `Content-Length: ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
    statuses: [400],
    then: "closed",
    backend: [],
  },
  {
    name: "Content-Length list",
    bytes: `POST /probe HTTP/1.1\r\n${H}Content-Length: 0, ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
    statuses: [400],
    then: "closed",
    backend: [],
  },
  {
    name: "Content-Length with sign",
    bytes: `POST /probe HTTP/1.1\r\n${H}Content-Length: +${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
    statuses: [400],
    then: "closed",
    backend: [],
  },
  {
    name: "malformed chunk size",
    bytes: `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n` +
      `zz\r\n${SMUGGLED}\r\n0\r\n\r\n`,
    statuses: [],
    then: "closed",
    backend: [],
  },
  {
    name: "chunk size with 0x",
    bytes: `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n` +
      `0x5\r\nhello\r\n0\r\n\r\n${SMUGGLED}`,
    statuses: [],
    then: "closed",
    backend: [],
  },
  {
    name: "overflowing chunk size",
    bytes: `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n` +
      `10000000000000005\r\nhello\r\n0\r\n\r\n${SMUGGLED}`,
    statuses: [],
    then: "closed",
    backend: [],
  },
  {
    name: "chunk data longer than its size",
    bytes: `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n` +
      `3\r\nhello\r\n0\r\n\r\n${SMUGGLED}`,
    statuses: [],
    then: "closed",
    backend: [],
  },
  {
    name: "bare LF in chunk framing",
    bytes: `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n` +
      `5\nhello\n0\n\n${SMUGGLED}`,
    statuses: [],
    then: "closed",
    backend: [],
  },
  {
    name: "obs-fold Transfer-Encoding",
    bytes: `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: identity\r\n chunked\r\n` +
      `Content-Length: ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
    statuses: [400],
    then: "closed",
    backend: [],
  },
  {
    name: "space before colon",
    bytes: `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding : chunked\r\n` +
      `Content-Length: ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
    statuses: [400],
    then: "closed",
    backend: [],
  },
  {
    name: "xchunked",
    bytes: `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: xchunked\r\nContent-Length: 4\r\n\r\n` +
      SMUGGLED,
    statuses: [400],
    then: "closed",
    backend: [],
  },
  {
    name: "chunked, identity",
    bytes: `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked, identity\r\n\r\n` +
      `0\r\n\r\n${SMUGGLED}`,
    statuses: [400],
    then: "closed",
    backend: [],
  },
  {
    name: "vertical tab before chunked",
    bytes: `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: \x0bchunked\r\n` +
      `Content-Length: ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
    statuses: [400],
    then: "closed",
    backend: [],
  },
  {
    name: "GET with a body",
    bytes: `GET /probe HTTP/1.1\r\n${H}Content-Length: ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
    statuses: [501],
    then: "open",
    backend: [],
  },
  {
    name: "two Host fields",
    bytes: `GET /probe HTTP/1.1\r\n${H}Host: other.example\r\n\r\n`,
    statuses: [400],
    then: "closed",
    backend: [],
  },
  {
    name: "NUL in a field",
    bytes: `GET /probe HTTP/1.1\r\n${H}X-A: a\0b\r\n\r\n`,
    statuses: [400],
    then: "closed",
    backend: [],
  },
  {
    name: "request line with tab",
    bytes: `GET\t/probe HTTP/1.1\r\n${H}\r\n`,
    statuses: [400],
    then: "closed",
    backend: [],
  },
  {
    name: "trailer smuggling a field",
    bytes: `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n` +
      `0\r\nContent-Length: 50\r\n\r\n${SMUGGLED}`,
    statuses: [200, 200],
    then: "open",
    backend: ["/probe", "/smuggled"],
  },
];

/** The target the echo backend says it was asked for, or the status of another answer. */
function echoedTarget(response: RawResponse): string {
  if (response.status !== 200 || headerValue(response.headers, "x-echo-service") === undefined) {
    return `(${response.status}, not the backend's echo)`;
  }
  return JSON.parse(latin1(response.body)).target;
}

Deno.test("smuggling probes get the answers expected of them, and the backend sees exactly the requests answered, none hidden in a body", async () => {
  const backend = await startEchoBackend({ name: "shop/web", pod: "web-1" });
  const proxy = await startProxy({
    routes: [{ endpoints: [{ address: "127.0.0.1", port: backend.port }] }],
  });
  try {
    for (const [index, probe] of PROBES.entries()) {
      const { name } = probe;
      const before = backend.requests.length;
      const sentinel = `/sentinel-${index}`;
      let conn = await RawConnection.open(proxy.port);
      try {
        await conn.send(probe.bytes);
        const statuses: number[] = [];
        const echoed: string[] = [];
        for (const _ of probe.statuses) {
          const response = await conn.readResponse();
          statuses.push(response.status);
          if (response.status === 200) echoed.push(echoedTarget(response));
        }
        assertEquals(statuses, probe.statuses, name);
        assertEquals(echoed, probe.backend, `${name}: the answers are the backend's own`);
        if (probe.then === "closed") {
          // Reads to the end (a deadline, not a quiet window): nothing may follow the answers.
          assertStrictEquals(
            latin1(await conn.readToEnd()),
            "",
            `${name}: bytes after the answers`,
          );
          conn.close();
          conn = await RawConnection.open(proxy.port);
        }
        // The next request's answer is its own: nothing of the probe was left queued.
        await conn.send(`GET ${sentinel} HTTP/1.1\r\n${H}\r\n`);
        assertStrictEquals(echoedTarget(await conn.readResponse()), sentinel, name);
      } finally {
        conn.close();
      }
      // The sentinel was answered, so the backend has logged it; whatever the probe put on the
      // backend connection before it was logged before it.
      const seen = backend.requests.slice(before);
      assertEquals(seen.map((r) => r.target), [...probe.backend, sentinel], name);
      assertEquals(seen.filter((r) => r.error !== undefined), [], `${name}: framing errors`);
    }
  } finally {
    await proxy.close();
    await backend.close();
  }
});

Deno.test("a body cut short by the limit leaves no partial request on a pooled connection", async () => {
  const backend = await startEchoBackend();
  const proxy = await startProxy({
    routes: [{ endpoints: [{ address: "127.0.0.1", port: backend.port }] }],
    maxBodyBytes: 100,
  });
  try {
    const chunked = `POST /big HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n` +
      `40\r\n${"a".repeat(64)}\r\n40\r\n${"b".repeat(64)}\r\n0\r\n\r\n`;
    const first = await RawConnection.open(proxy.port);
    try {
      await first.send(chunked);
      assertStrictEquals((await first.readResponse()).status, 413);
    } finally {
      first.close();
    }
    const second = await RawConnection.open(proxy.port);
    try {
      await second.send(`POST /next HTTP/1.1\r\n${H}Content-Length: 2\r\n\r\nok`);
      const echo = JSON.parse(latin1((await second.readResponse()).body));
      assertStrictEquals(echo.target, "/next");
      assertStrictEquals(echo.body.length, 2);
    } finally {
      second.close();
    }
    // The cut request, if the backend saw it at all, ended in a framing error, never as complete.
    assert(backend.requests.filter((r) => r.target === "/big").every((r) => r.error !== undefined));
  } finally {
    await proxy.close();
    await backend.close();
  }
});

// --- Response desync: what a backend sends outside a well-framed answer. ---

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

// --- Requests hidden behind Sluice's own refusals, and the stricter table. ---

function h1Get(target: string, extra = "", version = "1.1"): string {
  return `GET ${target} HTTP/${version}\r\nHost: ${HTTP1_HOST}\r\n${extra}\r\n`;
}

function h1Text(response: RawResponse): string {
  return latin1(response.body);
}

Deno.test("Expect: 100-continue with a backend that refuses before reading: the client gets the refusal, the body's hidden request reaches no backend, the connection stays in step", async () => {
  const hidden = `GET /smuggled HTTP/1.1\r\nHost: ${HTTP1_HOST}\r\n\r\n`;
  const refusal =
    "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic\r\nContent-Length: 4\r\n\r\nnope";
  const closing = async (conn: ScriptedConn) => {
    await conn.write(
      "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic\r\nConnection: close\r\n" +
        "Content-Length: 4\r\n\r\nnope",
    );
    conn.close();
  };
  for (
    const [size, answer] of [[1_000, refusal], [200_000, refusal], [200_000, closing]] as const
  ) {
    await overPlainListener({ "/upload": answer }, async (world, mode) => {
      const body = hidden + "x".repeat(size - hidden.length);
      using conn = await RawConnection.open(world.port);
      await conn.send(
        `POST /upload HTTP/1.1\r\nHost: ${HTTP1_HOST}\r\nExpect: 100-continue\r\n` +
          `Content-Length: ${body.length}\r\n\r\n`,
      );
      let first = await conn.readResponse();
      if (first.status === 100) {
        await conn.send(body).catch(() => {});
        first = await conn.readResponse();
      }
      assertEquals([first.status, h1Text(first)], [401, "nope"], `${mode} ${size}`);
      assertEquals(headerValue(first.headers, "www-authenticate"), "Basic");
      // The next request on the same connection: answered as itself, or the connection closed.
      await conn.send(h1Get("/next")).catch(() => {});
      const rest = parseResponses(await conn.readUntilQuiet(500, 5_000));
      for (const response of rest) assertEquals(h1Text(response), "/next", `${mode} ${size}`);
      assert(
        !world.received.some((r) => targetOf(r.head) === "/smuggled"),
        `${mode} ${size}: the hidden request reached the backend`,
      );
    }, { answerFirst: ["/upload"] });
  }
});

Deno.test("an HTTP/1.0 request with Transfer-Encoding, HTTP/0.9 and unknown versions get 400 and reach no backend", async () => {
  const hidden = h1Get("/hidden");
  await overPlainListener({}, async (world, mode) => {
    for (
      const raw of [
        `POST /te10 HTTP/1.0\r\nHost: ${HTTP1_HOST}\r\nConnection: keep-alive\r\n` +
        `Transfer-Encoding: chunked\r\n\r\n${hidden.length.toString(16)}\r\n${hidden}\r\n0\r\n\r\n`,
        "GET /v09\r\n\r\n",
        `GET /v2 HTTP/2.0\r\nHost: ${HTTP1_HOST}\r\n\r\n`,
        `GET /v12 HTTP/1.2\r\nHost: ${HTTP1_HOST}\r\n\r\n`,
      ]
    ) {
      using conn = await RawConnection.open(world.port);
      await conn.send(raw).catch(() => {});
      const responses = parseResponses(await conn.readToEnd(5_000));
      assertEquals(responses.map((r) => r.status), [400], `${mode} ${JSON.stringify(raw)}`);
    }
    assertEquals(world.received, [], mode);
  });
});

// BUG (Deno 2.9.6, not Sluice's code): a handler's `Connection: close` is written but not
// honoured: Deno drains the refused body and serves the next pipelined request on the same
// connection (measured with a bare Deno.serve too, also when the body stream errors after the
// last byte). RFC 9112 section 9.6: a server that sends "close" MUST NOT process further
// requests on that connection; a pipelining front that retries what was queued behind the close
// would run such a request twice. Sluice's 413 says close (proxy_handler.ts `plain(413, …)`).
// Fix: in the relays (lib/server/_connection_relay.ts), close the client connection once a
// response head carrying `connection: close` and its body have been relayed; the direct
// listener cannot (README "Known limitations" then).
Deno.test({
  name: "after Sluice's 413 with Connection: close, a request pipelined behind it is not processed",
  ignore: true,
}, async () => {
  await withHttp1World({}, async (world) => {
    using conn = await RawConnection.open(world.port);
    await conn.send(
      `POST /big HTTP/1.1\r\nHost: ${HTTP1_HOST}\r\nContent-Length: 100\r\n\r\n${"x".repeat(100)}` +
        h1Get("/after"),
    );
    const responses = parseResponses(await conn.readToEnd(5_000));
    assertEquals(responses.map((r) => r.status), [413]);
    assertEquals(world.received, []);
  }, { proxy: { maxBodyBytes: 10 } });
});

async function raw(port: number, text: string): Promise<RawResponse> {
  using conn = await RawConnection.open(port);
  await conn.send(text);
  return await conn.readResponse();
}

/** An echo backend behind the proxy for any host; `fn` gets the proxy's port and the backend. */
async function withEcho(
  fn: (port: number, backend: EchoBackend) => Promise<void>,
  options: Partial<Omit<HarnessOptions, "routes">> = {},
): Promise<void> {
  const backend = await startEchoBackend({ name: "shop/web" });
  const proxy = await startProxy({
    routes: [{ endpoints: [{ address: "127.0.0.1", port: backend.port }] }],
    ...options,
  });
  try {
    await fn(proxy.port, backend);
  } finally {
    await proxy.close();
    await backend.close();
  }
}

/** The four probe kinds; in each, a compliant front never sees SMUGGLED as a request. */
const STRICT_PROBES: Record<string, string> = {
  "Content-Length plus Transfer-Encoding":
    `POST /probe HTTP/1.1\r\n${H}Content-Length: ${SMUGGLED.length + 5}\r\n` +
    `Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n${SMUGGLED}`,
  "duplicate conflicting Content-Length": `POST /probe HTTP/1.1\r\n${H}Content-Length: 0\r\n` +
    `Content-Length: ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
  "duplicate conflicting Content-Length, long first":
    `POST /probe HTTP/1.1\r\n${H}Content-Length: ${SMUGGLED.length}\r\n` +
    `Content-Length: 0\r\n\r\n${SMUGGLED}`,
  "malformed chunk size hiding a request":
    `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n` +
    `5;\x00\r\nhello\r\n0\r\n\r\n${SMUGGLED}`,
  "chunk size with trailing junk":
    `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n` +
    `0 junk\r\n\r\n${SMUGGLED}`,
  "obs-fold in Content-Length": `POST /probe HTTP/1.1\r\n${H}Content-Length: 0\r\n` +
    ` ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
  "obs-fold Transfer-Encoding": `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding:\r\n chunked\r\n` +
    `Content-Length: ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
};

Deno.test("none of the RFC 9112 smuggling probes puts the hidden request on the backend, and the pool stays in step", async () => {
  await withEcho(async (port, backend) => {
    for (const [name, probe] of Object.entries(STRICT_PROBES)) {
      const conn = await RawConnection.open(port);
      try {
        await conn.send(probe);
        await conn.readUntilQuiet(300, 5_000);
      } finally {
        conn.close();
      }
      assertEquals(
        backend.requests.filter((r) => r.target === "/smuggled").length,
        0,
        `${name}: the backend saw the hidden request`,
      );
      assertEquals(backend.requests.filter((r) => r.error !== undefined), [], name);
      // A desynchronised pooled upstream connection would answer this with another request's reply.
      const target = `/after-${encodeURIComponent(name)}`;
      const after = await raw(port, `GET ${target} HTTP/1.1\r\n${H}\r\n`);
      assertEquals((JSON.parse(latin1(after.body)) as { target: string }).target, target, name);
    }
  });
});

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

function get(target: string, host = SHOP, extra = ""): string {
  return `GET ${target} HTTP/1.1\r\nHost: ${host}\r\n${extra}\r\n`;
}

Deno.test("a request hidden in the body of a refused request never reaches a backend", async () => {
  const rules: RuleSketch[] = [
    [SHOP, "/", "Prefix", "shop/public"],
    ["secure.example.com", "/", "Prefix", "shop/public"],
    ["empty.example.com", "/", "Prefix", "none/empty"],
  ];
  const options: WorldOptions = {
    tlsHosts: ["secure.example.com"],
    proxy: { maxBodyBytes: 2_000, maxHeaderBytes: 4_096 },
  };
  await withHostsWorld(
    async (world) => {
      const hidden = get("/smuggled", SHOP);
      const withLength = (host: string, extra = "", pad = 0) =>
        `POST /refused HTTP/1.1\r\nHost: ${host}\r\n${extra}Content-Length: ${
          pad + hidden.length
        }` +
        `\r\n\r\n${"p".repeat(pad)}${hidden}`;
      const chunked = (host: string) =>
        `POST /refused HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: chunked\r\n\r\n` +
        `${hidden.length.toString(16)}\r\n${hidden}\r\n0\r\n\r\n`;
      const cases: [string, string, number][] = [
        ["404, Content-Length", withLength("nowhere.test"), 404],
        ["404, chunked", chunked("nowhere.test"), 404],
        ["431", withLength(SHOP, `X-Big: ${"b".repeat(5_000)}\r\n`), 431],
        ["413", withLength(SHOP, "", 3_000), 413],
        ["308", withLength("secure.example.com"), 308],
        ["308, chunked", chunked("secure.example.com"), 308],
        ["503", withLength("empty.example.com"), 503],
        ["400", withLength("bad,host"), 400],
      ];
      // No rule for nowhere.test in this world: 404.
      for (const [name, raw, status] of cases) {
        const seen = world.mark();
        const responses = await probe(world.port, raw);
        assertEquals(responses[0]?.status, status, name);
        assert(
          responses.slice(1).every((r) => !latin1(r.body).includes("/smuggled")),
          `${name}: answered the hidden request`,
        );
        assertEquals(seen().map(({ request }) => request.target), [], name);
      }
    },
    rules,
    options,
  );
});
