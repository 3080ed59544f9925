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
import { RawH2, statusOf, textOf } from "./raw_h2.ts";
import { derOf, probeCertificate, sameBytes } from "./tls_material.ts";
import { closeQuietly, headerValue, RawConnection } from "./raw_http.ts";
import { tally } from "./steady_traffic.ts";

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

/** What one request on an open connection gave, and whether the next may use that connection. */
interface Exchanged {
  readonly status: number;
  readonly pod: string | undefined;
  readonly failure: string | undefined;
  readonly keep: boolean;
}

/** One client's kind of connection: how to open it, send one request on it, and close it. */
interface ClientKind<T> {
  readonly protocol: HttpsResult["protocol"];
  open(): Promise<T>;
  /** Throws for a network failure (the connection is then closed). */
  exchange(conn: T): Promise<Exchanged>;
  close(conn: T): Promise<void> | void;
}

/**
 * One client: a request at a time while `take()` allows, on a connection
 * opened when there is none (a handshake failure is that request's outcome),
 * each outcome pushed to `results` with the connection's number.
 */
async function runClient<T>(
  kind: ClientKind<T>,
  client: number,
  options: { take: () => boolean; results: HttpsResult[] },
): Promise<void> {
  let open: Opened<T> | undefined;
  let connections = 0;
  try {
    while (options.take()) {
      const start = Date.now();
      let status = 0;
      let pod: string | undefined;
      let failure: string | undefined;
      if (open === undefined) {
        connections++;
        try {
          open = { conn: await kind.open(), number: connections };
        } catch (error) {
          failure = `handshake: ${messageOf(error)}`;
        }
      }
      const number = open?.number ?? connections;
      if (open !== undefined) {
        let keep = false;
        try {
          ({ status, pod, failure, keep } = await kind.exchange(open.conn));
        } catch (error) {
          failure = `network: ${messageOf(error)}`;
        }
        if (!keep) {
          await kind.close(open.conn);
          open = undefined;
        }
      }
      options.results.push({
        protocol: kind.protocol,
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
    if (open !== undefined) await kind.close(open.conn);
  }
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
  const take = () => {
    if (stopping || sent >= maxRequests) return false;
    sent++;
    return true;
  };

  const http1 = (): ClientKind<RawConnection> => {
    let onThis = 0;
    return {
      protocol: "http/1.1",
      async open() {
        const conn = RawConnection.wrap(await openTls(options, "http/1.1"));
        onThis = 0;
        return conn;
      },
      async exchange(conn) {
        await conn.send(
          `GET ${path} HTTP/1.1\r\nHost: ${options.serverName}\r\nUser-Agent: https-traffic\r\n\r\n`,
        );
        const response = await conn.readResponse({ timeoutMs });
        const status = response.status;
        onThis++;
        const closing = headerValue(response.headers, "connection")?.toLowerCase() === "close";
        return {
          status,
          pod: podOf(new TextDecoder().decode(response.body)),
          failure: status !== 200 ? `status ${status}` : undefined,
          keep: !closing && !(reconnectEvery > 0 && onThis >= reconnectEvery),
        };
      },
      close: (conn) => conn.close(),
    };
  };

  const h2: ClientKind<RawH2> = {
    protocol: "h2",
    open: () =>
      RawH2.open({
        port: options.port,
        tls: { serverName: options.serverName, caCerts: options.caCerts },
      }),
    async exchange(conn) {
      const id = await conn.request([
        [":method", "GET"],
        [":scheme", "https"],
        [":authority", options.serverName],
        [":path", path],
      ]);
      const stream = await conn.finished(id, timeoutMs);
      const status = statusOf(stream) ?? 0;
      const failure = stream.reset !== undefined
        ? `reset ${stream.reset}`
        : !stream.ended
        ? `goaway ${JSON.stringify(conn.goaway)}`
        : status !== 200
        ? `status ${status}`
        : undefined;
      return {
        status,
        pod: podOf(textOf(stream)),
        failure,
        keep: failure === undefined && !conn.closed && conn.goaway === undefined,
      };
    },
    close: (conn) => conn.close(),
  };

  const shared = { take, results };
  const running = Promise.all([
    ...Array.from({ length: options.http1Clients ?? 3 }, (_, n) => runClient(http1(), n, shared)),
    ...Array.from({ length: options.h2Clients ?? 2 }, (_, n) => runClient(h2, 100 + n, shared)),
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
  return tally(results, (r) => r.failure === undefined ? undefined : `${r.protocol} ${r.failure}`);
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
