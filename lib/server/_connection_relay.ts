/**
 * One client connection, relayed (every HTTPS connection; plain TCP works the
 * same, which tests use): completes the TLS handshake if any and waits for
 * the client's first bytes (bounded in time), opens a loopback connection to
 * the listener's inner HTTP server, registers which client that inner
 * connection stands for, and copies bytes both ways until either side ends or
 * a timeout closes both: idle, a request head that never completes, a client
 * that takes nothing of what is sent to it (see
 * {@linkcode RelayOptions.idleTimeoutMs}).
 *
 * Why a relay and not Deno serving the TLS socket itself (see
 * `https_listener.ts`): the inner server lives as long as the listener, so
 * its connections and WebSockets outlive any TLS listener generation; and
 * the inner server writes a small response's head and body in one write,
 * which reaches the client as one TLS write. (Deno 2.9.6 serving a TLS
 * socket writes them separately, and without `TCP_NODELAY`, which Deno
 * cannot set on a TLS connection, the client's delayed ACK held every
 * keep-alive response for about 40 ms.) Responses larger than one read
 * (16 KiB) or streamed in several writes reach the TLS socket in several
 * writes: they do not wait for the client's ACK only because the HTTPS
 * listener gives its sockets `TCP_NODELAY` through FFI (`native_socket.ts`).
 *
 * Each relay holds two small buffers (one per direction) for its life.
 * Knows nothing of HTTP, certificates or routing.
 *
 * @module
 */
import type { ClientTimeout } from "./listener.ts";

/**
 * Who an inner connection stands for, looked up by its local port; the
 * inner server keeps its request counts up to date.
 */
export interface RelayPeer {
  /** The client's address, as the accepted socket saw it. */
  readonly remoteAddr: Deno.NetAddr;
  /** Requests of this connection in flight (until each response has been sent). */
  requests: number;
  /** Requests of this connection so far (the relay learns from it that a request head arrived). */
  arrived: number;
  /** Requests of this connection whose response has been sent, so far. */
  finished: number;
  /** The connection switched protocols (a WebSocket): exempt from the idle and head timeouts. */
  upgraded: boolean;
}

/** Options of {@linkcode relayConnection}. */
export interface RelayOptions {
  /** The inner HTTP server's loopback address. */
  readonly inner: { readonly hostname: string; readonly port: number };
  /** How long a client may take (TLS handshake included) to send its first bytes. */
  readonly firstBytesTimeoutMs: number;
  /**
   * The connection's timeouts after its first bytes, each checked once per
   * period of this length (so a connection goes between one and two of them
   * after the condition began):
   *
   * - idle (keep-alive timeout): no request in flight and no byte either way;
   * - request head (nginx's `client_header_timeout`): with no request in
   *   flight, the client sent bytes and no request came of them, however
   *   slowly they keep coming;
   * - send (nginx's `send_timeout`): a write to the client took no byte, even
   *   with a request in flight.
   *
   * Upgraded connections are exempt from the first two.
   */
  readonly idleTimeoutMs: number;
  /**
   * By ALPN protocol, the bytes a TLS client that negotiated it must send
   * first (HTTP/2's connection preface). One that sends anything else is
   * closed before a byte reaches the inner server. Absent: nothing checked.
   */
  readonly prefaces?: ReadonlyMap<string, Uint8Array>;
  /**
   * Called with a TLS connection given up on in its handshake (at the
   * first-bytes timeout, or `stop()`), after closing it: Deno 2.9.6 did not
   * close its socket (see `native_socket.ts`).
   */
  readonly onAbandoned?: (conn: Deno.Conn<Deno.NetAddr>) => void;
  /** Called when the relay closes the connection for a timeout (not for a handshake it abandons). */
  readonly onTimeout?: (reason: Exclude<ClientTimeout, "tls-handshake">) => void;
  /** Called once the inner connection exists, before any byte is relayed; `port` is its local port. */
  readonly register: (port: number, peer: RelayPeer) => void;
  /**
   * Called when the relay ends, with what it registered. The port may already
   * stand for another relay's new connection (the inner connection closed
   * before the relay ended): only an entry still equal to `peer` is its own.
   */
  readonly unregister: (port: number, peer: RelayPeer) => void;
}

