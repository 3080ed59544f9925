/**
 * Client timeouts for plain HTTP served straight by `Deno.serve`, which
 * closes no connection on its own (Deno 2.9.6: one that sends nothing, half a
 * request head, or nothing after a response stays open for good).
 *
 * Every `intervalMs` the reaper lists the process's TCP connections on the
 * HTTP port with the kernel's counters for each (`TCP_INFO`, through
 * `native_socket.ts`), reads from {@linkcode ConnectionActivity} whether the
 * workers have a request in flight on it, and shuts down (`shutdown(2)`) a
 * connection that:
 *
 * - **sent nothing** for `firstBytesTimeoutMs` since it was set up, with no
 *   request in flight;
 * - **is idle**: no request in flight and no byte either way for
 *   `idleTimeoutMs` (nginx's `keepalive_timeout`);
 * - **trickles a request head**: bytes keep arriving with no request in
 *   flight and none begun, for `idleTimeoutMs` (nginx's
 *   `client_header_timeout`);
 * - **takes nothing**: data waits to be sent or acknowledged and the client
 *   acknowledged no byte for `idleTimeoutMs`, request in flight or not
 *   (nginx's `send_timeout`).
 *
 * The last two are seen across sweeps, so they act between `idleTimeoutMs`
 * and that plus two intervals. A request in flight, or a WebSocket session
 * (held in {@linkcode ConnectionActivity} until it ends), exempts a
 * connection from the first three however long it is silent: a long poll is
 * the proxy's read timeout's business. Deno then sees the connection end and
 * closes it.
 *
 * Runs on one thread for all workers (their sockets are the process's).
 * Knows nothing of HTTP parsing or routing.
 *
 * @module
 */

import type { ConnectionActivity } from "./connection_activity.ts";
import type { ClientTimeout } from "./listener.ts";
import {
  shutdownTcpConnection,
  type TcpConnection,
  tcpConnectionsOnPort,
} from "./native_socket.ts";

/** Options of {@linkcode HttpConnectionReaper}. */
export interface HttpConnectionReaperOptions {
  /** The HTTP port whose client connections are watched. */
  readonly port: number;
  /** What the listeners report of their requests. */
  readonly activity: ConnectionActivity;
  readonly firstBytesTimeoutMs: number;
  readonly idleTimeoutMs: number;
  /** Time between sweeps. Default: a quarter of the shorter timeout, between 50 ms and 5 s. */
  readonly intervalMs?: number;
  /** Called once, when the sockets cannot be read (no FFI, no glibc): the reaper then stops. */
  readonly onUnavailable: (reason: string) => void;
}

/** Why a connection was shut down. */
export type ReapReason = Exclude<ClientTimeout, "tls-handshake">;

/** Counters of {@linkcode HttpConnectionReaper.stats}. */
export type HttpConnectionReaperStats = Readonly<Record<ReapReason, number>> & {
  readonly sweeps: number;
};

const TCP_ESTABLISHED = 1;
const TCP_CLOSE_WAIT = 8;

/** What one sweep remembers of a connection for the next. */
interface Seen {
  readonly at: number;
  readonly requests: number;
  readonly bytesReceived: number;
  readonly bytesAcked: number;
  /** Since when bytes have arrived with no request begun (a head in progress). */
  readonly headSince: number | undefined;
  /** Since when data has waited with no byte acknowledged. */
  readonly stalledSince: number | undefined;
}

/** Watches the HTTP port's connections and shuts down the ones past a timeout. */
export class HttpConnectionReaper {
  #options: HttpConnectionReaperOptions;
  #intervalMs: number;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #running = false;
  #sweeping: Promise<void> | undefined;
  /** By socket inode. */
  #seen = new Map<number, Seen>();
  #stats = { "first-bytes": 0, idle: 0, head: 0, send: 0, sweeps: 0 };

  constructor(options: HttpConnectionReaperOptions) {
    this.#options = options;
    this.#intervalMs = options.intervalMs ??
      Math.min(
        5_000,
        Math.max(50, Math.min(options.firstBytesTimeoutMs, options.idleTimeoutMs) / 4),
      );
  }

  get stats(): HttpConnectionReaperStats {
    return { ...this.#stats };
  }

  /** Sweeps every `intervalMs` until {@linkcode stop}. */
  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#schedule();
  }

  /** Stops sweeping; resolves once a sweep under way has finished. */
  async stop(): Promise<void> {
    this.#running = false;
    clearTimeout(this.#timer);
    await this.#sweeping;
  }

  /** One sweep now (also what the timer runs). Resolves with what it shut down. */
  sweep(): Promise<void> {
    this.#sweeping ??= this.#sweepOnce().finally(() => this.#sweeping = undefined);
    return this.#sweeping;
  }

  #schedule(): void {
    if (!this.#running) return;
    this.#timer = setTimeout(() => {
      // A sweep's calls never throw; a throwing onUnavailable must not end the process.
      void this.sweep().catch(() => {}).then(() => this.#schedule());
    }, this.#intervalMs);
    Deno.unrefTimer(this.#timer);
  }

  async #sweepOnce(): Promise<void> {
    const { port, activity, firstBytesTimeoutMs, idleTimeoutMs } = this.#options;
    const connections = await tcpConnectionsOnPort(port);
    if (!Array.isArray(connections)) {
      this.#running = false;
      this.#options.onUnavailable((connections as { reason: string }).reason);
      return;
    }
    this.#stats.sweeps++;
    const now = performance.now();
    const seen = new Map<number, Seen>();
    for (const connection of connections as readonly TcpConnection[]) {
      if (connection.state !== TCP_ESTABLISHED && connection.state !== TCP_CLOSE_WAIT) continue;
      // The socket's inode: a client reconnecting from the same port onto the same descriptor
      // number is another socket, and inherits nothing (such as a head's clock).
      const key = connection.inode;
      const before = this.#seen.get(key);
      const slot = activity.slotOf(connection.remoteIp, connection.remotePort);
      const requests = activity.seen(slot);
      const busy = activity.inFlight(slot) > 0;
      const waiting = connection.notSentBytes > 0 || connection.unackedSegments > 0;
      const stalledSince = waiting && before !== undefined &&
          before.bytesAcked === connection.bytesAcked
        ? before.stalledSince ?? before.at
        : undefined;
      const headSince = !busy && before !== undefined && before.requests === requests &&
          (connection.bytesReceived > before.bytesReceived || before.headSince !== undefined)
        ? before.headSince ?? before.at
        : undefined;
      const reason: ReapReason | undefined =
        stalledSince !== undefined && now - stalledSince >= idleTimeoutMs
          ? "send"
          : busy
          ? undefined
          : connection.bytesReceived === 0 &&
              connection.msSinceDataReceived >= firstBytesTimeoutMs
          ? "first-bytes"
          : connection.msSinceDataReceived >= idleTimeoutMs &&
              connection.msSinceDataSent >= idleTimeoutMs
          ? "idle"
          : headSince !== undefined && now - headSince >= idleTimeoutMs
          ? "head"
          : undefined;
      if (reason !== undefined && shutdownTcpConnection(connection)) {
        this.#stats[reason]++;
        continue;
      }
      seen.set(key, {
        at: now,
        requests,
        bytesReceived: connection.bytesReceived,
        bytesAcked: connection.bytesAcked,
        headSince,
        stalledSince,
      });
    }
    this.#seen = seen;
  }
}
