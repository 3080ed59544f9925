/**
 * A test backend that describes what it received, over a raw HTTP/1.1 server
 * on `Deno.listen`/`Deno.listenTls`, so it sees header fields in wire order
 * and case, duplicates, the request line as sent, and every request a
 * connection carried (a smuggled second request shows up in its log).
 *
 * Importable (`startEchoBackend`) and runnable:
 *
 *   deno run -A tests/support/echo_backend.ts --port 9001 --service web --pod web-1 \
 *     [--hostname 10.244.1.2] [--cert cert.pem --key key.pem] [--log requests.jsonl]
 *
 * Identity also from the environment: ECHO_SERVICE, ECHO_POD (else POD_NAME, HOSTNAME).
 *
 * Endpoints (every other path echoes):
 * - any path: JSON `{ service, pod, method, target, version, host, headers, body: { length, sha256 }, tls, remoteAddr }`;
 *   `?status=N` answers N; `?delay=ms` waits before answering; `?close=1` closes after answering.
 * - `/ws`: WebSocket echo (subprotocol: `?protocol=` or the first offered; `?refuse=N` answers N instead).
 *   Text commands: `headers` (the upgrade request's fields as JSON), `close:CODE:REASON`, `drop`
 *   (TCP close without a close frame), `fragments:N` (one message in N frames), `big:N` (N-byte binary).
 * - `/sse?n=5&interval=ms`: chunked `text/event-stream`, one event per chunk.
 * - `/gzip`: a pre-compressed body, `Content-Encoding: gzip`, `X-Body-Sha256` of the compressed bytes.
 * - `/bytes?n=N[&chunked=1][&stall=1]`: N pattern bytes ({@linkcode patternBytes}) streamed in 64 KiB
 *   writes; `stall=1` stops after the first 64 KiB and never finishes.
 * - `/cookies?n=3`: N `Set-Cookie` fields. `/redirect?to=/x&status=302`: a redirect with a cookie.
 * - `/hop`: a chunked response carrying hop-by-hop fields and a trailer.
 * - `/close`: a close-delimited body. `/http10`: an HTTP/1.0 response. `/1xx`: 103 and 100 before the 200.
 * - `/malformed?kind=K`: a broken response (status, cl-te, cl-dup, cl-bad, chunk-bad, fold,
 *   space-colon, te-gzip, eof-head, eof-body, nul, huge-head).
 * - `/drop`: closes the connection without answering.
 *
 * @module
 */

import { createHash } from "node:crypto";
import { gzipSync } from "node:zlib";
import {
  decodeClosePayload,
  encodeClosePayload,
  encodeFrame,
  FrameDecoder,
  OP_BINARY,
  OP_CLOSE,
  OP_CONTINUATION,
  OP_PING,
  OP_PONG,
  OP_TEXT,
} from "../../lib/websocket/ws_frame.ts";
import { concatBytes, latin1, latin1Bytes } from "./raw_http.ts";

export interface EchoBackendOptions {
  /** Address to bind. Default 127.0.0.1. */
  hostname?: string;
  /** Port; 0 picks a free one. Default 0. */
  port?: number;
  /** Service identity reported in every answer. */
  name?: string;
  /** Pod identity reported in every answer. */
  pod?: string;
  /** Serve TLS (HTTP/1.1 only) with these PEM contents. */
  tls?: { cert: string; key: string };
  /** Append every request as a JSON line to this file. */
  logFile?: string;
}

/** One request as received (also for upgrade requests and parse failures). */
export interface LoggedRequest {
  readonly connection: number;
  readonly method: string;
  readonly target: string;
  readonly version: string;
  readonly headers: [string, string][];
  bodyLength: number;
  bodySha256: string;
  /** Set when the request could not be parsed. */
  error?: string;
  /** For /ws: the close frame received from the client side. */
  wsClose?: { code: number; reason: string };
  /** For /ws: messages received. */
  wsMessages?: number;
}

