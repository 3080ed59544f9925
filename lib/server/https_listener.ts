/**
 * The HTTPS listener on `--https-port`: TLS with the certificate chosen per
 * server name (SNI) from the current snapshot's certificate table, ALPN `h2`
 * and `http/1.1`, serving a {@linkcode RequestHandler} (WebSocket upgrades
 * included).
 *
 * Two layers:
 *
 * - TLS *generations* (`_generation.ts`): listening sockets on the port
 *   (`reusePort`, which needs `--unstable-net`), one accepting at a time,
 *   each with its own accept loop. Deno caches the certificate it got for a
 *   server name for a listening socket's whole life and never evicts (see
 *   `lib/tls/deno_sni.ts`), so a new generation is opened when the
 *   certificate table's `fingerprint` changed ({@linkcode HttpsListener.refresh},
 *   called when a snapshot is installed, and checked on every resolver call),
 *   or when the current one resolved more than `maxServerNames` distinct
 *   names (a client sending random names cannot grow memory without bound).
 *   The old socket is closed as soon as the new one listens; the connections
 *   it accepted are not affected.
 * - One *inner* HTTP server (`Deno.serve` on a loopback port, HTTP/1.1 and
 *   h2 with prior knowledge) for the listener's whole life: every accepted
 *   TLS connection is relayed into it (`_connection_relay.ts`), and the handler is
 *   told the real client's address. A rotation therefore drops nothing:
 *   connections still in their handshake, idle keep-alive connections and
 *   WebSockets all carry on. (Serving each generation with Deno's own
 *   `serveHttpOnListener` instead closed, at every rotation, the connections
 *   that had not sent a request yet and every WebSocket of the generation,
 *   and held each small keep-alive response about 40 ms for want of
 *   `TCP_NODELAY`; see `_connection_relay.ts`. The relay costs one loopback
 *   hop, one copy per byte and two more descriptors per connection.)
 * - Every new listening socket gets `TCP_NODELAY` (`native_socket.ts`, through
 *   FFI), which the connections it accepts inherit: without it, a response
 *   reaching the TLS socket in several writes (streams, bodies over 16 KiB)
 *   waited about 40 ms for the client's delayed ACK.
 * - A client that negotiated `h2` and does not open with HTTP/2's
 *   connection preface is closed unanswered (RFC 9113 §3.4), rather than
 *   answered as HTTP/1.1 by the inner server.
 * - A connection still in its TLS handshake at the first-bytes timeout (or
 *   at shutdown) is closed, and its socket then shut down through FFI
 *   (`_stalled_sockets.ts`, a batch per second at most): Deno's `close()`
 *   leaves such a socket to the client, so a client could otherwise hold any
 *   number of descriptors by connecting and sending nothing.
 *
 * The only connections a rotation can lose are those the kernel queued on
 * the old socket in the instant it closes, before the accept loop took them
 * (reset before any byte; `net.ipv4.tcp_migrate_req=1` hands them to the new
 * socket instead). The inner server answers only connections from its own
 * relays (421 otherwise). Shutdown is Deno's graceful one on the inner
 * server: requests whose body has arrived finish, an upload still arriving
 * is cut (as with `Deno.serve`). A connection idle between requests, one
 * whose request head does not complete, and one whose client takes nothing
 * sent to it are closed after one to two `idleTimeoutMs` (WebSockets are
 * exempt from the first two; see `_connection_relay.ts`).
 *
 * Knows the certificate table's interface, not how it is built; nothing of
 * routes or Kubernetes.
 *
 * @module
 */
import type { CertificateTable } from "../routing/snapshot.ts";
import { componentLogger, type Logger } from "../log/logging.ts";
import { listenTlsWithSni, type TlsKeyPair } from "../tls/deno_sni.ts";
import { Generation } from "./_generation.ts";
import { RelayServer } from "./_relay_server.ts";
import { setNoDelayOnListeningSockets } from "./native_socket.ts";
import { StalledSockets } from "./_stalled_sockets.ts";
import {
  type ClientTimeout,
  DEFAULT_SHUTDOWN_TIMEOUT_MS,
  type Listener,
  type RequestHandler,
  type ShutdownOptions,
  type ShutdownResult,
} from "./listener.ts";

