/**
 * What the proxy passes through untouched: the client's fields in wire order and
 * case (duplicates apart, nothing added but forwarding fields, hop-by-hop fields
 * removed both ways), bodies and their Content-Encoding byte for byte (gzip, br,
 * and plain bodies never compressed), several Set-Cookie fields, and 3xx answers
 * unfollowed with their Location; and no environment-configured proxy is ever
 * used. Real handler on `Deno.serve`, echo and scripted backends, raw clients.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { GZIP_PLAIN, startEchoBackend } from "../../tests/support/echo_backend.ts";
import {
  headerValue,
  headerValues,
  latin1,
  RawConnection,
  type RawResponse,
} from "../../tests/support/raw_http.ts";
import { assert, assertEquals, assertStrictEquals } from "../../tests/support/assert.ts";
import { closedPort } from "../../tests/support/upstream_backends.ts";
import { gunzipSync, gzipSync } from "node:zlib";
import {
  ECHO_HOST,
  echoJson,
  sendRaw,
  withEchoProxy,
  withoutForwarding,
} from "../../tests/support/echo_proxy.ts";
import { type ScriptedConn, startScriptedBackend } from "../../tests/support/scripted_backend.ts";
import { startProxy } from "../../tests/support/proxy_harness.ts";
import type { StaticRoute } from "../../tests/support/static_snapshot.ts";
import { type H2World, openH2, statusOf, textOf, withH2World } from "../../tests/support/raw_h2.ts";

Deno.test("proxy sends the backend the client's fields in wire order and case, duplicates apart, nothing added but forwarding fields", async () => {
  await withEchoProxy(async ({ proxy }) => {
    const response = await sendRaw(
      proxy,
      `GET /a/../b?q=%20x&y HTTP/1.1\r\nHost: ${ECHO_HOST}\r\nZeta: 1\r\nX-Dup: one\r\nalpha: 2\r\n` +
        "x-dup: two\r\nAccept-Encoding: gzip\r\nUser-Agent: raw-test\r\n\r\n",
    );
    assertStrictEquals(response.status, 200);
    const echo = echoJson(response);
    assertStrictEquals(echo.target, "/b?q=%20x&y");
    assertEquals(withoutForwarding(echo.headers), [
      ["Host", ECHO_HOST],
      ["Zeta", "1"],
      ["X-Dup", "one"],
      ["alpha", "2"],
      ["x-dup", "two"],
      ["Accept-Encoding", "gzip"],
      ["User-Agent", "raw-test"],
    ]);
  });
});

Deno.test("proxy removes hop-by-hop fields in both directions", async () => {
  await withEchoProxy(async ({ proxy }) => {
    const request = await sendRaw(
      proxy,
      `GET / HTTP/1.1\r\nHost: ${ECHO_HOST}\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\n` +
        "Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nUpgrade: h2c\r\n" +
        "Proxy: http://evil\r\nX-Kept: yes\r\n\r\n",
    );
    assertEquals(withoutForwarding(echoJson(request).headers), [["Host", ECHO_HOST], [
      "X-Kept",
      "yes",
    ]]);

    const response = await sendRaw(proxy, `GET /hop HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`);
    assertStrictEquals(latin1(response.body), "hop\n");
    const names = response.headers.map(([name]) => name.toLowerCase());
    for (const hop of ["x-hop-named", "keep-alive", "proxy-connection", "upgrade", "trailer"]) {
      assert(!names.includes(hop), `${hop} leaked: ${names}`);
    }
    assert(!(headerValue(response.headers, "connection") ?? "").toLowerCase().includes("x-hop"));
    assertStrictEquals(headerValue(response.headers, "x-end-to-end"), "passes");
    assertEquals(response.trailers, []);
  });
});

Deno.test("proxy passes a gzip body and its Content-Encoding through byte for byte", async () => {
  await withEchoProxy(async ({ proxy }) => {
    const response = await sendRaw(
      proxy,
      `GET /gzip HTTP/1.1\r\nHost: ${ECHO_HOST}\r\nAccept-Encoding: gzip\r\n\r\n`,
    );
    assertStrictEquals(headerValue(response.headers, "content-encoding"), "gzip");
    assertStrictEquals(
      Number(headerValue(response.headers, "content-length")),
      response.body.length,
    );
    assertStrictEquals(
      createHash("sha256").update(response.body).digest("hex"),
      headerValue(response.headers, "x-body-sha256"),
    );
    assertStrictEquals(new TextDecoder().decode(gunzipSync(response.body)), GZIP_PLAIN);
  });
});

Deno.test("proxy keeps several Set-Cookie fields separate and passes 3xx through unfollowed", async () => {
  await withEchoProxy(async ({ proxy }) => {
    const cookies = await sendRaw(
      proxy,
      `GET /cookies?n=3 HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`,
    );
    assertEquals(headerValues(cookies.headers, "set-cookie"), [
      "c0=v0; Path=/; HttpOnly",
      "c1=v1; Path=/; HttpOnly",
      "c2=v2; Path=/; HttpOnly",
    ]);
    for (const status of [301, 302, 307, 308]) {
      const redirect = await sendRaw(
        proxy,
        `GET /redirect?status=${status}&to=/next%3Fa HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`,
      );
      assertStrictEquals(redirect.status, status);
      assertStrictEquals(headerValue(redirect.headers, "location"), "/next?a");
      assertStrictEquals(headerValue(redirect.headers, "set-cookie"), "r=1; Path=/");
    }
  });
});

Deno.test("proxy never sends backend traffic through an environment-configured proxy", async () => {
  const saved = ["HTTP_PROXY", "http_proxy", "ALL_PROXY"].map((k) => [k, Deno.env.get(k)] as const);
  const closed = closedPort();
  for (const [name] of saved) Deno.env.set(name, `http://127.0.0.1:${closed}`);
  try {
    await withEchoProxy(async ({ proxy }) => {
      const response = await sendRaw(
        proxy,
        `GET /direct HTTP/1.1\r\nHost: ${ECHO_HOST}\r\n\r\n`,
      );
      assertEquals([response.status, echoJson(response).target], [200, "/direct"]);
    });
  } finally {
    for (const [name, value] of saved) {
      if (value === undefined) Deno.env.delete(name);
      else Deno.env.set(name, value);
    }
  }
});

const HOST = "shop.example.com";

async function raw(port: number, text: string): Promise<RawResponse> {
  using conn = await RawConnection.open(port);
  await conn.send(text);
  return await conn.readResponse();
}

const PLAIN = "<p>Sluice must not compress what the backend sent plain.</p>\n".repeat(300);

/** Not real brotli: the proxy must not care what the bytes are. */
const BR = Uint8Array.from({ length: 50_000 }, (_, i) => (i * 131 + (i >> 8)) & 0xff);

