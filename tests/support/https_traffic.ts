/**
 * Steady, bounded HTTPS traffic for end-to-end tests of certificate changes:
 * HTTP/1.1 keep-alive clients and HTTP/2 clients, each on its own TLS
 * connection with a chosen server name (SNI) and trusted certificates, one
 * request at a time each, until stopped or a request cap is reached. HTTP/1.1
 * clients may open a fresh connection (a new handshake) every few requests.
 * Every outcome is recorded with the connection it used, so a test can tell
 * a failure on a connection opened before a change from one on a new
 * connection; and a probe tells which certificate a server name gets.
 *
 * Knows nothing about Sluice or Kubernetes.
 *
 * @module
 */
import { RawH2, statusOf, textOf } from "../../lib/server/_hostile_h2.ts";
import { derOf, probeCertificate, sameBytes } from "../../lib/server/_hostile_tls.ts";
import { closeQuietly, headerValue, RawConnection } from "./raw_http.ts";

/** One request's outcome. */
export interface HttpsResult {
  readonly protocol: "http/1.1" | "h2";
  /** The client's number and its connection's number (per client, from 1). */
  readonly client: number;
  readonly connection: number;
  /** `Date.now()` when it was sent and when it ended. */
  readonly start: number;
  readonly end: number;
  /** The HTTP status, or 0 when the request failed without one. */
  readonly status: number;
  /** The answering pod, when a backend answered. */
  readonly pod: string | undefined;
  /** Why it failed (`status <n>`, `handshake: …`, `network: …`), or undefined. */
  readonly failure: string | undefined;
}

/** Options of {@linkcode startHttpsTraffic}. */
export interface HttpsTrafficOptions {
  /** HTTPS port on 127.0.0.1. */
  readonly port: number;
  /** SNI and `Host` (`:authority`). */
  readonly serverName: string;
  /** Certificates the clients trust (give both the old and the new one around a renewal). */
  readonly caCerts: readonly string[];
  /** HTTP/1.1 keep-alive clients. Default 3. */
  readonly http1Clients?: number;
  /** HTTP/2 clients. Default 2. */
  readonly h2Clients?: number;
  /** An HTTP/1.1 client opens a new connection after this many requests; 0: never. Default 0. */
  readonly reconnectEvery?: number;
  /** The request target. Default `/` (the echo backend waits `n` ms for `/?delay=n`). */
  readonly path?: string;
  /** Stop after this many requests in all. Default 20,000. */
  readonly maxRequests?: number;
  /** Per-request timeout in ms. Default 10,000. */
  readonly timeoutMs?: number;
}

/** Running HTTPS traffic. */
export interface HttpsTraffic extends AsyncDisposable {
  /** Every outcome so far, in completion order. */
  readonly results: HttpsResult[];
  /** Stops sending, waits for requests in flight, closes every connection; resolves with all results. */
  stop(): Promise<HttpsResult[]>;
}

interface Opened<T> {
  readonly conn: T;
  readonly number: number;
}

