/**
 * Test support for the WebSocket tests of `lib/proxy/`: a raw `Deno.listen`
 * WebSocket backend whose script writes the 101 and every frame byte itself, a
 * client `WebSocket` with a message queue (and {@linkcode RawWsClient}, one
 * that writes its frames itself), and the proxy harness in between with a
 * relay counter. Knows nothing of the relay's internals: it only sees bytes
 * on the backend socket and events on the client.
 *
 * @module
 */

import { startProxy } from "./proxy_harness.ts";
import type { HarnessOptions, ProxyHarness } from "./proxy_harness.ts";
import { concatBytes, latin1, latin1Bytes } from "./raw_http.ts";
import {
  type ScriptedBackend,
  type ScriptedConn,
  startScriptedBackend,
} from "./scripted_backend.ts";
import { waitFor, within } from "./wait.ts";
import {
  decodeClosePayload,
  encodeFrame,
  FrameDecoder,
  OP_CLOSE,
  type WsFrame,
} from "../../lib/websocket/ws_frame.ts";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/** The sample `Sec-WebSocket-Key` of RFC 6455 section 1.3. */
export const SAMPLE_KEY = "dGhlIHNhbXBsZSBub25jZQ==";

/** A frame as a server sends it (unmasked), or with `mask` as a client does. */
export function wsFrame(
  opcode: number,
  payload: Uint8Array | string,
  options: { readonly fin?: boolean; readonly mask?: boolean } = {},
): Uint8Array {
  const bytes = typeof payload === "string" ? new TextEncoder().encode(payload) : payload;
  return encodeFrame(opcode, bytes, { mask: options.mask ?? false, fin: options.fin ?? true });
}

/** The `Sec-WebSocket-Accept` value RFC 6455 section 4.2.2 derives from `key`. */
export async function acceptFor(key: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-1", new TextEncoder().encode(key + GUID));
  return btoa(String.fromCharCode(...new Uint8Array(digest)));
}

/** The close code of a close frame, 1005 for an empty one, undefined for others. */
export function closeCodeOf(frame: WsFrame): number | undefined {
  if (frame.opcode !== OP_CLOSE) return undefined;
  try {
    return decodeClosePayload(frame.payload).code;
  } catch {
    return -1;
  }
}

/** One backend connection as its script sees it. */
export interface WsBackendConn {
  /** The upgrade request head, through CRLF CRLF. */
  readonly head: string;
  /** The value of a request field (first one, trimmed), case-insensitive. */
  field(name: string): string | undefined;
  /** Writes a valid 101 (plus `fields`, one `Name: value` each) and `after` in the same write. */
  accept(options?: { fields?: readonly string[]; after?: Uint8Array }): Promise<void>;
  write(data: string | Uint8Array): Promise<void>;
  /** The next frame the proxy sent (also recorded), or null once it closed; rejects after `timeoutMs`. */
  nextFrame(timeoutMs?: number): Promise<WsFrame | null>;
  /** Bytes the proxy sent since the last frame read; reads until EOF. Counts instead of keeping. */
  countToEnd(timeoutMs?: number): Promise<number>;
}

/** What one backend connection saw. */
export interface WsBackendRecord {
  /** Frames read from the proxy, by the script or by the drain after it. */
  readonly frames: WsFrame[];
  /** True once the proxy closed the connection (read returned EOF or failed). */
  eof: boolean;
  /** A framing error in what the proxy sent (unmasked frame...). */
  error: string | undefined;
}

export type WsScript = (conn: WsBackendConn) => Promise<void>;

/**
 * A raw backend: reads the upgrade head, runs `script`, then reads frames until
 * the proxy closes (so the test can see it did). Close it at the end.
 */
export class WsBackend {
  readonly port: number;
  readonly conns: WsBackendRecord[] = [];
  #backend: ScriptedBackend;

