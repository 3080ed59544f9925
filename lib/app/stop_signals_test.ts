import { assertEquals } from "../../tests/support/assert.ts";
import { SAME_STOP_WINDOW_MS, stopSignals } from "./stop_signals.ts";

Deno.test("stopSignals() takes a signal within the window as the first one repeated, a later one as forcing", () => {
  let now = 5_000;
  const judge = stopSignals({ now: () => now });
  assertEquals(judge(), "stop");
  now += 3; // deno task forwarding the terminal's SIGINT
  assertEquals(judge(), "repeat");
  now += 7; // deno run --watch passing it on as SIGTERM
  assertEquals(judge(), "repeat");
  now = 5_000 + SAME_STOP_WINDOW_MS;
  assertEquals(judge(), "force");
  assertEquals(judge(), "force");
});
