import { assertEquals, assertRejects } from "../../tests/support/assert.ts";
import { within } from "../../tests/support/wait.ts";
import { listenHttp } from "./http_listener.ts";
import type { ConnectionInfo, RequestHandler } from "./listener.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();
Deno.test("listenHttp() serves HTTP/1.1 and tells the handler the request is plain, with its port", async () => {
  const seen: ConnectionInfo[] = [];
  const handler: RequestHandler = (req, info) => {
    seen.push(info);
    return new Response(`${req.method} ${new URL(req.url).host}`);
  };
  const listener = listenHttp(handler, { hostname: "127.0.0.1", port: 0 });
  try {
    const port = listener.addr.port;
    const response = await fetch(`http://127.0.0.1:${port}/x`);
    assertEquals(await response.text(), `GET 127.0.0.1:${port}`);
    assertEquals(seen[0]!.secure, false);
    assertEquals(seen[0]!.localPort, port);
    assertEquals(seen[0]!.remoteAddr.hostname, "127.0.0.1");
  } finally {
    await listener.shutdown({ timeoutMs: 1_000 });
  }
});

Deno.test("listenHttp() serves h2c with prior knowledge", async () => {
  const handler: RequestHandler = (req) => new Response(new URL(req.url).host);
  const listener = listenHttp(handler, { hostname: "127.0.0.1", port: 0 });
  try {
    using client = Deno.createHttpClient({ http1: false, http2: true });
    const response = await fetch(`http://127.0.0.1:${listener.addr.port}/`, { client });
    assertEquals(await response.text(), `127.0.0.1:${listener.addr.port}`);
  } finally {
    await listener.shutdown({ timeoutMs: 1_000 });
  }
});

Deno.test("listenHttp() shutdown() waits for an in-flight request and closes the port", async () => {
  const entered = Promise.withResolvers<void>();
  const release = Promise.withResolvers<void>();
  const listener = listenHttp(async () => {
    entered.resolve();
    await release.promise;
    return new Response("done");
  }, { hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  const request = fetch(`http://127.0.0.1:${port}/`).then((r) => r.text());
  await within(5_000, "the request", entered.promise);
  const stopped = listener.shutdown({ timeoutMs: 5_000 });
  release.resolve();
  assertEquals(await request, "done");
  assertEquals((await stopped).graceful, true);
  await listener.finished;
  await assertRejects(() => Deno.connect({ hostname: "127.0.0.1", port }));
});

Deno.test("listenHttp() lets two listeners share a port", async () => {
  const one = listenHttp(() => new Response("one"), { hostname: "127.0.0.1", port: 0 });
  const two = listenHttp(() => new Response("two"), {
    hostname: "127.0.0.1",
    port: one.addr.port,
  });
  try {
    assertEquals(two.addr.port, one.addr.port);
  } finally {
    await Promise.all([one.shutdown(), two.shutdown()]);
  }
});

/** Reads from `conn` until the server closes it; the text it got. */
async function readToEnd(conn: Deno.Conn, what: string): Promise<string> {
  let text = "";
  const buffer = new Uint8Array(4096);
  while (true) {
    const n = await within(5_000, what, conn.read(buffer));
    if (n === null) return text;
    text += decoder.decode(buffer.subarray(0, n));
  }
}

Deno.test("listenHttp() tells the handler the client's own address and port", async () => {
  const seen: ConnectionInfo[] = [];
  const listener = listenHttp((_req, info) => {
    seen.push(info);
    return new Response("ok");
  }, { hostname: "127.0.0.1", port: 0 });
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port });
  try {
    await conn.write(encoder.encode("GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"));
    const answer = await readToEnd(conn, "the answer");
    assertEquals(answer.startsWith("HTTP/1.1 200 OK\r\n") && answer.endsWith("\r\n\r\nok"), true);
    const { hostname, port } = seen[0]!.remoteAddr;
    assertEquals({ hostname, port }, {
      hostname: conn.localAddr.hostname,
      port: conn.localAddr.port,
    });
    assertEquals(seen[0]!.localPort, listener.addr.port);
  } finally {
    conn.close();
    await listener.shutdown({ timeoutMs: 5_000 });
  }
});
