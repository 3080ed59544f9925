import { assert, assertEquals, assertThrows } from "../../tests/support/assert.ts";
import {
  decodeLatin1,
  encodeRequestHead,
  findHeadEnd,
  parseChunkSize,
  parseContentLength,
  parseResponseHead,
  UpstreamProtocolError,
} from "./http1.ts";

const bytes = (s: string) => Uint8Array.from(s, (c) => c.charCodeAt(0));

Deno.test("findHeadEnd() finds CRLF CRLF from any resume point and only there", () => {
  const buf = bytes("HTTP/1.1 200 OK\r\nA: b\r\n\r\nbody");
  assertEquals(findHeadEnd(buf, 0, buf.length), 25);
  assertEquals(findHeadEnd(buf, 20, buf.length), 25);
  assertEquals(findHeadEnd(buf, 0, 24), -1);
  assertEquals(findHeadEnd(bytes("HTTP/1.1 200 OK\nA: b\n\n"), 0, 22), -1);
});

Deno.test("parseResponseHead() keeps fields in order, case and duplicates", () => {
  const head = parseResponseHead(
    "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nX-Mixed-Case: v\r\nset-cookie: b=2\r\nContent-Length: 3\r\n\r\n",
  );
  assertEquals(head.status, 200);
  assertEquals(head.statusText, "OK");
  assertEquals(head.headers, [
    ["Set-Cookie", "a=1"],
    ["X-Mixed-Case", "v"],
    ["set-cookie", "b=2"],
    ["Content-Length", "3"],
  ]);
  assertEquals(head.framing, "length");
  assertEquals(head.contentLength, 3);
  assertEquals(head.keepAlive, true);
});

