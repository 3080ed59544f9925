/**
 * Steady, bounded request traffic for end-to-end tests: several keep-alive
 * clients (each its own `fetch` client, so its own connections) sending GET
 * and POST (a small `Content-Length` body) to one host through a proxy, one
 * request at a time each, until stopped or a request cap is reached. Every
 * outcome is recorded: which pod answered (from a JSON `pod` field), the
 * status, or how the request failed.
 *
 * Knows nothing about Sluice or Kubernetes.
 *
 * @module
 */

/** One request's outcome. */
export interface TrafficResult {
  readonly method: "GET" | "POST";
  /** `Date.now()` when it was sent and when it ended. */
  readonly start: number;
  readonly end: number;
  /** The HTTP status, or 0 when the request failed without one. */
  readonly status: number;
  /** The answering pod, when a backend answered. */
  readonly pod: string | undefined;
  /** Why it failed (`status <n>`, `network: <message>`, `wrong body`), or undefined. */
  readonly failure: string | undefined;
}

/** Options of {@linkcode startTraffic}. */
export interface TrafficOptions {
  /** Proxy port on 127.0.0.1. */
  readonly port: number;
  /** `Host` header. */
  readonly host: string;
  /** Concurrent clients. Default 6. */
  readonly clients?: number;
  /** Stop after this many requests in all. Default 50,000. */
  readonly maxRequests?: number;
  /** Every `delayEvery`-th request asks the backend to wait `delayMs` (in-flight requests during changes). Default 4, 15 ms. */
  readonly delayEvery?: number;
  readonly delayMs?: number;
  /** Per-request timeout in ms. Default 10,000. */
  readonly timeoutMs?: number;
}

/** Running traffic. */
export interface Traffic extends AsyncDisposable {
  /** Every outcome so far, in completion order. */
  readonly results: TrafficResult[];
  /** Outcomes since `results[index]` (exclusive of earlier ones). */
  since(index: number): TrafficResult[];
  /** Stops sending, waits for requests in flight, closes the clients; resolves with all results. */
  stop(): Promise<TrafficResult[]>;
}

const POST_BODY = "x".repeat(64);

/** Starts traffic; stop it (or dispose it) before the test ends. */
export function startTraffic(options: TrafficOptions): Traffic {
  const results: TrafficResult[] = [];
  const clients = options.clients ?? 6;
  const maxRequests = options.maxRequests ?? 50_000;
  const delayEvery = options.delayEvery ?? 4;
  const delayMs = options.delayMs ?? 15;
  const timeoutMs = options.timeoutMs ?? 10_000;
  let stopping = false;
  let sent = 0;
  const loop = async (n: number) => {
    using client = Deno.createHttpClient({ allowHost: true });
    for (let i = 0; !stopping && sent < maxRequests; i++) {
      sent++;
      const method = (i + n) % 2 === 0 ? "GET" : "POST";
      const delayed = (i + n) % delayEvery === 0;
      const start = Date.now();
      let status = 0;
      let pod: string | undefined;
      let failure: string | undefined;
      try {
        const response = await fetch(
          `http://127.0.0.1:${options.port}/${delayed ? `?delay=${delayMs}` : ""}`,
          {
            method,
            headers: { host: options.host, "content-type": "text/plain" },
            ...(method === "POST" ? { body: POST_BODY } : {}),
            client,
            signal: AbortSignal.timeout(timeoutMs),
          },
        );
        status = response.status;
        const text = await response.text();
        if (status !== 200) {
          failure = `status ${status}`;
        } else {
          const json = JSON.parse(text) as { pod?: string; method?: string; length?: number };
          pod = json.pod;
          const length = method === "POST" ? POST_BODY.length : 0;
          if (json.method !== method || json.length !== length) failure = "wrong body";
        }
      } catch (error) {
        failure = `network: ${error instanceof Error ? error.message : String(error)}`;
      }
      results.push({ method, start, end: Date.now(), status, pod, failure });
    }
  };
  const running = Promise.all(Array.from({ length: clients }, (_, n) => loop(n)));
  const stop = async () => {
    stopping = true;
    await running;
    return results;
  };
  return {
    results,
    since: (index) => results.slice(index),
    stop,
    async [Symbol.asyncDispose]() {
      await stop();
    },
  };
}

/** How many of `items` fall under each key; `keyOf` returning undefined skips an item. */
export function tally<T>(
  items: readonly T[],
  keyOf: (item: T) => string | undefined,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const item of items) {
    const key = keyOf(item);
    if (key !== undefined) out[key] = (out[key] ?? 0) + 1;
  }
  return out;
}

/** Failures among `results`, counted by method and kind (`POST status 502` → n). */
export function failuresByKind(results: readonly TrafficResult[]): Record<string, number> {
  return tally(results, (r) => r.failure === undefined ? undefined : `${r.method} ${r.failure}`);
}

/** Answers per pod among `results`. */
export function answersByPod(results: readonly TrafficResult[]): Record<string, number> {
  return tally(results, (r) => r.pod);
}
