import { assert, assertEquals, assertStrictEquals } from "./assert.ts";
import { createHash } from "node:crypto";
import { gunzipSync } from "node:zlib";
import { GZIP_PLAIN, patternSha256, startEchoBackend } from "./echo_backend.ts";
import { headerValue, headerValues, latin1, RawConnection } from "./raw_http.ts";

Deno.test("echo backend describes the request as received: raw target, fields in order, body hash", async () => {
  const backend = await startEchoBackend({ name: "shop/web", pod: "web-7" });
  const conn = await RawConnection.open(backend.port);
  try {
    await conn.send(
      "POST /a/../b?x=%20&y HTTP/1.1\r\nHost: Shop.Example\r\nZeta: 1\r\nX-Dup: a\r\nx-dup: b\r\n" +
        "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    );
    const response = await conn.readResponse();
    assertStrictEquals(response.status, 200);
    assertStrictEquals(headerValue(response.headers, "x-echo-pod"), "web-7");
    const echo = JSON.parse(latin1(response.body));
    assertStrictEquals(echo.service, "shop/web");
    assertStrictEquals(echo.pod, "web-7");
    assertStrictEquals(echo.method, "POST");
    assertStrictEquals(echo.target, "/a/../b?x=%20&y");
    assertStrictEquals(echo.host, "Shop.Example");
    assertEquals(echo.headers, [
      ["Host", "Shop.Example"],
      ["Zeta", "1"],
      ["X-Dup", "a"],
      ["x-dup", "b"],
      ["Transfer-Encoding", "chunked"],
    ]);
    assertEquals(echo.body, {
      length: 11,
      sha256: createHash("sha256").update("hello world").digest("hex"),
    });
    assertStrictEquals(echo.tls, null);
  } finally {
    conn.close();
    await backend.close();
  }
});

Deno.test("echo backend logs every request of a pipelined connection in order", async () => {
  const logFile = await Deno.makeTempFile({ suffix: ".jsonl" });
  const backend = await startEchoBackend({ logFile });
  const conn = await RawConnection.open(backend.port);
  try {
    await conn.send(
      "GET /one HTTP/1.1\r\nHost: a\r\n\r\nPOST /two HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc" +
        "HEAD /three HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    assertStrictEquals(JSON.parse(latin1((await conn.readResponse()).body)).target, "/one");
    assertStrictEquals(JSON.parse(latin1((await conn.readResponse()).body)).target, "/two");
    const head = await conn.readResponse({ head: true });
    assert(Number(headerValue(head.headers, "content-length")) > 0);
    assertEquals(backend.requests.map((r) => [r.method, r.target, r.bodyLength]), [
      ["GET", "/one", 0],
      ["POST", "/two", 3],
      ["HEAD", "/three", 0],
    ]);
    const lines = (await Deno.readTextFile(logFile)).trim().split("\n").map((l) =>
      JSON.parse(l).target
    );
    assertEquals(lines, ["/one", "/two", "/three"]);
  } finally {
    conn.close();
    await backend.close();
    await Deno.remove(logFile);
  }
});

Deno.test("echo backend serves status, gzip, bytes, cookies, SSE and hop-by-hop test endpoints", async () => {
  const backend = await startEchoBackend();
  const conn = await RawConnection.open(backend.port);
  const ask = async (target: string) => {
    await conn.send(`GET ${target} HTTP/1.1\r\nHost: a\r\n\r\n`);
    return await conn.readResponse();
  };
  try {
    assertStrictEquals((await ask("/?status=418")).status, 418);
    assertStrictEquals((await ask("/?status=204")).body.length, 0);
    assertStrictEquals((await ask("/?delay=20")).status, 200);
    const gz = await ask("/gzip");
    assertStrictEquals(headerValue(gz.headers, "content-encoding"), "gzip");
    assertStrictEquals(
      createHash("sha256").update(gz.body).digest("hex"),
      headerValue(gz.headers, "x-body-sha256"),
    );
    assertStrictEquals(new TextDecoder().decode(gunzipSync(gz.body)), GZIP_PLAIN);
    const bytes = await ask("/bytes?n=200000&chunked=1");
    assert(bytes.chunked);
    assertStrictEquals(
      createHash("sha256").update(bytes.body).digest("hex"),
      patternSha256(200_000),
    );
    assertStrictEquals(headerValues((await ask("/cookies?n=4")).headers, "set-cookie").length, 4);
    const sse = await ask("/sse?n=3&interval=1");
    assertStrictEquals(
      latin1(sse.body),
      "id: 0\ndata: event 0\n\nid: 1\ndata: event 1\n\nid: 2\ndata: event 2\n\n",
    );
    const hop = await ask("/hop");
    assertEquals(hop.trailers, [["X-Checksum", "abc"]]);
    assertStrictEquals(headerValue(hop.headers, "keep-alive"), "timeout=5");
  } finally {
    conn.close();
    await backend.close();
  }
});

Deno.test("echo backend echoes WebSocket messages with the first offered subprotocol", async () => {
  const backend = await startEchoBackend();
  const ws = new WebSocket(`ws://127.0.0.1:${backend.port}/ws`, ["b", "c"]);
  const messages: string[] = [];
  const closed = new Promise<CloseEvent>((resolve) => ws.onclose = resolve);
  try {
    await new Promise((resolve) => ws.onopen = resolve);
    assertStrictEquals(ws.protocol, "b");
    const got = new Promise<void>((resolve) =>
      ws.onmessage = (e) => {
        messages.push(e.data);
        if (messages.length === 2) resolve();
      }
    );
    ws.send("one");
    ws.send("fragments:3");
    await got;
    assertEquals(messages, ["one", "part0;part1;part2;"]);
    ws.send("close:4005:bye");
    const event = await closed;
    assertEquals([event.code, event.reason], [4005, "bye"]);
  } finally {
    await backend.close();
  }
});

Deno.test("echo backend runs as a script with identity from flags and environment", async () => {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("./echo_backend.ts", import.meta.url).pathname,
      "--hostname",
      "127.0.0.1",
      "--port",
      "0",
      "--pod",
      "flag-pod",
    ],
    env: { ECHO_SERVICE: "env/service" },
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  try {
    let line = "";
    while (!line.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) break;
      line += value;
    }
    const match = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(line);
    assert(match, line);
    const echo = await (await fetch(`${match[1]}/who`)).json();
    assertEquals([echo.service, echo.pod, echo.target], ["env/service", "flag-pod", "/who"]);
  } finally {
    child.kill("SIGTERM");
    await reader.cancel();
    const status = await child.status;
    assertStrictEquals(status.success, true);
  }
});

