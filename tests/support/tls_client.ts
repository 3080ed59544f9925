/**
 * Test support: a minimal TLS client that connects to a loopback port with a
 * chosen server name (SNI) and trusted certificates, and either completes the
 * handshake only, sends one HTTP/1.1 request with `Connection: close`, or
 * opens a WebSocket (raw frames, decoded by `lib/websocket/ws_frame.ts`, so the
 * test sees exactly what the server sent); and a keep-alive request on a
 * connection already open.
 * Used by the tests of `lib/tls/` and `lib/server/`; not part of Sluice.
 *
 * @module
 */
import { concatBytes } from "./raw_http.ts";
import { within } from "./wait.ts";
import {
  decodeClosePayload,
  encodeFrame,
  FrameDecoder,
  type WsFrame,
} from "../../lib/websocket/ws_frame.ts";

/**
 * Sends a keep-alive `GET path` for host `a.test` on `conn` and reads until the
 * response ends with `ok` (each read within 5 s); resolves with the text read.
 */
export async function keepAliveOk(conn: Deno.Conn, path = "/"): Promise<string> {
  const bytes = new TextEncoder().encode(`GET ${path} HTTP/1.1\r\nHost: a.test\r\n\r\n`);
  let at = 0;
  while (at < bytes.length) at += await conn.write(bytes.subarray(at));
  const decoder = new TextDecoder();
  let text = "";
  const buffer = new Uint8Array(4096);
  while (!text.endsWith("\r\n\r\nok")) {
    const n = await within(5_000, "the answer", conn.read(buffer));
    if (n === null) throw new Error(`Closed after "${text}"`);
    text += decoder.decode(buffer.subarray(0, n));
  }
  return text;
}

/** Options of {@linkcode tlsHandshake} and {@linkcode httpsGet}. */
export interface TlsClientOptions {
  /** Sent as SNI and checked against the certificate. An IP address sends no SNI. */
  readonly serverName: string;
  /** PEM certificates the client trusts. */
  readonly caCerts: readonly string[];
  /** Default `["http/1.1"]`. */
  readonly alpnProtocols?: readonly string[];
  /** Default `"127.0.0.1"`. */
  readonly hostname?: string;
}

/** Completes a TLS handshake and closes; returns the negotiated ALPN protocol. Throws when it fails. */
export async function tlsHandshake(
  port: number,
  options: TlsClientOptions,
): Promise<string | null> {
  const conn = await connect(port, options);
  try {
    const info = await conn.handshake();
    return info.alpnProtocol;
  } finally {
    closeQuietly(conn);
  }
}

/** The parts of a response {@linkcode httpsGet} returns. */
export interface SimpleResponse {
  readonly status: number;
  readonly headers: string;
  readonly body: string;
}

/** Sends `GET path` over a fresh TLS connection (`Connection: close`) and reads the whole response. */
export async function httpsGet(
  port: number,
  path: string,
  options: TlsClientOptions,
): Promise<SimpleResponse> {
  const conn = await connect(port, options);
  let text: string;
  try {
    await conn.write(
      new TextEncoder().encode(
        `GET ${path} HTTP/1.1\r\nHost: ${options.serverName}\r\nConnection: close\r\n\r\n`,
      ),
    );
    text = await new Response(conn.readable).text();
  } catch (error) {
    closeQuietly(conn);
    throw error;
  }
  const end = text.indexOf("\r\n\r\n");
  const head = end < 0 ? text : text.slice(0, end);
  const match = /^HTTP\/1\.1 (\d{3})/.exec(head);
  if (match === null) throw new Error(`Cannot parse the response: "${text.slice(0, 60)}"`);
  return { status: Number(match[1]), headers: head, body: end < 0 ? "" : text.slice(end + 4) };
}

/** A client WebSocket opened by {@linkcode wssConnect}. */
export interface TestWebSocket {
  /** The response head (status line and headers) of the upgrade. */
  readonly head: string;
  /** Sends one masked frame. */
  send(opcode: number, payload: Uint8Array): Promise<void>;
  /** The next frame, or `null` when the connection ended first. */
  receive(): Promise<WsFrame | null>;
  /** Closes the connection (without a close frame: send one first to close cleanly). */
  close(): void;
}

/** The close code of a close frame's payload (1005 when it has none). */
export function closeCode(frame: WsFrame): number {
  return decodeClosePayload(frame.payload).code;
}

/** Opens a WebSocket to `path` over a fresh TLS connection (ALPN `http/1.1`); throws if the answer is not 101. */
export async function wssConnect(
  port: number,
  path: string,
  options: TlsClientOptions,
): Promise<TestWebSocket> {
  const conn = await connect(port, options);
  const reader = conn.readable.getReader();
  const writer = conn.writable.getWriter();
  const frames = new FrameDecoder({ maxPayload: 1 << 20, expectMasked: false });
  const close = () => {
    reader.releaseLock();
    writer.releaseLock();
    closeQuietly(conn);
  };
  let head: string;
  try {
    const key = btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(16))));
    await writer.write(
      new TextEncoder().encode(
        `GET ${path} HTTP/1.1\r\nHost: ${options.serverName}\r\nUpgrade: websocket\r\n` +
          `Connection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
      ),
    );
    let received: Uint8Array = new Uint8Array(0);
    while (true) {
      const end = indexOfBlankLine(received);
      if (end >= 0) {
        head = new TextDecoder().decode(received.subarray(0, end));
        frames.push(received.subarray(end + 4));
        break;
      }
      const { value, done } = await reader.read();
      if (done) throw new Error("Cannot open a WebSocket: the connection ended first");
      received = concatBytes([received, value]);
    }
    if (!head.startsWith("HTTP/1.1 101 ")) {
      throw new Error(`Cannot open a WebSocket: the answer is "${head.split("\r\n")[0]}"`);
    }
  } catch (error) {
    close();
    throw error;
  }
  return {
    head,
    async send(opcode, payload) {
      await writer.write(encodeFrame(opcode, payload, { mask: true }));
    },
    async receive() {
      while (true) {
        const frame = frames.next();
        if (frame !== undefined) return frame;
        const { value, done } = await reader.read();
        if (done) return null;
        frames.push(value);
      }
    },
    close,
  };
}

function indexOfBlankLine(bytes: Uint8Array): number {
  for (let i = 0; i + 3 < bytes.length; i++) {
    if (bytes[i] === 13 && bytes[i + 1] === 10 && bytes[i + 2] === 13 && bytes[i + 3] === 10) {
      return i;
    }
  }
  return -1;
}

async function connect(port: number, options: TlsClientOptions): Promise<Deno.TlsConn> {
  const tcp = await Deno.connect({ hostname: options.hostname ?? "127.0.0.1", port });
  try {
    return await Deno.startTls(tcp, {
      hostname: options.serverName,
      caCerts: [...options.caCerts],
      alpnProtocols: [...(options.alpnProtocols ?? ["http/1.1"])],
    });
  } catch (error) {
    closeQuietly(tcp);
    throw error;
  }
}

function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch {
    // Already closed, e.g. by a failed read or by startTls taking it over.
  }
}
