/**
 * Test support: a streamed backend response stalled in flight, for the tests
 * of what becomes of the backend connection behind it when a listener shuts
 * down (`lib/server/listener_shutdown_test.ts`) or an HTTPS listener rotates
 * (`lib/server/tls_rotation_test.ts`). Owns a raw backend that answers a
 * chunked head and one chunk and then nothing, ever ({@linkcode stallingBackend}),
 * the proxy handler in front of it (its 60 s I/O timeout left as is), a
 * listener of each {@linkcode Kind} and a client of it, and the teardown.
 * Not part of Sluice.
 *
 * @module
 */
import { closeQuietly, latin1 } from "./raw_http.ts";
import { type ScriptedConn, startScriptedBackend } from "./scripted_backend.ts";
import { staticSnapshot } from "./static_snapshot.ts";
import { stubCertificateTable } from "./stub_snapshot.ts";
import { within } from "./wait.ts";
import { createProxyHandler, type ProxyHandler } from "../../lib/proxy/proxy_handler.ts";
import { listenHttp } from "../../lib/server/http_listener.ts";
import { listenHttps } from "../../lib/server/https_listener.ts";
import type { Listener } from "../../lib/server/listener.ts";
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";

const certificate = await generateSelfSignedCertificate({ hostnames: ["a.test"], commonName: "a" });

/** The backend's answer: a chunked head and one chunk, then nothing more, ever. */
export const STALLED_HEAD = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" +
  "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";

/** Far below the proxy's 60 s I/O timeout, far above a prompt close on a loaded machine. */
export const PROMPT_MS = 5_000;

/** A raw backend whose connections answer `STALLED_HEAD` once `answer` resolves, then wait for EOF. */
export function stallingBackend() {
  const answer = Promise.withResolvers<void>();
  const requested = Promise.withResolvers<void>();
  const closed = Promise.withResolvers<void>();
  let wrote = false;
  const backend = startScriptedBackend(async (conn: ScriptedConn) => {
    if ((await conn.readHead()) === null) return;
    requested.resolve();
    // Whichever comes first: the test lets the backend answer, or the proxy closes the socket.
    const eof = conn.readSome().then(async function drain(bytes): Promise<void> {
      if (bytes !== null) return drain(await conn.readSome());
    });
    if ((await Promise.race([answer.promise.then(() => "answer"), eof])) === "answer") {
      await conn.write(STALLED_HEAD).catch(() => {});
      wrote = true;
      await eof;
    }
    closed.resolve();
  });
  return {
    backend,
    answer: () => answer.resolve(),
    requested: requested.promise,
    /** Resolves when the proxy closed the backend connection. */
    closed: closed.promise,
    get wrote() {
      return wrote;
    },
  };
}

/** The proxy handler, every host routed to 127.0.0.1:`port`. */
export function proxyTo(port: number): ProxyHandler {
  const snapshot = staticSnapshot([{ endpoints: [{ address: "127.0.0.1", port }] }]);
  // readTimeoutMs stays at its 60 s default on purpose.
  return createProxyHandler({ snapshot: () => snapshot });
}

/** A test's world: a stalling backend, the proxy to it, a listener of `kind` and a client of it. */
export async function setUp(kind: Kind) {
  const world = stallingBackend();
  const proxy = proxyTo(world.backend.port);
  const listener = listen(kind, proxy);
  const client = await openClient(kind, listener.addr.port);
  return { world, proxy, listener, client };
}

/** A test's teardown: the client, the listener (bounded), the proxy, then the backend. */
export async function tearDown(
  client: Deno.Conn,
  listener: Listener,
  proxy: ProxyHandler,
  world: ReturnType<typeof stallingBackend>,
): Promise<void> {
  closeQuietly(client);
  await listener.shutdown({ timeoutMs: 1_000 });
  proxy.close();
  await world.backend.close();
}

/** The listener a test runs behind: plain HTTP or HTTPS. */
export type Kind = "http" | "https";
export const KINDS: Kind[] = ["http", "https"];

/** A listener of `kind` on 127.0.0.1 in front of `proxy` (HTTPS: a self-signed certificate for `a.test`). */
export function listen(kind: Kind, proxy: ProxyHandler): Listener {
  if (kind === "https") {
    return listenHttps(proxy, {
      hostname: "127.0.0.1",
      port: 0,
      certificates: () => stubCertificateTable([], certificate),
    });
  }
  return listenHttp(proxy, { hostname: "127.0.0.1", port: 0 });
}

/** A client connection to `port`, over TLS for `a.test` when `kind` is HTTPS. */
export async function openClient(kind: Kind, port: number): Promise<Deno.Conn> {
  if (kind !== "https") return await Deno.connect({ hostname: "127.0.0.1", port });
  const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    return await Deno.startTls(tcp, { hostname: "a.test", caCerts: [certificate.certPem] });
  } catch (error) {
    closeQuietly(tcp);
    throw error;
  }
}

/** Writes all of `text`. */
export async function send(conn: Deno.Conn, text: string): Promise<void> {
  const bytes = new TextEncoder().encode(text);
  let at = 0;
  while (at < bytes.length) at += await conn.write(bytes.subarray(at));
}

/** Reads until `marker` has arrived; resolves with everything read. */
export async function readUntil(conn: Deno.Conn, marker: string): Promise<string> {
  let text = "";
  const buffer = new Uint8Array(16 * 1024);
  while (!text.includes(marker)) {
    const n = await within(PROMPT_MS, `"${marker}" from the proxy`, conn.read(buffer));
    if (n === null) throw new Error(`Closed after "${text}"`);
    text += latin1(buffer.subarray(0, n));
  }
  return text;
}

/** The request every test sends. */
export const GET = "GET /stream HTTP/1.1\r\nHost: a.test\r\n\r\n";
