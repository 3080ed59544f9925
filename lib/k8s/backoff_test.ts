import { assertEquals } from "../../tests/support/assert.ts";
import { abortableSleep, Backoff } from "./backoff.ts";

Deno.test("Backoff doubles from 0.8 s up to 30 s and starts over after reset()", () => {
  const backoff = new Backoff({ random: () => 0.5 });
  const delays = Array.from({ length: 8 }, () => backoff.next());
  assertEquals(delays, [800, 1_600, 3_200, 6_400, 12_800, 25_600, 30_000, 30_000]);
  assertEquals(backoff.failures, 8);
  backoff.reset();
  assertEquals(backoff.next(), 800);
});

Deno.test("Backoff spreads each delay by ±20 %", () => {
  assertEquals(new Backoff({ random: () => 0 }).next(), 640);
  assertEquals(new Backoff({ random: () => 0.999999 }).next(), 960);
  assertEquals(new Backoff({ random: () => 0, initialMs: 100, maxMs: 100, jitter: 0 }).next(), 100);
});

Deno.test("abortableSleep() resolves at once when its signal aborts", async () => {
  const abort = new AbortController();
  const started = performance.now();
  const sleeping = abortableSleep(60_000, abort.signal);
  abort.abort();
  await sleeping;
  assertEquals(performance.now() - started < 1_000, true);
  await abortableSleep(60_000, abort.signal); // already aborted
});
