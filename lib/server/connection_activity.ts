/**
 * What the plain-HTTP listeners of every worker tell the connection reaper
 * (`http_connection_reaper.ts`) about their connections, in memory all of
 * them share (a `SharedArrayBuffer`): per client port, the requests in flight
 * (and upgraded sessions, such as WebSockets, held until they end) and the
 * requests seen so far.
 *
 * Keyed by the client's port alone, so every worker and the reaper agree on
 * the key without formatting addresses. Two clients with the same port share
 * a slot; that only ever makes the reaper more careful (a busy neighbour
 * counts as busy), never less.
 *
 * Knows nothing of HTTP or sockets.
 *
 * @module
 */

const PORTS = 65_536;

/** Per-client-port request counters, shared between threads. */
export class ConnectionActivity {
  /** The shared memory: post it to a worker and wrap it there with `new ConnectionActivity(buffer)`. */
  readonly buffer: SharedArrayBuffer;
  #inFlight: Int32Array;
  #seen: Int32Array;

  /** Wraps `buffer` (from another thread), or allocates new shared memory (512 KiB). */
  constructor(buffer?: SharedArrayBuffer) {
    this.buffer = buffer ?? new SharedArrayBuffer(2 * PORTS * Int32Array.BYTES_PER_ELEMENT);
    this.#inFlight = new Int32Array(this.buffer, 0, PORTS);
    this.#seen = new Int32Array(this.buffer, PORTS * Int32Array.BYTES_PER_ELEMENT, PORTS);
  }

  /** A request (or an upgraded session) from client port `port` began. */
  begin(port: number): void {
    Atomics.add(this.#inFlight, port & 0xffff, 1);
    Atomics.add(this.#seen, port & 0xffff, 1);
  }

  /** A request (or session) from client port `port` ended: call once per `begin`. */
  end(port: number): void {
    Atomics.sub(this.#inFlight, port & 0xffff, 1);
  }

  /** Requests and sessions from client port `port` in flight now. */
  inFlight(port: number): number {
    return Atomics.load(this.#inFlight, port & 0xffff);
  }

  /** Requests and sessions from client port `port` begun so far (wraps at 2^31). */
  seen(port: number): number {
    return Atomics.load(this.#seen, port & 0xffff);
  }
}
