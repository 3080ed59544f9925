/**
 * Test support for the upstream side of the proxy (retries, the pool, the
 * balancer, timeouts): loopback backends that can stop listening while their
 * connections stay open (a pod going away), come back on a port they had, and
 * count what reached them (built on {@linkcode ScriptedConn} from
 * `tests/support/scripted_backend.ts`); a proxy routing any host to given
 * endpoints ({@linkcode withProxyTo}); and {@linkcode scriptedServer}, a raw
 * backend for `sendUpstream()` itself. Not part of Sluice.
 *
 * @module
 */

import { closeQuietly, latin1, rawRequest } from "./raw_http.ts";
import { ScriptedConn } from "./scripted_backend.ts";
import type { Endpoint } from "../../lib/routing/snapshot.ts";
import { type HarnessOptions, type ProxyHarness, startProxy } from "./proxy_harness.ts";
import type { UpstreamRequest } from "../../lib/upstream/upstream_client.ts";

/** A backend whose listener and connections have separate lifetimes; disposing it closes it. */
export interface UpstreamBackend extends AsyncDisposable {
  readonly port: number;
  readonly endpoint: Endpoint;
  /** Every connection accepted, by index. */
  readonly connections: readonly ScriptedConn[];
  /** Connections whose script has not returned yet. */
  readonly open: number;
  /** Stops accepting (connects are refused from now on); open connections stay. */
  stopListening(): void;
  /** Stops listening and closes every connection; waits for the scripts. */
  close(): Promise<void>;
}

/**
 * Starts a backend on 127.0.0.1 (`port` 0: any free one); each connection
 * runs `script` and is closed when it returns.
 *
 * @throws {Deno.errors.AddrInUse} when `port` is taken.
 */
export function startBackend(
  script: (conn: ScriptedConn, backend: UpstreamBackend) => Promise<void>,
  options: { port?: number } = {},
): UpstreamBackend {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: options.port ?? 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  const connections: ScriptedConn[] = [];
  const running = new Set<Promise<void>>();
  let listening = true;
  let open = 0;
  const backend: UpstreamBackend = {
    port,
    endpoint: { address: "127.0.0.1", port },
    connections,
    get open() {
      return open;
    },
    stopListening() {
      if (!listening) return;
      listening = false;
      closeQuietly(listener);
    },
    async close() {
      backend.stopListening();
      await accepting;
      for (const conn of connections) conn.close();
      await Promise.all([...running]);
    },
    [Symbol.asyncDispose]: () => backend.close(),
  };
  const accepting = (async () => {
    for await (const raw of listener) {
      const conn = new ScriptedConn(raw, connections.length);
      connections.push(conn);
      open++;
      const task = script(conn, backend).catch(() => {}).finally(() => {
        open--;
        conn.close();
        running.delete(task);
      });
      running.add(task);
    }
  })().catch(() => {});
  return backend;
}

/** A well-framed 200 with `body`. */
export function ok(body: string): string {
  return `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
}

/**
 * Reads a request's body by its head's framing (Content-Length or chunked);
 * its length, or -1 when the connection ended first.
 */
export async function readBody(conn: ScriptedConn, head: string): Promise<number> {
  const length = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (length !== null) {
    const declared = Number(length[1]);
    return (await conn.readLength(declared, () => {})) === declared ? declared : -1;
  }
  if (!/\r\ntransfer-encoding:\s*chunked/i.test(head)) return 0;
  let got = 0;
  return (await conn.readChunked((data) => got += data.length)) ? got : -1;
}

/** The request line of `head` without its version: `"GET /path"`. */
export function requestLine(head: string): string {
  return head.slice(0, head.indexOf(" HTTP/"));
}

/** A {@linkcode countingBackend}: what it saw, one `"METHOD /target bodyLength"` per request. */
export interface CountingBackend extends UpstreamBackend {
  readonly seen: string[];
}

/** A keep-alive backend answering every request with `ok(name)` once it has read its body. */
export function countingBackend(name: string, options: { port?: number } = {}): CountingBackend {
  const seen: string[] = [];
  const backend = startBackend(async (conn) => {
    for (;;) {
      const head = await conn.readHead();
      if (head === null) return;
      const length = await readBody(conn, head);
      seen.push(`${requestLine(head)} ${length}`);
      if (length < 0) return;
      await conn.write(ok(name));
    }
  }, options);
  return Object.assign(backend, { seen });
}

/** A loopback port with nothing listening, outside the range the kernel hands out for port 0. */
export function closedPort(): number {
  // Below Linux's ephemeral range (32768-60999 by default): a port the kernel hands out for
  // port 0 could become a later listener's, such as the proxy's own, and a request to the
  // "closed" endpoint would then loop through the proxy until descriptors ran out (seen in CI).
  for (let attempt = 0; attempt < 1_000; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    try {
      Deno.listen({ hostname: "127.0.0.1", port }).close();
      return port;
    } catch {
      // In use: another one.
    }
  }
  throw new Error("Cannot find a free port between 20000 and 32000");
}

/**
 * A loopback port whose listener never accepts and whose accept queue is
 * full: the kernel drops further SYNs, so connects to it hang (a black-holed
 * endpoint, without leaving loopback). Close it at the end of the test.
 */
export async function blackholedPort(): Promise<{ port: number; close(): void }> {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0, tcpBacklog: 1 });
  const port = (listener.addr as Deno.NetAddr).port;
  const fillers: Deno.Conn[] = [];
  for (;;) {
    const filler = await Deno.connect({
      hostname: "127.0.0.1",
      port,
      signal: AbortSignal.timeout(200),
    }).catch(() => undefined);
    if (filler === undefined) break;
    fillers.push(filler);
  }
  return {
    port,
    close() {
      for (const filler of fillers) closeQuietly(filler);
      closeQuietly(listener);
    },
  };
}

export const UPSTREAM_HOST = "shop.example.com";

/** Runs `fn` with a proxy whose one route (any host) goes to `endpoints`. */
export async function withProxyTo(
  endpoints: readonly Endpoint[],
  fn: (proxy: ProxyHarness) => Promise<void>,
  options: Partial<Omit<HarnessOptions, "routes">> = {},
): Promise<void> {
  const proxy = await startProxy({ routes: [{ endpoints }], readTimeoutMs: 5_000, ...options });
  try {
    await fn(proxy);
  } finally {
    await proxy.close();
  }
}

export function proxyGet(proxy: ProxyHarness, target: string) {
  return rawRequest(proxy.port, `GET ${target} HTTP/1.1\r\nHost: ${UPSTREAM_HOST}\r\n\r\n`);
}

export function proxyPost(proxy: ProxyHarness, target: string, body: string) {
  return rawRequest(
    proxy.port,
    `POST ${target} HTTP/1.1\r\nHost: ${UPSTREAM_HOST}\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
  );
}

