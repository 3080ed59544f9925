/**
 * The HTTPS listener and the HTTP/2 connection preface (RFC 9113 §3.4): a
 * client that negotiated `h2` by ALPN must open with the preface; anything
 * else is a connection error (PROTOCOL_ERROR), and the connection is closed
 * without an answer. Real TLS sockets, raw bytes.
 */
import { assert, assertEquals } from "../../tests/support/assert.ts";
import { within } from "../../tests/support/wait.ts";
import { generateSelfSignedCertificate } from "../tls/self_signed.ts";
import { stubCertificateTable } from "../../tests/support/stub_snapshot.ts";
import { type HttpsListener, listenHttps } from "./https_listener.ts";

const certificate = await generateSelfSignedCertificate({ hostnames: ["a.test"] });
const encoder = new TextEncoder();
const PREFACE = encoder.encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
/** An empty SETTINGS frame. */
const SETTINGS = new Uint8Array([0, 0, 0, 4, 0, 0, 0, 0, 0]);
const GET = encoder.encode("GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n");

async function withListener(body: (port: number, calls: () => number) => Promise<void>) {
  let calls = 0;
  const listener: HttpsListener = listenHttps(() => {
    calls++;
    return new Response("ok");
  }, {
    hostname: "127.0.0.1",
    port: 0,
    certificates: () => stubCertificateTable([], certificate),
    firstBytesTimeoutMs: 5_000,
  });
  try {
    await body(listener.addr.port, () => calls);
  } finally {
    await listener.shutdown({ timeoutMs: 5_000 });
  }
}

/** A TLS connection to `port` for a.test offering `alpn`, checked to have negotiated `alpn[0]`. */
async function connectTls(port: number, alpn: string[]): Promise<Deno.TlsConn> {
  const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
  const conn = await Deno.startTls(tcp, {
    hostname: "a.test",
    caCerts: [certificate.certPem],
    alpnProtocols: alpn,
  });
  const { alpnProtocol } = await conn.handshake();
  assertEquals(alpnProtocol, alpn[0]);
  return conn;
}

/** Writes `chunks` (pausing between them), then reads until the server closes or errors. */
async function exchange(conn: Deno.TlsConn, chunks: Uint8Array[]): Promise<Uint8Array> {
  const received: number[] = [];
  try {
    for (const [i, chunk] of chunks.entries()) {
      if (i > 0) await new Promise((resolve) => setTimeout(resolve, 50));
      await conn.write(chunk);
    }
    const buffer = new Uint8Array(16 * 1024);
    await within(
      5_000,
      "the server to answer or close",
      (async () => {
        while (true) {
          const n = await conn.read(buffer).catch(() => null);
          if (n === null) return;
          received.push(...buffer.subarray(0, n));
          // An h2 server answers with its SETTINGS and keeps the connection: that is enough.
          if (received.length >= 9 && received[3] === 4) return;
        }
      })(),
    );
  } finally {
    try {
      conn.close();
    } catch {
      // Closed by the server.
    }
  }
  return new Uint8Array(received);
}

Deno.test("HTTPS closes an h2 connection whose client sends HTTP/1.1 instead of the preface, unanswered", async () => {
  await withListener(async (port, calls) => {
    const answer = await exchange(await connectTls(port, ["h2"]), [GET]);
    assertEquals(new TextDecoder().decode(answer), "", "no answer, only a close");
    assertEquals(calls(), 0);
  });
});

Deno.test("HTTPS closes an h2 connection that sends garbage, also when it matches the preface's first bytes", async () => {
  await withListener(async (port, calls) => {
    for (
      const chunks of [
        [encoder.encode("hello\r\n\r\n")],
        [PREFACE.subarray(0, 10), encoder.encode("garbage garbage garbage\r\n")],
      ]
    ) {
      const answer = await exchange(await connectTls(port, ["h2"]), chunks);
      assertEquals(answer.length, 0, `closed unanswered after ${JSON.stringify(chunks)}`);
    }
    assertEquals(calls(), 0);
  });
});

Deno.test("HTTPS serves h2 whose preface arrives in pieces, and HTTP/1.1 negotiated by ALPN", async () => {
  await withListener(async (port) => {
    const h2 = await exchange(await connectTls(port, ["h2"]), [
      PREFACE.subarray(0, 5),
      PREFACE.subarray(5, 20),
      new Uint8Array([...PREFACE.subarray(20), ...SETTINGS]),
    ]);
    assert(h2.length >= 9 && h2[3] === 4, "the server's SETTINGS frame");
    const h1 = await exchange(await connectTls(port, ["http/1.1"]), [GET]);
    assert(new TextDecoder().decode(h1).startsWith("HTTP/1.1 200"), "HTTP/1.1 is served");
  });
});
