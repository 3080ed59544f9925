/**
 * The inner side of a relaying listener: one `Deno.serve` on a loopback port
 * for the listener's whole life, fed by relays (`_connection_relay.ts`) of the
 * connections the listener accepts itself, and the registry that tells the
 * handler which client each inner connection stands for.
 *
 * Relaying is how a listener gets what `Deno.serve` lacks: it owns each client
 * socket, so it can close one that sends nothing or sits idle, and it can
 * replace its listening sockets without touching live connections. HTTPS
 * always relays. (Plain HTTP does not: its client timeouts come from the
 * connection reaper, `http_connection_reaper.ts`, which costs no extra hop.)
 *
 * The inner server answers only connections from its own relays (421
 * otherwise). Shutdown is Deno's graceful one on the inner server: requests
 * whose body has arrived finish, an upload still arriving is cut (as with
 * `Deno.serve`).
 *
 * Knows nothing of TLS, certificates or routing.
 *
 * @module
 */
import {
  type Relay,
  relayConnection,
  type RelayOptions,
  type RelayPeer,
} from "./_connection_relay.ts";
import {
  type ClientTimeout,
  internalServerError,
  type RequestHandler,
  type ShutdownResult,
} from "./listener.ts";
import { settlesWithin } from "../timers/timers.ts";

/** Options of {@linkcode RelayServer}. */
export interface RelayServerOptions {
  /** Whether clients reach the listener over TLS (told to the handler). */
  readonly secure: boolean;
  /** How long a new connection may take (TLS handshake included) to send its first bytes. */
  readonly firstBytesTimeoutMs: number;
  /**
   * A connection with no request in flight and no byte either way for this
   * long is closed; so is one whose bytes with no request in flight have not
   * become a request (a trickled head), and one whose client took nothing
   * sent to it (see `RelayOptions.idleTimeoutMs` in `_connection_relay.ts`).
   */
  readonly idleTimeoutMs: number;
  /** The listener's public port, told to the handler (read per request). */
  readonly localPort: () => number;
  /** Answers when the handler throws. Default: a bare 500. */
  readonly onError?: (error: unknown) => Response | Promise<Response>;
  /** See `RelayOptions.onTimeout` in `_connection_relay.ts`. */
  readonly onTimeout?: (reason: Exclude<ClientTimeout, "tls-handshake">) => void;
  /** See `RelayOptions.prefaces` in `_connection_relay.ts`. */
  readonly prefaces?: ReadonlyMap<string, Uint8Array>;
  /** See `RelayOptions.onAbandoned` in `_connection_relay.ts`. */
  readonly onAbandoned?: (conn: Deno.Conn<Deno.NetAddr>) => void;
  /** Called with `+1` when a request arrives and `-1` once its response has been sent (or failed). */
  readonly onRequest?: (delta: 1 | -1) => void;
}

/** Where the inner server listens: loopback only. */
const INNER_HOSTNAME = "127.0.0.1";

/** The inner server's answer to a connection that is not one of its relays. */
function misdirected(): Response {
  return new Response("Misdirected Request\n", {
    status: 421,
    headers: { "content-type": "text/plain; charset=utf-8" },
  });
}

/** One inner HTTP server and the relays feeding it. */
export class RelayServer {
  #inner: Deno.HttpServer<Deno.NetAddr>;
  /** The same for every relay: the inner server's address, the timeouts, the peer registry. */
  #relayOptions: RelayOptions;
  /** Relayed clients, by the local port of their inner connection. */
  #peers = new Map<number, RelayPeer>();
  #relays = new Set<Relay>();
  #requests = 0;

