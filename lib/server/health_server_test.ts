import { assertEquals } from "../../tests/support/assert.ts";
import { healthResponse, type HealthServerOptions, serveHealth } from "./health_server.ts";

function options(state: { live: boolean; ready: boolean }): HealthServerOptions {
  return {
    port: 0,
    live: () => state.live,
    ready: () => state.ready,
    metrics: () =>
      Promise.resolve({
        body: "sluice_config_version 7\n",
        contentType: "text/plain; version=0.0.4",
      }),
  };
}

Deno.test("healthResponse() answers /healthz, /readyz and /metrics from the state it is given", async () => {
  const state = { live: true, ready: false };
  const o = options(state);
  const get = async (path: string, method = "GET") => {
    const r = await healthResponse(new Request(`http://x${path}`, { method }), o);
    return [r.status, await r.text()] as const;
  };
  assertEquals(await get("/healthz"), [200, "ok\n"]);
  assertEquals(await get("/readyz"), [503, "not ready\n"]);
  state.ready = true;
  assertEquals(await get("/readyz"), [200, "ok\n"]);
  state.live = false;
  assertEquals(await get("/healthz"), [503, "not serving\n"]);
  assertEquals(await get("/metrics"), [200, "sluice_config_version 7\n"]);
  assertEquals(await get("/other"), [404, "Not found\n"]);
  assertEquals((await get("/readyz", "POST"))[0], 405);
});

Deno.test("serveHealth() serves the health endpoints over a real socket", async () => {
  const server = serveHealth({ ...options({ live: true, ready: true }), hostname: "127.0.0.1" });
  try {
    const r = await fetch(`http://127.0.0.1:${server.addr.port}/metrics`);
    assertEquals(r.headers.get("content-type"), "text/plain; version=0.0.4");
    assertEquals(await r.text(), "sluice_config_version 7\n");
  } finally {
    await server.shutdown();
  }
});
