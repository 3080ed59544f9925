/**
 * Reads the Linux settings that decide whether the HTTPS listener's
 * generation rotation can reset a connection, so that start-up can log a
 * hint once. Closing a `reusePort` listening socket resets the connections
 * the kernel queued on it but nobody accepted yet (and half-open ones);
 * with `net.ipv4.tcp_migrate_req=1` (Linux 5.14+, per network namespace,
 * so settable for a pod) the kernel hands them to another socket of the
 * same port instead.
 *
 * Knows nothing of listeners.
 *
 * @module
 */

/** Where the setting lives. */
export const TCP_MIGRATE_REQ_PATH = "/proc/sys/net/ipv4/tcp_migrate_req";

/**
 * Whether `net.ipv4.tcp_migrate_req` is on; `undefined` when it cannot be
 * read (not Linux, an older kernel, no read permission).
 */
export async function tcpMigrateReqEnabled(
  options: { readonly readTextFile?: (path: string) => Promise<string> } = {},
): Promise<boolean | undefined> {
  const read = options.readTextFile ?? Deno.readTextFile;
  try {
    return (await read(TCP_MIGRATE_REQ_PATH)).trim() === "1";
  } catch {
    return undefined;
  }
}
