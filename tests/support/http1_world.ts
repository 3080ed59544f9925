/**
 * Test support for HTTP/1.x client semantics: the real proxy handler behind
 * the real plain HTTP listener, routing `HTTP1_HOST` to
 * one scripted keep-alive backend that answers by target and records every
 * request it read (head, body, and whether the body came whole).
 *
 * @module
 */
import type { ScriptedConn } from "./scripted_backend.ts";
import { startBackend, type UpstreamBackend } from "./upstream_backends.ts";
import {
  type AccessLogEntry,
  createProxyHandler,
  type ProxyHandlerOptions,
} from "../../lib/proxy/proxy_handler.ts";
import { latin1 } from "./raw_http.ts";
import { staticSnapshot } from "./static_snapshot.ts";
import type { Listener } from "../../lib/server/listener.ts";
import { listenHttp } from "../../lib/server/http_listener.ts";

export const HTTP1_HOST = "shop.example.com";

/** One request as the backend received it. */
export interface Received {
  /** Index of the backend connection it came on. */
  readonly conn: number;
  readonly head: string;
  readonly body: string;
  /** False when the connection ended inside the body. */
  readonly whole: boolean;
}

/** What the backend answers to a target: raw bytes, or a script that writes them (and may close). */
export type Http1Answer = string | ((conn: ScriptedConn, received: Received) => Promise<void>);

export interface Http1World {
  readonly port: number;
  readonly backend: UpstreamBackend;
  /** Every request the backend read, in order. */
  readonly received: Received[];
  readonly access: AccessLogEntry[];
}

export interface Http1WorldOptions {
  readonly proxy?: Partial<Omit<ProxyHandlerOptions, "snapshot">>;
  /**
   * Answer before reading the request body (the body is then read, or not,
   * by the answer itself). Default false: the body is read first.
   */
  readonly answerFirst?: readonly string[];
}

export function targetOf(head: string): string {
  return head.slice(0, head.indexOf("\r\n")).split(" ")[1] ?? "";
}

export async function readWholeBody(conn: ScriptedConn, head: string): Promise<[string, boolean]> {
  const parts: string[] = [];
  const length = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (length !== null) {
    const declared = Number(length[1]);
    const got = await conn.readLength(declared, (d) => parts.push(latin1(d)));
    return [parts.join(""), got === declared];
  }
  if (!/\r\ntransfer-encoding:\s*chunked/i.test(head)) return ["", true];
  const whole = await conn.readChunked((d) => parts.push(latin1(d)));
  return [parts.join(""), whole];
}

/** A backend answering by target (unknown targets: a 200 naming the target), keep-alive. */
export function answering(
  answers: Record<string, Http1Answer>,
  received: Received[],
  answerFirst: readonly string[],
) {
  return async (conn: ScriptedConn) => {
    for (;;) {
      const head = await conn.readHead();
      if (head === null) return;
      const target = targetOf(head);
      const answer = answers[target] ??
        `HTTP/1.1 200 OK\r\nContent-Length: ${target.length}\r\n\r\n${target}`;
      if (answerFirst.includes(target)) {
        const entry = { conn: conn.index, head, body: "", whole: false };
        received.push(entry);
        if (typeof answer === "string") await conn.write(answer);
        else await answer(conn, entry);
        // Then the body is read and dropped (as Node and Go servers do), or the connection ends.
        const [, whole] = await readWholeBody(conn, head);
        if (!whole) return;
        continue;
      }
      const [body, whole] = await readWholeBody(conn, head);
      const entry = { conn: conn.index, head, body, whole };
      received.push(entry);
      if (!whole) return;
      if (typeof answer === "string") await conn.write(answer);
      else await answer(conn, entry);
    }
  };
}

export async function withHttp1World(
  answers: Record<string, Http1Answer>,
  fn: (world: Http1World) => Promise<void>,
  options: Http1WorldOptions = {},
): Promise<void> {
  const received: Received[] = [];
  const access: AccessLogEntry[] = [];
  const backend = startBackend(answering(answers, received, options.answerFirst ?? []));
  const snapshot = staticSnapshot([{ host: HTTP1_HOST, endpoints: [backend.endpoint] }]);
  const handler = createProxyHandler({
    readTimeoutMs: 5_000,
    onAccess: (entry) => access.push(entry),
    ...options.proxy,
    snapshot: () => snapshot,
  });
  let listener: Listener | undefined;
  try {
    listener = listenHttp(handler, {
      hostname: "127.0.0.1",
      port: 0,
      reusePort: false,
    });
    await fn({ port: listener.addr.port, backend, received, access });
  } finally {
    await listener?.shutdown({ timeoutMs: 5_000 });
    handler.close();
    await backend.close();
  }
}

/**
 * Runs `fn` over the plain-HTTP listener, `mode` naming it in assertion
 * messages.
 */
export async function overPlainListener(
  answers: Record<string, Http1Answer>,
  fn: (world: Http1World, mode: string) => Promise<void>,
  options: Http1WorldOptions = {},
): Promise<void> {
  await withHttp1World(answers, (world) => fn(world, "plain HTTP"), options);
}