const openssl = await new Deno.Command("openssl", {
  args: ["version"],
  stdout: "null",
  stderr: "null",
})
  .output().then((o) => o.success, () => false);

Deno.test({
  name: "echo backend serves TLS and reports the negotiated ALPN protocol",
  ignore: !openssl,
  async fn() {
    const dir = await Deno.makeTempDir();
    try {
      const made = await new Deno.Command("openssl", {
        args: [
          "req",
          "-x509",
          "-newkey",
          "ec",
          "-pkeyopt",
          "ec_paramgen_curve:prime256v1",
          "-nodes",
          "-keyout",
          `${dir}/key.pem`,
          "-out",
          `${dir}/cert.pem`,
          "-days",
          "1",
          "-subj",
          "/CN=localhost",
          "-addext",
          "subjectAltName=DNS:localhost",
          "-addext",
          "basicConstraints=critical,CA:FALSE",
        ],
        stdout: "null",
        stderr: "null",
      }).output();
      assert(made.success);
      const cert = await Deno.readTextFile(`${dir}/cert.pem`);
      const key = await Deno.readTextFile(`${dir}/key.pem`);
      const backend = await startEchoBackend({ tls: { cert, key } });
      const client = Deno.createHttpClient({ caCerts: [cert] });
      try {
        const response = await fetch(`https://localhost:${backend.port}/secure`, { client });
        const echo = await response.json();
        assertEquals(echo.tls, { alpnProtocol: "http/1.1" });
        assertStrictEquals(backend.url, `https://127.0.0.1:${backend.port}`);
      } finally {
        client.close();
        await backend.close();
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
