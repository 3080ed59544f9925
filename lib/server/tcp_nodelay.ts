/**
 * Turns Nagle's algorithm off (`TCP_NODELAY`) for the TLS connections Sluice
 * accepts, which Deno 2.9.6 cannot do itself: `Deno.TlsConn` has no
 * `setNoDelay()`, and `Deno.listenTls` offers no such option.
 *
 * Without it, a response written in more than one piece (an SSE or chunked
 * stream, or any body larger than one relay write of 16 KiB) waits for the
 * client's delayed ACK, about 40 ms, whenever a small segment is still
 * unacknowledged: measured on a 1500-byte MTU veth pair, three 100-byte
 * chunks 5 ms apart took 44 ms instead of 13, and 64 KiB responses had a p99
 * of 45 ms instead of 8 (on loopback, with its 64 KiB MSS, every such
 * response waited).
 *
 * Linux copies `TCP_NODELAY` from a listening socket to the sockets it
 * accepts, so setting it once on each listening socket is enough. This
 * module finds the process's listening TCP sockets bound to a port (calling
 * `getsockname` on each descriptor number) and sets the option with
 * `setsockopt`, through Deno's FFI to glibc's `libc.so.6` at its Debian path
 * ({@linkcode LIBC_PATHS}, as in the distroless image). That needs
 * `--allow-ffi` for that one file (the `sluice` permission set grants exactly
 * these paths). Without it, or without glibc there, it reports why and
 * changes nothing: connections then work as before, only slower to deliver
 * streams.
 *
 * The sweep may touch a socket that another thread (another worker) opens or
 * closes meanwhile: the only thing it ever does is set `TCP_NODELAY`, which is
 * harmless on any TCP socket, and a descriptor reused as something else just
 * fails the call. Setting it on another worker's listening socket on the same
 * port (`reusePort`) is what that worker wants too.
 *
 * `tcp_nodelay_test.ts` proves, with real sockets, that an accepted socket
 * inherits the option; re-run it after a Deno or kernel upgrade.
 *
 * Knows nothing of TLS, HTTP or Sluice's listeners.
 *
 * @module
 */

/** What {@linkcode setNoDelayOnListeningSockets} did. */
export type NoDelayOutcome =
  | { readonly ok: true; readonly sockets: number }
  | { readonly ok: false; readonly reason: string };

/** glibc as Debian (and the distroless image) installs it, per CPU architecture. */
export const LIBC_PATHS: Readonly<Record<string, string>> = {
  x86_64: "/lib/x86_64-linux-gnu/libc.so.6",
  aarch64: "/lib/aarch64-linux-gnu/libc.so.6",
};

/**
 * Descriptors examined, from 0. Deno 2.9.6 lets only `--allow-all` list
 * `/proc/self/fd`, so every number is tried: 12-20 ms here, once per new
 * listening socket. A socket numbered above this (a process holding more
 * descriptors) is not found, and that is reported.
 */
const SCANNED_DESCRIPTORS = 65_536;

const AF_INET = 2;
const AF_INET6 = 10;
const SOL_SOCKET = 1;
const SO_ACCEPTCONN = 30;
const IPPROTO_TCP = 6;
const TCP_NODELAY = 1;

const SYMBOLS = {
  getsockname: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
  getsockopt: { parameters: ["i32", "i32", "i32", "buffer", "buffer"], result: "i32" },
  setsockopt: { parameters: ["i32", "i32", "i32", "buffer", "i32"], result: "i32" },
} as const;

type Libc = Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];

let loaded: { libc: Libc } | { reason: string } | undefined;

/**
 * Sets `TCP_NODELAY` on every listening TCP socket of this process bound to
 * `port` (IPv4 or IPv6), so that the connections they accept from now on
 * have it; `on: false` clears it again (a benchmark's baseline). Never throws.
 */
export function setNoDelayOnListeningSockets(port: number, on = true): NoDelayOutcome {
  const found = libc();
  if ("reason" in found) return { ok: false, reason: found.reason };
  const address = new Uint8Array(128);
  const addressLength = new Uint32Array(1);
  const value = new Int32Array(1);
  const valueLength = new Uint32Array(1);
  const option = new Int32Array([on ? 1 : 0]);
  let sockets = 0;
  for (let fd = 0; fd < SCANNED_DESCRIPTORS; fd++) {
    addressLength[0] = address.length;
    if (found.libc.getsockname(fd, address, addressLength) !== 0) continue;
    const family = address[0]! | (address[1]! << 8);
    if (family !== AF_INET && family !== AF_INET6) continue;
    // sockaddr_in and sockaddr_in6 both hold the port at bytes 2-3, big-endian.
    if (((address[2]! << 8) | address[3]!) !== port) continue;
    valueLength[0] = 4;
    if (found.libc.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, value, valueLength) !== 0) continue;
    if (value[0] !== 1) continue;
    if (found.libc.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, option, 4) === 0) sockets++;
  }
  return sockets === 0
    ? {
      ok: false,
      reason: `No listening TCP socket on port ${port} among descriptors 0-${
        SCANNED_DESCRIPTORS - 1
      }`,
    }
    : { ok: true, sockets };
}

function libc(): { libc: Libc } | { reason: string } {
  if (loaded !== undefined) return loaded;
  const path = LIBC_PATHS[Deno.build.arch];
  if (Deno.build.os !== "linux" || path === undefined) {
    return loaded = {
      reason: `Setting TCP_NODELAY is implemented for Linux on x86_64 and aarch64`,
    };
  }
  try {
    if (Deno.permissions.querySync({ name: "ffi", path }).state !== "granted") {
      return loaded = {
        reason: `Cannot set TCP_NODELAY: Sluice runs without --allow-ffi="${path}"`,
      };
    }
    return loaded = { libc: Deno.dlopen(path, SYMBOLS).symbols };
  } catch (error) {
    return loaded = { reason: `Cannot load "${path}" to set TCP_NODELAY: ${String(error)}` };
  }
}
