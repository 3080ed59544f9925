/**
 * What Deno 2.9.6 cannot do to its own TCP sockets, done through its FFI to
 * glibc's `libc.so.6` at its Debian path ({@linkcode LIBC_PATHS}, as in the
 * distroless image): Deno hands out no descriptors, so each function lists
 * the process's descriptors (`/proc/self/fd`, read through glibc: Deno lets
 * only `--allow-all` list it) and finds its sockets by address, calling
 * `getsockname` (and `getpeername`) on each. That needs `--allow-ffi` for that one file (the `sluice`
 * permission set grants exactly these paths). Without it, or without glibc
 * there, each function reports why and changes nothing.
 *
 * **`TCP_NODELAY` on TLS connections** ({@linkcode setNoDelayOnListeningSockets}).
 * `Deno.TlsConn` has no `setNoDelay()`, and `Deno.listenTls` offers no such
 * option. Without it, a response written in more than one piece (an SSE or
 * chunked stream, or any body larger than one relay write of 16 KiB) waits
 * for the client's delayed ACK, about 40 ms, whenever a small segment is
 * still unacknowledged (what that costs: docs/benchmarks.md, "HTTPS and
 * `TCP_NODELAY`"). Linux copies `TCP_NODELAY` from a listening socket to the
 * sockets it accepts, so setting it once on each listening socket is enough.
 * The sweep may touch a socket that another thread (another worker) opens or
 * closes meanwhile: setting `TCP_NODELAY` is harmless on any TCP socket, a
 * descriptor reused as something else just fails the call, and another
 * worker's listening socket on the same port (`reusePort`) wants it too.
 *
 * **Closing a connection stalled in its TLS handshake**
 * ({@linkcode shutdownConnections}). Closing a `Deno.TlsConn` whose handshake
 * is pending does not close its socket: Deno's handshake task keeps the TCP
 * stream until the client leaves, so a client that connects and sends
 * nothing (or a ClientHello and then nothing) would hold a descriptor for
 * good. `shutdown(2)` on the socket ends that task's read, and the task then
 * drops the socket. The socket is matched by all four of its addresses and
 * ports, read again right before the call, so only a connection with exactly
 * that address pair can be shut down: one the caller has given up on.
 *
 * **Reading the kernel's counters of connections** ({@linkcode tcpConnectionsOnPort},
 * {@linkcode shutdownTcpConnection}): `TCP_INFO` tells how long a socket has
 * been silent each way and whether its client acknowledges what is sent,
 * which `Deno.serve` does not (`http_connection_reaper.ts` gives plain HTTP
 * its client timeouts with it). A descriptor is shut down only if it still
 * has the ends it was read with, read again right before the call.
 *
 * `native_socket_test.ts` proves each with real sockets, and pins the Deno
 * behaviour each works around; re-run it after a Deno or kernel upgrade.
 *
 * Knows nothing of TLS, HTTP or Sluice's listeners.
 *
 * @module
 */

import { parseIp } from "../net/cidr.ts";

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
 * Descriptor numbers tried, from 0, when `/proc/self/fd` cannot be listed
 * (no `/proc`).
 */
const FALLBACK_DESCRIPTORS = 65_536;

/**
 * Descriptors examined between two yields to the event loop, so that a sweep
 * through many sockets never holds the thread for long (the cost per socket
 * is in docs/benchmarks.md).
 */
const SWEEP_SLICE = 4_096;

const AF_INET = 2;
const AF_INET6 = 10;
const SOL_SOCKET = 1;
const SO_ACCEPTCONN = 30;
const IPPROTO_TCP = 6;
const TCP_NODELAY = 1;
const TCP_INFO = 11;
const SHUT_RDWR = 2;
const O_DIRECTORY = 0o200000;
const O_CLOEXEC = 0o2000000;

