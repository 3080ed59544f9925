import { assertEquals } from "../../tests/support/assert.ts";
import { FakeTimers } from "../../tests/support/fake_timers.ts";
import { coalescedTask } from "./coalesced_task.ts";

Deno.test("coalescedTask() runs once per burst, delayMs after its first request", async () => {
  const timers = new FakeTimers();
  const runs: number[] = [];
  const task = coalescedTask(() => runs.push(timers.now()), { delayMs: 100, timers });
  task.request();
  await timers.advance(60);
  task.request();
  task.request();
  assertEquals(runs, []);
  await timers.advance(40);
  assertEquals(runs, [100]);
  await timers.advance(500);
  assertEquals(runs, [100], "nothing asked, nothing run");
  task.request();
  await timers.advance(100);
  assertEquals(runs, [100, 700]);
});

Deno.test("coalescedTask() keeps running every delayMs under a steady stream of requests", async () => {
  const timers = new FakeTimers();
  const runs: number[] = [];
  const task = coalescedTask(() => runs.push(timers.now()), { delayMs: 100, timers });
  for (let i = 0; i < 25; i++) {
    task.request();
    await timers.advance(10);
  }
  assertEquals(runs, [100, 200]);
});

Deno.test("coalescedTask() runs nothing after cancel()", async () => {
  const timers = new FakeTimers();
  let runs = 0;
  const task = coalescedTask(() => runs++, { delayMs: 100, timers });
  task.request();
  task.cancel();
  task.request();
  await timers.advance(1_000);
  assertEquals([runs, timers.pendingCount], [0, 0]);
});
