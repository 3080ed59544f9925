import { assert, assertEquals, assertStrictEquals } from "../../tests/support/assert.ts";
import {
  type EchoBackend,
  patternBytes,
  startEchoBackend,
} from "../../tests/support/echo_backend.ts";
import {
  type HarnessOptions,
  type ProxyHarness,
  startProxy,
} from "../../tests/support/proxy_harness.ts";
import { headerValue, headerValues, latin1, RawConnection } from "../../tests/support/raw_http.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import { relayWebSocket } from "./websocket_relay.ts";

async function withProxy(
  fn: (backend: EchoBackend, proxy: ProxyHarness) => Promise<void>,
  options: Partial<Omit<HarnessOptions, "routes">> = {},
): Promise<void> {
  const backend = await startEchoBackend({ name: "chat/ws", pod: "ws-1" });
  const proxy = await startProxy({
    routes: [{ endpoints: [{ address: "127.0.0.1", port: backend.port }] }],
    ...options,
  });
  try {
    await fn(backend, proxy);
  } finally {
    await proxy.close();
    await backend.close();
  }
}

/** A client WebSocket with a message queue; every test closes it and awaits `closed`. */
function connect(url: string, protocols?: string[]) {
  const ws = new WebSocket(url, protocols);
  ws.binaryType = "arraybuffer";
  const queue: (string | ArrayBuffer)[] = [];
  const waiters: (() => void)[] = [];
  ws.onmessage = (event) => {
    queue.push(event.data);
    waiters.splice(0).forEach((wake) => wake());
  };
  const opened = new Promise<void>((resolve, reject) => {
    ws.onopen = () => resolve();
    ws.onerror = () => reject(new Error("WebSocket failed to open"));
  });
  const closed = new Promise<CloseEvent>((resolve) => ws.onclose = resolve);
  return {
    ws,
    opened,
    closed,
    async next(timeoutMs = 5_000): Promise<string | ArrayBuffer> {
      const deadline = performance.now() + timeoutMs;
      while (queue.length === 0) {
        if (performance.now() > deadline) throw new Error("No message in time");
        await new Promise<void>((resolve) => {
          waiters.push(resolve);
          setTimeout(resolve, 50);
        });
      }
      return queue.shift()!;
    },
  };
}

Deno.test("websocket relay echoes text and binary both ways with the negotiated subprotocol", async () => {
  await withProxy(async (_backend, proxy) => {
    const client = connect(`ws://127.0.0.1:${proxy.port}/ws`, ["chat.v2", "chat.v1"]);
    await client.opened;
    assertStrictEquals(client.ws.protocol, "chat.v2");
    client.ws.send("hello");
    assertStrictEquals(await client.next(), "hello");
    client.ws.send(Uint8Array.of(0, 1, 2, 255));
    assertEquals(new Uint8Array(await client.next() as ArrayBuffer), Uint8Array.of(0, 1, 2, 255));
    client.ws.send("x".repeat(100_000));
    assertStrictEquals(await client.next(), "x".repeat(100_000));
    client.ws.close(1000);
    await client.closed;
  });
});

Deno.test("websocket relay sends the backend the client's fields minus extensions", async () => {
  await withProxy(async (_backend, proxy) => {
    const client = connect(`ws://127.0.0.1:${proxy.port}/ws`, ["p1"]);
    await client.opened;
    client.ws.send("headers");
    const fields = JSON.parse(await client.next() as string) as [string, string][];
    assertStrictEquals(headerValue(fields, "upgrade")?.toLowerCase(), "websocket");
    assertStrictEquals(headerValue(fields, "connection"), "Upgrade");
    assertStrictEquals(headerValue(fields, "sec-websocket-protocol"), "p1");
    assertStrictEquals(headerValue(fields, "sec-websocket-version"), "13");
    assertStrictEquals(headerValue(fields, "sec-websocket-extensions"), undefined);
    assert(headerValues(fields, "user-agent").length <= 1);
    assertStrictEquals(headerValues(fields, "x-forwarded-for").length, 1);
    client.ws.close();
    await client.closed;
  });
});

