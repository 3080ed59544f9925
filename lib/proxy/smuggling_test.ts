/**
 * Request-smuggling probes (RFC 9112 sections 6.1, 6.3, 7.1 and 11.2) sent as
 * raw bytes to a real `Deno.serve` running the proxy handler, with an echo
 * backend that logs every request it parses. Each probe has the answer it is
 * expected to get and the requests the backend is expected to see: never a
 * request hidden inside another's body, and never a framing error that would
 * leave a pooled connection out of step. A sentinel request after each probe
 * (on the same client connection when it stays open) proves both: its answer
 * must be its own, and the backend must log it right after the probe's
 * requests.
 */
import { assert, assertEquals, assertStrictEquals } from "../../tests/support/assert.ts";
import { startEchoBackend } from "../../tests/support/echo_backend.ts";
import { startProxy } from "../../tests/support/proxy_harness.ts";
import {
  headerValue,
  latin1,
  RawConnection,
  type RawResponse,
} from "../../tests/support/raw_http.ts";

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
