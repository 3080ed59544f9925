/**
 * Keep-alive connections to backend endpoints, shared by every request of a
 * worker: connect (with a timeout), reuse (most recently used first), cap the
 * idle connections per endpoint, and enforce deadlines.
 *
 * One timer sweeps at a fraction of the smallest timeout: it closes active
 * connections whose pending read or write has waited longer than the idle
 * timeout (the waiting call then fails with a `timeout`), or whose response
 * body has waited that long for the client to take a chunk, and pooled
 * connections idle for longer than `idleTimeoutMs`. Per-read timers would cost
 * a timer per chunk; the sweep costs one field read per I/O call: connections
 * stamp their I/O with a coarse clock the sweeper advances, and deadlines are
 * checked with one tick of slack (late by at most two ticks, never early).
 * A second timer, running only while an exchange is watched, runs work that
 * only an exchange still waiting after 50 to 100 ms needs (`watchClient`).
 *
 * A connection that an endpoint's DNS name (an ExternalName Service) led to
 * this host's loopback is closed before any byte and refused. A connection
 * to an endpoint named by DNS is reused for at most `dnsMaxAgeMs` after it
 * was opened (as a resolver's `valid=30s`), so that traffic follows the name
 * when its addresses change (a cloud load balancer rotating its IPs);
 * endpoints given by address are unaffected.
 *
 * Knows nothing of HTTP; never consults HTTP_PROXY or any environment.
 *
 * @module
 */

import type { Endpoint } from "../routing/snapshot.ts";
import { parseIp } from "../net/cidr.ts";
import { UpstreamConnection } from "./upstream_connection.ts";
import { UpstreamError } from "./upstream_error.ts";

/**
 * The interval of the check for exchanges still waiting (see
 * {@linkcode UpstreamPool.watchClient}): a watch runs 50 to 100 ms after it
 * was set.
 */
export const CLIENT_CHECK_MS = 50;

/** Opens a TCP connection; injectable for tests. */
export type Connector = (options: {
  hostname: string;
  port: number;
  signal: AbortSignal;
}) => Promise<Deno.Conn>;

export interface UpstreamPoolOptions {
  /** Connect timeout in ms. Default 5,000. */
  connectTimeoutMs?: number;
  /**
   * Longest wait for a single read or write on an active connection, or for the client to take
   * a chunk of the response body, in ms. Default 60,000. Never a total cap.
   */
  ioTimeoutMs?: number;
  /** Pooled connections kept per endpoint. Default 64. */
  maxIdlePerEndpoint?: number;
  /** Pooled connections idle for longer are closed, in ms. Default 60,000. */
  idleTimeoutMs?: number;
  /**
   * A connection to an endpoint named by DNS (not an IP address) is not reused once it is
   * older than this, in ms, so the next request resolves the name again. Default 30,000.
   */
  dnsMaxAgeMs?: number;
  /** The interval of the check for watched exchanges (`watchClient`), in ms. Default {@linkcode CLIENT_CHECK_MS}. */
  clientCheckMs?: number;
  /** Default `Deno.connect` over TCP. */
  connect?: Connector;
}

/** Counts for tests and metrics. */
export interface PoolStats {
  readonly active: number;
  readonly idle: number;
  readonly connectsTotal: number;
}

const keys = new WeakMap<Endpoint, string>();

/** The endpoint key used for pooling, health and logs: `address:port` (`[v6]:port`). */
export function endpointKey(endpoint: Endpoint): string {
  // Endpoints are frozen snapshot objects reused by every request: key each once.
  let key = keys.get(endpoint);
  if (key === undefined) {
    key = endpoint.address.includes(":")
      ? `[${endpoint.address}]:${endpoint.port}`
      : `${endpoint.address}:${endpoint.port}`;
    keys.set(endpoint, key);
  }
  return key;
}

const defaultConnect: Connector = async (options) => {
  const conn = await Deno.connect({
    hostname: options.hostname,
    port: options.port,
    transport: "tcp",
    signal: options.signal,
  });
  // Without it, a small write after another (a short chunk, a WebSocket frame) waits for
  // the peer's delayed ACK, which slows chunked uploads badly (docs/benchmarks.md).
  conn.setNoDelay(true);
  return conn;
};

/**
 * The peer address of `conn` when `address` is a DNS name (an ExternalName
 * Service) that led to this host (loopback or unspecified), else undefined.
 *
 * Translation refuses names that are loopback by their spelling (`localhost`,
 * `127.1`), but only the resolver knows the rest: /etc/hosts maps
 * `ip6-localhost` to `::1` in every Kubernetes pod, and a DNS record may
 * point anywhere. Without this, anyone allowed to create a Service and an
 * Ingress could reach ports the controller's pod listens on only on loopback
 * (a sidecar's admin port, Sluice's own inner HTTPS relay). The check costs
 * nothing for endpoints given by address (pod IPs), which are never refused.
 */