  constructor(handler: RequestHandler, options: RelayServerOptions) {
    const onRequest = options.onRequest;
    const secure = options.secure;
    this.#inner = Deno.serve({
      hostname: INNER_HOSTNAME,
      port: 0,
      onError: options.onError ?? internalServerError,
      onListen: () => {},
    }, (req, info) => {
      // Read now: Deno's info.remoteAddr throws once the response has been sent. Relays connect
      // from INNER_HOSTNAME; a port alone could be borrowed from another loopback address.
      const from = info.remoteAddr;
      const peer = from.hostname === INNER_HOSTNAME ? this.#peers.get(from.port) : undefined;
      if (peer === undefined) return misdirected();
      this.#requests++;
      peer.requests++;
      peer.arrived++;
      onRequest?.(1);
      const done = () => {
        this.#requests--;
        peer.requests--;
        peer.finished++;
        onRequest?.(-1);
      };
      info.completed.then(done, done);
      // Read before the handler: once it has upgraded the request, Deno refuses the response
      // if the request's fields are read again.
      const upgrade = req.headers.has("upgrade");
      const response = handler(req, {
        remoteAddr: peer.remoteAddr,
        secure,
        localPort: options.localPort(),
        fallbackAuthority,
      });
      if (!upgrade) return response;
      // Only a connection that did switch protocols (a WebSocket) is exempt from the idle
      // timeout: asking for an upgrade is not enough, or any client could keep a connection.
      return Promise.resolve(response).then((answer) => {
        if (answer.status === 101) peer.upgraded = true;
        return answer;
      });
    });
    // What Deno puts in req.url for a request without Host: the inner server's port.
    const fallbackAuthority = `localhost:${this.#inner.addr.port}`;
    this.#relayOptions = {
      inner: { hostname: INNER_HOSTNAME, port: this.#inner.addr.port },
      firstBytesTimeoutMs: options.firstBytesTimeoutMs,
      idleTimeoutMs: options.idleTimeoutMs,
      ...(options.onAbandoned === undefined ? {} : { onAbandoned: options.onAbandoned }),
      ...(options.prefaces === undefined ? {} : { prefaces: options.prefaces }),
      ...(options.onTimeout === undefined ? {} : { onTimeout: options.onTimeout }),
      register: (port, peer) => this.#peers.set(port, peer),
      unregister: (port, peer) => {
        if (this.#peers.get(port) === peer) this.#peers.delete(port);
      },
    };
  }

  /** Resolves when the inner HTTP server has stopped serving (see `Listener.closed`). */
  get closed(): Promise<void> {
    return this.#inner.finished.catch(() => {});
  }

  /** The inner HTTP server's loopback address (for tests). */
  get innerAddr(): Deno.NetAddr {
    return this.#inner.addr;
  }

  /** Client connections being relayed (including ones still in their TLS handshake). */
  get connections(): number {
    return this.#relays.size;
  }

  /** Requests in flight (a request counts until its response has been sent). */
  get requests(): number {
    return this.#requests;
  }

  /** Relays an accepted client connection; resolves when it is closed (never rejects). */
  relay(conn: Deno.Conn<Deno.NetAddr>): Promise<void> {
    const relay = relayConnection(conn, this.#relayOptions);
    this.#relays.add(relay);
    return relay.done.then(() => {
      this.#relays.delete(relay);
    });
  }

  /**
   * Graceful: in-flight requests finish; idle connections and WebSockets are
   * closed, which ends their relays. Call once the listening sockets are
   * closed. Resolves `finished` when every relay has ended, even past the
   * timeout.
   */
  async shutdown(timeoutMs: number): Promise<{ result: ShutdownResult; finished: Promise<void> }> {
    // Relays still in their handshake (or before their first bytes) have no inner connection:
    // stop them.
    const drained = this.#inner.shutdown().catch(() => {});
    this.#stopUnconnected();
    // Once the inner server has closed its connections, each relay ends when it has passed on
    // the last bytes; one that got its first bytes meanwhile finds the inner server gone.
    const finished = drained.then(async () => {
      this.#stopUnconnected();
      await Promise.all([...this.#relays].map((relay) => relay.done));
    });
    const graceful = await settlesWithin(finished, timeoutMs);
    const openConnections = this.#requests;
    return {
      result: graceful
        ? { graceful: true, openConnections: 0 }
        : { graceful: false, openConnections },
      finished,
    };
  }

  /** Shuts the inner server down at once (a listener that failed to start). */
  abandon(): void {
    void this.#inner.shutdown();
  }

  #stopUnconnected(): void {
    for (const relay of this.#relays) if (!relay.connected) relay.stop();
  }
}