const SYMBOLS = {
  getsockname: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
  getpeername: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
  open: { parameters: ["buffer", "i32"], result: "i32" },
  getdents64: { parameters: ["i32", "buffer", "usize"], result: "isize" },
  close: { parameters: ["i32"], result: "i32" },
  fstat: { parameters: ["i32", "buffer"], result: "i32" },
  shutdown: { parameters: ["i32", "i32"], result: "i32" },
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
  const value = new Int32Array(1);
  const valueLength = new Uint32Array(1);
  const option = new Int32Array([on ? 1 : 0]);
  let sockets = 0;
  for (const fd of openDescriptors(found.libc)) {
    if (socketEnd(found.libc.getsockname, fd)?.port !== port) continue;
    valueLength[0] = 4;
    if (found.libc.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, value, valueLength) !== 0) continue;
    if (value[0] !== 1) continue;
    if (found.libc.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, option, 4) === 0) sockets++;
  }
  return sockets === 0
    ? {
      ok: false,
      reason: `No listening TCP socket on port ${port}`,
    }
    : { ok: true, sockets };
}

/** A connection's two ends, as `Deno.Conn` reports them. */
export interface ConnectionEnds {
  readonly localAddr: Deno.NetAddr;
  readonly remoteAddr: Deno.NetAddr;
}

/** What {@linkcode shutdownConnections} did. */
export type ShutdownOutcome =
  | {
    readonly ok: true;
    /** Connections found and shut down. */
    readonly shut: number;
    /** Connections not found: already closed (or above the descriptors examined). */
    readonly missing: number;
    /** Descriptor numbers examined. */
    readonly examined: number;
  }
  | { readonly ok: false; readonly reason: string };

/**
 * Shuts down (`shutdown(2)`, both directions) this process's connected TCP
 * sockets whose local and remote address and port are exactly those of one
 * of `connections`, so a socket Deno would not close on `close()` (see the
 * module's documentation) ends, and its owner drops it. A connection
 * already closed is not found and counted as missing. Examines the process's
 * open descriptors, 4,096 between two yields to the event loop, and stops
 * once every connection was found. Never throws.
 */
export async function shutdownConnections(
  connections: readonly ConnectionEnds[],
): Promise<ShutdownOutcome> {
  const found = libc();
  if ("reason" in found) return { ok: false, reason: found.reason };
  const { libc: calls } = found;
  const wanted = new Map<string, { local: Uint8Array; remote: Uint8Array }[]>();
  const localPorts = new Set<number>();
  let pending = 0;
  for (const { localAddr, remoteAddr } of connections) {
    const local = parseIp(localAddr.hostname);
    const remote = parseIp(remoteAddr.hostname);
    if (local === undefined || remote === undefined) continue;
    const key = `${localAddr.port}/${remoteAddr.port}`;
    wanted.set(key, [...wanted.get(key) ?? [], { local, remote }]);
    localPorts.add(localAddr.port);
    pending++;
  }
  const missingFromStart = connections.length - pending;
  /** Whether `fd` is one of the wanted connections (removed from `wanted` if so). */
  const matches = (fd: number): boolean => {
    const local = socketEnd(calls.getsockname, fd);
    if (local === undefined || !localPorts.has(local.port)) return false;
    const remote = socketEnd(calls.getpeername, fd);
    if (remote === undefined) return false;
    const key = `${local.port}/${remote.port}`;
    const candidates = wanted.get(key);
    const index =
      candidates?.findIndex((candidate) =>
        sameBytes(candidate.local, local.ip) && sameBytes(candidate.remote, remote.ip)
      ) ?? -1;
    if (index < 0) return false;
    candidates!.splice(index, 1);
    if (candidates!.length === 0) wanted.delete(key);
    return true;
  };
  let shut = 0;
  let examined = 0;
  for (const fd of openDescriptors(calls)) {
    if (pending === 0) break;
    if (++examined % SWEEP_SLICE === 0) await yieldToEventLoop();
    if (!matches(fd)) continue;
    pending--;
    if (calls.shutdown(fd, SHUT_RDWR) === 0) shut++;
  }
  return { ok: true, shut, missing: missingFromStart + pending, examined };
}