/** A running relay. */
export interface Relay {
  /** Resolves when both connections are closed; never rejects. */
  readonly done: Promise<void>;
  /** The handshake is done and the inner connection open. */
  readonly connected: boolean;
  /** Closes both connections at once. */
  stop(): void;
}

/** Bytes read at once from the client (requests are mostly small). */
const CLIENT_BUFFER_BYTES = 8 * 1024;
/** Bytes read at once from the inner server: one full TLS record. */
const INNER_BUFFER_BYTES = 16 * 1024;

/** What a relay's checks compare between two readings. */
interface Activity {
  /** Bytes copied, both ways. */
  bytes: number;
  /** A write toward the client is pending. */
  sending: boolean;
  /** Writes toward the client started or finished. */
  sends: number;
}

/** Hooks of {@linkcode pump}. */
interface PumpHooks {
  /** Called with each read's size, before it is written on. */
  readonly onRead: (n: number) => void;
  /** Called when a write starts (`true`) and when it returns (`false`). */
  readonly onWrite?: (pending: boolean) => void;
  /** Called once `from` ended or either side failed. */
  readonly onEnd: () => void;
}

/** Copies `from` into `to` until `from` ends. */
async function pump(
  from: Deno.Conn,
  to: Deno.Conn,
  buffer: Uint8Array,
  hooks: PumpHooks,
): Promise<void> {
  try {
    while (true) {
      const n = await from.read(buffer);
      if (n === null) break;
      hooks.onRead(n);
      let written = 0;
      while (written < n) {
        hooks.onWrite?.(true);
        written += await to.write(buffer.subarray(written, n));
        hooks.onWrite?.(false);
      }
    }
  } finally {
    hooks.onEnd();
  }
}

/** Whether `bytes` begins with `prefix`. */
function startsWith(bytes: Uint8Array, prefix: Uint8Array): boolean {
  for (let i = 0; i < prefix.length; i++) if (bytes[i] !== prefix[i]) return false;
  return true;
}

function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch {
    // Already closed.
  }
}

/**
 * Relays one accepted connection (TLS or plain TCP) into the inner server;
 * resolves when both are closed. Never rejects: a failed handshake, an unreachable inner
 * server or a broken connection just ends the relay. `stop` closes both
 * sides at once (for a relay whose inner side cannot end it, e.g. one still
 * in its handshake at shutdown).
 */
