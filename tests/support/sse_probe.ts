/**
 * Test support: measures how long each SSE event takes from a scripted
 * backend's write to the client's read, one event at a time (the backend
 * sends the next only once the client has the one before, so no event waits
 * behind another).
 *
 * @module
 */
import { latin1 } from "./raw_http.ts";
import type { ScriptedConn } from "./scripted_backend.ts";
import { within } from "./wait.ts";

/** One measurement of `count` events; make a new one per client. */
export class SseProbe {
  readonly count: number;
  /** Milliseconds from write to read, per event, in order. */
  readonly latencies: number[] = [];
  #sentAt: number[] = [];
  #received: PromiseWithResolvers<void>[];

  constructor(count: number) {
    this.count = count;
    this.#received = Array.from({ length: count }, () => Promise.withResolvers<void>());
  }

  /**
   * The backend's script (give it a socket with `TCP_NODELAY`): answers the
   * request with a chunked `text/event-stream` of the events.
   */
  async serve(conn: ScriptedConn): Promise<void> {
    if ((await conn.readHead()) === null) return;
    await conn.write(
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    for (let i = 0; i < this.count; i++) {
      const text = `id: ${i}\ndata: event ${i}\n\n`;
      this.#sentAt[i] = performance.now();
      await conn.write(`${text.length.toString(16)}\r\n${text}\r\n`);
      await within(10_000, `the client to get event ${i}`, this.#received[i]!.promise);
    }
    await conn.write("0\r\n\r\n");
  }

  /** Takes everything the client has read so far; true once every event arrived. */
  seen(text: string): boolean {
    for (let i = this.latencies.length; i < this.count; i++) {
      if (!text.includes(`data: event ${i}\n\n`)) break;
      this.latencies.push(performance.now() - this.#sentAt[i]!);
      this.#received[i]!.resolve();
    }
    return this.latencies.length === this.count;
  }

  /** Reads `conn` (the request already sent) until every event arrived, within 20 s. */
  async readFrom(conn: Deno.Conn): Promise<void> {
    let text = "";
    const buffer = new Uint8Array(16 * 1024);
    await within(
      20_000,
      "every event",
      (async () => {
        while (this.latencies.length < this.count) {
          const n = await conn.read(buffer);
          if (n === null) throw new Error("Cannot read the events: closed");
          text += latin1(buffer.subarray(0, n));
          this.seen(text);
        }
      })(),
    );
  }

  /** The median latency, ms. */
  get median(): number {
    return [...this.latencies].sort((a, b) => a - b)[Math.floor(this.count / 2)]!;
  }

  /** `first F ms, median M ms, max X ms`. */
  summary(): string {
    const max = Math.max(...this.latencies);
    return `first ${this.latencies[0]!.toFixed(1)} ms, median ${this.median.toFixed(1)} ms, ` +
      `max ${max.toFixed(1)} ms`;
  }
}
