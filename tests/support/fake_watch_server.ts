/**
 * A scripted, plain-HTTP stand-in for the Kubernetes API, on loopback, for the
 * only faults the real API server cannot be made to produce on demand: a
 * watch stream torn mid-line, malformed lines, and a watch that goes silent
 * without closing (a half-open connection). Everything else is tested
 * against the real API server.
 *
 * Speaks raw HTTP/1.1 over `Deno.listen` so that a test controls the bytes:
 * LIST requests get a JSON list; each WATCH request gets the next script,
 * sent as chunked transfer encoding piece by piece, and then is cut (socket
 * closed without the final chunk), ended cleanly, or held open.
 *
 * @module
 */
import type { KubeAccess } from "../../lib/k8s/kube_access.ts";

/** One step of a watch response. */
export type WatchStep =
  /** Send this text as one chunk (it may hold half a line). */
  | { readonly send: string }
  /** Wait for this before the next step. */
  | { readonly wait: Promise<unknown> }
  /** Close the connection without the final chunk: a torn stream. */
  | { readonly cut: true }
  /** Send the final chunk and close: a server-side timeout. */
  | { readonly end: true };

/** What a watch request is answered with. */
export interface WatchScript {
  /** HTTP status; 200 by default. A non-200 status sends `body` as JSON. */
  readonly status?: number;
  readonly body?: unknown;
  readonly steps?: readonly WatchStep[];
}

/** Options of {@linkcode startFakeWatchServer}. */
export interface FakeWatchServerOptions {
  /** The list answered to every LIST request. */
  readonly list: (url: URL) => { items: unknown[]; resourceVersion: string };
  /** The script of the n-th (0-based) WATCH request; held open without events when absent. */
  readonly watch: (url: URL, n: number) => WatchScript | undefined;
}

/** A running fake server. */
export interface FakeWatchServer extends AsyncDisposable {
  /** Credentials-free access for a `KubeClient`. */
  readonly access: KubeAccess;
  /** Every request received, in order. */
  readonly requests: URL[];
  /** The WATCH requests received, in order. */
  readonly watches: URL[];
  close(): Promise<void>;
}

const encoder = new TextEncoder();

/** One watch event line (no newline): `type` for Ingress `shop/<name>` at resourceVersion `rv`. */
export function watchEvent(type: string, name: string, rv: string): string {
  return JSON.stringify({
    type,
    object: { kind: "Ingress", metadata: { namespace: "shop", name, resourceVersion: rv } },
  });
}

function chunk(text: string): Uint8Array {
  const bytes = encoder.encode(text);
  const head = encoder.encode(`${bytes.length.toString(16)}\r\n`);
  const out = new Uint8Array(head.length + bytes.length + 2);
  out.set(head);
  out.set(bytes, head.length);
  out.set(encoder.encode("\r\n"), head.length + bytes.length);
  return out;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let written = 0;
  while (written < bytes.length) written += await conn.write(bytes.subarray(written));
}

async function readHead(conn: Deno.Conn): Promise<string | undefined> {
  const buffer = new Uint8Array(16 * 1024);
  let text = "";
  while (!text.includes("\r\n\r\n")) {
    const n = await conn.read(buffer);
    if (n === null) return undefined;
    text += new TextDecoder().decode(buffer.subarray(0, n));
  }
  return text;
}

/** Starts the server on a free loopback port. */
export function startFakeWatchServer(options: FakeWatchServerOptions): FakeWatchServer {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  const requests: URL[] = [];
  const watches: URL[] = [];
  const open = new Set<Deno.Conn>();
  const handlers = new Set<Promise<void>>();

  const respond = async (conn: Deno.Conn) => {
    const head = await readHead(conn);
    if (head === undefined) return;
    const target = head.split(" ", 2)[1] ?? "/";
    const url = new URL(target, `http://127.0.0.1:${port}`);
    requests.push(url);
    if (url.searchParams.get("watch") !== "true") {
      const { items, resourceVersion } = options.list(url);
      const body = encoder.encode(
        JSON.stringify({ kind: "List", apiVersion: "v1", metadata: { resourceVersion }, items }),
      );
      await writeAll(
        conn,
        encoder.encode(
          `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n`,
        ),
      );
      await writeAll(conn, body);
      return;
    }
    const script = options.watch(url, watches.length);
    watches.push(url);
    const status = script?.status ?? 200;
    if (status !== 200) {
      const body = encoder.encode(JSON.stringify(script?.body ?? {}));
      await writeAll(
        conn,
        encoder.encode(
          `HTTP/1.1 ${status} Scripted\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n`,
        ),
      );
      await writeAll(conn, body);
      return;
    }
    await writeAll(
      conn,
      encoder.encode(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
      ),
    );
    for (const step of script?.steps ?? []) {
      if ("send" in step) await writeAll(conn, chunk(step.send));
      else if ("wait" in step) await step.wait;
      else if ("cut" in step) return;
      else if ("end" in step) {
        await writeAll(conn, encoder.encode("0\r\n\r\n"));
        return;
      }
    }
    // Hold the stream open until the client goes away (or the server closes).
    const buffer = new Uint8Array(1024);
    while ((await conn.read(buffer)) !== null) {
      // discard
    }
  };

  const accepting = (async () => {
    for await (const conn of listener) {
      open.add(conn);
      const handler = respond(conn).catch(() => {}).finally(() => {
        open.delete(conn);
        try {
          conn.close();
        } catch {
          // already closed
        }
        handlers.delete(handler);
      });
      handlers.add(handler);
    }
  })().catch(() => {});

  const client = Deno.createHttpClient({});
  let closed: Promise<void> | undefined;
  const close = () =>
    closed ??= (async () => {
      listener.close();
      await accepting;
      for (const conn of open) {
        try {
          conn.close();
        } catch {
          // already closed
        }
      }
      await Promise.all([...handlers]);
      client.close();
    })();

  return {
    access: {
      server: `http://127.0.0.1:${port}`,
      namespace: undefined,
      origin: "fake-watch-server",
      headers: () => Promise.resolve(new Headers()),
      client,
      close() {},
    },
    requests,
    watches,
    close,
    [Symbol.asyncDispose]: close,
  };
}
