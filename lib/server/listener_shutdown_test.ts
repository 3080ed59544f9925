/**
 * A streamed backend response in flight when a listener shuts down, and what
 * becomes of the backend connection behind it (the same across an HTTPS
 * rotation is in `tls_rotation_test.ts`).
 *
 * The worry checked here: `Deno.serve` (2.9.6, ext/http/00_serve.ts) answers
 * 503 and neither reads nor cancels the body a handler returns once its
 * server is closed (`e.closed`), so the proxy's backend connection would stay
 * checked out until the 60 s I/O timeout. Measured: a graceful `shutdown()`
 * never takes that branch (it waits for every pending handler, its client
 * gone or not, then cancels the body Deno cannot send), only a forced stop
 * does, and then the request's signal has aborted, which closes the backend
 * socket (`upstream_client.ts`). An HTTPS rotation shuts no `Deno.serve`
 * down at all. These tests pin all of that with the real listeners, the
 * proxy handler and a raw backend, the I/O timeout left at its 60 s default,
 * so a connection held until then fails every deadline below.
 *
 * @module
 */
import { assert, assertEquals } from "../../tests/support/assert.ts";
import { closeQuietly } from "../../tests/support/raw_http.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import {
  GET,
  KINDS,
  listen,
  PROMPT_MS,
  proxyTo,
  readUntil,
  send,
  setUp,
  stallingBackend,
  tearDown,
} from "../../tests/support/stalled_body_world.ts";

for (const kind of KINDS) {
  Deno.test(`a stalled streamed body in flight at shutdown: the backend connection closes as soon as the client leaves, and shutdown then finishes (${kind})`, async () => {
    const { world, proxy, listener, client } = await setUp(kind);
    world.answer();
    try {
      await send(client, GET);
      assert(/^HTTP\/1\.1 200/.test(await readUntil(client, "hello")));
      assertEquals(proxy.pool.stats().active, 1);
      const stopped = listener.shutdown({ timeoutMs: 30_000 });
      // The client keeps the response open for as long as it likes: the connection is not idle.
      client.close();
      await within(PROMPT_MS, "the backend connection to close", world.closed);
      await waitFor("the pool to give the connection back", () => proxy.pool.stats().active === 0, {
        timeoutMs: PROMPT_MS,
      });
      assertEquals((await within(PROMPT_MS, "shutdown", stopped)).graceful, true);
      await within(PROMPT_MS, "the listener to finish", listener.finished);
    } finally {
      await tearDown(client, listener, proxy, world);
    }
  });
}

for (const kind of ["http"] as const) {
  Deno.test(`an HTTP/2 client resetting a stalled body's stream at shutdown closes the backend connection at once, and shutdown then finishes (${kind})`, async () => {
    const world = stallingBackend();
    world.answer();
    const proxy = proxyTo(world.backend.port);
    const listener = listen(kind, proxy);
    const client = Deno.createHttpClient({ http1: false, http2: true });
    const reset = new AbortController();
    try {
      const response = await fetch(`http://127.0.0.1:${listener.addr.port}/stream`, {
        client,
        signal: reset.signal,
      });
      const reader = response.body!.getReader();
      const first = await within(PROMPT_MS, "the first chunk", reader.read());
      assertEquals(new TextDecoder().decode(first.value), "hello");
      const stopped = listener.shutdown({ timeoutMs: 30_000 });
      reset.abort();
      await reader.cancel().catch(() => {});
      await within(PROMPT_MS, "the backend connection to close", world.closed);
      assertEquals((await within(PROMPT_MS, "shutdown", stopped)).graceful, true);
      assertEquals(proxy.pool.stats().active, 0);
    } finally {
      reset.abort();
      client.close();
      await listener.shutdown({ timeoutMs: 1_000 });
      proxy.close();
      await world.backend.close();
    }
  });
}

for (const kind of KINDS) {
  Deno.test(`a client holding a stalled body past the shutdown timeout is reported, and closing the proxy (as the worker does next) closes the backend connection and ends the response (${kind})`, async () => {
    const { world, proxy, listener, client } = await setUp(kind);
    world.answer();
    try {
      await send(client, GET);
      await readUntil(client, "hello");
      const result = await within(PROMPT_MS, "shutdown", listener.shutdown({ timeoutMs: 200 }));
      assertEquals(result.graceful, false);
      assertEquals(proxy.pool.stats().active, 1);
      proxy.close();
      await within(PROMPT_MS, "the backend connection to close", world.closed);
      // The body ends short: Deno closes the client's connection, and the listener finishes.
      const buffer = new Uint8Array(1024);
      while ((await within(PROMPT_MS, "the client's EOF", client.read(buffer))) !== null);
      await within(PROMPT_MS, "the listener to finish", listener.finished);
    } finally {
      closeQuietly(client);
      proxy.close();
      await world.backend.close();
    }
  });
}