  constructor(script: WsScript) {
    this.#backend = startScriptedBackend((conn) => {
      const record: WsBackendRecord = { frames: [], eof: false, error: undefined };
      this.conns.push(record);
      return this.#run(conn, record, script).catch((error) => {
        record.error ??= String(error);
      });
    });
    this.port = this.#backend.port;
  }

  /** Waits until connection `index` exists and the proxy has closed it. */
  async closedByProxy(index: number, timeoutMs = 10_000): Promise<WsBackendRecord> {
    return await waitFor(
      `the proxy to close backend connection ${index}`,
      () => this.conns[index]?.eof ? this.conns[index] : undefined,
      { timeoutMs },
    );
  }

  async close(): Promise<void> {
    await this.#backend.close();
  }

  async #run(conn: ScriptedConn, record: WsBackendRecord, script: WsScript): Promise<void> {
    const decoder = new FrameDecoder({ maxPayload: 256 * 1024 * 1024, expectMasked: true });
    const upgrade = await conn.readHead();
    if (upgrade === null) {
      record.eof = true;
      return;
    }
    const head = upgrade;
    decoder.push(conn.takeBuffered());
    const write = (data: string | Uint8Array) => conn.write(data);
    const field = (name: string) => {
      const lower = name.toLowerCase();
      for (const line of head.split("\r\n").slice(1)) {
        const colon = line.indexOf(":");
        if (colon > 0 && line.slice(0, colon).trim().toLowerCase() === lower) {
          return line.slice(colon + 1).trim();
        }
      }
      return undefined;
    };
    const readMore = async (timeoutMs: number): Promise<Uint8Array | null> => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const read = conn.readSome();
      const result = await Promise.race([
        read,
        new Promise<"timeout">((resolve) =>
          timer = setTimeout(() => resolve("timeout"), timeoutMs)
        ),
      ]);
      clearTimeout(timer);
      if (result === "timeout") {
        conn.close();
        await read;
        throw new Error("Timed out reading from the proxy");
      }
      if (result === null) record.eof = true;
      return result;
    };
    const nextFrame = async (timeoutMs = 10_000): Promise<WsFrame | null> => {
      const deadline = performance.now() + timeoutMs;
      for (;;) {
        let frame: WsFrame | undefined;
        try {
          frame = decoder.next();
        } catch (error) {
          record.error = String(error);
          throw error;
        }
        if (frame !== undefined) {
          record.frames.push(frame);
          return frame;
        }
        if (record.eof) return null;
        const bytes = await readMore(Math.max(1, deadline - performance.now()));
        if (bytes !== null) decoder.push(bytes);
      }
    };
    const conn$: WsBackendConn = {
      head,
      field,
      async accept(options = {}) {
        const key = field("sec-websocket-key") ?? "";
        const lines = [
          "HTTP/1.1 101 Switching Protocols",
          "Upgrade: websocket",
          "Connection: Upgrade",
          `Sec-WebSocket-Accept: ${await acceptFor(key)}`,
          ...(options.fields ?? []),
        ];
        const text = latin1Bytes(lines.join("\r\n") + "\r\n\r\n");
        await write(concatBytes([text, options.after ?? new Uint8Array(0)]));
      },
      write,
      nextFrame,
      async countToEnd(timeoutMs = 30_000) {
        const deadline = performance.now() + timeoutMs;
        let total = 0;
        for (;;) {
          const bytes = await readMore(Math.max(1, deadline - performance.now()));
          if (bytes === null) return total;
          total += bytes.length;
        }
      },
    };
    await script(conn$);
    // Whatever the script left: frames until the proxy closes (bounded by backend.close()).
    while (!record.eof) {
      if (await nextFrame(60_000) === null) return;
    }
  }
}

/** A client WebSocket with a message queue. */
export interface WsClient {
  readonly ws: WebSocket;
  readonly messages: (string | ArrayBuffer)[];
  /** True once `open` fired. */
  readonly opened: () => boolean;
  /** Resolves with the close event (every client gets one). */
  readonly closed: Promise<CloseEvent>;
  /** Resolves once open; rejects if it closed first. */
  waitOpen(timeoutMs?: number): Promise<void>;
  /** The next message; rejects after `timeoutMs`. */
  next(timeoutMs?: number): Promise<string | ArrayBuffer>;
}

export function connectClient(url: string, protocols?: string[]): WsClient {
  const ws = new WebSocket(url, protocols);
  ws.binaryType = "arraybuffer";
  const messages: (string | ArrayBuffer)[] = [];
  let open = false;
  ws.onmessage = (event) => messages.push(event.data);
  ws.onerror = () => {};
  const openedPromise = new Promise<void>((resolve, reject) => {
    ws.onopen = () => {
      open = true;
      resolve();
    };
    ws.addEventListener("close", () => reject(new Error("WebSocket closed before opening")));
  });
  openedPromise.catch(() => {});
  const closed = new Promise<CloseEvent>((resolve) => ws.addEventListener("close", resolve));
  let read = 0;
  return {
    ws,
    messages,
    opened: () => open,
    closed,
    waitOpen: (timeoutMs = 10_000) => within(timeoutMs, "the client to open", openedPromise),
    async next(timeoutMs = 10_000) {
      await waitFor("a message to the client", () => messages.length > read, { timeoutMs });
      return messages[read++] as string | ArrayBuffer;
    },
  };
}