Deno.test("websocket relay passes the backend's 101 fields to the client", async () => {
  await withProxy(async (_backend, proxy) => {
    const conn = await RawConnection.open(proxy.port);
    try {
      await conn.send(
        "GET /ws HTTP/1.1\r\nHost: chat.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
      );
      const response = await conn.readResponse({ head: true });
      assertStrictEquals(response.status, 101);
      assertStrictEquals(
        headerValue(response.headers, "sec-websocket-accept"),
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
      );
      assertStrictEquals(headerValue(response.headers, "x-echo-pod"), "ws-1");
      assertStrictEquals(headerValue(response.headers, "set-cookie"), "ws=1; Path=/");
    } finally {
      conn.close();
    }
  });
});

Deno.test("websocket relay returns a refused upgrade's status, fields and body", async () => {
  await withProxy(async (_backend, proxy) => {
    const conn = await RawConnection.open(proxy.port);
    try {
      await conn.send(
        "GET /ws?refuse=403 HTTP/1.1\r\nHost: chat.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
      );
      const response = await conn.readResponse();
      assertEquals([response.status, latin1(response.body)], [403, "upgrade refused\n"]);
      assertStrictEquals(headerValue(response.headers, "x-refused"), "yes");
    } finally {
      conn.close();
    }
  });
});

Deno.test("websocket relay propagates the client's close code and reason to the backend", async () => {
  await withProxy(async (backend, proxy) => {
    const client = connect(`ws://127.0.0.1:${proxy.port}/ws`);
    await client.opened;
    client.ws.close(4001, "client leaving");
    const event = await client.closed;
    assertStrictEquals(event.code, 4001);
    await backend.waitFor(() => backend.requests[0]?.wsClose !== undefined);
    assertEquals(backend.requests[0]?.wsClose, { code: 4001, reason: "client leaving" });
  });
});

Deno.test("websocket relay propagates the backend's close code and reason to the client", async () => {
  await withProxy(async (_backend, proxy) => {
    for (const [code, reason] of [[4002, "done"], [1001, "going away"], [1011, "oops"]] as const) {
      const client = connect(`ws://127.0.0.1:${proxy.port}/ws`);
      await client.opened;
      client.ws.send(`close:${code}:${reason}`);
      const event = await client.closed;
      assertEquals([event.code, event.reason], [code, reason]);
    }
  });
});

Deno.test("websocket relay reports a backend that vanishes without a close frame as 1011", async () => {
  await withProxy(async (_backend, proxy) => {
    const client = connect(`ws://127.0.0.1:${proxy.port}/ws`);
    await client.opened;
    client.ws.send("drop");
    assertStrictEquals((await client.closed).code, 1011);
  });
});

Deno.test("websocket relay joins a fragmented backend message and relays a large one", async () => {
  await withProxy(async (_backend, proxy) => {
    const client = connect(`ws://127.0.0.1:${proxy.port}/ws`);
    await client.opened;
    client.ws.send("fragments:4");
    assertStrictEquals(await client.next(), "part0;part1;part2;part3;");
    client.ws.send("big:3000000");
    assertEquals(new Uint8Array(await client.next() as ArrayBuffer), patternBytes(0, 3_000_000));
    client.ws.close();
    await client.closed;
  });
});

Deno.test("websocket relay closes both sides after the idle timeout, not before", async () => {
  await withProxy(async (backend, proxy) => {
    const client = connect(`ws://127.0.0.1:${proxy.port}/ws`);
    await client.opened;
    // Traffic keeps it open past the timeout...
    for (let i = 0; i < 4; i++) {
      client.ws.send(`tick ${i}`);
      assertStrictEquals(await client.next(), `tick ${i}`);
      await new Promise((resolve) => setTimeout(resolve, 150));
    }
    // ...silence closes it.
    const event = await client.closed;
    assertStrictEquals(event.code, 1001);
    await backend.waitFor(() => backend.requests[0]?.wsClose !== undefined);
    assertStrictEquals(backend.requests[0]?.wsClose?.code, 1001);
  }, { webSocketIdleTimeoutMs: 400 });
});

Deno.test("websocket relay counts +1 when it starts and -1 once when the client closes", async () => {
  const deltas: number[] = [];
  await withProxy(async (_backend, proxy) => {
    const client = connect(`ws://127.0.0.1:${proxy.port}/ws`);
    await client.opened;
    client.ws.send("ping");
    assertStrictEquals(await client.next(), "ping");
    assertEquals(deltas, [1]);
    client.ws.close(1000);
    await client.closed;
    await waitFor("the relay to end", () => deltas.length === 2);
    assertEquals(deltas, [1, -1]);
  }, { onWebSocket: (delta) => deltas.push(delta) });
  // Nothing more after the proxy and its connections are gone.
  assertEquals(deltas, [1, -1]);
});