export interface EchoBackend {
  readonly hostname: string;
  readonly port: number;
  /** `http://host:port` (or https). */
  readonly url: string;
  readonly name: string;
  readonly pod: string;
  /** Every request received, in order. */
  readonly requests: LoggedRequest[];
  /** TCP connections accepted so far. */
  readonly connectionsAccepted: number;
  /** TCP connections currently open. */
  readonly connectionsOpen: number;
  /** Resolves once `predicate` holds (checked on every logged event), rejects after `timeoutMs`. */
  waitFor(predicate: () => boolean, timeoutMs?: number): Promise<void>;
  /** Stops listening and closes every connection. */
  close(): Promise<void>;
}

const encoder = new TextEncoder();
const BLOCK = 64 * 1024;
const MAX_HEAD = 64 * 1024;

/** The bytes `/bytes` serves from `offset`: a pattern that differs per 64 KiB block. */
export function patternBytes(offset: number, length: number): Uint8Array {
  const out = new Uint8Array(length);
  for (let i = 0; i < length; i++) {
    const position = offset + i;
    out[i] = (position * 31 + Math.floor(position / BLOCK) * 17 + 7) & 0xff;
  }
  return out;
}

/** SHA-256 (hex) of the first `n` pattern bytes. */
export function patternSha256(n: number): string {
  const hash = createHash("sha256");
  for (let offset = 0; offset < n; offset += BLOCK) {
    hash.update(patternBytes(offset, Math.min(BLOCK, n - offset)));
  }
  return hash.digest("hex");
}

/** The body `/gzip` serves, before compression. */
export const GZIP_PLAIN = "Sluice passes compressed bytes through untouched.\n".repeat(200);

/** Starts a backend; close it at the end of the test. */
export function startEchoBackend(options: EchoBackendOptions = {}): Promise<EchoBackend> {
  const hostname = options.hostname ?? "127.0.0.1";
  const listener: Deno.Listener = options.tls
    ? Deno.listenTls({
      hostname,
      port: options.port ?? 0,
      cert: options.tls.cert,
      key: options.tls.key,
      alpnProtocols: ["http/1.1"],
    })
    : Deno.listen({ hostname, port: options.port ?? 0 });
  const server = new EchoServer(listener, {
    name: options.name ?? "echo",
    pod: options.pod ?? "echo-0",
    tls: options.tls !== undefined,
    logFile: options.logFile,
  });
  server.run();
  const addr = listener.addr as Deno.NetAddr;
  const host = addr.hostname.includes(":") ? `[${addr.hostname}]` : addr.hostname;
  return Promise.resolve({
    hostname: addr.hostname,
    port: addr.port,
    url: `${options.tls ? "https" : "http"}://${host}:${addr.port}`,
    name: server.name,
    pod: server.pod,
    requests: server.requests,
    get connectionsAccepted() {
      return server.accepted;
    },
    get connectionsOpen() {
      return server.open.size;
    },
    waitFor: (predicate, timeoutMs = 5_000) => server.waitFor(predicate, timeoutMs),
    close: () => server.close(),
  });
}

class Connection {
  #conn: Deno.Conn;
  #buf = new Uint8Array(MAX_HEAD + 1024);
  #start = 0;
  #end = 0;
  closed = false;

  constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  get buffered(): number {
    return this.#end - this.#start;
  }

  #pending: Promise<boolean> | undefined;

  /** Reads more bytes; concurrent callers share one read. */
  fill(): Promise<boolean> {
    this.#pending ??= this.#fill().finally(() => this.#pending = undefined);
    return this.#pending;
  }

  /** Resolves true when the peer closes (reads are buffered for later), false once `until` settles. */
  async closedBefore(until: Promise<void>): Promise<boolean> {
    let done = false;
    until.then(() => done = true);
    const watch = (async () => {
      while (!done) {
        if (!(await this.fill().catch(() => false))) return true;
      }
      return false;
    })();
    return await Promise.race([watch, until.then(() => false)]);
  }

