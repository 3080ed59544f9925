/**
 * Request-smuggling probes (RFC 9112 sections 6.1, 6.3, 7.1 and 11.2) sent as
 * raw bytes to a real `Deno.serve` running the proxy handler, with an echo
 * backend that logs every request it parses. Whatever the front does with a
 * probe (reject it, or read it one way), the backend must see exactly the
 * requests the proxy answered for, never a request hidden inside another's
 * body, and never a framing error that would leave a pooled connection out of
 * step.
 */
import { ok, strictEqual } from "node:assert/strict";
import { startEchoBackend } from "../../tests/support/echo_backend.ts";
import { startProxy } from "../../tests/support/proxy_harness.ts";
import {
  headerValue,
  latin1,
  parseResponses,
  RawConnection,
} from "../../tests/support/raw_http.ts";

const SMUGGLED = "GET /smuggled HTTP/1.1\r\nHost: shop.example.com\r\n\r\n";
const H = "Host: shop.example.com\r\n";

const probes: Record<string, string> = {
  "CL.TE":
    `POST /probe HTTP/1.1\r\n${H}Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${SMUGGLED}`,
  "TE.CL": `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n` +
    `${SMUGGLED.length.toString(16)}\r\n${SMUGGLED}\r\n0\r\n\r\n`,
  "duplicate conflicting Content-Length": `POST /probe HTTP/1.1\r\n${H}Content-Length: 0\r\n` +
    `Content-Length: ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
  "Content-Length list":
    `POST /probe HTTP/1.1\r\n${H}Content-Length: 0, ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
  "Content-Length with sign":
    `POST /probe HTTP/1.1\r\n${H}Content-Length: +${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
  "malformed chunk size":
    `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\nzz\r\n${SMUGGLED}\r\n0\r\n\r\n`,
  "chunk size with 0x":
    `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n${SMUGGLED}`,
  "overflowing chunk size": `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n` +
    `10000000000000005\r\nhello\r\n0\r\n\r\n${SMUGGLED}`,
  "chunk data longer than its size":
    `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n` +
    `3\r\nhello\r\n0\r\n\r\n${SMUGGLED}`,
  "bare LF in chunk framing":
    `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n${SMUGGLED}`,
  "obs-fold Transfer-Encoding":
    `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: identity\r\n chunked\r\n` +
    `Content-Length: ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
  "space before colon": `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding : chunked\r\n` +
    `Content-Length: ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
  "xchunked":
    `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: xchunked\r\nContent-Length: 4\r\n\r\n` +
    `${SMUGGLED}`,
  "chunked, identity": `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked, identity\r\n\r\n` +
    `0\r\n\r\n${SMUGGLED}`,
  "vertical tab before chunked": `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: \x0bchunked\r\n` +
    `Content-Length: ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
  "GET with a body":
    `GET /probe HTTP/1.1\r\n${H}Content-Length: ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
  "two Host fields": `GET /probe HTTP/1.1\r\n${H}Host: other.example\r\n\r\n`,
  "NUL in a field": `GET /probe HTTP/1.1\r\n${H}X-A: a\0b\r\n\r\n`,
  "request line with tab": `GET\t/probe HTTP/1.1\r\n${H}\r\n`,
  "trailer smuggling a field": `POST /probe HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n` +
    `0\r\nContent-Length: 50\r\n\r\n${SMUGGLED}`,
};

Deno.test("smuggling probes never reach the backend as a hidden second request", async () => {
  const backend = await startEchoBackend({ name: "shop/web", pod: "web-1" });
  const proxy = await startProxy({
    routes: [{ endpoints: [{ address: "127.0.0.1", port: backend.port }] }],
  });
  const outcomes: string[] = [];
  try {
    for (const [name, probe] of Object.entries(probes)) {
      const before = backend.requests.length;
      const conn = await RawConnection.open(proxy.port);
      let bytes: Uint8Array;
      try {
        await conn.send(probe);
        bytes = await conn.readUntilQuiet(300, 5_000);
      } finally {
        conn.close();
      }
      const responses = parseResponses(bytes);
      // What the backend saw for this probe, and what the client was told it saw.
      const seen = backend.requests.slice(before);
      const echoed = responses
        .filter((r) => headerValue(r.headers, "x-echo-service") !== undefined && r.status === 200)
        .map((r) => JSON.parse(latin1(r.body)).target as string);
      outcomes.push(`${name}: ${responses.map((r) => r.status).join(",") || "closed"}`);
      if (name === "CL.TE" || name === "TE.CL") strictEqual(responses[0]?.status, 400, name);
      for (const request of seen) {
        ok(request.error === undefined, `${name}: backend framing error ${request.error}`);
        ok(
          echoed.includes(request.target),
          `${name}: backend saw ${request.target} the client was not answered for`,
        );
      }
      ok(
        seen.length <= echoed.length,
        `${name}: backend saw ${seen.length} requests, client got ${echoed.length}`,
      );
    }
    // After all that, the pooled upstream connection still works.
    const conn = await RawConnection.open(proxy.port);
    try {
      await conn.send(`GET /after HTTP/1.1\r\n${H}\r\n`);
      strictEqual(JSON.parse(latin1((await conn.readResponse()).body)).target, "/after");
    } finally {
      conn.close();
    }
    ok(
      backend.requests.every((r) => r.error === undefined),
      JSON.stringify(backend.requests.filter((r) => r.error)),
    );
  } finally {
    await proxy.close();
    await backend.close();
  }
  // Seen on Deno 2.9.6: CL+TE, TE+CL, conflicting or signed lengths, obs-fold, "TE :", unknown
  // codings, two Hosts, NUL and a tab in the request line get 400 from Deno.serve; broken chunking
  // closes the connection; GET with a body gets Sluice's 501; a trailer that looks like a field is
  // just a trailer (the request after it is a genuine pipelined request, answered as such).
  strictEqual(outcomes.length, Object.keys(probes).length);
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
      strictEqual((await first.readResponse()).status, 413);
    } finally {
      first.close();
    }
    const second = await RawConnection.open(proxy.port);
    try {
      await second.send(`POST /next HTTP/1.1\r\n${H}Content-Length: 2\r\n\r\nok`);
      const echo = JSON.parse(latin1((await second.readResponse()).body));
      strictEqual(echo.target, "/next");
      strictEqual(echo.body.length, 2);
    } finally {
      second.close();
    }
    // The cut request, if the backend saw it at all, ended in a framing error, never as complete.
    ok(backend.requests.filter((r) => r.target === "/big").every((r) => r.error !== undefined));
  } finally {
    await proxy.close();
    await backend.close();
  }
});