/** Options of {@linkcode listenHttps}. */
export interface HttpsListenerOptions {
  /** Default `"0.0.0.0"`. */
  readonly hostname?: string;
  /** 0 picks a free port (read it from `addr`); later generations reuse it. */
  readonly port: number;
  /** The current certificate table, read on every TLS handshake that Deno has not cached. */
  readonly certificates: () => CertificateTable;
  /** Distinct server names one generation may resolve before it is replaced. Default 1000. */
  readonly maxServerNames?: number;
  /**
   * How long a new connection may take to complete its TLS handshake and send
   * its first bytes before it is closed. Default 30,000 ms.
   */
  readonly firstBytesTimeoutMs?: number;
  /**
   * A connection with no request in flight and no byte either way for this
   * long is closed (keep-alive timeout; WebSockets excepted); the same period
   * bounds a request head and a client that takes nothing (see
   * `RelayOptions.idleTimeoutMs`). Default 75,000 ms (nginx's `keepalive_timeout`).
   */
  readonly idleTimeoutMs?: number;
  /** Answers when the handler throws. Default: a bare 500. */
  readonly onError?: (error: unknown) => Response | Promise<Response>;
  /** Called with `+1` when a request arrives and `-1` once its response has been sent (or failed). */
  readonly onRequest?: (delta: 1 | -1) => void;
  /** Called for each client connection closed for a timeout, with why (`count` at once). */
  readonly onClientTimeout?: (reason: ClientTimeout, count: number) => void;
  /** Default: the `server` component logger. */
  readonly logger?: Logger;
}

/** Counters of {@linkcode HttpsListener.stats}. */
export interface HttpsListenerStats {
  /** The accepting generation's number (the first is 1). */
  readonly generation: number;
  /** Distinct server names the accepting generation resolved. */
  readonly serverNames: number;
  /** Generations replaced so far. */
  readonly rotations: number;
  /** Generations whose listening socket is still open: 1 (0 once shut down). */
  readonly accepting: number;
  /** Replaced generations still closing their socket or holding connections. */
  readonly draining: number;
  /** Open client connections, all generations (including ones still in their TLS handshake). */
  readonly connections: number;
  /** Requests in flight (a request counts until its response has been sent). */
  readonly requests: number;
  /** Connections given up on while still in their TLS handshake (the first-bytes timeout, or shutdown). */
  readonly stalledHandshakes: number;
  /** Of those, sockets Sluice shut down itself (Deno does not close them; see `native_socket.ts`). */
  readonly stalledHandshakesShut: number;
}

/** Why a generation was replaced. */
export type RotationReason = "certificates" | "server-names" | "requested";

/**
 * RFC 9113 §3.4: a client that negotiated `h2` opens with this preface; an
 * invalid one is a connection error (PROTOCOL_ERROR), and the GOAWAY may be
 * omitted since the peer is not speaking HTTP/2. Without the check the inner
 * server, which also speaks HTTP/1.1, answered such bytes as HTTP/1.1.
 */
