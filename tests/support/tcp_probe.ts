/**
 * Test support: reads `TCP_NODELAY` of one of this process's TCP sockets,
 * found by its local and remote ports (a sweep over `/proc/self/fd` through
 * FFI to glibc), so tests can check the option without timing anything.
 *
 * @module
 */

import { LIBC_PATHS } from "../../lib/server/native_socket.ts";

const libc = Deno.dlopen(LIBC_PATHS[Deno.build.arch]!, {
  getsockname: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
  getpeername: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
  getsockopt: { parameters: ["i32", "i32", "i32", "buffer", "buffer"], result: "i32" },
}).symbols;

const IPPROTO_TCP = 6;
const TCP_NODELAY = 1;

/**
 * Whether the socket with these ports has `TCP_NODELAY` set.
 *
 * @throws {Error} when no socket of this process has these ports.
 */
export function tcpNoDelay(localPort: number, remotePort: number): boolean {
  const address = new Uint8Array(128);
  const length = new Uint32Array(1);
  const port = (call: typeof libc.getsockname, fd: number) => {
    length[0] = address.length;
    return call(fd, address, length) === 0 ? (address[2]! << 8) | address[3]! : -1;
  };
  for (const entry of Deno.readDirSync("/proc/self/fd")) {
    const fd = Number(entry.name);
    if (port(libc.getsockname, fd) !== localPort || port(libc.getpeername, fd) !== remotePort) {
      continue;
    }
    const value = new Int32Array(1);
    const size = new Uint32Array([4]);
    if (libc.getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, value, size) !== 0) {
      throw new Error(`Cannot read TCP_NODELAY of descriptor ${fd}`);
    }
    return value[0] !== 0;
  }
  throw new Error(`Cannot find a socket from port ${localPort} to port ${remotePort}`);
}