/** HTTP/1.1 keep-alive backend answering per path: /br…, /plain…, /moved…; `chunked` in the path chunks it. */
async function scripted(conn: ScriptedConn): Promise<void> {
  for (;;) {
    const head = await conn.readHead();
    if (head === null) return;
    const path = head.split(" ")[1] ?? "/";
    const chunked = path.includes("chunked");
    let status = "200 OK";
    let fields: string[];
    let body: Uint8Array;
    if (path.startsWith("/br")) {
      fields = ["Content-Type: text/html", "Content-Encoding: br"];
      body = BR;
    } else if (path.startsWith("/moved")) {
      status = "303 See Other";
      fields = [
        "Location: http://backend.internal:8080/elsewhere?a=1&b=%20",
        "Content-Type: text/html",
      ];
      body = new TextEncoder().encode("<a href=/elsewhere>moved</a>");
    } else {
      fields = ["Content-Type: text/html; charset=utf-8"];
      body = new TextEncoder().encode(PLAIN);
    }
    const framing = chunked ? "Transfer-Encoding: chunked" : `Content-Length: ${body.length}`;
    await conn.write(`HTTP/1.1 ${status}\r\n${[...fields, framing].join("\r\n")}\r\n\r\n`);
    if (!chunked) {
      await conn.write(body);
      continue;
    }
    for (let at = 0; at < body.length; at += 7_000) {
      const part = body.subarray(at, at + 7_000);
      await conn.write(`${part.length.toString(16)}\r\n`);
      await conn.write(part);
      await conn.write("\r\n");
    }
    await conn.write("0\r\n\r\n");
  }
}

async function withScripted(fn: (port: number) => Promise<void>): Promise<void> {
  const backend = startScriptedBackend(scripted);
  const proxy = await startProxy({
    routes: [{ endpoints: [{ address: "127.0.0.1", port: backend.port }] }],
  });
  try {
    await fn(proxy.port);
  } finally {
    await proxy.close();
    await backend.close();
  }
}

Deno.test("a br body and its Content-Encoding reach an HTTP/1.1 client byte for byte", async () => {
  await withScripted(async (port) => {
    for (const path of ["/br", "/br?chunked"]) {
      const response = await raw(
        port,
        `GET ${path} HTTP/1.1\r\nHost: ${HOST}\r\nAccept-Encoding: br\r\n\r\n`,
      );
      assertEquals(response.status, 200, path);
      assertEquals(headerValues(response.headers, "content-encoding"), ["br"], path);
      assertEquals(response.body, BR, path);
    }
  });
});

