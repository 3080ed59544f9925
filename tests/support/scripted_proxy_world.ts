/**
 * Test support: the proxy handler (`proxy_harness.ts`, behind a real
 * `Deno.serve`) in front of one scripted raw backend (`scripted_backend.ts`)
 * that answers each request target with exact bytes the test chose
 * ({@linkcode withAnswers}), records which connections the proxy closed and
 * whether it sent anything more on them ({@linkcode assertClosedUnused}), and
 * raw clients sending one request for {@linkcode HOST} each. Shared by the
 * tests of what a backend may answer (`lib/proxy/response_framing_test.ts`),
 * of response desync (`lib/proxy/smuggling_test.ts`) and of the timeouts
 * toward backends (`lib/upstream/upstream_timeouts_test.ts`). Owns nothing of
 * the proxy itself; not part of Sluice.
 *
 * @module
 */
import { assertEquals } from "./assert.ts";
import { type HarnessOptions, type ProxyHarness, startProxy } from "./proxy_harness.ts";
import { latin1, rawExchange, rawRequest, type RawResponse } from "./raw_http.ts";
import {
  type ScriptedBackend,
  type ScriptedConn,
  startScriptedBackend,
} from "./scripted_backend.ts";
import { waitFor } from "./wait.ts";

/** The Host every request of this world names (every host routes to the backend anyway). */
export const HOST = "shop.example.com";

/** Streamed (over the 64 KiB read-whole limit); its tail is read by `#fill` into the read buffer. */
export const BIG = "y".repeat(70_000);

/** Options of the proxy in front of the backend (its routes are the world's). */
export type ProxyOptions = Partial<Omit<HarnessOptions, "routes">>;

type Script = (conn: ScriptedConn) => Promise<void>;

/** Runs `fn` with a proxy in front of `backend` (every host routes to it). */
async function withProxy(
  backend: ScriptedBackend,
  fn: (proxy: ProxyHarness) => Promise<void>,
  options: ProxyOptions = {},
): Promise<void> {
  const proxy = await startProxy({
    routes: [{ endpoints: [{ address: "127.0.0.1", port: backend.port }] }],
    readTimeoutMs: 3_000,
    ...options,
  });
  try {
    await fn(proxy);
  } finally {
    await proxy.close();
    await backend.close();
  }
}

/** One request on a fresh client connection; one response read. */
export function request(
  proxy: ProxyHarness,
  target: string,
  options: { method?: string; timeoutMs?: number } = {},
): Promise<RawResponse> {
  const method = options.method ?? "GET";
  return rawRequest(proxy.port, `${method} ${target} HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`, {
    head: method === "HEAD",
    timeoutMs: options.timeoutMs ?? 10_000,
  });
}

/** One request on a fresh client connection; every byte until the proxy closes it. */
export async function requestToEnd(
  proxy: ProxyHarness,
  target: string,
  method = "GET",
): Promise<string> {
  const text = `${method} ${target} HTTP/1.1\r\nHost: ${HOST}\r\nConnection: close\r\n\r\n`;
  return latin1(await rawExchange(proxy.port, text));
}

/** A well-framed 200 with `body`. */
export function ok(body: string, extra = ""): string {
  return `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n${extra}\r\n${body}`;
}

/** A raw answer, or a function that writes one (and may close the connection). */
export type Answer = string | ((conn: ScriptedConn) => Promise<void>);

/**
 * A backend script: `/fresh` gets `ok("fresh")`, any other target gets
 * `answers[target]`, on any connection, any number of times. When the proxy
 * closes a connection, `closed` records, under each target answered on it,
 * the request lines the proxy sent on it after that answer (none expected
 * after a misframed answer: the proxy must not reuse such a connection). An
 * answer given as a function writes what it likes (and may close).
 */
function serve(answers: Record<string, Answer>, closed: Map<string, string[]>): Script {
  return async (conn) => {
    const after = new Map<string, string[]>();
    try {
      for (;;) {
        const head = await conn.readHead();
        if (head === null) return;
        const line = head.slice(0, head.indexOf("\r\n"));
        for (const later of after.values()) later.push(line);
        const target = line.split(" ")[1] ?? "";
        if (target === "/fresh") {
          await conn.write(ok("fresh"));
          continue;
        }
        const answer = answers[target] ?? "garbage\r\n\r\n";
        after.set(target, []);
        if (typeof answer === "string") await conn.write(answer);
        else await answer(conn);
      }
    } finally {
      for (const [target, later] of after) closed.set(target, later);
    }
  };
}

/** Waits until the proxy closed the connection that answered `target`; fails if it sent more on it. */
export async function assertClosedUnused(
  closed: Map<string, string[]>,
  target: string,
): Promise<void> {
  const later = await waitFor(
    `the proxy to close the connection of ${target}`,
    () => closed.get(target),
  );
  assertEquals(later, [], `requests sent on the connection after ${target}`);
}

/** What {@linkcode withAnswers} hands a test. */
export interface Served {
  readonly proxy: ProxyHarness;
  readonly backend: ScriptedBackend;
  /** Filled by the backend script as the proxy closes connections. */
  readonly closed: Map<string, string[]>;
}

/**
 * Runs `fn` with a proxy (read timeout 3 s unless `options` say otherwise) in
 * front of a backend answering `/fresh` with `ok("fresh")`, any other target
 * with `answers[target]` (unknown ones: a malformed head).
 */
export function withAnswers(
  answers: Record<string, Answer>,
  fn: (served: Served) => Promise<void>,
  options: ProxyOptions = {},
): Promise<void> {
  const closed = new Map<string, string[]>();
  const backend = startScriptedBackend(serve(answers, closed));
  return withProxy(backend, (proxy) => fn({ proxy, backend, closed }), options);
}

/** An answer written a character at a time, `ms` apart. */
export function trickle(text: string, ms: number): Answer {
  return async (conn) => {
    for (const char of text) {
      await conn.write(char);
      await new Promise((resolve) => setTimeout(resolve, ms));
    }
  };
}