/** A proxy in front of a {@linkcode WsBackend}, counting relays. */
export interface WsWorld {
  readonly proxy: ProxyHarness;
  readonly backend: WsBackend;
  /** `+1`/`-1` as relays start and end. */
  readonly deltas: number[];
  readonly url: string;
  /** Waits until every started relay has ended. */
  relaysEnded(timeoutMs?: number): Promise<void>;
}

/** Runs `fn` with a proxy in front of a backend running `script`; closes both. */
export async function withWsWorld(
  script: WsScript,
  fn: (world: WsWorld) => Promise<void>,
  options: Partial<Omit<HarnessOptions, "routes">> = {},
): Promise<void> {
  const backend = new WsBackend(script);
  const deltas: number[] = [];
  const proxy = await startProxy({
    routes: [{ endpoints: [{ address: "127.0.0.1", port: backend.port }] }],
    readTimeoutMs: 10_000,
    webSocketIdleTimeoutMs: 60_000,
    onWebSocket: (delta) => deltas.push(delta),
    ...options,
  });
  const world: WsWorld = {
    proxy,
    backend,
    deltas,
    url: `ws://127.0.0.1:${proxy.port}/ws`,
    async relaysEnded(timeoutMs = 10_000) {
      await waitFor("every relay to end", () => {
        const started = deltas.filter((d) => d === 1).length;
        return started > 0 && deltas.length === 2 * started;
      }, { timeoutMs });
    },
  };
  try {
    await fn(world);
  } finally {
    await proxy.close();
    await backend.close();
  }
}

/** A raw client speaking frames itself over TCP, after a hand-written upgrade. */
export class RawWsClient {
  readonly status: number;
  readonly head: string;
  #conn: Deno.Conn;
  #decoder = new FrameDecoder({ maxPayload: 256 * 1024 * 1024, expectMasked: false });
  #eof = false;
  #closed = false;

  private constructor(conn: Deno.Conn, head: string, rest: Uint8Array) {
    this.#conn = conn;
    this.head = head;
    this.status = Number(head.split(" ")[1]);
    this.#decoder.push(rest);
  }

  static async open(port: number, target = "/ws", extra: readonly string[] = []) {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    const request = [
      `GET ${target} HTTP/1.1`,
      "Host: chat.example",
      "Upgrade: websocket",
      "Connection: Upgrade",
      `Sec-WebSocket-Key: ${SAMPLE_KEY}`,
      "Sec-WebSocket-Version: 13",
      ...extra,
    ].join("\r\n") + "\r\n\r\n";
    await conn.write(latin1Bytes(request));
    let buf = new Uint8Array(0);
    const chunk = new Uint8Array(64 * 1024);
    for (;;) {
      const end = latin1(buf).indexOf("\r\n\r\n");
      if (end >= 0) {
        return new RawWsClient(conn, latin1(buf.subarray(0, end)), buf.slice(end + 4));
      }
      const n = await within(10_000, "the proxy's answer", conn.read(chunk));
      if (n === null) {
        conn.close();
        throw new Error("Connection closed before the 101");
      }
      buf = concatBytes([buf, chunk.subarray(0, n)]);
    }
  }

  async send(bytes: Uint8Array): Promise<void> {
    let offset = 0;
    while (offset < bytes.length) offset += await this.#conn.write(bytes.subarray(offset));
  }

  /** The next frame, or null at EOF. */
  async next(timeoutMs = 10_000): Promise<WsFrame | null> {
    const chunk = new Uint8Array(64 * 1024);
    for (;;) {
      const frame = this.#decoder.next();
      if (frame !== undefined) return frame;
      if (this.#eof) return null;
      const n = await within(timeoutMs, "a frame from the proxy", this.#conn.read(chunk));
      if (n === null) this.#eof = true;
      else this.#decoder.push(chunk.subarray(0, n));
    }
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }
}