function loopbackByName(address: string, conn: Deno.Conn): string | undefined {
  if (parseIp(address) !== undefined) return undefined;
  const peer = (conn.remoteAddr as Deno.NetAddr).hostname;
  const bytes = parseIp(peer);
  if (bytes === undefined) return undefined;
  if (bytes.length === 4) return bytes[0] === 127 || bytes[0] === 0 ? peer : undefined;
  // ::1 and ::, the IPv6 loopback and unspecified addresses.
  for (let i = 0; i < 15; i++) if (bytes[i] !== 0) return undefined;
  return bytes[15]! <= 1 ? peer : undefined;
}

/** A pool of keep-alive connections. Close it when done (tests: at the end of each test). */
export class UpstreamPool {
  readonly connectTimeoutMs: number;
  readonly ioTimeoutMs: number;
  readonly maxIdlePerEndpoint: number;
  readonly idleTimeoutMs: number;
  readonly dnsMaxAgeMs: number;
  readonly clientCheckMs: number;
  #connector: Connector;
  #idle = new Map<string, UpstreamConnection[]>();
  #active = new Set<UpstreamConnection>();
  #sweeper: ReturnType<typeof setInterval> | undefined;
  #tick: number;
  /** The coarse clock connections stamp their I/O with (advanced by the sweeper). */
  #clock: { now: number } = { now: performance.now() };
  #closed = false;
  #connectsTotal = 0;
  #clientCheck: ReturnType<typeof setInterval> | undefined;
  #clientCheckTick = 0;