for (const kind of KINDS) {
  Deno.test(`a handler still waiting for the backend's head at shutdown relays the late head, and the backend is closed when the client leaves (${kind})`, async () => {
    const { world, proxy, listener, client } = await setUp(kind);
    try {
      await send(client, GET);
      await within(PROMPT_MS, "the request at the backend", world.requested);
      const stopped = listener.shutdown({ timeoutMs: 30_000 });
      // The listening socket is closed before the head arrives.
      await waitFor("the port to refuse connections", async () => {
        try {
          (await Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port })).close();
          return false;
        } catch {
          return true;
        }
      }, { timeoutMs: PROMPT_MS });
      world.answer();
      const text = await readUntil(client, "hello");
      assert(/^HTTP\/1\.1 200/.test(text), text);
      client.close();
      await within(PROMPT_MS, "the backend connection to close", world.closed);
      await waitFor("the pool to give the connection back", () => proxy.pool.stats().active === 0, {
        timeoutMs: PROMPT_MS,
      });
      assertEquals((await within(PROMPT_MS, "shutdown", stopped)).graceful, true);
    } finally {
      await tearDown(client, listener, proxy, world);
    }
  });
}

for (const kind of KINDS) {
  Deno.test(`a client leaving while its handler waits for the backend's head at shutdown closes the backend connection before any head (${kind})`, async () => {
    const { world, proxy, listener, client } = await setUp(kind);
    try {
      await send(client, GET);
      await within(PROMPT_MS, "the request at the backend", world.requested);
      const stopped = listener.shutdown({ timeoutMs: 30_000 });
      client.close();
      await within(PROMPT_MS, "the backend connection to close", world.closed);
      assertEquals(world.wrote, false);
      assertEquals((await within(PROMPT_MS, "shutdown", stopped)).graceful, true);
      assertEquals(proxy.pool.stats().active, 0);
    } finally {
      world.answer();
      await tearDown(client, listener, proxy, world);
    }
  });
}

Deno.test("a forced Deno.serve stop while the handler waits for the backend's head closes the backend connection at once (Deno drops the handler's answer unread)", async () => {
  const world = stallingBackend();
  const proxy = proxyTo(world.backend.port);
  const stop = new AbortController();
  const answered = Promise.withResolvers<Response>();
  const server = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    signal: stop.signal,
    onListen() {},
  }, async (req, info) => {
    const response = await proxy(req, {
      remoteAddr: info.remoteAddr as Deno.NetAddr,
      secure: false,
      localPort: 0,
    });
    answered.resolve(response);
    return response;
  });
  const client = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
  try {
    await send(client, GET);
    await within(PROMPT_MS, "the request at the backend", world.requested);
    stop.abort();
    await within(PROMPT_MS, "the server to stop", server.finished);
    // The handler's promise settles after the server closed: Deno's `e.closed` branch.
    await within(PROMPT_MS, "the backend connection to close", world.closed);
    assertEquals(world.wrote, false);
    assertEquals((await within(PROMPT_MS, "the handler", answered.promise)).status, 499);
    assertEquals(proxy.pool.stats().active, 0);
  } finally {
    world.answer();
    closeQuietly(client);
    proxy.close();
    await world.backend.close();
  }
});

Deno.test("Deno.serve's graceful shutdown() waits for a handler whose client left, then cancels the body it returns (canary: Sluice relies on it)", async () => {
  const entered = Promise.withResolvers<AbortSignal>();
  const release = Promise.withResolvers<void>();
  const cancelled = Promise.withResolvers<void>();
  let released = false;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    entered.resolve(req.signal);
    await release.promise;
    released = true;
    return new Response(
      new ReadableStream<Uint8Array>({
        pull: () => new Promise(() => {}),
        cancel: () => cancelled.resolve(),
      }),
    );
  });
  const client = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
  try {
    await send(client, GET);
    const signal = await within(PROMPT_MS, "the request", entered.promise);
    client.close();
    await waitFor("the request signal to abort", () => signal.aborted, { timeoutMs: PROMPT_MS });
    let stoppedEarly = false;
    const stopped = server.shutdown().then(() => stoppedEarly = !released);
    // An observation window, not a synchronisation: a shutdown that did not wait for the
    // pending handler would finish within it (a few ms), before the handler answers.
    await Promise.race([stopped, new Promise((resolve) => setTimeout(resolve, 300))]);
    release.resolve();
    await within(PROMPT_MS, "the returned body to be cancelled", cancelled.promise);
    await within(PROMPT_MS, "shutdown", stopped);
    assertEquals(stoppedEarly, false);
  } finally {
    release.resolve();
    closeQuietly(client);
    await server.shutdown();
  }
});
