/**
 * Test support: a minimal TLS client that connects to a loopback port with a
 * chosen server name (SNI) and trusted certificates, and either completes the
 * handshake only or sends one HTTP/1.1 request with `Connection: close`.
 * Used by the tests of `lib/tls/` and `lib/server/`; not part of Sluice.
 *
 * @module
 */

/** Options of {@linkcode tlsHandshake} and {@linkcode httpsGet}. */
export interface TlsClientOptions {
  /** Sent as SNI and checked against the certificate. An IP address sends no SNI. */
  readonly serverName: string;
  /** PEM certificates the client trusts. */
  readonly caCerts: readonly string[];
  /** Default `["http/1.1"]`. */
  readonly alpnProtocols?: readonly string[];
  /** Default `"127.0.0.1"`. */
  readonly hostname?: string;
}

/** Completes a TLS handshake and closes; returns the negotiated ALPN protocol. Throws when it fails. */
export async function tlsHandshake(
  port: number,
  options: TlsClientOptions,
): Promise<string | null> {
  const conn = await connect(port, options);
  try {
    const info = await conn.handshake();
    return info.alpnProtocol;
  } finally {
    closeQuietly(conn);
  }
}

/** The parts of a response {@linkcode httpsGet} returns. */
export interface SimpleResponse {
  readonly status: number;
  readonly headers: string;
  readonly body: string;
}

/** Sends `GET path` over a fresh TLS connection (`Connection: close`) and reads the whole response. */
export async function httpsGet(
  port: number,
  path: string,
  options: TlsClientOptions,
): Promise<SimpleResponse> {
  const conn = await connect(port, options);
  let text: string;
  try {
    await conn.write(
      new TextEncoder().encode(
        `GET ${path} HTTP/1.1\r\nHost: ${options.serverName}\r\nConnection: close\r\n\r\n`,
      ),
    );
    text = await new Response(conn.readable).text();
  } catch (error) {
    closeQuietly(conn);
    throw error;
  }
  const end = text.indexOf("\r\n\r\n");
  const head = end < 0 ? text : text.slice(0, end);
  const match = /^HTTP\/1\.1 (\d{3})/.exec(head);
  if (match === null) throw new Error(`Cannot parse the response: "${text.slice(0, 60)}"`);
  return { status: Number(match[1]), headers: head, body: end < 0 ? "" : text.slice(end + 4) };
}

async function connect(port: number, options: TlsClientOptions): Promise<Deno.TlsConn> {
  const tcp = await Deno.connect({ hostname: options.hostname ?? "127.0.0.1", port });
  try {
    return await Deno.startTls(tcp, {
      hostname: options.serverName,
      caCerts: [...options.caCerts],
      alpnProtocols: [...(options.alpnProtocols ?? ["http/1.1"])],
    });
  } catch (error) {
    closeQuietly(tcp);
    throw error;
  }
}

function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch {
    // Already closed, e.g. by a failed read or by startTls taking it over.
  }
}
