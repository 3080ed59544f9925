/**
 * Open-loop request traffic at a fixed rate for end-to-end tests: requests
 * are started on a schedule (not when the previous one ends), half on a
 * pool of keep-alive connections, half each on a fresh TCP connection of its
 * own (`Connection: close`), so that both reuse and connection set-up are
 * exercised while backends come and go. Bounded by a request cap and a
 * cap on requests in flight. Every outcome is recorded with its latency and
 * the backend that answered (a `Hostname:` line, as `traefik/whoami` writes).
 *
 * Knows nothing about Sluice or Kubernetes.
 *
 * @module
 */

/** One request's outcome. */
export interface PacedResult {
  readonly kind: "keep-alive" | "fresh";
  /** `performance.now()` at start, and the latency in ms. */
  readonly start: number;
  readonly ms: number;
  /** The HTTP status, or 0 when the request failed without one. */
  readonly status: number;
  readonly hostname: string | undefined;
  readonly failure: string | undefined;
}

/** Options of {@linkcode startPacedTraffic}. */
export interface PacedOptions {
  /** Proxy port on 127.0.0.1. */
  readonly port: number;
  readonly host: string;
  /** Requests per second. */
  readonly rate: number;
  /** Stop after this many requests in all. */
  readonly maxRequests: number;
  /** At most this many in flight (further ones wait their turn). Default 256. */
  readonly maxInFlight?: number;
  /** Per-request timeout in ms. Default 10,000. */
  readonly timeoutMs?: number;
}

/** Running traffic. */
export interface PacedTraffic {
  readonly results: PacedResult[];
  /** Stops starting requests, waits for those in flight; resolves with every result. */
  stop(): Promise<PacedResult[]>;
}

/** Starts traffic; stop it before the test ends. */
export function startPacedTraffic(options: PacedOptions): PacedTraffic {
  const results: PacedResult[] = [];
  const timeoutMs = options.timeoutMs ?? 10_000;
  const maxInFlight = options.maxInFlight ?? 256;
  const client = Deno.createHttpClient({ allowHost: true });
  const inFlight = new Set<Promise<void>>();
  let stopping = false;

  const keepAlive = async (start: number) => {
    let status = 0;
    let body = "";
    let failure: string | undefined;
    try {
      const response = await fetch(`http://127.0.0.1:${options.port}/`, {
        headers: { host: options.host },
        client,
        signal: AbortSignal.timeout(timeoutMs),
      });
      status = response.status;
      body = await response.text();
    } catch (error) {
      failure = `network: ${error instanceof Error ? error.message : String(error)}`;
    }
    record("keep-alive", start, status, body, failure);
  };

  const fresh = async (start: number) => {
    let status = 0;
    let body = "";
    let failure: string | undefined;
    let conn: Deno.TcpConn | undefined;
    const timer = setTimeout(() => {
      try {
        conn?.close();
      } catch {
        // closed already
      }
    }, timeoutMs);
    try {
      conn = await Deno.connect({ hostname: "127.0.0.1", port: options.port });
      await conn.write(
        new TextEncoder().encode(
          `GET / HTTP/1.1\r\nHost: ${options.host}\r\nConnection: close\r\n\r\n`,
        ),
      );
      const text = await new Response(conn.readable).text();
      conn = undefined; // the readable closed it
      const m = text.match(/^HTTP\/1\.1 (\d{3})/);
      if (m) status = Number(m[1]);
      else failure = `malformed answer: ${JSON.stringify(text.slice(0, 80))}`;
      body = text.slice(text.indexOf("\r\n\r\n") + 4);
    } catch (error) {
      failure = `network: ${error instanceof Error ? error.message : String(error)}`;
      try {
        conn?.close();
      } catch {
        // closed already
      }
    } finally {
      clearTimeout(timer);
    }
    record("fresh", start, status, body, failure);
  };

  const record = (
    kind: PacedResult["kind"],
    start: number,
    status: number,
    body: string,
    failure: string | undefined,
  ) => {
    const hostname = body.match(/^Hostname: (.+)$/m)?.[1];
    if (failure === undefined && status !== 200) failure = `status ${status}`;
    results.push({ kind, start, ms: performance.now() - start, status, hostname, failure });
  };

  const started = performance.now();
  let sent = 0;
  const loop = (async () => {
    while (!stopping && sent < options.maxRequests) {
      const due = Math.min(
        options.maxRequests,
        Math.floor(((performance.now() - started) / 1000) * options.rate),
      );
      while (sent < due && inFlight.size < maxInFlight) {
        const start = performance.now();
        const p: Promise<void> = (sent % 2 === 0 ? keepAlive(start) : fresh(start)).finally(() =>
          inFlight.delete(p)
        );
        inFlight.add(p);
        sent++;
      }
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  })();

  return {
    results,
    async stop() {
      stopping = true;
      await loop;
      while (inFlight.size > 0) await Promise.all([...inFlight]);
      client.close();
      return results;
    },
  };
}

/** The `q`-quantile (0 to 1) of `values`, in their unit; NaN when empty. */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}
