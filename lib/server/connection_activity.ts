/**
 * What the plain-HTTP listeners of every worker tell the connection reaper
 * (`http_connection_reaper.ts`) about their connections, in memory all of
 * them share (a `SharedArrayBuffer`): per client (address and port), the
 * requests in flight (and upgraded sessions, such as WebSockets, held until
 * they end) and the requests begun so far.
 *
 * Clients are counted in 2^18 slots chosen by a hash of the address and the
 * port: the listeners know a client by Deno's text (`"10.0.0.1"`,
 * `"::ffff:10.0.0.1"`), the reaper by the socket's address bytes, and both
 * hash to the same slot. Two clients in one slot share it, which only ever
 * makes the reaper more careful (a busy neighbour counts as busy); an
 * attacker cannot aim at a busy client's slot without knowing that client's
 * address and port.
 *
 * Knows nothing of HTTP or sockets.
 *
 * @module
 */

import { parseIp } from "../net/cidr.ts";

const SLOT_BITS = 18;
const SLOTS = 1 << SLOT_BITS;

/** A client as the listener sees it. */
export interface Peer {
  readonly hostname: string;
  readonly port: number;
}

/** Per-client request counters, shared between threads. */
export class ConnectionActivity {
  /** The shared memory: post it to a worker and wrap it there with `new ConnectionActivity(buffer)`. */
  readonly buffer: SharedArrayBuffer;
  #inFlight: Int32Array;
  #seen: Int32Array;

  /** Wraps `buffer` (from another thread), or allocates new shared memory (2 MiB, touched as used). */
  constructor(buffer?: SharedArrayBuffer) {
    this.buffer = buffer ?? new SharedArrayBuffer(2 * SLOTS * Int32Array.BYTES_PER_ELEMENT);
    this.#inFlight = new Int32Array(this.buffer, 0, SLOTS);
    this.#seen = new Int32Array(this.buffer, SLOTS * Int32Array.BYTES_PER_ELEMENT, SLOTS);
  }

  /** A request (or an upgraded session) from `peer` began; returns its slot, for {@linkcode end}. */
  begin(peer: Peer): number {
    const slot = slotOf(addressWordOfText(peer.hostname), peer.port);
    Atomics.add(this.#inFlight, slot, 1);
    Atomics.add(this.#seen, slot, 1);
    return slot;
  }

  /** The request (or session) that {@linkcode begin} gave `slot` ended: call once per `begin`. */
  end(slot: number): void {
    Atomics.sub(this.#inFlight, slot, 1);
  }

  /** The slot of a client known by its address bytes (4 for IPv4, 16 for IPv6) and port. */
  slotOf(address: Uint8Array, port: number): number {
    return slotOf(addressWordOfBytes(address), port);
  }

  /** Requests and sessions in flight now in `slot`. */
  inFlight(slot: number): number {
    return Atomics.load(this.#inFlight, slot);
  }

  /** Requests and sessions begun so far in `slot` (wraps at 2^31). */
  seen(slot: number): number {
    return Atomics.load(this.#seen, slot);
  }

  /** Requests and sessions in flight now, over every slot (for tests and checks). */
  totalInFlight(): number {
    let total = 0;
    for (let slot = 0; slot < SLOTS; slot++) total += Atomics.load(this.#inFlight, slot);
    return total;
  }
}

function slotOf(word: number, port: number): number {
  let hash = Math.imul(word, 0x9e3779b1) ^ port;
  hash = Math.imul(hash ^ (hash >>> 16), 0x85ebca6b);
  return (hash ^ (hash >>> 13)) >>> (32 - SLOT_BITS);
}

/** 32 bits of an address: IPv4 as is, IPv6 its four words XORed (IPv4-mapped as IPv4). */
function addressWordOfBytes(address: Uint8Array): number {
  let word = 0;
  for (let i = 0; i < address.length; i += 4) {
    word ^= (address[i]! << 24) | (address[i + 1]! << 16) | (address[i + 2]! << 8) |
      address[i + 3]!;
  }
  return word;
}

/** {@linkcode addressWordOfBytes} of a textual address; dotted IPv4 without allocating. */
function addressWordOfText(text: string): number {
  let word = 0;
  let octet = 0;
  let dots = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code === 0x2e) {
      word = (word << 8) | octet;
      octet = 0;
      dots++;
    } else if (code >= 0x30 && code <= 0x39) octet = octet * 10 + code - 0x30;
    else return addressWordOfBytes(parseIp(text) ?? new Uint8Array(4));
  }
  return dots === 3 ? (word << 8) | octet : 0;
}
