/**
 * The HTTPS listener on `--https-port`: TLS with the certificate chosen per
 * server name (SNI) from the current snapshot's certificate table, ALPN `h2`
 * and `http/1.1`, serving a {@linkcode RequestHandler}.
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
 * Then the old socket stops accepting (closed after a short quiet moment:
 * closing a listening socket resets the connections the kernel queued on it
 * but nobody accepted yet; `net.ipv4.tcp_migrate_req=1` makes the kernel hand
 * those to the new socket instead), and its connections finish their
 * in-flight requests and close when idle; one that has not sent a request
 * yet gets `firstRequestGraceMs` to send it. In-flight requests are never cut
 * (see `_generation.ts`): bounding them is the request handler's job.
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
   * How long a draining connection that has not sent a request yet may take
   * to send one before it is closed (on rotation and on shutdown). Default 5,000 ms.
   */
  readonly firstRequestGraceMs?: number;
  /** A replaced socket is closed once no connection arrived for this long… Default 10 ms. */
  readonly acceptQuietMs?: number;
  /** …or after this long at most. Default 250 ms. */
  readonly acceptDrainMaxMs?: number;
  /** Answers when the handler throws. Default: a bare 500. */
  readonly onError?: (error: unknown) => Response | Promise<Response>;
  /** Default: the `server` component logger. */
  readonly logger?: Logger;
  /** Called with `+1` when a connection is accepted and `-1` when it has closed (a gauge). */
  readonly onConnection?: (delta: 1 | -1) => void;
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
  /** Replaced generations with connections still open. */
  readonly draining: number;
  /** Open connections, all generations. */
  readonly connections: number;
}

/** Why a generation was replaced. */
export type RotationReason = "certificates" | "server-names" | "requested";

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
  #firstRequestGraceMs: number;
  #current: Generation;
  #retiring = new Map<Generation, Promise<void>>();
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
    this.#firstRequestGraceMs = options.firstRequestGraceMs ?? 5_000;
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
    let connections = this.#current.connections;
    let accepting = this.#current.accepting ? 1 : 0;
    for (const generation of this.#retiring.keys()) {
      connections += generation.connections;
      if (generation.accepting) accepting++;
    }
    return {
      generation: this.#current.id,
      serverNames: this.#current.serverNames,
      rotations: this.#rotations,
      accepting,
      draining: this.#retiring.size,
      connections,
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

  /** Resolves once only the current generation accepts connections (after a rotation, its predecessor's socket is closed). */
  async settled(): Promise<void> {
    await Promise.all([...this.#retiring.keys()].map((generation) => generation.stopAccepting()));
  }

  shutdown(options: ShutdownOptions = {}): Promise<ShutdownResult> {
    this.#shutdown ??= this.#stop(options.timeoutMs ?? DEFAULT_SHUTDOWN_TIMEOUT_MS);
    return this.#shutdown;
  }

  async #stop(timeoutMs: number): Promise<ShutdownResult> {
    const generations = [this.#current, ...this.#retiring.keys()];
    const closed = Promise.all(generations.map((generation) => generation.closed()));
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<"deadline">((resolve) => {
      timer = setTimeout(() => resolve("deadline"), timeoutMs);
    });
    const grace = Math.min(timeoutMs, this.#firstRequestGraceMs);
    await Promise.all(generations.map((generation) => generation.stopAccepting()));
    for (const generation of generations) generation.drain();
    const idle = this.#after(grace, () => {
      for (const generation of generations) generation.closeIdle();
    });
    const outcome = await Promise.race([closed.then(() => "closed" as const), deadline]);
    clearTimeout(timer);
    let openConnections = 0;
    for (const generation of generations) openConnections += generation.closeIdle();
    this.#cancel(idle);
    for (const pending of this.#timers) clearTimeout(pending);
    this.#timers.clear();
    void closed.then(() => this.#resolveFinished());
    return outcome === "closed"
      ? { graceful: true, openConnections: 0 }
      : { graceful: false, openConnections };
  }

  #after(ms: number, fn: () => void): ReturnType<typeof setTimeout> {
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      fn();
    }, ms);
    this.#timers.add(timer);
    return timer;
  }

  #cancel(timer: ReturnType<typeof setTimeout>): void {
    clearTimeout(timer);
    this.#timers.delete(timer);
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
      ...(this.#options.onConnection ? { onConnection: this.#options.onConnection } : {}),
      onError: this.#options.onError ?? internalServerError,
      acceptQuietMs: this.#options.acceptQuietMs ?? 10,
      acceptDrainMaxMs: this.#options.acceptDrainMaxMs ?? 250,
      onAcceptError: (error) =>
        this.#logger.warn("Cannot accept an HTTPS connection: {error}", {
          error: String(error),
          port: listener.addr.port,
          generation: id,
        }),
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
    let idle: ReturnType<typeof setTimeout> | undefined;
    void generation.stopAccepting().then(() => {
      generation.drain();
      if (this.#shutdown === undefined) {
        idle = this.#after(this.#firstRequestGraceMs, () => generation.closeIdle());
      }
    });
    const done = generation.closed().then(() => {
      if (idle !== undefined) this.#cancel(idle);
      this.#retiring.delete(generation);
      this.#logger.debug("Closed HTTPS listener generation {generation}", {
        generation: generation.id,
        durationMs: Math.round(performance.now() - started),
      });
    });
    this.#retiring.set(generation, done);
  }
}
