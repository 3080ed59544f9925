import { assert, assertEquals } from "../../tests/support/assert.ts";
import { FakeTimers, settle } from "../../tests/support/fake_timers.ts";
import { RebuildScheduler } from "./rebuild_scheduler.ts";

function setup(options: { rebuildMs?: number } = {}) {
  const timers = new FakeTimers(1_000);
  const rebuilds: number[] = [];
  const scheduler = new RebuildScheduler({
    timers,
    holdOffMs: 20,
    maxHoldOffMs: 250,
    rebuild: async () => {
      rebuilds.push(timers.now());
      if (options.rebuildMs !== undefined) {
        await new Promise<void>((resolve) => timers.setTimeout(resolve, options.rebuildMs!));
      }
    },
  });
  return { timers, rebuilds, scheduler };
}

Deno.test("RebuildScheduler rebuilds an isolated change at once", async () => {
  const { timers, rebuilds, scheduler } = setup();
  scheduler.notify();
  await timers.advance(0);
  assertEquals(rebuilds, [1_000]);
  await scheduler.stop();
});

Deno.test("RebuildScheduler coalesces changes that arrive together into one rebuild", async () => {
  const { timers, rebuilds, scheduler } = setup();
  for (let i = 0; i < 100; i++) scheduler.notify();
  await timers.advance(1_000);
  assertEquals(rebuilds.length, 1);
  assertEquals(scheduler.stats.notifications, 100);
  await scheduler.stop();
});

Deno.test("RebuildScheduler holds a change after a recent rebuild off until 20 ms after that rebuild", async () => {
  const { timers, rebuilds, scheduler } = setup();
  scheduler.notify();
  await timers.advance(5);
  scheduler.notify(); // 5 ms after the last rebuild: inside the hold-off
  await timers.advance(14);
  assertEquals(rebuilds, [1_000]);
  await timers.advance(1);
  assertEquals(rebuilds, [1_000, 1_020]);
  await scheduler.stop();
});

Deno.test("RebuildScheduler extends the hold-off for each further change while one waits", async () => {
  const { timers, rebuilds, scheduler } = setup();
  scheduler.notify();
  await timers.advance(5);
  scheduler.notify(); // due at 1,020
  await timers.advance(10);
  scheduler.notify(); // at 1,015: due 20 ms later
  await timers.advance(19);
  assertEquals(rebuilds, [1_000]);
  await timers.advance(1);
  assertEquals(rebuilds, [1_000, 1_035]);
  await scheduler.stop();
});

Deno.test("RebuildScheduler rebuilds at least every 250 ms while changes never stop", async () => {
  const { timers, rebuilds, scheduler } = setup();
  scheduler.notify();
  await timers.advance(1);
  // A change every 10 ms for 1 s: each one alone would keep holding off.
  for (let i = 0; i < 100; i++) {
    scheduler.notify();
    await timers.advance(10);
  }
  await timers.advance(1_000);
  const gaps = rebuilds.slice(1).map((t, i) => t - rebuilds[i]!);
  assert(rebuilds.length >= 5 && rebuilds.length <= 6, `rebuilds at ${rebuilds.join(", ")}`);
  for (const gap of gaps) assert(gap <= 251, `a gap of ${gap} ms between rebuilds`);
  await scheduler.stop();
});

Deno.test("RebuildScheduler runs one rebuild at a time and one more for changes made during it", async () => {
  const { timers, rebuilds, scheduler } = setup({ rebuildMs: 100 });
  scheduler.notify();
  await timers.advance(0);
  assertEquals(rebuilds.length, 1);
  for (let i = 0; i < 10; i++) {
    scheduler.notify();
    await timers.advance(5);
  }
  assertEquals(rebuilds.length, 1, "no second rebuild while the first runs");
  await timers.advance(1_000);
  assertEquals(rebuilds.length, 2);
  // The changes waited since 1,000 ms; their rebuild came right after the first ended (1,100).
  assert(rebuilds[1]! <= 1_100 + 20, `second rebuild at ${rebuilds[1]}`);
  await scheduler.stop();
});

Deno.test("RebuildScheduler.flush() rebuilds now and cancels the waiting timer", async () => {
  const { timers, rebuilds, scheduler } = setup();
  scheduler.notify();
  await timers.advance(0);
  scheduler.notify();
  await scheduler.flush();
  assertEquals(rebuilds, [1_000, 1_000]);
  await timers.advance(1_000);
  assertEquals(rebuilds.length, 2);
  await scheduler.stop();
});

Deno.test("RebuildScheduler keeps going after a rebuild throws", async () => {
  const timers = new FakeTimers();
  const errors: unknown[] = [];
  let calls = 0;
  const scheduler = new RebuildScheduler({
    timers,
    rebuild: () => {
      calls++;
      if (calls === 1) throw new Error("boom");
    },
    onError: (e) => errors.push(e),
  });
  scheduler.notify();
  await timers.advance(100);
  scheduler.notify();
  await timers.advance(100);
  assertEquals(calls, 2);
  assertEquals(errors.length, 1);
  await scheduler.stop();
});

Deno.test("RebuildScheduler.stop() cancels a waiting rebuild", async () => {
  const { timers, rebuilds, scheduler } = setup();
  scheduler.notify();
  await timers.advance(0);
  scheduler.notify();
  await scheduler.stop();
  scheduler.notify();
  await timers.advance(1_000);
  await settle();
  assertEquals(rebuilds.length, 1);
  assertEquals(timers.pendingCount, 0);
});

// Was a bug: an onError that threw made the timer's rebuild reject with nobody to catch it
// (`void this.#run()`): an unhandled rejection, which ends a Deno process.
Deno.test("RebuildScheduler keeps going when onError itself throws, and rejects nothing", async () => {
  const timers = new FakeTimers();
  let calls = 0;
  const scheduler = new RebuildScheduler({
    timers,
    rebuild: () => {
      calls++;
      throw new Error("Cannot rebuild: thrown on purpose");
    },
    onError: () => {
      throw new Error("Cannot log: thrown on purpose");
    },
  });
  const unhandled: unknown[] = [];
  const onUnhandled = (event: PromiseRejectionEvent) => {
    event.preventDefault();
    unhandled.push(event.reason);
  };
  globalThis.addEventListener("unhandledrejection", onUnhandled);
  try {
    scheduler.notify();
    await timers.advance(100);
    await scheduler.flush();
    scheduler.notify();
    await timers.advance(100);
    // Unhandled rejections are reported after a macrotask turn.
    await new Promise((resolve) => setTimeout(resolve, 0));
    assertEquals(calls, 3);
    assertEquals(unhandled, []);
  } finally {
    globalThis.removeEventListener("unhandledrejection", onUnhandled);
    await scheduler.stop();
  }
});
