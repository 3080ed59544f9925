/**
 * Test support for streaming exchanges: a static route to a loopback port,
 * backends that sink uploads (recording what arrived and whether it came
 * whole) or serve large bodies, raw HTTP/1.1 socket helpers, and the
 * process's resident memory.
 *
 * @module
 */
import type { StaticRoute } from "./static_snapshot.ts";
import {
  type ScriptedBackend,
  type ScriptedConn,
  startScriptedBackend,
} from "./scripted_backend.ts";
import { createHash } from "node:crypto";
import type { H2World } from "./raw_h2.ts";
import { within } from "./wait.ts";
import { latin1 } from "./raw_http.ts";

export function routeTo(host: string | undefined, port: number, service: string): StaticRoute {
  return {
    ...(host === undefined ? {} : { host }),
    endpoints: [{ address: "127.0.0.1", port }],
    service,
  };
}

/** A backend that reads each request's body whole and answers its length; records whether it completed. */
export function uploadSink(): ScriptedBackend & { readonly log: UploadRecord[] } {
  const log: UploadRecord[] = [];
  const backend = startScriptedBackend(async (conn: ScriptedConn) => {
    while (true) {
      const head = await conn.readHead();
      if (head === null) return;
      const chunked = /\r\ntransfer-encoding: *chunked/i.test(head);
      const length = /\r\ncontent-length: *(\d+)/i.exec(head);
      const hash = createHash("sha256");
      let bytes = 0;
      const onChunk = (data: Uint8Array) => {
        bytes += data.length;
        hash.update(data);
      };
      let complete = true;
      if (chunked) complete = await conn.readChunked(onChunk);
      else if (length !== null) {
        complete = (await conn.readLength(Number(length[1]), onChunk)) === Number(length[1]);
      }
      log.push({
        connection: conn.index,
        target: head.split(" ")[1]!,
        framing: chunked ? "chunked" : length !== null ? "length" : "none",
        bytes,
        complete,
        sha256: hash.digest("hex"),
      });
      if (!complete) return;
      const answer = String(bytes);
      await conn.write(`HTTP/1.1 200 OK\r\nContent-Length: ${answer.length}\r\n\r\n${answer}`);
    }
  }, { noDelay: true });
  return Object.assign(backend, { log });
}

export interface UploadRecord {
  readonly connection: number;
  readonly target: string;
  readonly framing: "chunked" | "length" | "none";
  readonly bytes: number;
  readonly complete: boolean;
  readonly sha256: string;
}

/** A backend answering `/big` with a 64 MiB Content-Length body written until the socket blocks or closes, and anything else with "ok". */
export function bigBackend(): ScriptedBackend & { readonly log: [string, number][] } {
  const block = new Uint8Array(256 * 1024).fill(0x61);
  const log: [string, number][] = [];
  const backend = startScriptedBackend(async (conn) => {
    while (true) {
      const head = await conn.readHead();
      if (head === null) return;
      log.push([head.split(" ")[1]!, conn.index]);
      if (!head.startsWith("GET /big")) {
        await conn.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        continue;
      }
      const size = 64 * 1024 * 1024;
      await conn.write(`HTTP/1.1 200 OK\r\nContent-Length: ${size}\r\n\r\n`);
      for (let sent = 0; sent < size; sent += block.length) await conn.write(block);
    }
  }, { noDelay: true });
  return Object.assign(backend, { log });
}

export async function connectHttp(world: H2World): Promise<Deno.TcpConn> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: world.httpPort });
  conn.setNoDelay(true);
  return conn;
}

export async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let at = 0;
  while (at < bytes.length) at += await conn.write(bytes.subarray(at));
}

/** Reads until the text read so far satisfies `done`; returns it (latin1). */
export async function readUntil(
  conn: Deno.Conn,
  done: (text: string) => boolean,
  timeoutMs = 10_000,
): Promise<string> {
  let text = "";
  const buffer = new Uint8Array(64 * 1024);
  await within(
    timeoutMs,
    "the expected bytes",
    (async () => {
      while (!done(text)) {
        const n = await conn.read(buffer);
        if (n === null) throw new Error(`Cannot read more: closed after "${text.slice(0, 80)}"`);
        text += latin1(buffer.subarray(0, n));
      }
    })(),
  );
  return text;
}

export function rssBytes(): number {
  const status = Deno.readTextFileSync("/proc/self/status");
  const match = /VmRSS:\s+(\d+) kB/.exec(status);
  return Number(match![1]) * 1024;
}