  async #fill(): Promise<boolean> {
    if (this.#start === this.#end) this.#start = this.#end = 0;
    if (this.#end === this.#buf.length) {
      if (this.#start === 0) throw new Error("head too large");
      this.#buf.copyWithin(0, this.#start, this.#end);
      this.#end -= this.#start;
      this.#start = 0;
    }
    const n = await this.#conn.read(this.#buf.subarray(this.#end)).catch(() => null);
    if (n === null) return false;
    this.#end += n;
    return true;
  }

  /** Reads up to and including CRLF CRLF; null on a clean EOF before any byte. */
  async readHead(): Promise<string | null> {
    for (;;) {
      const text = latin1(this.#buf.subarray(this.#start, this.#end));
      const end = text.indexOf("\r\n\r\n");
      if (end !== -1) {
        this.#start += end + 4;
        return text.slice(0, end + 2);
      }
      const had = this.#end - this.#start;
      if (!(await this.fill())) {
        if (had === 0) return null;
        throw new Error("connection closed inside a head");
      }
    }
  }

  async readLine(): Promise<string> {
    for (;;) {
      const lf = this.#buf.subarray(this.#start, this.#end).indexOf(10);
      if (lf !== -1) {
        const line = latin1(this.#buf.subarray(this.#start, this.#start + lf));
        this.#start += lf + 1;
        if (!line.endsWith("\r")) throw new Error("bare LF");
        return line.slice(0, -1);
      }
      if (!(await this.fill())) throw new Error("connection closed inside a line");
    }
  }

  async read(max: number): Promise<Uint8Array | null> {
    if (this.#end === this.#start && !(await this.fill())) return null;
    const n = Math.min(max, this.#end - this.#start);
    const out = this.#buf.slice(this.#start, this.#start + n);
    this.#start += n;
    return out;
  }

  take(): Uint8Array {
    const out = this.#buf.slice(this.#start, this.#end);
    this.#start = this.#end = 0;
    return out;
  }

  async write(data: Uint8Array | string): Promise<void> {
    const bytes = typeof data === "string" ? latin1Bytes(data) : data;
    let offset = 0;
    while (offset < bytes.length) offset += await this.#conn.write(bytes.subarray(offset));
  }

  readRaw(buf: Uint8Array): Promise<number | null> {
    return this.#conn.read(buf);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }
}

interface ParsedRequest {
  method: string;
  target: string;
  version: string;
  headers: [string, string][];
  framing: { kind: "none" } | { kind: "length"; length: number } | { kind: "chunked" };
}

class EchoServer {
  readonly name: string;
  readonly pod: string;
  readonly requests: LoggedRequest[] = [];
  readonly open = new Set<Connection>();
  accepted = 0;
  #listener: Deno.Listener;
  #tls: boolean;
  #logFile: string | undefined;
  #waiters = new Set<() => void>();
  #tasks = new Set<Promise<void>>();
  #closing = false;
  #sleepers = new Map<ReturnType<typeof setTimeout>, () => void>();

  constructor(
    listener: Deno.Listener,
    options: { name: string; pod: string; tls: boolean; logFile: string | undefined },
  ) {
    this.#listener = listener;
    this.name = options.name;
    this.pod = options.pod;
    this.#tls = options.tls;
    this.#logFile = options.logFile;
  }

  run(): void {
    const accept = (async () => {
      for (;;) {
        let conn: Deno.Conn;
        try {
          conn = await this.#listener.accept();
        } catch {
          return;
        }
        this.accepted++;
        const task = this.#serve(conn, this.accepted).catch(() => {});
        this.#tasks.add(task);
        task.finally(() => this.#tasks.delete(task));
      }
    })();
    this.#tasks.add(accept);
  }

  waitFor(predicate: () => boolean, timeoutMs: number): Promise<void> {
    if (predicate()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const check = () => {
        if (predicate()) {
          cleanup();
          resolve();
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`Echo backend condition not met within ${timeoutMs} ms`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.#waiters.delete(check);
      };
      this.#waiters.add(check);
    });
  }

  async close(): Promise<void> {
    this.#closing = true;
    try {
      this.#listener.close();
    } catch {
      // Already closed.
    }
    for (const conn of this.open) conn.close();
    for (const [timer, wake] of this.#sleepers) {
      clearTimeout(timer);
      wake();
    }
    this.#sleepers.clear();
    await Promise.allSettled([...this.#tasks]);
  }

  #notify(): void {
    for (const waiter of [...this.#waiters]) waiter();
  }

  #log(entry: LoggedRequest): void {
    this.requests.push(entry);
    if (this.#logFile !== undefined) {
      Deno.writeTextFileSync(this.#logFile, JSON.stringify(entry) + "\n", { append: true });
    }
    this.#notify();
  }

  #sleep(ms: number): Promise<void> {
    if (this.#closing) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#sleepers.delete(timer);
        resolve();
      }, ms);
      this.#sleepers.set(timer, resolve);
    });
  }

  async #serve(raw: Deno.Conn, id: number): Promise<void> {
    const conn = new Connection(raw);
    this.open.add(conn);
    if ("setNoDelay" in raw && typeof raw.setNoDelay === "function") raw.setNoDelay(true);
    let tls: { alpnProtocol: string | null } | null = null;
    try {
      if (this.#tls) {
        const info = await (raw as Deno.TlsConn).handshake();
        tls = { alpnProtocol: info.alpnProtocol };
      }
      const remote = raw.remoteAddr as Deno.NetAddr;
      while (!conn.closed && !this.#closing) {
        let head: string | null;
        try {
          head = await conn.readHead();
        } catch (error) {
          this.#log(failure(id, String(error)));
          return;
        }
        if (head === null) return;
        let request: ParsedRequest;
        try {
          request = parseRequest(head);
        } catch (error) {
          this.#log(failure(id, (error as Error).message));
          await conn.write(
            "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
          );
          return;
        }
        const entry: LoggedRequest = {
          connection: id,
          method: request.method,
          target: request.target,
          version: request.version,
          headers: request.headers,
          bodyLength: 0,
          bodySha256: "",
        };
        const url = new URL(request.target, "http://echo.invalid");
        const isUpgrade = url.pathname === "/ws" &&
          header(request.headers, "upgrade")?.toLowerCase() === "websocket";
        if (isUpgrade) {
          this.#log(entry);
          await this.#webSocket(conn, request, url, entry);
          return;
        }
        // Read (and hash) the whole body, streaming: nothing is buffered.
        const hash = createHash("sha256");
        try {
          entry.bodyLength = await readBody(conn, request, (chunk) => hash.update(chunk));
        } catch (error) {
          entry.error = `body: ${(error as Error).message}`;
          this.#log(entry);
          return;
        }
        entry.bodySha256 = hash.digest("hex");
        this.#log(entry);
        const keepOpen = await this.#respond(conn, request, url, entry, remote, tls);
        if (!keepOpen) return;
      }
    } finally {
      conn.close();
      this.open.delete(conn);
      this.#notify();
    }
  }

  /** Answers one request; returns whether the connection stays open. */
  async #respond(
    conn: Connection,
    request: ParsedRequest,
    url: URL,
    entry: LoggedRequest,
    remote: Deno.NetAddr,
    tls: { alpnProtocol: string | null } | null,
  ): Promise<boolean> {
    const q = url.searchParams;
    const delay = Number(q.get("delay") ?? 0);
    if (delay > 0 && await conn.closedBefore(this.#sleep(delay))) return false;
    const clientClose = request.version === "HTTP/1.0" ||
      (header(request.headers, "connection") ?? "").toLowerCase().includes("close");
    const close = clientClose || q.get("close") === "1";
    const ident = [`X-Echo-Service: ${this.name}`, `X-Echo-Pod: ${this.pod}`];
    const head = request.method === "HEAD";
    const send = async (status: number, fields: string[], body: Uint8Array | string) => {
      const bytes = typeof body === "string" ? encoder.encode(body) : body;
      const lines = [
        `HTTP/1.1 ${status} ${reason(status)}`,
        ...ident,
        ...fields,
        ...(status === 204 || status === 304 ? [] : [`Content-Length: ${bytes.length}`]),
        ...(close ? ["Connection: close"] : []),
      ];
      const noBody = head || status === 204 || status === 304 || (status >= 100 && status < 200);
      const headBytes = latin1Bytes(lines.join("\r\n") + "\r\n\r\n");
      const out = new Uint8Array(headBytes.length + (noBody ? 0 : bytes.length));
      out.set(headBytes);
      if (!noBody) out.set(bytes, headBytes.length);
      await conn.write(out);
    };

    switch (url.pathname) {
      case "/sse": {
        const n = Number(q.get("n") ?? 5);
        const interval = Number(q.get("interval") ?? 50);
        await conn.write(
          [
            "HTTP/1.1 200 OK",
            ...ident,
            "Content-Type: text/event-stream",
            "Cache-Control: no-cache",
            "Transfer-Encoding: chunked",
          ].join("\r\n") + "\r\n\r\n",
        );
        for (let i = 0; i < n; i++) {
          if (i > 0 && await conn.closedBefore(this.#sleep(interval))) return false;
          await conn.write(chunk(encoder.encode(`id: ${i}\ndata: event ${i}\n\n`)));
        }
        await conn.write("0\r\n\r\n");
        return !close;
      }
      case "/gzip": {
        const gz = gzipSync(encoder.encode(GZIP_PLAIN));
        const sha = createHash("sha256").update(gz).digest("hex");
        await send(200, [
          "Content-Type: text/plain; charset=utf-8",
          "Content-Encoding: gzip",
          "Vary: Accept-Encoding",
          `X-Body-Sha256: ${sha}`,
        ], gz);
        return !close;
      }
      case "/bytes": {
        const n = Number(q.get("n") ?? 1024);
        const chunked = q.get("chunked") === "1";
        const stall = q.get("stall") === "1";
        await conn.write(
          [
            "HTTP/1.1 200 OK",
            ...ident,
            "Content-Type: application/octet-stream",
            chunked ? "Transfer-Encoding: chunked" : `Content-Length: ${n}`,
          ].join("\r\n") + "\r\n\r\n",
        );
        if (head) return !close;
        for (let offset = 0; offset < n; offset += BLOCK) {
          const part = patternBytes(offset, Math.min(BLOCK, n - offset));
          await conn.write(chunked ? chunk(part) : part);
          if (stall) {
            // Never finish; the test's timeout or close ends this.
            await new Promise<void>((resolve) => {
              const wait = async () => {
                const sink = new Uint8Array(1024);
                while ((await conn.readRaw(sink).catch(() => null)) !== null) {
                  // Discard.
                }
                resolve();
              };
              wait();
            });
            return false;
          }
        }
        if (chunked) await conn.write("0\r\n\r\n");
        return !close;
      }
      case "/cookies": {
        const n = Number(q.get("n") ?? 3);
        const cookies = Array.from(
          { length: n },
          (_, i) => `Set-Cookie: c${i}=v${i}; Path=/; HttpOnly`,
        );
        await send(200, ["Content-Type: text/plain", ...cookies], "cookies\n");
        return !close;
      }
      case "/redirect": {
        const status = Number(q.get("status") ?? 302);
        await send(status, [`Location: ${q.get("to") ?? "/"}`, "Set-Cookie: r=1; Path=/"], "");
        return !close;
      }
      case "/hop": {
        await conn.write(
          [
            "HTTP/1.1 200 OK",
            ...ident,
            "Content-Type: text/plain",
            "Connection: X-Hop-Named, keep-alive",
            "X-Hop-Named: should-not-pass",
            "Keep-Alive: timeout=5",
            "Proxy-Connection: keep-alive",
            "Upgrade: h2c",
            "Trailer: X-Checksum",
            "X-End-To-End: passes",
            "Transfer-Encoding: chunked",
          ].join("\r\n") + "\r\n\r\n",
        );
        await conn.write(chunk(encoder.encode("hop\n")));
        await conn.write("0\r\nX-Checksum: abc\r\n\r\n");
        return !close;
      }
      case "/close": {
        await conn.write(
          ["HTTP/1.1 200 OK", ...ident, "Content-Type: text/plain", "Connection: close"].join(
            "\r\n",
          ) +
            "\r\n\r\n",
        );
        await conn.write("close-delimited body\n");
        return false;
      }
      case "/http10": {
        await conn.write(
          ["HTTP/1.0 200 OK", ...ident, "Content-Type: text/plain"].join("\r\n") + "\r\n\r\n",
        );
        await conn.write("http/1.0 body\n");
        return false;
      }
      case "/1xx": {
        await conn.write("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n");
        await conn.write("HTTP/1.1 100 Continue\r\n\r\n");
        await send(200, ["Content-Type: text/plain"], "after 1xx\n");
        return !close;
      }
      case "/malformed": {
        await conn.write(malformed(q.get("kind") ?? "status"));
        return false;
      }
      case "/drop":
        return false;
    }

    const status = Number(q.get("status") ?? 200);
    const body = JSON.stringify({
      service: this.name,
      pod: this.pod,
      method: request.method,
      target: request.target,
      version: request.version,
      host: header(request.headers, "host") ?? null,
      headers: request.headers,
      body: { length: entry.bodyLength, sha256: entry.bodySha256 },
      tls,
      remoteAddr: `${remote.hostname}:${remote.port}`,
    }) + "\n";
    await send(status, ["Content-Type: application/json"], body);
    return !close;
  }

  async #webSocket(conn: Connection, request: ParsedRequest, url: URL, entry: LoggedRequest) {
    const refuse = url.searchParams.get("refuse");
    if (refuse !== null) {
      const body = "upgrade refused\n";
      await conn.write(
        `HTTP/1.1 ${refuse} ${
          reason(Number(refuse))
        }\r\nX-Refused: yes\r\nContent-Type: text/plain\r\n` +
          `Content-Length: ${body.length}\r\n\r\n${body}`,
      );
      return;
    }
    const key = header(request.headers, "sec-websocket-key") ?? "";
    const accept = createHash("sha1").update(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest(
      "base64",
    );
    const offered = (header(request.headers, "sec-websocket-protocol") ?? "").split(",").map((p) =>
      p.trim()
    ).filter((p) => p !== "");
    const protocol = url.searchParams.get("protocol") ?? offered[0];
    await conn.write(
      [
        "HTTP/1.1 101 Switching Protocols",
        "Upgrade: websocket",
        "Connection: Upgrade",
        `Sec-WebSocket-Accept: ${accept}`,
        ...(protocol ? [`Sec-WebSocket-Protocol: ${protocol}`] : []),
        `X-Echo-Pod: ${this.pod}`,
        "Set-Cookie: ws=1; Path=/",
      ].join("\r\n") + "\r\n\r\n",
    );
    const decoder = new FrameDecoder({ maxPayload: 128 * 1024 * 1024, expectMasked: true });
    decoder.push(conn.take());
    const sendFrame = (opcode: number, payload: Uint8Array, fin = true) =>
      conn.write(encodeFrame(opcode, payload, { mask: false, fin }));
    const buf = new Uint8Array(64 * 1024);
    let parts: Uint8Array[] = [];
    let messageOpcode = 0;
    entry.wsMessages = 0;
    for (;;) {
      let frame;
      while ((frame = decoder.next()) !== undefined) {
        if (frame.opcode === OP_PING) {
          await sendFrame(OP_PONG, frame.payload);
          continue;
        }
        if (frame.opcode === OP_PONG) continue;
        if (frame.opcode === OP_CLOSE) {
          entry.wsClose = decodeClosePayload(frame.payload);
          this.#notify();
          await sendFrame(OP_CLOSE, frame.payload).catch(() => {});
          return;
        }
        if (frame.opcode !== OP_CONTINUATION) messageOpcode = frame.opcode;
        parts.push(frame.payload);
        if (!frame.fin) continue;
        const data = parts.length === 1 ? parts[0] as Uint8Array : concatBytes(parts);
        parts = [];
        entry.wsMessages++;
        this.#notify();
        if (messageOpcode === OP_TEXT) {
          const text = new TextDecoder().decode(data);
          if (text === "headers") {
            await sendFrame(OP_TEXT, encoder.encode(JSON.stringify(request.headers)));
          } else if (text.startsWith("close:")) {
            const [, code, ...why] = text.split(":");
            await sendFrame(OP_CLOSE, encodeClosePayload(Number(code), why.join(":")));
          } else if (text === "drop") {
            return;
          } else if (text.startsWith("fragments:")) {
            const n = Number(text.slice(10));
            for (let i = 0; i < n; i++) {
              await sendFrame(
                i === 0 ? OP_TEXT : OP_CONTINUATION,
                encoder.encode(`part${i};`),
                i === n - 1,
              );
            }
          } else if (text.startsWith("big:")) {
            await sendFrame(OP_BINARY, patternBytes(0, Number(text.slice(4))));
          } else {
            await sendFrame(OP_TEXT, data);
          }
        } else {
          await sendFrame(OP_BINARY, data);
        }
      }
      const n = await conn.readRaw(buf).catch(() => null);
      if (n === null) return;
      decoder.push(buf.subarray(0, n));
    }
  }
}

function failure(connection: number, error: string): LoggedRequest {
  return {
    connection,
    method: "",
    target: "",
    version: "",
    headers: [],
    bodyLength: 0,
    bodySha256: "",
    error,
  };
}

/** A plain RFC 9112 request parser: Transfer-Encoding wins over Content-Length, as most servers do. */
function parseRequest(head: string): ParsedRequest {
  const lines = head.split("\r\n");
  lines.pop();
  const line = lines.shift() ?? "";
  const match = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) (HTTP\/1\.[01])$/.exec(line);
  if (match === null) throw new Error(`bad request line ${JSON.stringify(line)}`);
  const headers: [string, string][] = [];
  for (const field of lines) {
    const colon = field.indexOf(":");
    if (colon <= 0 || /\s/.test(field[0] ?? "")) {
      throw new Error(`bad field ${JSON.stringify(field)}`);
    }
    headers.push([field.slice(0, colon), field.slice(colon + 1).trim()]);
  }
  const te = header(headers, "transfer-encoding");
  const cl = header(headers, "content-length");
  let framing: ParsedRequest["framing"] = { kind: "none" };
  if (te !== undefined) {
    if (!te.toLowerCase().split(",").map((t) => t.trim()).includes("chunked")) {
      throw new Error(`unsupported transfer-encoding ${te}`);
    }
    framing = { kind: "chunked" };
  } else if (cl !== undefined) {
    if (!/^[0-9]+$/.test(cl)) throw new Error(`bad content-length ${cl}`);
    framing = { kind: "length", length: Number(cl) };
  }
  return {
    method: match[1] as string,
    target: match[2] as string,
    version: match[3] as string,
    headers,
    framing,
  };
}

async function readBody(
  conn: Connection,
  request: ParsedRequest,
  onChunk: (chunk: Uint8Array) => void,
): Promise<number> {
  const framing = request.framing;
  if (framing.kind === "none") return 0;
  let total = 0;
  if (framing.kind === "length") {
    let remaining = framing.length;
    while (remaining > 0) {
      const part = await conn.read(Math.min(remaining, BLOCK));
      if (part === null) throw new Error("closed before content-length");
      onChunk(part);
      remaining -= part.length;
      total += part.length;
    }
    return total;
  }
  for (;;) {
    const sizeLine = await conn.readLine();
    const size = parseInt(sizeLine.split(";")[0] ?? "", 16);
    if (!/^[0-9a-fA-F]+/.test(sizeLine) || Number.isNaN(size)) {
      throw new Error(`bad chunk size ${JSON.stringify(sizeLine)}`);
    }
    if (size === 0) {
      while ((await conn.readLine()) !== "") {
        // Trailers: ignored.
      }
      return total;
    }
    let remaining = size;
    while (remaining > 0) {
      const part = await conn.read(Math.min(remaining, BLOCK));
      if (part === null) throw new Error("closed inside a chunk");
      onChunk(part);
      remaining -= part.length;
      total += part.length;
    }
    if ((await conn.readLine()) !== "") throw new Error("missing CRLF after chunk");
  }
}

function malformed(kind: string): string {
  const ok = "HTTP/1.1 200 OK\r\n";
  switch (kind) {
    case "status":
      return "HTTP/1.1 abc OK\r\nContent-Length: 0\r\n\r\n";
    case "cl-te":
      return ok + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    case "cl-dup":
      return ok + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!";
    case "cl-bad":
      return ok + "Content-Length: abc\r\n\r\nhello";
    case "chunk-bad":
      return ok + "Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n";
    case "fold":
      return ok + "X-Folded: one\r\n two\r\nContent-Length: 0\r\n\r\n";
    case "space-colon":
      return ok + "X-Space : bad\r\nContent-Length: 0\r\n\r\n";
    case "te-gzip":
      return ok + "Transfer-Encoding: gzip\r\n\r\nhello";
    case "eof-head":
      return "HTTP/1.1 200 OK\r\nContent-Le";
    case "eof-body":
      return ok + "Content-Length: 100\r\n\r\nonly ten b";
    case "nul":
      return ok + "X-Nul: a\0b\r\nContent-Length: 0\r\n\r\n";
    case "huge-head":
      return ok + `X-Huge: ${"a".repeat(80 * 1024)}\r\nContent-Length: 0\r\n\r\n`;
    default:
      return "garbage\r\n\r\n";
  }
}

function header(headers: readonly [string, string][], name: string): string | undefined {
  for (const [key, value] of headers) if (key.toLowerCase() === name) return value;
  return undefined;
}

function chunk(data: Uint8Array): Uint8Array {
  const prefix = encoder.encode(data.length.toString(16) + "\r\n");
  const out = new Uint8Array(prefix.length + data.length + 2);
  out.set(prefix);
  out.set(data, prefix.length);
  out.set([13, 10], prefix.length + data.length);
  return out;
}

function reason(status: number): string {
  const reasons: Record<number, string> = {
    101: "Switching Protocols",
    200: "OK",
    204: "No Content",
    301: "Moved Permanently",
    302: "Found",
    304: "Not Modified",
    307: "Temporary Redirect",
    308: "Permanent Redirect",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    500: "Internal Server Error",
    503: "Service Unavailable",
  };
  return reasons[status] ?? "Status";
}

function parseArgs(args: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (!arg.startsWith("--")) continue;
    const eq = arg.indexOf("=");
    if (eq !== -1) out[arg.slice(2, eq)] = arg.slice(eq + 1);
    else out[arg.slice(2)] = args[++i] ?? "";
  }
  return out;
}

if (import.meta.main) {
  const args = parseArgs(Deno.args);
  const env = (name: string) => Deno.env.get(name);
  const certFile = args["cert"];
  const keyFile = args["key"];
  const backend = await startEchoBackend({
    hostname: args["hostname"] ?? "0.0.0.0",
    port: Number(args["port"] ?? 9001),
    name: args["service"] ?? env("ECHO_SERVICE") ?? "echo",
    pod: args["pod"] ?? env("ECHO_POD") ?? env("POD_NAME") ?? env("HOSTNAME") ?? "echo-0",
    ...(certFile && keyFile
      ? { tls: { cert: Deno.readTextFileSync(certFile), key: Deno.readTextFileSync(keyFile) } }
      : {}),
    ...(args["log"] ? { logFile: args["log"] } : {}),
  });
  // One line for scripts to wait on.
  // deno-lint-ignore no-console
  console.log(`echo backend ${backend.name}/${backend.pod} listening on ${backend.url}`);
  const stop = () => backend.close().then(() => Deno.exit(0));
  Deno.addSignalListener("SIGTERM", stop);
  Deno.addSignalListener("SIGINT", stop);
}