Deno.test("parseResponseHead() decides framing and reuse per RFC 9112", () => {
  const cases: [string, string, boolean][] = [
    ["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "chunked", true],
    ["HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked \r\n\r\n", "chunked", true],
    ["HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n", "length", true],
    ["HTTP/1.1 200 OK\r\n\r\n", "close", true],
    ["HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n", "length", false],
    [
      "HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\nContent-Length: 1\r\n\r\n",
      "length",
      false,
    ],
    ["HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", "length", false],
    ["HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n", "length", true],
    ["HTTP/1.1 204 No Content\r\n\r\n", "close", true],
    ["HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", "length", true],
  ];
  for (const [text, framing, keepAlive] of cases) {
    const head = parseResponseHead(text);
    assertEquals([head.framing, head.keepAlive], [framing, keepAlive], text);
  }
});

Deno.test("parseResponseHead() reads the Keep-Alive timeout hint, and nothing else as one", () => {
  const cases: [string, number | undefined][] = [
    ["Keep-Alive: timeout=5", 5_000],
    ["Keep-Alive: timeout=5, max=1000", 5_000],
    ["keep-alive: max=10,timeout = 30", 30_000],
    ["Keep-Alive: TIMEOUT=2", 2_000],
    ["Keep-Alive: max=5", undefined],
    ["Keep-Alive: timeout=abc", undefined],
    ["Keep-Alive: timeout=1.5", undefined],
    ["Keep-Alive: mytimeout=5", undefined],
    ["X-Keep-Alive: timeout=5", undefined],
  ];
  for (const [field, ms] of cases) {
    const head = parseResponseHead(`HTTP/1.1 200 OK\r\n${field}\r\nContent-Length: 0\r\n\r\n`);
    assertEquals(head.keepAliveTimeoutMs, ms, field);
  }
});

Deno.test("parseResponseHead() refuses what must not reach a client", () => {
  const bad = [
    "HTTP/1.1 abc OK\r\n\r\n",
    "HTTP/2 200 OK\r\n\r\n",
    "HTTP/1.1 099 Low\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-Space : a\r\n\r\n",
    "HTTP/1.1 200 OK\r\nNo colon\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-Nul: a\0b\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-Cr: a\rb\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-Ctl: a\x01b\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-Esc: a\x1bb\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-Del: a\x7fb\r\n\r\n",
    "HTTP/1.1 200 OK\r\nBad Name: a\r\n\r\n",
  ];
  for (const text of bad) {
    assertThrows(
      () => parseResponseHead(text),
      UpstreamProtocolError,
      undefined,
      JSON.stringify(text),
    );
  }
});

Deno.test("parseChunkSize() reads hex with extensions and refuses junk", () => {
  assertEquals(parseChunkSize("1a"), 26);
  assertEquals(parseChunkSize("FF;name=value"), 255);
  assertEquals(parseChunkSize("0"), 0);
  for (const bad of ["", "zz", "-1", "0x10", "1 2", "1234567890abc"]) {
    assertThrows(() => parseChunkSize(bad), UpstreamProtocolError, undefined, bad);
  }
});

Deno.test("parseContentLength() accepts equal lists only", () => {
  assertEquals(parseContentLength("42"), 42);
  assertEquals(parseContentLength(" 7 , 7"), 7);
  assertEquals(parseContentLength("7, 8"), undefined);
  assertEquals(parseContentLength("+7"), undefined);
  assertEquals(parseContentLength(""), undefined);
  assertEquals(parseContentLength("9".repeat(16)), undefined);
});

Deno.test("encodeRequestHead() writes the target as UTF-8 and fields one byte per char", () => {
  const head = encodeRequestHead("GET", "/caf\u00e9?q=1", [["Host", "a"], [
    "X-Raw",
    "\u00c3\u00a9\u00ff",
  ]]);
  const text = decodeLatin1(head, 0, head.length);
  assertEquals(
    text,
    "GET /caf\u00c3\u00a9?q=1 HTTP/1.1\r\nHost: a\r\nX-Raw: \u00c3\u00a9\u00ff\r\n\r\n",
  );
  const ascii = encodeRequestHead("POST", "/x", [["A", "b"]]);
  assertEquals(new TextDecoder().decode(ascii), "POST /x HTTP/1.1\r\nA: b\r\n\r\n");
});

Deno.test("decodeLatin1() maps every byte to one char, also non-ASCII bytes and a leading BOM", () => {
  const all = Uint8Array.from({ length: 256 }, (_, i) => i);
  const text = decodeLatin1(all, 0, all.length);
  assertEquals(text.length, 256);
  for (let i = 0; i < 256; i++) assertEquals(text.charCodeAt(i), i);
  const bom = Uint8Array.of(0xef, 0xbb, 0xbf, 0x41);
  assertEquals(decodeLatin1(bom, 0, 4), "\u00ef\u00bb\u00bfA");
  assertEquals(decodeLatin1(bytes("xHTTP/1.1 200 \ufffd"), 1, 14), "HTTP/1.1 200 ");
});

Deno.test("encodeRequestHead() encodes into a supplied buffer and appends the extra field", () => {
  const scratch = new Uint8Array(1024).fill(0x7a);
  const head = encodeRequestHead("PUT", "/x", [["Host", "a"]], {
    extra: ["Content-Length", "3"],
    buffer: (size) => size <= scratch.length ? scratch : undefined,
  });
  assertEquals(head.buffer, scratch.buffer);
  assertEquals(
    decodeLatin1(head, 0, head.length),
    "PUT /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n",
  );
  const big = encodeRequestHead("GET", "/", [["X", "y".repeat(2000)]], {
    buffer: (size) => size <= scratch.length ? scratch : undefined,
  });
  assertEquals(big.length, "GET / HTTP/1.1\r\nX: \r\n\r\n".length + 2000);
  assert(big.buffer !== scratch.buffer, "a head too large for the buffer is allocated");
});

Deno.test("encodeRequestHead() fits any target in the size it asks for", () => {
  for (
    const target of [
      "/",
      "/caf\u00e9",
      "/\u20ac\u20ac\u20ac",
      "/\u{1f600}?q=\u{1f600}",
      "/a\ud800b",
    ]
  ) {
    let asked = 0;
    const head = encodeRequestHead("GET", target, [["Host", "h"]], {
      extra: ["Content-Length", "0"],
      buffer: (size) => new Uint8Array(asked = size),
    });
    const expected = new Uint8Array([
      ...new TextEncoder().encode(`GET ${target} HTTP/1.1\r\n`),
      ...new TextEncoder().encode("Host: h\r\nContent-Length: 0\r\n\r\n"),
    ]);
    assertEquals(head, expected, target);
    assert(head.length <= asked);
  }
});
