/**
 * A fake clock for tests of timing logic (the rebuild scheduler, the
 * controller, reflector pacing): time moves only when the test says so, and
 * due callbacks then run in order. Implements both `SchedulerTimers` and
 * `ReflectorTimers`. Test support only; nothing in production imports it.
 *
 * @module
 */

interface Pending {
  readonly id: number;
  readonly at: number;
  readonly callback: () => void;
}

/** Lets pending promise reactions run (several turns, for chained awaits). */
export async function settle(turns = 20): Promise<void> {
  for (let i = 0; i < turns; i++) await Promise.resolve();
}

/** A manual clock with timers. */
export class FakeTimers {
  #now: number;
  #nextId = 1;
  #pending: Pending[] = [];
  /** Every delay asked of `sleep`, in order (for backoff assertions). */
  readonly sleeps: number[] = [];

  constructor(start = 0) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  setTimeout(callback: () => void, ms: number): unknown {
    const id = this.#nextId++;
    this.#pending.push({ id, at: this.#now + Math.max(0, ms), callback });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this.#pending = this.#pending.filter((p) => p.id !== handle);
  }

  sleep(ms: number, signal: AbortSignal): Promise<void> {
    this.sleeps.push(ms);
    if (signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const id = this.setTimeout(() => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      const onAbort = () => {
        this.clearTimeout(id);
        resolve();
      };
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** How many timers are waiting. */
  get pendingCount(): number {
    return this.#pending.length;
  }

  /** When the next timer is due, if any. */
  get nextAt(): number | undefined {
    return this.#pending.length === 0 ? undefined : Math.min(...this.#pending.map((p) => p.at));
  }

  /** Moves time forward by `ms`, running every callback that falls due (and settling after each). */
  async advance(ms: number): Promise<void> {
    const end = this.#now + ms;
    await settle();
    while (true) {
      const due = this.#pending
        .filter((p) => p.at <= end)
        .sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (due === undefined) break;
      this.#pending = this.#pending.filter((p) => p !== due);
      this.#now = Math.max(this.#now, due.at);
      due.callback();
      await settle();
    }
    this.#now = end;
    await settle();
  }
}