Deno.test("websocket relay counts -1 once when the backend drops the connection", async () => {
  const deltas: number[] = [];
  await withProxy(async (_backend, proxy) => {
    const client = connect(`ws://127.0.0.1:${proxy.port}/ws`);
    await client.opened;
    client.ws.send("drop");
    assertStrictEquals((await client.closed).code, 1011);
    await waitFor("the relay to end", () => deltas.length === 2);
    assertEquals(deltas, [1, -1]);
  }, { onWebSocket: (delta) => deltas.push(delta) });
  assertEquals(deltas, [1, -1]);
});

Deno.test("closeWebSockets() closes the client with 1001 and sends the backend a close frame", async () => {
  const deltas: number[] = [];
  await withProxy(async (backend, proxy) => {
    const clients = [
      connect(`ws://127.0.0.1:${proxy.port}/ws`),
      connect(`ws://127.0.0.1:${proxy.port}/ws`),
    ];
    for (const client of clients) {
      await client.opened;
      client.ws.send("ready");
      assertStrictEquals(await client.next(), "ready");
    }
    await within(5_000, "closeWebSockets()", proxy.handler.closeWebSockets());
    // Every relay has ended when it resolves.
    assertEquals(deltas, [1, 1, -1, -1]);
    for (const client of clients) {
      const event = await within(5_000, "the client's close event", client.closed);
      assertEquals([event.code, event.reason], [1001, "Going away"]);
    }
    await backend.waitFor(() => backend.requests.every((r) => r.wsClose !== undefined));
    assertEquals(
      backend.requests.map((r) => r.wsClose),
      [{ code: 1001, reason: "Going away" }, { code: 1001, reason: "Going away" }],
    );
  }, { onWebSocket: (delta) => deltas.push(delta) });
});

Deno.test("closeWebSockets() also closes a relay that starts afterwards", async () => {
  await withProxy(async (backend, proxy) => {
    await proxy.handler.closeWebSockets(4000, "Draining");
    const client = connect(`ws://127.0.0.1:${proxy.port}/ws`);
    await client.opened;
    const event = await within(5_000, "the client's close event", client.closed);
    assertEquals([event.code, event.reason], [4000, "Draining"]);
    await backend.waitFor(() => backend.requests[0]?.wsClose !== undefined);
    assertEquals(backend.requests[0]?.wsClose, { code: 4000, reason: "Draining" });
  });
});

Deno.test("relayWebSocket() refuses a 101 field Deno would refuse before upgrading, so the server keeps serving", async () => {
  // Deno 2.9.6 closes the whole server when a handler that called Deno.upgradeWebSocket
  // answers anything but its 101; every failure must come before the upgrade.
  const key = "dGhlIHNhbXBsZSBub25jZQ==";
  const accept = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";
  const backendSide = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const errors: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    if (req.headers.get("upgrade") !== "websocket") return new Response("still serving");
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: backendSide.addr.port });
    const peer = await backendSide.accept();
    peer.close();
    try {
      return relayWebSocket(req, {
        status: 101,
        statusText: "Switching Protocols",
        headers: [
          ["Upgrade", "websocket"],
          ["Connection", "Upgrade"],
          ["Sec-WebSocket-Accept", accept],
          // Never from a real backend (the response parser refuses it), but any field Deno
          // refuses must fail the same way.
          ["X Bad", "1"],
        ],
        connectionTokens: ["upgrade"],
        body: null,
        done: Promise.resolve({ bytes: 0, complete: true }),
        tunnel: { conn, initial: new Uint8Array(0) },
      }, { idleTimeoutMs: 5_000, maxMessageBytes: 1024 }).response;
    } catch (error) {
      errors.push(String(error));
      conn.close();
      return new Response("bad gateway", { status: 502 });
    }
  });
  try {
    using conn = await RawConnection.open(server.addr.port);
    await conn.send(
      "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
        `Sec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
    );
    assertStrictEquals((await conn.readResponse()).status, 502);
    assertStrictEquals(errors.length, 1);
    assert(errors[0]!.includes("X Bad"), errors[0]!);
    const after = await within(
      5_000,
      "a request after the refused upgrade",
      fetch(
        `http://127.0.0.1:${server.addr.port}/`,
      ),
    );
    assertStrictEquals(await after.text(), "still serving");
  } finally {
    backendSide.close();
    await server.shutdown();
  }
});
