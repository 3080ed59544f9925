/**
 * Test support for the plain-HTTP connection reaper: the real HTTP listener
 * counting into a {@linkcode ConnectionActivity}, a reaper with short
 * timeouts, and a handler with the paths the tests need (`/slow` until
 * released, `/big` 64 MiB, `/ws` echo held in the activity, `/upload`,
 * `/throw`, `/until-abort`).
 *
 * @module
 */

import { RawConnection } from "./raw_http.ts";
import { waitFor } from "./wait.ts";
import { ConnectionActivity } from "../../lib/server/connection_activity.ts";
import { HttpConnectionReaper } from "../../lib/server/http_connection_reaper.ts";
import { listenHttp } from "../../lib/server/http_listener.ts";
import type { ConnectionInfo, RequestHandler } from "../../lib/server/listener.ts";

export const TIMEOUTS = { firstBytesTimeoutMs: 300, idleTimeoutMs: 400, intervalMs: 50 };
/** Sweeps that cover three idle timeouts: long enough for any timeout to have acted. */
export const SWEEPS_PAST_TIMEOUTS = 3 * TIMEOUTS.idleTimeoutMs / TIMEOUTS.intervalMs;

/** Pacing a client's trickle (what is being tested), never to wait for something. */
export function pace(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export interface World extends AsyncDisposable {
  readonly port: number;
  readonly activity: ConnectionActivity;
  readonly reaper: HttpConnectionReaper;
  /** Resolves the pending `/slow` requests. */
  release(): void;
  /** Resolves once a `/big` response's body was cancelled (its client went away). */
  readonly bigCancelled: Promise<void>;
  /** Waits for `n` more sweeps (with the reaper started). */
  sweeps(n: number): Promise<void>;
}

/** The real HTTP listener counting into an activity, and a reaper (started unless `manual`). */
export function world(options: { manual?: boolean; handler?: RequestHandler } = {}): World {
  const activity = new ConnectionActivity();
  let release = () => {};
  const released = new Promise<void>((resolve) => release = resolve);
  const bigCancelled = Promise.withResolvers<void>();
  const handler = async (req: Request, info: ConnectionInfo): Promise<Response> => {
    const path = new URL(req.url).pathname;
    if (path === "/slow") {
      await released;
      await req.body?.cancel();
      return new Response("done");
    }
    if (path === "/throw") throw new Error("Handler failed on purpose");
    if (path === "/until-abort") {
      await new Promise((resolve) => req.signal.addEventListener("abort", resolve));
      return new Response("gone");
    }
    if (path === "/upload") {
      const bytes = await req.arrayBuffer();
      return new Response(String(bytes.byteLength));
    }
    if (path === "/big") {
      const chunk = new Uint8Array(64 * 1024);
      let sent = 0;
      return new Response(
        new ReadableStream({
          pull(controller) {
            if (sent++ < 1_024) controller.enqueue(chunk);
            else controller.close();
          },
          cancel: () => bigCancelled.resolve(),
        }),
      );
    }
    if (path === "/ws") {
      // As the proxy handler does: the session is counted for its whole life.
      const { socket, response } = Deno.upgradeWebSocket(req);
      const slot = info.activity?.begin(info.remoteAddr);
      socket.onmessage = (event) => socket.send(event.data);
      socket.onclose = () => slot !== undefined && info.activity!.end(slot);
      return response;
    }
    return options.handler === undefined ? new Response("ok") : options.handler(req, info);
  };
  const listener = listenHttp(handler, { hostname: "127.0.0.1", port: 0, activity });
  const reaper = new HttpConnectionReaper({
    port: listener.addr.port,
    activity,
    ...TIMEOUTS,
    onUnavailable: (reason) => {
      throw new Error(reason);
    },
  });
  if (options.manual !== true) reaper.start();
  return {
    port: listener.addr.port,
    activity,
    reaper,
    release,
    bigCancelled: bigCancelled.promise,
    async sweeps(n) {
      const target = reaper.stats.sweeps + n;
      await waitFor(`${n} sweeps`, () => reaper.stats.sweeps >= target);
    },
    async [Symbol.asyncDispose]() {
      release();
      await reaper.stop();
      await listener.shutdown({ timeoutMs: 2_000 });
    },
  };
}

/**
 * Sends one byte every 50 ms until the server closes `conn` (a request head
 * that never completes, yet never sits idle); resolves whether it was closed.
 */
export async function trickleUntilClosed(conn: RawConnection): Promise<boolean> {
  const closed = conn.closedByPeer(10_000);
  let open = true;
  void closed.then(() => open = false);
  while (open) {
    await conn.send("x").catch(() => open = false);
    await pace(50);
  }
  return await closed;
}