/** One connected TCP socket of this process, with the kernel's counters for it (`TCP_INFO`). */
export interface TcpConnection {
  readonly fd: number;
  /** The socket's inode: which socket this is, whatever descriptor number it has. */
  readonly inode: number;
  readonly localPort: number;
  /** 4 bytes for IPv4 (an IPv4 client of an IPv6 socket included), 16 for IPv6. */
  readonly localIp: Uint8Array;
  readonly remotePort: number;
  readonly remoteIp: Uint8Array;
  /** `TCP_ESTABLISHED` (1), `TCP_CLOSE_WAIT` (8), ... (`include/net/tcp_states.h`). */
  readonly state: number;
  /** Bytes received from the peer, all told (`tcpi_bytes_received`). */
  readonly bytesReceived: number;
  /** Bytes sent and acknowledged by the peer, all told (`tcpi_bytes_acked`). */
  readonly bytesAcked: number;
  /** Milliseconds since data last arrived (since the connection was set up, if it never did). */
  readonly msSinceDataReceived: number;
  /** Milliseconds since data was last sent (since the connection was set up, if it never was). */
  readonly msSinceDataSent: number;
  /** Segments sent and not yet acknowledged. */
  readonly unackedSegments: number;
  /** Bytes written to the socket and not yet sent. */
  readonly notSentBytes: number;
}

/**
 * This process's connected TCP sockets whose local port is `port` (listening
 * sockets excluded), with their `TCP_INFO` counters, read now. Yields to the
 * event loop every 4,096 descriptors. Never throws.
 */
export async function tcpConnectionsOnPort(
  port: number,
): Promise<readonly TcpConnection[] | { readonly reason: string }> {
  const found = libc();
  if ("reason" in found) return { reason: found.reason };
  const { libc: calls } = found;
  const connections: TcpConnection[] = [];
  let examined = 0;
  for (const fd of openDescriptors(calls)) {
    if (++examined % SWEEP_SLICE === 0) await yieldToEventLoop();
    const local = socketEnd(calls.getsockname, fd);
    if (local === undefined || local.port !== port) continue;
    const remote = socketEnd(calls.getpeername, fd);
    if (remote === undefined) continue;
    tcpInfoLength[0] = tcpInfo.length;
    if (calls.getsockopt(fd, IPPROTO_TCP, TCP_INFO, tcpInfo, tcpInfoLength) !== 0) continue;
    if (tcpInfoLength[0]! < TCP_INFO_BYTES_NEEDED) continue;
    const inode = inodeOf(calls, fd);
    if (inode === undefined) continue;
    connections.push({
      fd,
      inode,
      localPort: local.port,
      localIp: local.ip,
      remotePort: remote.port,
      remoteIp: remote.ip,
      state: tcpInfo[0]!,
      bytesReceived: Number(tcpInfoView.getBigUint64(128, true)),
      bytesAcked: Number(tcpInfoView.getBigUint64(120, true)),
      msSinceDataReceived: tcpInfoView.getUint32(52, true),
      msSinceDataSent: tcpInfoView.getUint32(44, true),
      unackedSegments: tcpInfoView.getUint32(24, true),
      notSentBytes: tcpInfoView.getUint32(144, true),
    });
  }
  return connections;
}

/**
 * Shuts down (`shutdown(2)`, both directions) the socket `connection` was
 * read from, if its descriptor still holds that socket (its inode and its
 * ends, read again right before the call). Returns whether it did. Never
 * throws.
 */
export function shutdownTcpConnection(connection: TcpConnection): boolean {
  const found = libc();
  if ("reason" in found) return false;
  const { libc: calls } = found;
  const local = socketEnd(calls.getsockname, connection.fd);
  const remote = socketEnd(calls.getpeername, connection.fd);
  if (
    inodeOf(calls, connection.fd) !== connection.inode ||
    local === undefined || remote === undefined ||
    local.port !== connection.localPort || remote.port !== connection.remotePort ||
    !sameBytes(local.ip, connection.localIp) || !sameBytes(remote.ip, connection.remoteIp)
  ) {
    return false;
  }
  return calls.shutdown(connection.fd, SHUT_RDWR) === 0;
}

/** `struct tcp_info` (Linux 4.6 and later hold every field read here, up to tcpi_notsent_bytes). */
const tcpInfo = new Uint8Array(256);
const tcpInfoView = new DataView(tcpInfo.buffer);
const tcpInfoLength = new Uint32Array(1);
const TCP_INFO_BYTES_NEEDED = 148;