function podOf(body: string): string | undefined {
  try {
    return (JSON.parse(body) as { pod?: string }).pod;
  } catch {
    return undefined;
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

async function openTls(
  options: HttpsTrafficOptions,
  alpn: string,
): Promise<Deno.TlsConn> {
  const tcp = await Deno.connect({ hostname: "127.0.0.1", port: options.port });
  let tls: Deno.TlsConn;
  try {
    tls = await Deno.startTls(tcp, {
      hostname: options.serverName,
      caCerts: [...options.caCerts],
      alpnProtocols: [alpn],
    });
  } catch (error) {
    closeQuietly(tcp);
    throw error;
  }
  try {
    await tls.handshake();
  } catch (error) {
    closeQuietly(tls);
    throw error;
  }
  return tls;
}

/** Starts traffic; stop it (or dispose it) before the test ends. */
export function startHttpsTraffic(options: HttpsTrafficOptions): HttpsTraffic {
  const results: HttpsResult[] = [];
  const maxRequests = options.maxRequests ?? 20_000;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const reconnectEvery = options.reconnectEvery ?? 0;
  const path = options.path ?? "/";
  let stopping = false;
  let sent = 0;
  const more = () => !stopping && sent < maxRequests;

  const http1 = async (client: number) => {
    let open: Opened<RawConnection> | undefined;
    let connections = 0;
    let onThis = 0;
    try {
      while (more()) {
        sent++;
        const start = Date.now();
        let status = 0;
        let pod: string | undefined;
        let failure: string | undefined;
        if (open === undefined) {
          connections++;
          try {
            open = {
              conn: RawConnection.wrap(await openTls(options, "http/1.1")),
              number: connections,
            };
            onThis = 0;
          } catch (error) {
            failure = `handshake: ${messageOf(error)}`;
          }
        }
        const number = open?.number ?? connections;
        const current = open;
        if (current !== undefined) {
          try {
            await current.conn.send(
              `GET ${path} HTTP/1.1\r\nHost: ${options.serverName}\r\nUser-Agent: https-traffic\r\n\r\n`,
            );
            const response = await current.conn.readResponse({ timeoutMs });
            status = response.status;
            const body = new TextDecoder().decode(response.body);
            pod = podOf(body);
            if (status !== 200) failure = `status ${status}`;
            onThis++;
            const closing = headerValue(response.headers, "connection")?.toLowerCase() === "close";
            if (closing || (reconnectEvery > 0 && onThis >= reconnectEvery)) {
              current.conn.close();
              open = undefined;
            }
          } catch (error) {
            failure = `network: ${messageOf(error)}`;
            current.conn.close();
            open = undefined;
          }
        }
        results.push({
          protocol: "http/1.1",
          client,
          connection: number,
          start,
          end: Date.now(),
          status,
          pod,
          failure,
        });
      }
    } finally {
      open?.conn.close();
    }
  };

  const h2 = async (client: number) => {
    let open: Opened<RawH2> | undefined;
    let connections = 0;
    try {
      while (more()) {
        sent++;
        const start = Date.now();
        let status = 0;
        let pod: string | undefined;
        let failure: string | undefined;
        if (open === undefined) {
          connections++;
          try {
            open = {
              conn: await RawH2.open({
                port: options.port,
                tls: { serverName: options.serverName, caCerts: options.caCerts },
              }),
              number: connections,
            };
          } catch (error) {
            failure = `handshake: ${messageOf(error)}`;
          }
        }
        const number = open?.number ?? connections;
        if (open !== undefined) {
          try {
            const id = await open.conn.request([
              [":method", "GET"],
              [":scheme", "https"],
              [":authority", options.serverName],
              [":path", path],
            ]);
            const stream = await open.conn.finished(id, timeoutMs);
            status = statusOf(stream) ?? 0;
            pod = podOf(textOf(stream));
            if (stream.reset !== undefined) failure = `reset ${stream.reset}`;
            else if (!stream.ended) failure = `goaway ${JSON.stringify(open.conn.goaway)}`;
            else if (status !== 200) failure = `status ${status}`;
          } catch (error) {
            failure = `network: ${messageOf(error)}`;
          }
          if (failure !== undefined || open.conn.closed || open.conn.goaway !== undefined) {
            await open.conn.close();
            open = undefined;
          }
        }
        results.push({
          protocol: "h2",
          client,
          connection: number,
          start,
          end: Date.now(),
          status,
          pod,
          failure,
        });
      }
    } finally {
      await open?.conn.close();
    }
  };

  const running = Promise.all([
    ...Array.from({ length: options.http1Clients ?? 3 }, (_, n) => http1(n)),
    ...Array.from({ length: options.h2Clients ?? 2 }, (_, n) => h2(100 + n)),
  ]);
  const stop = async () => {
    stopping = true;
    await running;
    return results;
  };
  return {
    results,
    stop,
    async [Symbol.asyncDispose]() {
      await stop();
    },
  };
}

/** Failures among `results`, counted by protocol and kind (`h2 status 502` → n). */
export function httpsFailures(results: readonly HttpsResult[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of results) {
    if (r.failure === undefined) continue;
    const key = `${r.protocol} ${r.failure}`;
    out[key] = (out[key] ?? 0) + 1;
  }
  return out;
}

/**
 * Whether a new handshake for `serverName` at `port` gets `certPem`'s leaf
 * (read from the server's TLS 1.2 Certificate message, so nothing needs to be
 * trusted). `serverName` undefined sends no SNI.
 */
export async function servesCertificate(
  port: number,
  serverName: string | undefined,
  certPem: string,
): Promise<boolean> {
  const flight = await probeCertificate(port, serverName === undefined ? {} : { serverName });
  const leaf = flight.certificates[0];
  return leaf !== undefined && sameBytes(leaf, derOf(certPem));
}
