/**
 * The HTTPS listener on `--https-port`: TLS with the certificate chosen per
 * server name (SNI) from the current snapshot's certificate table, ALPN `h2`
 * and `http/1.1`, serving a {@linkcode RequestHandler} (WebSocket upgrades
 * included).
 *
 * Deno caches the certificate it got for a server name for the listening
 * socket's whole life, and never evicts (see `lib/tls/deno_sni.ts`). So the
 * listener runs in *generations*: sockets on the same port (`reusePort`, which
 * needs `--unstable-net`), one accepting at a time. A new generation is opened
 * when
 *
 * - the certificate table's `fingerprint` changed ({@linkcode HttpsListener.refresh},
 *   called when a snapshot is installed, and checked on every resolver call), or
 * - the current generation resolved more than `maxServerNames` distinct names
 *   (a client sending random names cannot grow memory without bound).
 *
 * Then the old generation is shut down gracefully `overlapMs` after the new
 * one listens (see `_generation.ts` for why each generation is served by Deno's
 * own accept loop): its socket closes, its in-flight requests finish. What a
 * rotation costs, measured on Deno 2.9.6 (`https_listener_test.ts`):
 *
 * - connections of the old generation that have not sent a complete request
 *   yet (most of them still in their TLS handshake) are closed by Deno: the
 *   client sees the connection end without a response and must retry;
 * - connections the kernel queued on the old socket but Deno had not accepted
 *   yet are reset before any byte (`net.ipv4.tcp_migrate_req=1` hands them to
 *   the new socket instead);
 * - idle keep-alive connections are closed (clients reopen them), and
 *   WebSockets of the old generation get a close frame ("Server shutting
 *   down"): clients reconnect, to the new generation.
 *
 * In-flight requests are never cut: bounding them is the request handler's job.
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
import {
  DEFAULT_SHUTDOWN_TIMEOUT_MS,
  internalServerError,
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
   * Ignored since WebSockets are served (Deno's graceful shutdown closes a
   * connection that has not sent a request at once; see `_generation.ts`).
   * Kept so that existing configurations still type-check.
   */
  readonly firstRequestGraceMs?: number;
  /**
   * How long a replaced generation keeps accepting next to the new one before
   * it is shut down. Default 100 ms (measured: about half the failed requests
   * per rotation of closing at once; longer did not help).
   */
  readonly overlapMs?: number;
  /** Answers when the handler throws. Default: a bare 500. */
  readonly onError?: (error: unknown) => Response | Promise<Response>;
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
  /** Generations whose listening socket is still open: 1, or 2 while a rotation closes the old one. */
  readonly accepting: number;
  /** Replaced generations still finishing requests. */
  readonly draining: number;
  /** Requests in flight, all generations (a request counts until its response has been sent). */
  readonly requests: number;
}

/** Why a generation was replaced. */
export type RotationReason = "certificates" | "server-names" | "requested";

/** Default of {@linkcode HttpsListenerOptions.overlapMs}. */
export const DEFAULT_OVERLAP_MS = 100;

/** Default of {@linkcode HttpsListenerOptions.maxServerNames}. */
export const DEFAULT_MAX_SERVER_NAMES = 1000;

/**
 * Starts serving HTTPS on `options.port` with `handler`, choosing each
 * connection's certificate with `options.certificates().resolve(serverName)`.
 */
export function listenHttps(handler: RequestHandler, options: HttpsListenerOptions): HttpsListener {
  return new HttpsListener(handler, options);
}

/** HTTPS on one port, served by successive listener generations. Create with {@linkcode listenHttps}. */
export class HttpsListener implements Listener {
  readonly addr: Deno.NetAddr;
  readonly finished: Promise<void>;
  #handler: RequestHandler;
  #options: HttpsListenerOptions;
  #logger: Logger;
  #maxServerNames: number;
  #current: Generation;
  #retiring = new Map<Generation, Promise<void>>();
  #overlapMs: number;
  #timers = new Set<ReturnType<typeof setTimeout>>();
  #nextId = 1;
  #rotations = 0;
  #rotationQueued = false;
  #shutdown: Promise<ShutdownResult> | undefined;
  #resolveFinished: () => void = () => {};

