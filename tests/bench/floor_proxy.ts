// A benchmark helper: printing its ready line is its job.
// deno-lint-ignore-file no-console
/**
 * The floor of the proxy benchmark: the least a reverse proxy built on this
 * stack (`Deno.serve` in front, an HTTP/1.1 client on `Deno.connect` behind)
 * can do per request, so the benchmark can show how much of Sluice's cost is
 * the stack and how much is Sluice.
 *
 * It keeps pooled keep-alive connections to one backend, sends `GET <target>`
 * with only a `Host` header, reads the response head, passes the status and
 * the end-to-end header fields on, and relays a `Content-Length` body (whole
 * when it fits the read buffer, else streamed in fresh 256 KiB chunks like
 * Sluice, each released once Deno has taken it). Nothing else: no client
 * headers forwarded, no X-Forwarded-*, no request id, no routing, no
 * timeouts, no client-abort handling, no retries, no chunked bodies, no
 * validation. It is not a proxy anyone should run.
 *
 * Usage: `deno run --allow-net tests/bench/floor_proxy.ts --port 18082 --backend 127.0.0.1:18081`
 * Prints one JSON line `{ "ready": true, "pid": n }` when serving.
 *
 * @module
 */
import { releaseTakenChunk } from "../../lib/upstream/deno_internal.ts";

const BUFFER_BYTES = 64 * 1024;
const CHUNK_BYTES = 256 * 1024;
const SKIPPED = new Set(["connection", "keep-alive", "transfer-encoding", "content-length"]);
const latin1 = new TextDecoder("latin1");
const encoder = new TextEncoder();

interface Connection {
  readonly conn: Deno.Conn;
  readonly buf: Uint8Array<ArrayBuffer>;
  readonly out: Uint8Array<ArrayBuffer>;
}

function flag(name: string): string {
  const index = Deno.args.indexOf(`--${name}`);
  const value = index >= 0 ? Deno.args[index + 1] : undefined;
  if (value === undefined) throw new Error(`Cannot start the floor proxy: --${name} is required`);
  return value;
}

function headEnd(buf: Uint8Array, end: number): number {
  for (let i = 3; i < end; i++) {
    if (buf[i] === 10 && buf[i - 1] === 13 && buf[i - 2] === 10 && buf[i - 3] === 13) return i + 1;
  }
  return -1;
}

if (import.meta.main) {
  const [hostname = "", port = "0"] = flag("backend").split(":");
  const idle: Connection[] = [];

  const connect = async (): Promise<Connection> => {
    const conn = await Deno.connect({ hostname, port: Number(port) });
    conn.setNoDelay(true);
    return { conn, buf: new Uint8Array(BUFFER_BYTES), out: new Uint8Array(BUFFER_BYTES) };
  };

  const handler = async (req: Request): Promise<Response> => {
    const url = req.url;
    const slash = url.indexOf("/", url.indexOf("//") + 2);
    const head = `GET ${url.slice(slash)} HTTP/1.1\r\nHost: ${
      url.slice(url.indexOf("//") + 2, slash)
    }\r\n\r\n`;
    let c = idle.pop() ?? await connect();
    let got = 0;
    let end = -1;
    // A pooled connection the backend closed while idle (its keepalive_timeout passes between
    // rounds): one fresh connection, as any client would.
    for (let attempt = 0; end < 0; attempt++) {
      await c.conn.write(c.out.subarray(0, encoder.encodeInto(head, c.out).written));
      while (end < 0) {
        const n = await c.conn.read(c.buf.subarray(got));
        if (n === null) {
          c.conn.close();
          if (got > 0 || attempt > 0) throw new Error("backend closed the connection");
          c = await connect();
          break;
        }
        got += n;
        end = headEnd(c.buf, got);
      }
    }
    const lines = latin1.decode(c.buf.subarray(0, end - 4)).split("\r\n");
    const status = Number(lines[0]!.slice(9, 12));
    let length = 0;
    const fields: [string, string][] = [];
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const colon = line.indexOf(":");
      const name = line.slice(0, colon);
      const value = line.slice(colon + 1).trim();
      const lower = name.toLowerCase();
      if (lower === "content-length") length = Number(value);
      if (!SKIPPED.has(lower)) fields.push([name, value]);
    }
    let body: Uint8Array<ArrayBuffer> | ReadableStream<Uint8Array>;
    if (end + length <= BUFFER_BYTES) {
      while (got < end + length) {
        const n = await c.conn.read(c.buf.subarray(got));
        if (n === null) throw new Error("backend closed the connection");
        got += n;
      }
      body = c.buf.slice(end, end + length);
      idle.push(c);
    } else {
      const first = c.buf.slice(end, got);
      let left = length - first.length;
      // The chunk enqueued last, released as Sluice does: once the next pull has awaited,
      // Deno.serve has taken it. The first and the last chunk too.
      let previous = first.length > 0 ? first : undefined;
      body = new ReadableStream<Uint8Array>({
        start(controller) {
          if (first.length > 0) controller.enqueue(first);
        },
        async pull(controller) {
          if (left === 0) {
            controller.close();
            idle.push(c);
            await Promise.resolve();
            if (previous !== undefined) releaseTakenChunk(previous);
            return;
          }
          const chunk = new Uint8Array(Math.min(CHUNK_BYTES, left));
          const n = await c.conn.read(chunk);
          if (previous !== undefined) releaseTakenChunk(previous);
          previous = chunk;
          if (n === null) throw new Error("backend closed the connection");
          left -= n;
          controller.enqueue(chunk.subarray(0, n));
        },
      }, { highWaterMark: 1 });
    }
    const response = status === 200 ? new Response(body) : new Response(body, { status });
    for (const [name, value] of fields) response.headers.append(name, value);
    return response;
  };

  Deno.serve({
    hostname: "127.0.0.1",
    port: Number(flag("port")),
    onListen: () => console.log(JSON.stringify({ ready: true, pid: Deno.pid })),
  }, handler);
}