export function relayConnection(conn: Deno.Conn<Deno.NetAddr>, options: RelayOptions): Relay {
  let inner: Deno.TcpConn | undefined;
  let stopped = false;
  let idleTimer: ReturnType<typeof setTimeout> | undefined;
  const stop = () => {
    stopped = true;
    clearTimeout(idleTimer);
    closeQuietly(conn);
    if (inner !== undefined) closeQuietly(inner);
  };
  const run = async () => {
    // The first read drives the TLS handshake and waits for the client's first bytes, bounded in
    // time; close() cancels it. (Deno 2.9.6 caveat: while the handshake itself is pending, from
    // no byte at all to a whole ClientHello answered, close() does not close the socket: such a
    // connection goes to options.onAbandoned. A partial ClientHello, or a finished handshake
    // without a request, is closed. Pinned by native_socket_test.ts and tls_handshake_test.ts.)
    const clientBuffer = new Uint8Array(CLIENT_BUFFER_BYTES);
    const tls = "handshake" in conn;
    // Only a connection still in its handshake needs onAbandoned: a finished one closes.
    let handshaking = tls;
    if (tls) (conn as Deno.TlsConn).handshake().then(() => handshaking = false, () => {});
    let timer: ReturnType<typeof setTimeout> | undefined;
    let timedOut = false;
    let first: number | null;
    try {
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          timedOut = true;
          reject(new Error("No first bytes in time"));
        }, options.firstBytesTimeoutMs);
      });
      first = await Promise.race([conn.read(clientBuffer), timeout]);
      if (first === null || stopped) throw new Error("closed before a request");
      const preface = tls && options.prefaces !== undefined
        ? options.prefaces.get((await (conn as Deno.TlsConn).handshake()).alpnProtocol ?? "")
        : undefined;
      // Bytes that already differ from the preface end the connection; a preface split over
      // several reads is waited for (within the first-bytes timeout).
      while (preface !== undefined) {
        const n = Math.min(first, preface.length);
        if (!startsWith(clientBuffer.subarray(0, n), preface.subarray(0, n))) {
          throw new Error("not the preface of the negotiated protocol");
        }
        if (first >= preface.length) break;
        const more: number | null = await Promise.race([
          conn.read(clientBuffer.subarray(first)),
          timeout,
        ]);
        if (more === null || stopped) throw new Error("closed before a request");
        first += more;
      }
      // Plain TCP: small responses go out at once (a TLS socket cannot set it on Deno 2.9.6).
      if (!tls) (conn as Deno.TcpConn).setNoDelay(true);
      inner = await Deno.connect(options.inner);
    } catch {
      const abandoned = handshaking && (timedOut || stopped);
      stop();
      if (abandoned) options.onAbandoned?.(conn);
      else if (timedOut) options.onTimeout?.("first-bytes");
      return;
    } finally {
      clearTimeout(timer);
    }
    const innerConn = inner;
    if (stopped) {
      stop();
      return;
    }
    let port = 0;
    const peer: RelayPeer = {
      remoteAddr: conn.remoteAddr,
      requests: 0,
      arrived: 0,
      finished: 0,
      upgraded: false,
    };
    const activity: Activity = { bytes: first, sending: false, sends: 0 };
    // Bytes from the client with no request in flight start a request head: `head` is then the
    // number of requests that had arrived, and the head's end is the next one arriving.
    let head: number | undefined = 0;
    let headChecks = 0;
    const fromClient = (n: number) => {
      activity.bytes += n;
      if (head === undefined && peer.requests === 0 && !peer.upgraded) {
        head = peer.arrived;
        headChecks = 0;
      }
    };
    // One timer per connection, re-armed until the relay ends (see RelayOptions.idleTimeoutMs).
    let seen = -1;
    let seenSends = -1;
    let seenFinished = -1;
    const check = () => {
      if (stopped) return;
      const waiting = peer.requests === 0 && !peer.upgraded;
      if (head !== undefined && (peer.arrived !== head || !waiting)) head = undefined;
      // A head counts as late once a whole period passed since its first bytes.
      if (head !== undefined) headChecks++;
      // Idle means nothing in flight during the whole period, not just now: a response the inner
      // server has just finished may not have reached the relay's read yet.
      const idle = waiting && activity.bytes === seen && peer.finished === seenFinished;
      const stalled = activity.sending && activity.sends === seenSends;
      if (idle || stalled || headChecks >= 2) {
        options.onTimeout?.(stalled ? "send" : idle ? "idle" : "head");
        stop();
        return;
      }
      seen = activity.bytes;
      seenSends = activity.sends;
      seenFinished = peer.finished;
      idleTimer = setTimeout(check, options.idleTimeoutMs);
    };
    try {
      innerConn.setNoDelay(true);
      port = (innerConn.localAddr as Deno.NetAddr).port;
      options.register(port, peer);
      relay.connected = true;
      check();
      let written = 0;
      while (written < first) {
        written += await innerConn.write(clientBuffer.subarray(written, first));
      }
      await Promise.allSettled([
        // The client finished sending: let the inner server see the end of the request stream.
        pump(conn, innerConn, clientBuffer, {
          onRead: fromClient,
          onEnd: () => {
            innerConn.closeWrite().catch(() => closeQuietly(innerConn));
          },
        }),
        // The inner server closed (or failed): the connection is over once the client has it all
        // (closeWrite flushes and sends TLS close_notify; close alone may drop what is buffered).
        pump(
          innerConn,
          conn,
          // 16 KiB: each relay holds its buffers for its whole life, and the listener is meant to
          // hold up under many idle clients.
          new Uint8Array(INNER_BUFFER_BYTES),
          {
            onRead: (n) => activity.bytes += n,
            onWrite: (pending) => {
              activity.sending = pending;
              activity.sends++;
            },
            onEnd: () => {
              conn.closeWrite().then(stop, stop);
            },
          },
        ),
      ]);
    } catch {
      // The inner server went away before the first bytes were passed on.
    } finally {
      stop();
      if (port !== 0) options.unregister(port, peer);
    }
  };
  const relay = { done: Promise.resolve(), connected: false, stop };
  relay.done = run();
  return relay;
}