Deno.test("a body the backend sent unencoded reaches a client accepting gzip and br unencoded, byte for byte", async () => {
  await withScripted(async (port) => {
    for (const path of ["/plain", "/plain?chunked"]) {
      const response = await raw(
        port,
        `GET ${path} HTTP/1.1\r\nHost: ${HOST}\r\nAccept-Encoding: gzip, deflate, br\r\n\r\n`,
      );
      assertEquals(response.status, 200, path);
      assertEquals(headerValue(response.headers, "content-encoding"), undefined, path);
      assertEquals(new TextDecoder().decode(response.body), PLAIN, path);
    }
  });
});

Deno.test("a 3xx passes untouched: an absolute Location naming the backend's own host, and its body", async () => {
  await withScripted(async (port) => {
    for (const path of ["/moved", "/moved?chunked"]) {
      const response = await raw(port, `GET ${path} HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
      assertEquals(response.status, 303, path);
      // Not rewritten to the client's host, as nginx's proxy_redirect default would.
      assertEquals(
        headerValues(response.headers, "location"),
        ["http://backend.internal:8080/elsewhere?a=1&b=%20"],
        path,
      );
      assertEquals(latin1(response.body), "<a href=/elsewhere>moved</a>", path);
    }
  });
});

type Fields = [string, string][];

const FORWARDING = /^(x-forwarded-(for|host|port|proto)|x-real-ip|x-request-id)$/i;

function routeFor(host: string, port: number, tls = false): StaticRoute {
  return { host, endpoints: [{ address: "127.0.0.1", port }], service: "t/web", tls };
}

/** A TLS connection to `a.test` (ALPN http/1.1). */
async function tlsHttp1(world: H2World): Promise<Deno.TlsConn> {
  const tcp = await Deno.connect({ hostname: "127.0.0.1", port: world.httpsPort });
  return await Deno.startTls(tcp, {
    hostname: "a.test",
    caCerts: [world.caCert],
    alpnProtocols: ["http/1.1"],
  });
}

/** A raw HTTP/1.1 connection to `a.test` over TLS (ALPN http/1.1). */
async function http1OverTls(world: H2World): Promise<RawConnection> {
  return RawConnection.wrap(await tlsHttp1(world));
}

/** The backend's fields without Sluice's forwarding fields, and those names (lowercase, sorted). */
function split(fields: Fields): { rest: Fields; forwarding: string[] } {
  return {
    rest: fields.filter(([name]) => !FORWARDING.test(name)),
    forwarding: fields.filter(([name]) => FORWARDING.test(name)).map(([n]) => n.toLowerCase())
      .sort(),
  };
}

const ALL_FORWARDING = [
  "x-forwarded-for",
  "x-forwarded-host",
  "x-forwarded-port",
  "x-forwarded-proto",
  "x-real-ip",
  "x-request-id",
];

Deno.test("over HTTP/1.1 on TLS the backend sees exactly the client's fields, in order and case, plus the forwarding fields", async () => {
  const backend = await startEchoBackend({ name: "t/web" });
  try {
    await withH2World([routeFor("a.test", backend.port)], async (world) => {
      const conn = await http1OverTls(world);
      try {
        await conn.send(
          "GET /x HTTP/1.1\r\nHost: a.test\r\nZeta: 1\r\nUser-Agent: raw\r\nx-dup: a\r\nX-Dup: b\r\n\r\n",
        );
        const response = await conn.readResponse();
        assertEquals(response.status, 200);
        const echo = JSON.parse(latin1(response.body)) as { headers: Fields };
        const { rest, forwarding } = split(echo.headers);
        assertEquals(rest, [
          ["Host", "a.test"],
          ["Zeta", "1"],
          ["User-Agent", "raw"],
          ["x-dup", "a"],
          ["X-Dup", "b"],
        ]);
        assertEquals(forwarding, ALL_FORWARDING);
        assertEquals(headerValues(echo.headers, "x-forwarded-proto"), ["https"]);
      } finally {
        conn.close();
      }
    });
  } finally {
    await backend.close();
  }
});

const PLAIN_HTML = "<p>Sluice must not compress what the backend sent plain.</p>\n".repeat(300);
const GZIPPED = gzipSync(new TextEncoder().encode(PLAIN_HTML));

/** Not real brotli: the proxy must not care what the bytes are. */
const BR_BYTES = Uint8Array.from({ length: 50_000 }, (_, i) => (i * 131 + (i >> 8)) & 0xff);

/** Answers every request on the connection per its path; HTTP/1.1, keep-alive. */
async function encodingBackend(conn: ScriptedConn): Promise<void> {
  for (;;) {
    const head = await conn.readHead();
    if (head === null) return;
    const path = head.split(" ")[1] ?? "/";
    const chunked = path.includes("chunked");
    const [fields, body]: [string[], Uint8Array] = path.startsWith("/gzip")
      ? [["Content-Type: text/html", "Content-Encoding: gzip"], GZIPPED]
      : path.startsWith("/br")
      ? [["Content-Type: text/html", "Content-Encoding: br"], BR_BYTES]
      : path.startsWith("/cookies")
      ? [
        ["Content-Type: text/plain", "Set-Cookie: a=1; Path=/", "Set-Cookie: b=2, c=3; HttpOnly"],
        new TextEncoder().encode("ok"),
      ]
      : [["Content-Type: text/html; charset=utf-8"], new TextEncoder().encode(PLAIN_HTML)];
    const framing = chunked ? "Transfer-Encoding: chunked" : `Content-Length: ${body.length}`;
    await conn.write(`HTTP/1.1 200 OK\r\n${[...fields, framing].join("\r\n")}\r\n\r\n`);
    if (chunked) {
      for (let at = 0; at < body.length; at += 7_000) {
        const part = body.subarray(at, at + 7_000);
        await conn.write(`${part.length.toString(16)}\r\n`);
        await conn.write(part);
        await conn.write("\r\n");
      }
      await conn.write("0\r\n\r\n");
    } else {
      await conn.write(body);
    }
  }
}

function sha(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

Deno.test("over h2, encoded bodies keep their bytes and Content-Encoding, plain ones stay plain, and Set-Cookie fields stay apart", async () => {
  const backend = startScriptedBackend(encodingBackend);
  try {
    // "localhost" resolves without a resolver option, and the world's certificate covers it.
    await withH2World([routeFor("localhost", backend.port)], async (world) => {
      using client = Deno.createHttpClient({
        caCerts: [world.caCert],
        http1: false,
        http2: true,
      });
      // fetch decodes gzip/br unless the request says exactly "identity" (DENO-FACTS 1), so the
      // client asks for identity: the backend here encodes whatever is asked.
      const get = async (path: string, acceptEncoding: string) => {
        const response = await fetch(`https://localhost:${world.httpsPort}${path}`, {
          client,
          headers: { "accept-encoding": acceptEncoding },
        });
        return { response, body: new Uint8Array(await response.arrayBuffer()) };
      };
      for (const suffix of ["", "?chunked"]) {
        const gz = await get(`/gzip${suffix}`, "identity");
        assertEquals(gz.response.headers.get("content-encoding"), "gzip", `gzip${suffix}`);
        assertEquals(sha(gz.body), sha(GZIPPED), `gzip${suffix}`);
        const br = await get(`/br${suffix}`, "identity");
        assertEquals(br.response.headers.get("content-encoding"), "br", `br${suffix}`);
        assertEquals(sha(br.body), sha(BR_BYTES), `br${suffix}`);
      }
      const cookies = await get("/cookies", "identity");
      assertEquals(cookies.response.headers.getSetCookie(), ["a=1; Path=/", "b=2, c=3; HttpOnly"]);
    });
  } finally {
    await backend.close();
  }
});