/** `struct stat`: `st_ino` is at byte 8 on x86_64 and on aarch64 alike. */
const stat = new Uint8Array(256);
const statView = new DataView(stat.buffer);

function inodeOf(calls: Libc, fd: number): number | undefined {
  return calls.fstat(fd, stat) === 0 ? Number(statView.getBigUint64(8, true)) : undefined;
}

const socketAddress = new Uint8Array(128);
const socketAddressLength = new Uint32Array(1);

/** The port and address of `fd`'s local (`getsockname`) or remote (`getpeername`) end, or undefined. */
function socketEnd(
  call: Libc["getsockname"],
  fd: number,
): { port: number; ip: Uint8Array } | undefined {
  socketAddressLength[0] = socketAddress.length;
  if (call(fd, socketAddress, socketAddressLength) !== 0) return undefined;
  const family = socketAddress[0]! | (socketAddress[1]! << 8);
  // sockaddr_in and sockaddr_in6 both hold the port at bytes 2-3, big-endian.
  const port = (socketAddress[2]! << 8) | socketAddress[3]!;
  if (family === AF_INET) return { port, ip: socketAddress.slice(4, 8) };
  if (family !== AF_INET6) return undefined;
  const ip = socketAddress.slice(8, 24);
  // An IPv4 client of an IPv6 socket (::ffff:a.b.c.d), as parseIp() gives it.
  return isV4Mapped(ip) ? { port, ip: ip.slice(12) } : { port, ip };
}

function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/**
 * This process's open descriptor numbers, as {@linkcode shutdownConnections}
 * and {@linkcode setNoDelayOnListeningSockets} examine them (for tests).
 */
export function openDescriptorNumbers(): readonly number[] | { reason: string } {
  const found = libc();
  return "reason" in found ? found : openDescriptors(found.libc);
}

/**
 * This process's open descriptor numbers, read from `/proc/self/fd` with
 * `getdents64` (Deno 2.9.6 lets only `--allow-all` list that directory, so
 * glibc reads it); without `/proc`, the numbers 0 to 65,535.
 */
function openDescriptors(calls: Libc): readonly number[] {
  const dir = calls.open(new TextEncoder().encode("/proc/self/fd\0"), O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return Array.from({ length: FALLBACK_DESCRIPTORS }, (_, fd) => fd);
  const descriptors: number[] = [];
  const buffer = new Uint8Array(32 * 1024);
  const view = new DataView(buffer.buffer);
  try {
    for (;;) {
      const n = Number(calls.getdents64(dir, buffer, BigInt(buffer.length)));
      if (n <= 0) break;
      // struct linux_dirent64: d_ino (8 bytes), d_off (8), d_reclen (2), d_type (1), d_name.
      for (let at = 0; at < n; at += view.getUint16(at + 16, true)) {
        let fd = 0;
        let digits = 0;
        for (let i = at + 19; buffer[i] !== 0; i++) {
          const digit = buffer[i]! - 0x30;
          if (digit < 0 || digit > 9) {
            digits = 0; // "." and ".."
            break;
          }
          fd = fd * 10 + digit;
          digits++;
        }
        if (digits > 0 && fd !== dir) descriptors.push(fd);
      }
    }
  } finally {
    calls.close(dir);
  }
  return descriptors;
}

function isV4Mapped(ip: Uint8Array): boolean {
  for (let i = 0; i < 10; i++) if (ip[i] !== 0) return false;
  return ip[10] === 0xff && ip[11] === 0xff;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}

function libc(): { libc: Libc } | { reason: string } {
  if (loaded !== undefined) return loaded;
  const path = LIBC_PATHS[Deno.build.arch];
  if (Deno.build.os !== "linux" || path === undefined) {
    return loaded = {
      reason: `Native socket calls are implemented for Linux on x86_64 and aarch64`,
    };
  }
  try {
    if (Deno.permissions.querySync({ name: "ffi", path }).state !== "granted") {
      return loaded = {
        reason: `Sluice runs without --allow-ffi="${path}"`,
      };
    }
    return loaded = { libc: Deno.dlopen(path, SYMBOLS).symbols };
  } catch (error) {
    return loaded = { reason: `Cannot load "${path}": ${String(error)}` };
  }
}
