/**
 * A raw TCP backend on 127.0.0.1 for tests that must see and write exact
 * bytes: it accepts connections, counts them, and hands each to a test's
 * script as a {@linkcode ScriptedConn} (buffered reads of request heads and
 * of chunked or length-framed bodies; writes of bytes, or of text one byte
 * per char; both counted). Owns the listener and every connection's
 * lifetime: a connection closes when its script returns, and `close()` ends
 * them all. Knows nothing of the proxy, and of HTTP only where a head ends
 * and how a body is framed.
 *
 * @module
 */

import { closeQuietly, concatBytes, latin1, latin1Bytes } from "./raw_http.ts";

/** One accepted backend connection, with buffered reads. */
export class ScriptedConn {
  /** 0 for the first connection the backend accepted. */
  readonly index: number;
  readonly conn: Deno.Conn;
  /** Bytes written to this connection so far (by `write`). */
  written = 0;
  /** Bytes read from this connection so far. */
  read = 0;
  closed = false;
  #buf = new Uint8Array(0);
  #scratch = new Uint8Array(256 * 1024);
  #eof = false;

  constructor(conn: Deno.Conn, index: number) {
    this.conn = conn;
    this.index = index;
  }

  /** Reads the next request head (through CRLF CRLF); null on EOF first. */
  async readHead(): Promise<string | null> {
    let from = 0;
    while (true) {
      const end = indexOfBlankLine(this.#buf, from);
      if (end !== -1) {
        const head = latin1(this.#buf.subarray(0, end + 4));
        this.#buf = this.#buf.slice(end + 4);
        return head;
      }
      from = Math.max(0, this.#buf.length - 3);
      if (!(await this.#fill())) return null;
    }
  }

  /** The bytes read but not consumed yet (possibly none); consumes them. */
  takeBuffered(): Uint8Array {
    const out = this.#buf;
    this.#buf = new Uint8Array(0);
    return out;
  }

  /** The bytes read but not consumed yet, or else the next read; null at EOF. */
  async readSome(): Promise<Uint8Array | null> {
    if (this.#buf.length === 0 && !(await this.#fill())) return null;
    return this.takeBuffered();
  }

  /**
   * Reads a chunked body, calling `onChunk` for each chunk's data; true when
   * the last chunk (and trailer section) arrived, false when the connection
   * ended first.
   */
  async readChunked(onChunk: (data: Uint8Array) => void): Promise<boolean> {
    while (true) {
      const line = await this.#line();
      if (line === null) return false;
      const size = parseInt(line.split(";")[0]!, 16);
      if (!(size >= 0)) return false;
      if (size === 0) {
        while (true) {
          const trailer = await this.#line();
          if (trailer === null) return false;
          if (trailer === "") return true;
        }
      }
      if ((await this.readLength(size, onChunk)) < size) return false;
      if ((await this.#line()) !== "") return false;
    }
  }

  /** Streams a Content-Length body to `onChunk`; returns the bytes that arrived before EOF. */
  async readLength(n: number, onChunk: (data: Uint8Array) => void): Promise<number> {
    let got = 0;
    while (got < n) {
      if (this.#buf.length === 0 && !(await this.#fill())) break;
      const take = Math.min(n - got, this.#buf.length);
      onChunk(this.#buf.subarray(0, take));
      this.#buf = this.#buf.slice(take);
      got += take;
    }
    return got;
  }

  /** Writes bytes, or text one byte per char (latin1: callers wanting UTF-8 encode it). */
  async write(data: string | Uint8Array): Promise<void> {
    const bytes = typeof data === "string" ? latin1Bytes(data) : data;
    let at = 0;
    while (at < bytes.length) {
      const n = await this.conn.write(bytes.subarray(at));
      at += n;
      this.written += n;
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    closeQuietly(this.conn);
  }

  async #line(): Promise<string | null> {
    while (true) {
      const lf = this.#buf.indexOf(10);
      if (lf !== -1) {
        const line = latin1(this.#buf.subarray(0, lf));
        this.#buf = this.#buf.slice(lf + 1);
        return line.endsWith("\r") ? line.slice(0, -1) : line;
      }
      if (!(await this.#fill())) return null;
    }
  }

  async #fill(): Promise<boolean> {
    if (this.#eof) return false;
    const n = await this.conn.read(this.#scratch).catch(() => null);
    if (n === null) {
      this.#eof = true;
      return false;
    }
    this.read += n;
    const chunk = this.#scratch.subarray(0, n);
    this.#buf = this.#buf.length === 0 ? chunk.slice() : concatBytes([this.#buf, chunk]);
    return true;
  }
}

/** What {@linkcode startScriptedBackend} returns; `close()` it at the end of the test. */
export interface ScriptedBackend {
  readonly port: number;
  /** Every connection accepted so far, by index. */
  readonly connections: readonly ScriptedConn[];
  /** Connections whose script has not returned yet. */
  readonly open: number;
  close(): Promise<void>;
}

/** Options of {@linkcode startScriptedBackend}. */
export interface ScriptedBackendOptions {
  /** Sets TCP_NODELAY on every accepted connection (default false). */
  noDelay?: boolean;
}

/**
 * Starts a raw backend on 127.0.0.1; each accepted connection runs `script`
 * (its errors are the script's to record: they are dropped here) and is
 * closed when it returns.
 */
export function startScriptedBackend(
  script: (conn: ScriptedConn) => Promise<void>,
  options: ScriptedBackendOptions = {},
): ScriptedBackend {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const connections: ScriptedConn[] = [];
  const running = new Set<Promise<void>>();
  let open = 0;
  const accepting = (async () => {
    for await (const raw of listener) {
      if (options.noDelay) raw.setNoDelay(true);
      const conn = new ScriptedConn(raw, connections.length);
      connections.push(conn);
      open++;
      const task = script(conn).catch(() => {}).finally(() => {
        open--;
        conn.close();
        running.delete(task);
      });
      running.add(task);
    }
  })().catch(() => {});
  return {
    port: (listener.addr as Deno.NetAddr).port,
    connections,
    get open() {
      return open;
    },
    async close() {
      listener.close();
      await accepting;
      for (const conn of connections) conn.close();
      await Promise.all([...running]);
    },
  };
}

/** Where CR LF CR LF starts in `buf`, searching from `from`; -1 if nowhere. */
function indexOfBlankLine(buf: Uint8Array, from: number): number {
  for (let i = from; i + 3 < buf.length; i++) {
    if (buf[i] === 13 && buf[i + 1] === 10 && buf[i + 2] === 13 && buf[i + 3] === 10) return i;
  }
  return -1;
}
