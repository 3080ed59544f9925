/**
 * One generation of the HTTPS listener: a TLS listening socket (sharing its
 * port with the other generations through `reusePort`) with its own accept
 * loop, handing every accepted connection to the listener, and how it stops
 * accepting. Generic over the connection type, so tests can feed a relay
 * from a plain TCP socket.
 *
 * Stopping closes the listening socket and nothing else: the connections it
 * accepted are the listener's, and live on (they are relayed into one
 * long-lived HTTP server, see `https_listener.ts`). A connection the kernel
 * had queued on the socket but the loop had not accepted yet is reset by the
 * kernel when the socket closes (unless `net.ipv4.tcp_migrate_req=1`); the
 * loop keeps that queue short by accepting continuously.
 *
 * Knows nothing of certificates, HTTP or snapshots.
 *
 * @module
 */

/** Options of {@linkcode Generation}. */
export interface GenerationOptions<C extends Deno.Conn<Deno.NetAddr>> {
  readonly id: number;
  readonly listener: Deno.Listener<C, Deno.NetAddr>;
  /** The certificate table's fingerprint this generation's resolver caches answers for (TLS). */
  readonly fingerprint?: string;
  /** Takes over an accepted (for TLS, not yet handshaken) connection. */
  readonly onConnection: (conn: C, generation: Generation<C>) => void;
  /** Reports an accept error other than the socket closing (the loop goes on). */
  readonly onAcceptError: (error: unknown) => void;
}

/** Waits after an accept error (e.g. out of file descriptors) before accepting again. */
const ACCEPT_RETRY_MS = 100;

/** A listening socket and its accept loop. */
export class Generation<C extends Deno.Conn<Deno.NetAddr> = Deno.TlsConn> {
  readonly id: number;
  readonly fingerprint: string;
  readonly addr: Deno.NetAddr;
  /** Distinct server names the resolver was asked for (Deno calls it once per name). */
  serverNames = 0;
  /** Connections accepted by this generation and still open. */
  connections = 0;
  #listener: Deno.Listener<C, Deno.NetAddr>;
  #accepting = true;
  #loop: Promise<void>;

  constructor(options: GenerationOptions<C>) {
    this.id = options.id;
    this.fingerprint = options.fingerprint ?? "";
    this.#listener = options.listener;
    this.addr = options.listener.addr;
    this.#loop = this.#acceptLoop(options);
  }

  /** The listening socket is still open. */
  get accepting(): boolean {
    return this.#accepting;
  }

  /** Closes the listening socket (idempotent); resolves once the accept loop has ended. */
  stopAccepting(): Promise<void> {
    if (this.#accepting) {
      this.#accepting = false;
      try {
        this.#listener.close();
      } catch {
        // Already closed.
      }
    }
    return this.#loop;
  }

  async #acceptLoop(options: GenerationOptions<C>): Promise<void> {
    while (this.#accepting) {
      let conn: C;
      try {
        conn = await this.#listener.accept();
      } catch (error) {
        if (!this.#accepting || error instanceof Deno.errors.BadResource) return;
        options.onAcceptError(error);
        await new Promise((resolve) => setTimeout(resolve, ACCEPT_RETRY_MS));
        continue;
      }
      // Accepted as the socket was closing: still a client's connection, served like any other.
      options.onConnection(conn, this);
    }
  }
}
