/**
 * Test support, run as a separate process by `https_listener_test.ts`: sends
 * `requests` HTTPS requests, `concurrency` at a time, each over a fresh TLS
 * connection (a full handshake), and reports what happened. Reads its
 * options as JSON on standard input; prints `progress N` lines as requests
 * complete, then one JSON line `{ "ok", "failed", "resets", "unanswered", "errors" }`.
 *
 * `resets` counts connections the kernel reset before the server sent a
 * single TLS byte (a listening socket closed with the connection still in
 * its queue): no request was sent on them, and the client retries at once,
 * as browsers do. Any other error counts as a failed request. `unanswered`
 * counts the failed requests whose connection ended after the handshake
 * without a single response byte, by an end of stream or by a reset (the
 * server closed it with the request unread); they are also in `errors` and
 * are not retried.
 *
 * @module
 */
interface LoadOptions {
  readonly port: number;
  readonly serverName: string;
  readonly caCerts: string[];
  readonly concurrency: number;
  readonly requests: number;
  readonly progressEvery: number;
}

const options = JSON.parse(await new Response(Deno.stdin.readable).text()) as LoadOptions;
const encoder = new TextEncoder();
const request = encoder.encode(
  `GET / HTTP/1.1\r\nHost: ${options.serverName}\r\nConnection: close\r\n\r\n`,
);
let started = 0;
let ok = 0;
let failed = 0;
let resets = 0;
let unanswered = 0;
const errors: Record<string, number> = {};

/** Whether `error` is the kernel resetting a connection before any TLS byte came back. */
function isEarlyReset(error: unknown): boolean {
  // ECONNRESET, or ENOTCONN when the reset landed while the handshake was being written.
  return error instanceof Deno.errors.ConnectionReset ||
    error instanceof Deno.errors.NotConnected;
}

/** Connects and completes the TLS handshake; `undefined` when the kernel reset the connection first. */
async function handshake(): Promise<Deno.TlsConn | undefined> {
  let conn: Deno.TlsConn | undefined;
  try {
    const tcp = await Deno.connect({ hostname: "127.0.0.1", port: options.port });
    conn = await Deno.startTls(tcp, {
      hostname: options.serverName,
      caCerts: options.caCerts,
    });
    await conn.handshake();
    return conn;
  } catch (error) {
    conn?.close();
    if (isEarlyReset(error)) return undefined;
    throw error;
  }
}

async function send(): Promise<void> {
  let conn: Deno.TlsConn | undefined;
  for (let attempt = 0; conn === undefined; attempt++) {
    if (attempt === 3) throw new Error("Connection reset three times before the handshake");
    conn = await handshake();
    if (conn === undefined) resets++;
  }
  let text: string;
  try {
    await conn.write(request);
    text = await new Response(conn.readable).text();
  } catch (error) {
    // Closed by the server with the request unread: the kernel answers the unread bytes with a
    // reset instead of an end of stream. Either way no byte of response came.
    if (error instanceof Deno.errors.ConnectionReset || error instanceof Deno.errors.BrokenPipe) {
      unanswered++;
    }
    throw error;
  }
  if (text === "") unanswered++;
  if (!text.startsWith("HTTP/1.1 200 ")) {
    throw new Error(`Unexpected response "${text.slice(0, 40)}"`);
  }
}

async function worker(): Promise<void> {
  while (started < options.requests) {
    started++;
    try {
      await send();
      ok++;
    } catch (error) {
      failed++;
      const key = String(error).slice(0, 120);
      errors[key] = (errors[key] ?? 0) + 1;
    }
    const done = ok + failed;
    if (done % options.progressEvery === 0) {
      await Deno.stdout.write(encoder.encode(`progress ${done}\n`));
    }
  }
}

await Promise.all(Array.from({ length: options.concurrency }, worker));
await Deno.stdout.write(
  encoder.encode(JSON.stringify({ ok, failed, resets, unanswered, errors }) + "\n"),
);