  constructor(handler: RequestHandler, options: HttpsListenerOptions) {
    this.#handler = handler;
    this.#options = options;
    this.#logger = options.logger ?? componentLogger("server");
    this.#maxServerNames = options.maxServerNames ?? DEFAULT_MAX_SERVER_NAMES;
    this.#overlapMs = options.overlapMs ?? DEFAULT_OVERLAP_MS;
    if (!(this.#maxServerNames >= 1)) {
      throw new RangeError(
        `Cannot listen for HTTPS: maxServerNames "${this.#maxServerNames}" is below 1`,
      );
    }
    this.#current = this.#open(options.port);
    this.addr = this.#current.addr;
    this.finished = new Promise((resolve) => this.#resolveFinished = resolve);
  }

  /** Counters for tests, metrics and logs. */
  get stats(): HttpsListenerStats {
    let requests = this.#current.requests;
    let accepting = this.#current.accepting ? 1 : 0;
    for (const generation of this.#retiring.keys()) {
      requests += generation.requests;
      if (generation.accepting) accepting++;
    }
    return {
      generation: this.#current.id,
      serverNames: this.#current.serverNames,
      rotations: this.#rotations,
      accepting,
      draining: this.#retiring.size,
      requests,
    };
  }

  /**
   * Opens a new generation if the certificate table changed since the
   * accepting one was opened. Call after installing a new snapshot. Returns
   * whether it rotated.
   */
  refresh(): boolean {
    if (this.#shutdown !== undefined) return false;
    if (this.#options.certificates().fingerprint === this.#current.fingerprint) return false;
    this.#rotate("certificates");
    return true;
  }

  /** Opens a new generation now and drains the accepting one. */
  rotate(): void {
    if (this.#shutdown === undefined) this.#rotate("requested");
  }

  /**
   * Resolves once only the current generation accepts connections: after a
   * rotation, when its predecessor's socket is closed (`overlapMs` later).
   */
  async settled(): Promise<void> {
    await Promise.all(
      [...this.#retiring.keys()].map((generation) => generation.stoppedAccepting()),
    );
  }

  shutdown(options: ShutdownOptions = {}): Promise<ShutdownResult> {
    this.#shutdown ??= this.#stop(options.timeoutMs ?? DEFAULT_SHUTDOWN_TIMEOUT_MS);
    return this.#shutdown;
  }

  async #stop(timeoutMs: number): Promise<ShutdownResult> {
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    const generations = [this.#current, ...this.#retiring.keys()];
    await Promise.all(generations.map((generation) => generation.stopAccepting()));
    const closed = Promise.all(generations.map((generation) => generation.closed()));
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<"deadline">((resolve) => {
      timer = setTimeout(() => resolve("deadline"), timeoutMs);
    });
    const outcome = await Promise.race([closed.then(() => "closed" as const), deadline]);
    clearTimeout(timer);
    let openConnections = 0;
    for (const generation of generations) openConnections += generation.requests;
    void closed.then(() => this.#resolveFinished());
    return outcome === "closed"
      ? { graceful: true, openConnections: 0 }
      : { graceful: false, openConnections };
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
    const generation = new Generation({
      id,
      listener,
      fingerprint,
      handler: this.#handler,
      onError: this.#options.onError ?? internalServerError,
    });
    slot.generation = generation;
    this.#nextId++;
    return generation;
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

  #rotate(reason: RotationReason): void {
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
      return;
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
    this.#retire(old);
  }

  #retire(generation: Generation): void {
    const started = performance.now();
    // Both sockets accept for overlapMs: the old generation's fresh connections get to send their
    // request meanwhile (the kernel sends half of the new ones to each), which halved the failures.
    const overlap = setTimeout(() => {
      this.#timers.delete(overlap);
      void generation.stopAccepting();
    }, this.#overlapMs);
    this.#timers.add(overlap);
    const done = generation.closed().then(() => {
      this.#retiring.delete(generation);
      this.#logger.debug("Closed HTTPS listener generation {generation}", {
        generation: generation.id,
        durationMs: Math.round(performance.now() - started),
      });
    });
    this.#retiring.set(generation, done);
  }
}