const ALPN_PREFACES: ReadonlyMap<string, Uint8Array> = new Map([
  ["h2", new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")],
]);

/** Default of {@linkcode HttpsListenerOptions.maxServerNames}. */
export const DEFAULT_MAX_SERVER_NAMES = 1000;

/** Default of {@linkcode HttpsListenerOptions.firstBytesTimeoutMs}. */
export const DEFAULT_FIRST_BYTES_TIMEOUT_MS = 30_000;

/** Default of {@linkcode HttpsListenerOptions.idleTimeoutMs}. */
export const DEFAULT_IDLE_TIMEOUT_MS = 75_000;

/**
 * Starts serving HTTPS on `options.port` with `handler`, choosing each
 * connection's certificate with `options.certificates().resolve(serverName)`.
 */
export function listenHttps(handler: RequestHandler, options: HttpsListenerOptions): HttpsListener {
  return new HttpsListener(handler, options);
}

/** HTTPS on one port: TLS generations relayed into one inner HTTP server. Create with {@linkcode listenHttps}. */
export class HttpsListener implements Listener {
  readonly addr: Deno.NetAddr;
  readonly finished: Promise<void>;
  #options: HttpsListenerOptions;
  #logger: Logger;
  #maxServerNames: number;
  #server: RelayServer;
  #current: Generation;
  #retired = new Set<Generation>();
  #nextId = 1;
  #rotations = 0;
  #rotationQueued = false;
  #noDelayWarned = false;
  #stalled: StalledSockets;
  #shutdown: Promise<ShutdownResult> | undefined;
  #resolveFinished: () => void = () => {};

  constructor(handler: RequestHandler, options: HttpsListenerOptions) {
    this.#options = options;
    this.#logger = options.logger ?? componentLogger("server");
    this.#maxServerNames = options.maxServerNames ?? DEFAULT_MAX_SERVER_NAMES;
    if (!(this.#maxServerNames >= 1)) {
      throw new RangeError(
        `Cannot listen for HTTPS: maxServerNames "${this.#maxServerNames}" is below 1`,
      );
    }
    let localPort = 0;
    const onClientTimeout = options.onClientTimeout;
    this.#stalled = new StalledSockets({
      ...(onClientTimeout === undefined
        ? {}
        : { onShut: (count: number) => onClientTimeout("tls-handshake", count) }),
      onUnavailable: (reason) =>
        this.#logger.warn(
          "HTTPS connections that stall in their TLS handshake keep their socket until the client leaves, so a client can use up descriptors: {reason}",
          { reason },
        ),
    });
    this.#server = new RelayServer(handler, {
      secure: true,
      firstBytesTimeoutMs: options.firstBytesTimeoutMs ?? DEFAULT_FIRST_BYTES_TIMEOUT_MS,
      idleTimeoutMs: options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS,
      localPort: () => localPort,
      onAbandoned: (conn) => this.#stalled.add(conn),
      prefaces: ALPN_PREFACES,
      ...(onClientTimeout === undefined
        ? {}
        : { onTimeout: (reason: ClientTimeout) => onClientTimeout(reason, 1) }),
      ...(options.onError === undefined ? {} : { onError: options.onError }),
      ...(options.onRequest === undefined ? {} : { onRequest: options.onRequest }),
    });
    try {
      this.#current = this.#open(options.port);
    } catch (error) {
      this.#server.abandon();
      throw error;
    }
    this.addr = this.#current.addr;
    localPort = this.addr.port;
    this.finished = new Promise((resolve) => this.#resolveFinished = resolve);
  }

  /** Counters for tests, metrics and logs. */
  get stats(): HttpsListenerStats {
    const draining = this.#retired.size;
    return {
      generation: this.#current.id,
      serverNames: this.#current.serverNames,
      rotations: this.#rotations,
      accepting: this.#current.accepting ? 1 : 0,
      draining,
      connections: this.#server.connections,
      requests: this.#server.requests,
      stalledHandshakes: this.#stalled.stats.queued,
      stalledHandshakesShut: this.#stalled.stats.shut,
    };
  }

  get closed(): Promise<void> {
    return this.#server.closed;
  }

  /** The inner HTTP server's loopback address (for tests). */
  get innerAddr(): Deno.NetAddr {
    return this.#server.innerAddr;
  }

  /**
   * Opens a new generation if the certificate table changed since the
   * accepting one was opened. Call after installing a new snapshot. Returns
   * whether it rotated.
   */
  refresh(): boolean {
    if (this.#shutdown !== undefined) return false;
    if (this.#options.certificates().fingerprint === this.#current.fingerprint) return false;
    return this.#rotate("certificates");
  }

  /** Opens a new generation now and closes the accepting one's socket. */
  rotate(): void {
    if (this.#shutdown === undefined) this.#rotate("requested");
  }

  /** Resolves once only the current generation accepts connections (old sockets are closed). */
  async settled(): Promise<void> {
    await Promise.all([...this.#retired].map((generation) => generation.stopAccepting()));
  }

  shutdown(options: ShutdownOptions = {}): Promise<ShutdownResult> {
    this.#shutdown ??= this.#stop(options.timeoutMs ?? DEFAULT_SHUTDOWN_TIMEOUT_MS);
    return this.#shutdown;
  }

  async #stop(timeoutMs: number): Promise<ShutdownResult> {
    const generations = [this.#current, ...this.#retired];
    await Promise.all(generations.map((generation) => generation.stopAccepting()));
    const { result, finished } = await this.#server.shutdown(timeoutMs);
    // The relays stopped in their handshake left their sockets to be shut down.
    void finished.then(() => this.#stalled.flush()).then(() => this.#resolveFinished());
    return result;
  }

  #open(port: number): Generation {
    const id = this.#nextId;
    const fingerprint = this.#options.certificates().fingerprint;
    // The resolver refers to its generation, which exists only once the listener does.
    const slot: { generation?: Generation } = {};
    const listener = listenTlsWithSni({
      hostname: this.#options.hostname ?? "0.0.0.0",
      port,
      reusePort: true,
      alpnProtocols: ["h2", "http/1.1"],
      resolve: (serverName) => this.#resolve(slot.generation, serverName),
    });
    this.#setNoDelay(listener.addr.port, id);
    const generation = new Generation({
      id,
      listener,
      fingerprint,
      onConnection: (conn, from) => this.#relay(conn, from),
      onAcceptError: (error) =>
        this.#logger.warn("Cannot accept an HTTPS connection: {error}", {
          error: String(error),
          generation: id,
        }),
    });
    slot.generation = generation;
    this.#nextId++;
    return generation;
  }

  /** Connections the new socket accepts get `TCP_NODELAY` (see `native_socket.ts`); says once if not. */
  #setNoDelay(port: number, generation: number): void {
    const outcome = setNoDelayOnListeningSockets(port);
    if (outcome.ok || this.#noDelayWarned) return;
    this.#noDelayWarned = true;
    this.#logger.warn(
      "HTTPS connections run without TCP_NODELAY, so streamed and large responses can wait about 40 ms for the client's delayed ACK: {reason}",
      { reason: outcome.reason, generation },
    );
  }

  #relay(conn: Deno.TlsConn, generation: Generation): void {
    generation.connections++;
    void this.#server.relay(conn).then(() => {
      generation.connections--;
      this.#forgetIfDrained(generation);
    });
  }

  #resolve(generation: Generation | undefined, serverName: string): TlsKeyPair {
    const table = this.#options.certificates();
    if (generation !== undefined) {
      generation.serverNames++;
      if (
        generation === this.#current &&
        (table.fingerprint !== generation.fingerprint ||
          generation.serverNames > this.#maxServerNames)
      ) {
        this.#queueRotation();
      }
    }
    const certificate = table.resolve(serverName === "" ? undefined : serverName);
    return { cert: certificate.certPem, key: certificate.keyPem };
  }

  #queueRotation(): void {
    if (this.#rotationQueued) return;
    this.#rotationQueued = true;
    queueMicrotask(() => {
      this.#rotationQueued = false;
      if (this.#shutdown !== undefined) return;
      const current = this.#current;
      if (this.#options.certificates().fingerprint !== current.fingerprint) {
        this.#rotate("certificates");
      } else if (current.serverNames > this.#maxServerNames) {
        this.#rotate("server-names");
      }
    });
  }

  /** Opens a new generation and closes the current one's socket; false when it could not open one. */
  #rotate(reason: RotationReason): boolean {
    const old = this.#current;
    let next: Generation;
    try {
      next = this.#open(this.addr.port);
    } catch (error) {
      this.#logger.error("Cannot open a new HTTPS listener generation: {error}", {
        error: String(error),
        port: this.addr.port,
        reason,
      });
      return false;
    }
    this.#current = next;
    this.#rotations++;
    this.#logger.info("Replaced HTTPS listener generation {old} by {new} ({reason})", {
      old: old.id,
      new: next.id,
      reason,
      serverNames: old.serverNames,
      port: this.addr.port,
    });
    // The new socket listens: close the old one. Its connections carry on; it is draining until
    // its accept loop has ended and its last connection closed.
    this.#retired.add(old);
    void old.stopAccepting().then(() => this.#forgetIfDrained(old));
    return true;
  }

  #forgetIfDrained(generation: Generation): void {
    if (generation !== this.#current && !generation.accepting && generation.connections === 0) {
      this.#retired.delete(generation);
    }
  }
}
