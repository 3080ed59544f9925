/**
 * Test support: the proxy side of the buffers test of
 * `lib/websocket/websocket_limits_test.ts`,
 * run as its own process with `--v8-flags=--expose-gc`, so that what it
 * measures is the proxy alone (the test's clients and backend live in the
 * test's process). Serves the proxy handler (`tests/support/proxy_harness.ts`)
 * in front of the backend on `127.0.0.1:<port>` and prints `{ "port": n }`;
 * then for each line read on stdin, once no WebSocket relay is live, prints
 * the isolate's heap and external (ArrayBuffer) memory after a full
 * collection, and how many relays ended. Exits at the end of stdin.
 *
 * Usage: `deno run -A --unstable-net --v8-flags=--expose-gc tests/support/websocket_soak_probe.ts <backend port>`
 *
 * @module
 */
// deno-lint-ignore-file no-console
import { startProxy } from "./proxy_harness.ts";
import { waitFor } from "./wait.ts";

/** What the probe prints per stdin line. */
export interface ProbeReading {
  readonly gc: boolean;
  readonly ended: number;
  readonly heapUsed: number;
  readonly external: number;
}

if (import.meta.main) {
  let live = 0;
  let ended = 0;
  const proxy = await startProxy({
    routes: [{ endpoints: [{ address: "127.0.0.1", port: Number(Deno.args[0]) }] }],
    webSocketIdleTimeoutMs: 60_000,
    onWebSocket: (delta) => {
      live += delta;
      if (delta === -1) ended++;
    },
  });
  console.log(JSON.stringify({ port: proxy.port }));
  const gc = (globalThis as { gc?: () => void }).gc;
  const lines = Deno.stdin.readable.pipeThrough(new TextDecoderStream());
  for await (const _ of lines) {
    await waitFor("every relay to end", () => live === 0, { timeoutMs: 30_000 });
    // The harness keeps every access-log entry: not the proxy's memory.
    proxy.accessLog.length = 0;
    // ArrayBuffers are swept off the main thread: collect a few times, a timer tick apart.
    for (let i = 0; i < 10; i++) {
      gc?.();
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const { heapUsed, external } = Deno.memoryUsage();
    const reading: ProbeReading = { gc: gc !== undefined, ended, heapUsed, external };
    console.log(JSON.stringify(reading));
  }
  await proxy.close();
}