Deno.test("over h2 and HTTP/1.1 on TLS, a plain body sent to a client accepting gzip and br arrives uncompressed, byte for byte", async () => {
  const backend = startScriptedBackend(encodingBackend);
  try {
    await withH2World([routeFor("a.test", backend.port)], async (world) => {
      for (const path of ["/plain", "/plain?chunked"]) {
        // HTTP/2 with a raw client: DATA is what went on the wire.
        const h2 = await openH2(world);
        try {
          const id = await h2.request([
            [":method", "GET"],
            [":scheme", "https"],
            [":authority", "a.test"],
            [":path", path],
            ["accept-encoding", "gzip, deflate, br"],
          ]);
          const stream = await h2.finished(id);
          assertEquals(statusOf(stream), 200, path);
          assertEquals(
            stream.heads[0]!.filter(([n]) => n === "content-encoding"),
            [],
            `h2 ${path}`,
          );
          assertEquals(textOf(stream), PLAIN_HTML, `h2 ${path}`);
        } finally {
          await h2.close();
        }
        // HTTP/1.1 over TLS with a raw client.
        const conn = await http1OverTls(world);
        try {
          await conn.send(
            `GET ${path} HTTP/1.1\r\nHost: a.test\r\nAccept-Encoding: gzip, deflate, br\r\n\r\n`,
          );
          const response = await conn.readResponse();
          assertEquals(headerValue(response.headers, "content-encoding"), undefined, path);
          assertEquals(new TextDecoder().decode(response.body), PLAIN_HTML, `h1 ${path}`);
        } finally {
          conn.close();
        }
      }
    });
  } finally {
    await backend.close();
  }
});