export const getRequest = (target: string): UpstreamRequest => ({
  method: "GET",
  target,
  headers: [["Host", UPSTREAM_HOST]],
  body: null,
});

export async function drainBody(
  body: Uint8Array | ReadableStream<Uint8Array> | null,
): Promise<string> {
  if (body === null) return "";
  if (body instanceof Uint8Array) return latin1(body);
  return latin1(new Uint8Array(await new Response(body).arrayBuffer()));
}

export function tally(values: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const value of values) out[value] = (out[value] ?? 0) + 1;
  return out;
}

/** A backend that records the request line of each connection's first request, then answers nothing. */
export function silentBackend() {
  const heads: string[] = [];
  const backend = startBackend(async (conn) => {
    const head = await conn.readHead();
    if (head !== null) heads.push(requestLine(head));
    await conn.readHead();
  });
  return Object.assign(backend, { heads });
}

export const backendGet = (target: string): UpstreamRequest => ({
  method: "GET",
  target,
  headers: [["Host", "backend.test"]],
  body: null,
});

export async function bodyText(
  body: Uint8Array | ReadableStream<Uint8Array> | null,
): Promise<string> {
  if (body === null) return "";
  if (body instanceof Uint8Array) return new TextDecoder().decode(body);
  return await new Response(body).text();
}

/**
 * A scripted backend: `script` runs once per accepted connection with a reader of request
 * heads and a writer; faults the echo backend cannot produce on demand.
 */
export function scriptedServer(
  script: (
    io: {
      nextHead(): Promise<string | null>;
      write(s: string | Uint8Array): Promise<void>;
      close(): void;
    },
    index: number,
  ) => Promise<void>,
) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const tasks: Promise<void>[] = [];
  const conns = new Set<Deno.Conn>();
  let accepted = 0;
  const loop = (async () => {
    for (;;) {
      let conn: Deno.Conn;
      try {
        conn = await listener.accept();
      } catch {
        return;
      }
      conns.add(conn);
      const index = accepted++;
      let pending = "";
      const buf = new Uint8Array(65536);
      const io = {
        async nextHead(): Promise<string | null> {
          for (;;) {
            const end = pending.indexOf("\r\n\r\n");
            if (end !== -1) {
              const head = pending.slice(0, end + 4);
              pending = pending.slice(end + 4);
              return head;
            }
            const n = await conn.read(buf).catch(() => null);
            if (n === null) return null;
            pending += new TextDecoder().decode(buf.subarray(0, n));
          }
        },
        async write(s: string | Uint8Array) {
          const bytes = typeof s === "string" ? new TextEncoder().encode(s) : s;
          let offset = 0;
          while (offset < bytes.length) offset += await conn.write(bytes.subarray(offset));
        },
        close() {
          conns.delete(conn);
          try {
            conn.close();
          } catch {
            // Already closed.
          }
        },
      };
      tasks.push(script(io, index).catch(() => {}).finally(() => io.close()));
    }
  })();
  return {
    port: (listener.addr as Deno.NetAddr).port,
    get accepted() {
      return accepted;
    },
    async close() {
      listener.close();
      for (const conn of conns) conn.close();
      await loop;
      await Promise.all(tasks);
    },
  };
}
