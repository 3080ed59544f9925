/**
 * Test support: a client in its own worker, so that what it
 * measures is the serving workers and not the test's main thread (which
 * blocks while it posts a large snapshot). Told `{ port, host, lanes }`, it
 * sends `GET /` on fresh connections in `lanes` loops, posts `"running"`
 * after its first 20 answers, and when told `"stop"` posts every answer.
 *
 * @module
 */

/** One answer: status (0 when the connection ended without one), duration and end. */
export interface TrafficAnswer {
  readonly status: number;
  readonly ms: number;
  /** When it ended, `performance.timeOrigin + performance.now()` milliseconds. */
  readonly at: number;
}

/** What the worker is told first. */
export interface TrafficOrder {
  readonly port: number;
  readonly host: string;
  readonly lanes: number;
}

async function once(order: TrafficOrder): Promise<TrafficAnswer> {
  const started = performance.now();
  let status = 0;
  try {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: order.port });
    try {
      await conn.write(
        new TextEncoder().encode(
          `GET / HTTP/1.1\r\nHost: ${order.host}\r\nConnection: close\r\n\r\n`,
        ),
      );
      const text = await new Response(conn.readable).text();
      status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
    } finally {
      try {
        conn.close();
      } catch {
        // Closed with its readable.
      }
    }
  } catch {
    status = 0;
  }
  const now = performance.now();
  return { status, ms: now - started, at: performance.timeOrigin + now };
}

if ("WorkerGlobalScope" in globalThis) {
  const scope = self as unknown as {
    onmessage: ((event: MessageEvent) => void) | null;
    postMessage(message: unknown): void;
    close(): void;
  };
  let stopped = false;
  scope.onmessage = (event) => {
    if (event.data === "stop") {
      stopped = true;
      return;
    }
    const order = event.data as TrafficOrder;
    const answers: TrafficAnswer[] = [];
    void Promise.all(Array.from({ length: order.lanes }, async () => {
      while (!stopped) {
        answers.push(await once(order));
        if (answers.length === 20) scope.postMessage("running");
      }
    })).then(() => {
      scope.postMessage(answers);
      scope.close();
    });
  };
}