  constructor(options: UpstreamPoolOptions = {}) {
    this.connectTimeoutMs = options.connectTimeoutMs ?? 5_000;
    this.ioTimeoutMs = options.ioTimeoutMs ?? 60_000;
    this.maxIdlePerEndpoint = options.maxIdlePerEndpoint ?? 64;
    this.idleTimeoutMs = options.idleTimeoutMs ?? 60_000;
    this.dnsMaxAgeMs = options.dnsMaxAgeMs ?? 30_000;
    this.clientCheckMs = options.clientCheckMs ?? CLIENT_CHECK_MS;
    this.#connector = options.connect ?? defaultConnect;
    this.#tick = Math.min(
      1_000,
      Math.max(5, Math.min(this.ioTimeoutMs, this.idleTimeoutMs) / 4),
    );
  }

  stats(): PoolStats {
    let idle = 0;
    for (const list of this.#idle.values()) idle += list.length;
    return { active: this.#active.size, idle, connectsTotal: this.#connectsTotal };
  }

  /**
   * A new connection to `endpoint`, activated ({@linkcode takeIdle} first for
   * a pooled one). `signal` is the client's: its abort stops the connect.
   *
   * @throws {UpstreamError} `connect-failed`, `connect-timeout`, or `aborted`.
   */
  async connect(
    endpoint: Endpoint,
    options: { signal?: AbortSignal | undefined } = {},
  ): Promise<UpstreamConnection> {
    if (this.#closed) throw new UpstreamError("connect-failed", "Cannot connect: pool is closed");
    this.#ensureSweeper();
    const key = endpointKey(endpoint);
    if (options.signal?.aborted === true) {
      throw new UpstreamError("aborted", "Cannot connect: client went away");
    }
    const socket = await this.#open(endpoint, key, options.signal);
    const conn = new UpstreamConnection(socket, key, this.#clock);
    if (parseIp(endpoint.address) === undefined) {
      conn.expiresAt = performance.now() + this.dnsMaxAgeMs;
    }
    if (this.#closed) {
      conn.close();
      throw new UpstreamError("connect-failed", "Cannot connect: pool is closed");
    }
    this.#connectsTotal++;
    conn.activate();
    this.#active.add(conn);
    return conn;
  }

  /**
   * A pooled idle connection to `endpoint`, activated, or undefined when none
   * is left. Synchronous, so the common case costs no promise.
   */
  takeIdle(endpoint: Endpoint): UpstreamConnection | undefined {
    if (this.#closed) return undefined;
    const list = this.#idle.get(endpointKey(endpoint));
    while (list !== undefined && list.length > 0) {
      const conn = list.pop() as UpstreamConnection;
      if (conn.closed) continue;
      if (conn.reuseUntil !== Infinity && performance.now() > conn.reuseUntil) {
        conn.close();
        continue;
      }
      conn.activate();
      this.#active.add(conn);
      return conn;
    }
    return undefined;
  }

  /** Returns a connection after an exchange; it is pooled only when `reusable` and there is room. */
  release(conn: UpstreamConnection, reusable: boolean): void {
    this.#active.delete(conn);
    if (
      !reusable || conn.closed || this.#closed ||
      // Only endpoints named by DNS pay for reading the clock here.
      (conn.expiresAt !== Infinity && performance.now() > conn.expiresAt)
    ) {
      conn.close();
      return;
    }
    let list = this.#idle.get(conn.endpointKey);
    if (list === undefined) {
      list = [];
      this.#idle.set(conn.endpointKey, list);
    }
    if (list.length >= this.maxIdlePerEndpoint) {
      conn.close();
      return;
    }
    if (conn.park(this.#onDead)) list.push(conn);
  }

  /**
   * Runs `onWaited` once if `conn`'s exchange is still waiting (not yet
   * {@linkcode UpstreamConnection.unwatchClient}ed) after between one and two
   * intervals of `clientCheckMs`. For work only a slow exchange
   * needs, such as listening for its client going away: a field write per
   * request instead of the work itself, and one timer while any is watched.
   */
  watchClient(conn: UpstreamConnection, onWaited: () => void): void {
    conn.watchClient(onWaited, this.#clientCheckTick);
    if (this.#clientCheck !== undefined || this.#closed) return;
    const check = setInterval(() => this.#checkClients(), this.clientCheckMs);
    Deno.unrefTimer(check);
    this.#clientCheck = check;
  }

  #checkClients(): void {
    const tick = ++this.#clientCheckTick;
    let pending = false;
    for (const conn of this.#active) {
      if (conn.checkWatch(tick)) pending = true;
    }
    if (!pending) this.#stopClientCheck();
  }

  #stopClientCheck(): void {
    if (this.#clientCheck !== undefined) clearInterval(this.#clientCheck);
    this.#clientCheck = undefined;
  }

  /** Stops tracking a connection handed over to a tunnel (after a 101). */
  detach(conn: UpstreamConnection): void {
    this.#active.delete(conn);
  }

  /** Closes every connection and stops the sweeper. */
  close(): void {
    this.#closed = true;
    if (this.#sweeper !== undefined) clearInterval(this.#sweeper);
    this.#sweeper = undefined;
    this.#stopClientCheck();
    for (const conn of this.#active) conn.close();
    this.#active.clear();
    for (const list of this.#idle.values()) for (const conn of list) conn.close();
    this.#idle.clear();
  }

  async #open(endpoint: Endpoint, key: string, signal?: AbortSignal): Promise<Deno.Conn> {
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, this.connectTimeoutMs);
    // The client leaving stops a slow connect (a black-holed endpoint) at once.
    const onAbort = () => controller.abort();
    // An abort listener added after the abort would never fire.
    if (signal?.aborted === true) controller.abort();
    else signal?.addEventListener("abort", onAbort, { once: true });
    let conn: Deno.Conn;
    try {
      conn = await this.#connector({
        hostname: endpoint.address,
        port: endpoint.port,
        signal: controller.signal,
      });
    } catch (error) {
      if (signal?.aborted === true && !timedOut) {
        throw new UpstreamError("aborted", "Cannot connect: client went away", { cause: error });
      }
      if (timedOut) {
        throw new UpstreamError(
          "connect-timeout",
          `Cannot connect to "${key}": no answer within ${this.connectTimeoutMs} ms`,
          { cause: error },
        );
      }
      throw new UpstreamError("connect-failed", `Cannot connect to "${key}"`, { cause: error });
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
    const refused = loopbackByName(endpoint.address, conn);
    if (refused !== undefined) {
      conn.close();
      throw new UpstreamError(
        "connect-failed",
        `Cannot connect to "${key}": the name resolves to loopback address "${refused}", which is refused`,
      );
    }
    return conn;
  }

  #onDead = (conn: UpstreamConnection): void => this.#forget(conn);

  #forget(conn: UpstreamConnection): void {
    const list = this.#idle.get(conn.endpointKey);
    if (list === undefined) return;
    const index = list.indexOf(conn);
    if (index !== -1) list.splice(index, 1);
  }

  #ensureSweeper(): void {
    if (this.#sweeper !== undefined) return;
    this.#clock.now = performance.now();
    const sweeper = setInterval(() => this.#sweep(), this.#tick);
    Deno.unrefTimer(sweeper);
    this.#sweeper = sweeper;
  }

  #sweep(): void {
    const now = performance.now();
    this.#clock.now = now;
    // Stamps are up to one tick old: allow for it so that nothing times out early.
    const ioLimit = this.ioTimeoutMs + this.#tick;
    for (const conn of this.#active) {
      const read = conn.readSince;
      const write = conn.writeSince;
      const consumer = conn.consumerSince;
      if (
        (read !== 0 && now - read > ioLimit) || (write !== 0 && now - write > ioLimit) ||
        (consumer !== 0 && now - consumer > ioLimit)
      ) {
        conn.timeout();
      }
    }
    const idleLimit = this.idleTimeoutMs + this.#tick;
    for (const [key, list] of this.#idle) {
      for (let i = list.length - 1; i >= 0; i--) {
        const conn = list[i] as UpstreamConnection;
        if (conn.closed || now - conn.idleSince > idleLimit || now > conn.reuseUntil) {
          conn.close();
          list.splice(i, 1);
        }
      }
      if (list.length === 0) this.#idle.delete(key);
    }
  }
}
