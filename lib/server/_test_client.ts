/**
 * Test support: a minimal TLS client that connects to a loopback port with a
 * chosen server name (SNI) and trusted certificates, and either completes the
 * handshake only, sends one HTTP/1.1 request with `Connection: close`, or
 * opens a WebSocket (raw frames, so the test sees exactly what the server sent).
 * Used by the tests of `lib/tls/` and `lib/server/`; not part of Sluice.
 *
 * @module
 */

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

/** One WebSocket frame as received (payloads of at most 65,535 bytes; unmasked, as a server sends). */
export interface WebSocketFrame {
  readonly fin: boolean;
  /** 1 text, 2 binary, 8 close, 9 ping, 10 pong. */
  readonly opcode: number;
  readonly payload: Uint8Array;
}

/** A client WebSocket opened by {@linkcode wssConnect}. */
export interface TestWebSocket {
  /** The response head (status line and headers) of the upgrade. */
  readonly head: string;
  /** Sends one masked frame. */
  send(opcode: number, payload: Uint8Array): Promise<void>;
  /** The next frame, or `null` when the connection ended first. */
  receive(): Promise<WebSocketFrame | null>;
  /** Closes the connection (without a close frame: send one first to close cleanly). */
  close(): void;
}

/** The close code of a close frame's payload (1005 when it has none). */
export function closeCode(frame: WebSocketFrame): number {
  return frame.payload.length >= 2 ? (frame.payload[0]! << 8) | frame.payload[1]! : 1005;
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
  let buffer = new Uint8Array(0);
  const fill = async (): Promise<boolean> => {
    const { value, done } = await reader.read();
    if (done) return false;
    const next = new Uint8Array(buffer.length + value.length);
    next.set(buffer);
    next.set(value, buffer.length);
    buffer = next;
    return true;
  };
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
    while (true) {
      const end = indexOfBlankLine(buffer);
      if (end >= 0) {
        head = new TextDecoder().decode(buffer.subarray(0, end));
        buffer = buffer.slice(end + 4);
        break;
      }
      if (!(await fill())) throw new Error("Cannot open a WebSocket: the connection ended first");
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
      if (payload.length > 0xffff) throw new RangeError("Cannot send a frame over 65,535 bytes");
      const lengthBytes = payload.length < 126
        ? [0x80 | payload.length]
        : [0x80 | 126, payload.length >> 8, payload.length & 0xff];
      const mask = crypto.getRandomValues(new Uint8Array(4));
      const frame = new Uint8Array(1 + lengthBytes.length + 4 + payload.length);
      frame.set([0x80 | opcode, ...lengthBytes, ...mask]);
      const start = 1 + lengthBytes.length + 4;
      for (let i = 0; i < payload.length; i++) frame[start + i] = payload[i]! ^ mask[i % 4]!;
      await writer.write(frame);
    },
    async receive() {
      while (true) {
        if (buffer.length >= 2) {
          let length = buffer[1]! & 0x7f;
          let start = 2;
          if (length === 127) throw new Error("Cannot read a frame over 65,535 bytes");
          if (length === 126) {
            start = 4;
            length = buffer.length >= 4 ? (buffer[2]! << 8) | buffer[3]! : Infinity;
          }
          if (buffer.length >= start + length) {
            const frame = {
              fin: (buffer[0]! & 0x80) !== 0,
              opcode: buffer[0]! & 0x0f,
              payload: buffer.slice(start, start + length),
            };
            buffer = buffer.slice(start + length);
            return frame;
          }
        }
        if (!(await fill())) return null;
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
