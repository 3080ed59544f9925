/**
 * Hostile WebSocket backends behind the real proxy: a raw `Deno.listen`
 * backend answers the upgrade with a hand-written 101 and then writes exact
 * frame bytes; a real client (`WebSocket`, or raw bytes where the status
 * matters) checks what reaches it. Each test also checks that the relay ends
 * (the `onWebSocket` count returns to zero) and that the proxy closes the
 * backend socket. A comment starting "Was a bug" marks a test pinning a fix.
 *
 * @module
 */
import { assert, assertBetween, assertEquals } from "../../tests/support/assert.ts";
import { concatBytes, latin1Bytes, RawConnection } from "../../tests/support/raw_http.ts";
import { waitFor, within } from "../../tests/support/wait.ts";
import {
  closeCodeOf,
  connectClient,
  SAMPLE_KEY,
  withWsWorld,
  type WsBackendConn,
  wsFrame,
} from "../../tests/support/websocket_world.ts";
import {
  encodeClosePayload,
  encodeFrame,
  OP_BINARY,
  OP_CLOSE,
  OP_CONTINUATION,
  OP_PING,
  OP_PONG,
  OP_TEXT,
  type WsFrame,
} from "./ws_frame.ts";

const KEY = SAMPLE_KEY;
const text = (s: string) => new TextEncoder().encode(s);
/** A frame as a server sends it (unmasked). */
const frame = (opcode: number, payload: Uint8Array | string, fin = true) =>
  wsFrame(opcode, payload, { fin });
const join = (...parts: Uint8Array[]) => concatBytes(parts);
/** The case name a client put in its target (`/ws?case=NAME`). */
const caseOf = (conn: WsBackendConn) =>
  decodeURIComponent(/[?&]case=([^ &]*)/.exec(conn.head)?.[1] ?? "");

function upgradeHead(target: string, extra: readonly string[] = []): string {
  return [
    `GET ${target} HTTP/1.1`,
    "Host: chat.example",
    "Upgrade: websocket",
    "Connection: Upgrade",
    `Sec-WebSocket-Key: ${KEY}`,
    "Sec-WebSocket-Version: 13",
    ...extra,
  ].join("\r\n") + "\r\n\r\n";
}

/** Status and fields of the proxy's answer to a raw upgrade request. */
async function rawUpgrade(port: number, target: string, extra: readonly string[] = []) {
  const conn = await RawConnection.open(port);
  try {
    await conn.send(upgradeHead(target, extra));
    const head = await conn.readResponse({ head: true, timeoutMs: 10_000 });
    return { status: head.status, headers: head.headers };
  } finally {
    conn.close();
  }
}

/** The close frames a backend connection received, as codes. */
const closeCodes = (frames: readonly WsFrame[]) =>
  frames.map(closeCodeOf).filter((code) => code !== undefined);

// --- The handshake. ---

Deno.test("a 101 choosing a subprotocol the client did not offer gets 502 and the backend socket is closed", async () => {
  const cases: [string, string[], string][] = [
    ["none-offered", [], "evil"],
    ["other", ["Sec-WebSocket-Protocol: chat.v1"], "chat.v2"],
    ["list", ["Sec-WebSocket-Protocol: a, b"], "a, b"],
  ];
  await withWsWorld(async (conn) => {
    const chosen = cases.find(([name]) => name === caseOf(conn))?.[2] ?? "";
    await conn.accept({ fields: [`Sec-WebSocket-Protocol: ${chosen}`] });
  }, async ({ proxy, backend, deltas }) => {
    for (const [index, [name, fields]] of cases.entries()) {
      const answer = await rawUpgrade(proxy.port, `/ws?case=${name}`, fields);
      assertEquals(answer.status, 502, name);
      await backend.closedByProxy(index);
    }
    assertEquals(deltas, []);
  });
});

// Was a bug: the backend's Sec-WebSocket-Accept and Upgrade were never checked, and Deno answered
// the client with an accept of its own (RFC 6455 section 4.1 says fail).
Deno.test({
  name: "a 101 without a valid Sec-WebSocket-Accept or Upgrade: websocket gets 502",
  fn: async () => {
    const cases: Record<string, string[]> = {
      "missing-accept": [
        "HTTP/1.1 101 Switching Protocols",
        "Upgrade: websocket",
        "Connection: Upgrade",
      ],
      "wrong-accept": [
        "HTTP/1.1 101 Switching Protocols",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=",
      ],
      "no-upgrade": ["HTTP/1.1 101 Switching Protocols", "Connection: Upgrade", "ACCEPT"],
      "upgrade-h2c": [
        "HTTP/1.1 101 Switching Protocols",
        "Upgrade: h2c",
        "Connection: Upgrade",
        "ACCEPT",
      ],
    };
    await withWsWorld(async (conn) => {
      const lines = cases[caseOf(conn)] ?? [];
      const accept = "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="; // right for KEY
      await conn.write(lines.map((l) => l === "ACCEPT" ? accept : l).join("\r\n") + "\r\n\r\n");
    }, async ({ proxy, backend }) => {
      for (const [index, name] of Object.keys(cases).entries()) {
        const answer = await rawUpgrade(proxy.port, `/ws?case=${name}`);
        // Today: 101, with a Sec-WebSocket-Accept Deno computed from the client's key, so the
        // client believes the backend accepted a WebSocket it never did.
        assertEquals(answer.status, 502, name);
        await backend.closedByProxy(index);
      }
    });
  },
});

// Was a bug: a 101 naming an extension the proxy never offered was relayed (RFC 6455 section 4.1,
// step 5: fail); the first compressed frame then closed the client with 1011.
Deno.test({
  name: "a 101 with an extension the proxy never offered gets 502",
  fn: async () => {
    await withWsWorld(async (conn) => {
      await conn.accept({ fields: ["Sec-WebSocket-Extensions: permessage-deflate"] });
    }, async ({ proxy, backend }) => {
      const answer = await rawUpgrade(proxy.port, "/ws", [
        "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits",
      ]);
      // Today: 101 without the field, then 1011 on the first compressed (RSV1) frame.
      assertEquals(answer.status, 502);
      await backend.closedByProxy(0);
    });
  },
});

Deno.test("frames sent in the same packet as the 101 reach the client in order, then the close", async () => {
  await withWsWorld(async (conn) => {
    await conn.accept({
      after: join(
        frame(OP_TEXT, "first"),
        frame(OP_BINARY, Uint8Array.of(1, 2, 3)),
        frame(OP_CLOSE, encodeClosePayload(4000, "bye")),
      ),
    });
  }, async ({ url, backend, relaysEnded }) => {
    const client = connectClient(url);
    const event = await within(10_000, "the client's close", client.closed);
    assertEquals([event.code, event.reason], [4000, "bye"]);
    assertEquals(client.messages.length, 2);
    assertEquals(client.messages[0], "first");
    assertEquals([...new Uint8Array(client.messages[1] as ArrayBuffer)], [1, 2, 3]);
    const record = await backend.closedByProxy(0);
    assertEquals(closeCodes(record.frames), [4000]);
    await relaysEnded();
  });
});

// --- Protocol violations after the 101. ---

const OVER = 1024; // maxWebSocketMessageBytes in these tests

/** Name → [frames after a valid "ok" message, close code the backend must get]. */
const VIOLATIONS: Record<string, [Uint8Array, number | readonly number[]]> = {
  "masked frame": [encodeFrame(OP_TEXT, text("x"), { mask: true }), 1002],
  "RSV1": [rsv(0x40), 1002],
  "RSV2": [rsv(0x20), 1002],
  "RSV3": [rsv(0x10), 1002],
  "opcode 3": [frame(3, "x"), 1002],
  "opcode 7": [frame(7, "x"), 1002],
  "opcode 0xB": [frame(0xb, "x"), 1002],
  "opcode 0xF": [frame(0xf, "x"), 1002],
  "fragmented ping": [frame(OP_PING, "p", false), 1002],
  "126-byte ping": [frame(OP_PING, new Uint8Array(126)), 1002],
  "126-byte close": [frame(OP_CLOSE, join(Uint8Array.of(3, 232), new Uint8Array(124))), 1002],
  "invalid UTF-8 text": [frame(OP_TEXT, Uint8Array.of(0x61, 0xff, 0x62)), 1007],
  "invalid UTF-8 across fragments": [
    join(frame(OP_TEXT, Uint8Array.of(0xe2, 0x82), false), frame(OP_CONTINUATION, "(")),
    1007,
  ],
  "text ending inside a code point": [frame(OP_TEXT, Uint8Array.of(0x61, 0xe2, 0x82)), 1007],
  "surrogate in UTF-8": [frame(OP_TEXT, Uint8Array.of(0xed, 0xa0, 0x80)), 1007],
  "continuation without a start": [frame(OP_CONTINUATION, "x"), 1002],
  "new message inside a fragmented one": [
    join(frame(OP_TEXT, "a", false), frame(OP_BINARY, "b")),
    1002,
  ],
  "declared length over the cap": [
    Uint8Array.of(0x82, 126, (OVER + 1) >> 8, (OVER + 1) & 0xff),
    1009,
  ],
  "fragments over the cap": [
    join(
      frame(OP_BINARY, new Uint8Array(500), false),
      frame(OP_CONTINUATION, new Uint8Array(500), false),
      frame(OP_CONTINUATION, new Uint8Array(500), false),
    ),
    1009,
  ],
  "2^63-byte length": [Uint8Array.of(0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0), [1002, 1009]],
  "2^64-1-byte length": [Uint8Array.of(0x82, 127, 255, 255, 255, 255, 255, 255, 255, 255), [
    1002,
    1009,
  ]],
  "1-byte close": [frame(OP_CLOSE, Uint8Array.of(3)), 1002],
  "close reason not UTF-8": [frame(OP_CLOSE, Uint8Array.of(3, 232, 0xc3, 0x28)), 1007],
};

function rsv(bit: number): Uint8Array {
  const bytes = frame(OP_TEXT, "x");
  bytes[0] = (bytes[0] as number) | bit;
  return bytes;
}

Deno.test("a backend's protocol violation ends the relay: the client gets 1011 after the valid messages, the backend the matching close code", async () => {
  const names = Object.keys(VIOLATIONS);
  await withWsWorld(async (conn) => {
    const [bytes] = VIOLATIONS[caseOf(conn)] ?? [new Uint8Array(0)];
    await conn.accept({ after: join(frame(OP_TEXT, "ok"), bytes) });
  }, async ({ url, backend, deltas }) => {
    for (const [index, name] of names.entries()) {
      const client = connectClient(`${url}?case=${encodeURIComponent(name)}`);
      const event = await within(10_000, `the client's close (${name})`, client.closed);
      assertEquals([event.code, client.messages], [1011, ["ok"]], name);
      const record = await backend.closedByProxy(index);
      const expected = VIOLATIONS[name]?.[1];
      const codes = closeCodes(record.frames);
      assertEquals(codes.length, 1, `${name}: close frames ${codes}`);
      assert(
        ([] as number[]).concat(expected ?? []).includes(codes[0] ?? 0),
        `${name}: backend got close ${codes[0]}, expected ${expected}`,
      );
      await waitFor(`relay ${index} to end`, () => deltas.length === 2 * (index + 1));
    }
  }, { maxWebSocketMessageBytes: OVER });
});

Deno.test("fragments joined across a split code point, with a ping between them, and a message at the cap are relayed whole", async () => {
  await withWsWorld(async (conn) => {
    await conn.accept({
      after: join(
        frame(OP_TEXT, Uint8Array.of(0x31, 0xe2), false),
        frame(OP_PING, "mid"),
        frame(OP_CONTINUATION, Uint8Array.of(0x82), false),
        frame(OP_CONTINUATION, Uint8Array.of(0xac, 0x32)),
        frame(OP_BINARY, new Uint8Array(OVER / 2).fill(7), false),
        frame(OP_CONTINUATION, new Uint8Array(OVER / 2).fill(7)),
        frame(OP_TEXT, ""),
      ),
    });
    const pong = await conn.nextFrame();
    assertEquals([pong?.opcode, new TextDecoder().decode(pong?.payload)], [OP_PONG, "mid"]);
    const close = await conn.nextFrame();
    assertEquals(close === null ? undefined : closeCodeOf(close), 1000);
    await conn.write(frame(OP_CLOSE, encodeClosePayload(1000, "")));
  }, async ({ url, backend, relaysEnded }) => {
    const client = connectClient(url);
    assertEquals(await client.next(), "1€2");
    const big = new Uint8Array(await client.next() as ArrayBuffer);
    assertEquals([big.length, big.every((b) => b === 7)], [OVER, true]);
    assertEquals(await client.next(), "");
    client.ws.close(1000, "thanks");
    assertEquals((await client.closed).code, 1000);
    const record = await backend.closedByProxy(0);
    assertEquals(closeCodes(record.frames), [1000]);
    await relaysEnded();
  }, { maxWebSocketMessageBytes: OVER });
});

// --- Close frames from the backend. ---

Deno.test("a backend close code no endpoint may send reaches the client as 1002", async () => {
  const codes = [999, 1004, 1006, 1015, 2999, 5000, 65535];
  await withWsWorld(async (conn) => {
    const code = Number(caseOf(conn));
    await conn.accept({ after: frame(OP_CLOSE, Uint8Array.of(code >> 8, code & 0xff)) });
  }, async ({ url, backend, deltas }) => {
    for (const [index, code] of codes.entries()) {
      const client = connectClient(`${url}?case=${code}`);
      const event = await within(10_000, `the client's close (${code})`, client.closed);
      assertEquals(event.code, 1002, `wire code ${code}`);
      await backend.closedByProxy(index);
      await waitFor(`relay ${index} to end`, () => deltas.length === 2 * (index + 1));
    }
  });
});

// Was a bug: an invalid close code was answered with an empty close (not 1002), and 1005 on the
// wire reached the client as 1005.
Deno.test({
  name: "a backend close code no endpoint may send is answered 1002 to the backend, 1005 included",
  fn: async () => {
    const codes = [1005, 999, 1006, 1015, 5000];
    await withWsWorld(async (conn) => {
      const code = Number(caseOf(conn));
      await conn.accept({ after: frame(OP_CLOSE, Uint8Array.of(code >> 8, code & 0xff)) });
    }, async ({ url, backend }) => {
      for (const [index, code] of codes.entries()) {
        const client = connectClient(`${url}?case=${code}`);
        const event = await within(10_000, `the client's close (${code})`, client.closed);
        // Today 1005 → the client sees 1005 (no code); others → 1002.
        assertEquals(event.code, 1002, `wire code ${code}`);
        const record = await backend.closedByProxy(index);
        // Today: an empty close frame (1005).
        assertEquals(closeCodes(record.frames), [1002], `wire code ${code}`);
      }
    });
  },
});

Deno.test("bytes a backend sends after its close frame never reach the client", async () => {
  await withWsWorld(async (conn) => {
    await conn.accept();
    await conn.write(join(
      frame(OP_CLOSE, encodeClosePayload(1000, "done")),
      frame(OP_TEXT, "late"),
      latin1Bytes("HTTP/1.1 200 OK\r\n\r\ngarbage"),
    ));
  }, async ({ url, backend, relaysEnded }) => {
    const client = connectClient(url);
    const event = await within(10_000, "the client's close", client.closed);
    assertEquals([event.code, event.reason, client.messages], [1000, "done", []]);
    const record = await backend.closedByProxy(0);
    assertEquals(closeCodes(record.frames), [1000]);
    await relaysEnded();
  });
});

// --- Backends that do not answer. ---

Deno.test("a backend that never answers the client's close is cut off after the grace period", async () => {
  let closeSeen = 0;
  await withWsWorld(async (conn) => {
    await conn.accept();
    const close = await conn.nextFrame();
    assertEquals(close === null ? undefined : closeCodeOf(close), 4001);
    closeSeen = performance.now();
    // Keeps talking, never closes: pings every 100 ms until the proxy hangs up.
    for (let i = 0; i < 100; i++) {
      try {
        await conn.write(frame(OP_PING, `${i}`));
      } catch {
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }, async ({ url, backend, relaysEnded }) => {
    const client = connectClient(url);
    await client.waitOpen();
    client.ws.close(4001, "leaving");
    assertEquals((await within(5_000, "the client's close", client.closed)).code, 4001);
    await relaysEnded(10_000);
    await backend.closedByProxy(0, 10_000);
    assertBetween(performance.now() - closeSeen, 4_000, 8_000, "ms from close to hang-up");
  });
});

Deno.test("closeWebSockets() ends a relay whose backend never answers within the grace period", async () => {
  await withWsWorld(async (conn) => {
    await conn.accept();
    await conn.nextFrame(); // the close; never answered
  }, async ({ url, proxy, backend, deltas }) => {
    const client = connectClient(url);
    await client.waitOpen();
    const started = performance.now();
    await within(8_000, "closeWebSockets()", proxy.handler.closeWebSockets(1001, "Going away"));
    assertBetween(performance.now() - started, 0, 8_000, "ms closeWebSockets() took");
    assertEquals(deltas, [1, -1]);
    assertEquals((await within(5_000, "the client's close", client.closed)).code, 1001);
    const record = await backend.closedByProxy(0);
    assertEquals(closeCodes(record.frames), [1001]);
  });
});

Deno.test("10,000 pings from a backend that is not reading are each answered once, in order, and the relay keeps working", async () => {
  const PINGS = 10_000;
  await withWsWorld(async (conn) => {
    await conn.accept();
    const flood = join(
      ...Array.from({ length: PINGS }, (_, i) => frame(OP_PING, `${i}`.padEnd(125, "."))),
    );
    await conn.write(join(flood, frame(OP_TEXT, "after flood")));
    // Only now read: every pong, then the client's message.
    let pongs = 0;
    for (;;) {
      const next = await conn.nextFrame();
      assert(next !== null, "the proxy closed before the client's message");
      if (next.opcode === OP_TEXT) break;
      assertEquals(next.opcode, OP_PONG);
      assertEquals(new TextDecoder().decode(next.payload), `${pongs}`.padEnd(125, "."));
      pongs++;
    }
    assertEquals(pongs, PINGS);
    await conn.write(frame(OP_CLOSE, encodeClosePayload(1000, "")));
  }, async ({ url, backend, relaysEnded }) => {
    const client = connectClient(url);
    assertEquals(await client.next(), "after flood");
    client.ws.send("sentinel");
    assertEquals((await within(10_000, "the client's close", client.closed)).code, 1000);
    const record = await backend.closedByProxy(0);
    assertEquals(record.error, undefined);
    await relaysEnded();
  });
});

// --- Backpressure towards a backend that stops reading. ---

const MIB = 1024 * 1024;

/** A 1 MiB message whose bytes all equal `index & 0xff`. */
const chunk = (index: number) => new Uint8Array(MIB).fill(index & 0xff);

Deno.test("50 MiB sent to a backend that is not reading arrive whole and in order once it reads", async () => {
  const COUNT = 50;
  let clientDone = false;
  await withWsWorld(async (conn) => {
    await conn.accept();
    await waitFor("the client to hand over its 50 MiB", () => clientDone, { timeoutMs: 30_000 });
    for (let i = 0; i < COUNT; i++) {
      const next = await conn.nextFrame(30_000);
      assertEquals([next?.opcode, next?.payload.length], [OP_BINARY, MIB], `message ${i}`);
      assert(next?.payload.every((b) => b === (i & 0xff)), `message ${i} content`);
    }
    await conn.write(frame(OP_TEXT, "all read"));
  }, async ({ url, backend, relaysEnded }) => {
    const client = connectClient(url);
    await client.waitOpen();
    for (let i = 0; i < COUNT; i++) client.ws.send(chunk(i));
    await waitFor("the client's send buffer to drain", () => client.ws.bufferedAmount === 0, {
      timeoutMs: 30_000,
    });
    clientDone = true;
    assertEquals(await client.next(30_000), "all read");
    client.ws.close(1000);
    assertEquals((await client.closed).code, 1000);
    await backend.closedByProxy(0);
    await relaysEnded();
  });
});

// Was a bug: over the 64 MiB queue cap the relay ended but the backend socket stayed open, its
// write pending, until the backend read everything.
Deno.test({
  name: "a backend that stops reading past the 64 MiB queue cap is disconnected at once",
  fn: async () => {
    const COUNT = 80;
    let clientClosed = false;
    let received = -1;
    await withWsWorld(async (conn) => {
      await conn.accept();
      await waitFor("the client to be closed", () => clientClosed, { timeoutMs: 30_000 });
      received = await conn.countToEnd(30_000);
    }, async ({ url, backend, relaysEnded }) => {
      const client = connectClient(url);
      await client.waitOpen();
      for (let i = 0; i < COUNT; i++) client.ws.send(chunk(i));
      const event = await within(30_000, "the client's close", client.closed);
      // Sluice closes with 1008 "Backend too slow", but the client (still sending) sees an
      // abnormal close (Deno 2.9.6 reports code 0): the close frame is lost to a reset.
      assert(!event.wasClean || event.code === 1008, `client close ${event.code}`);
      await relaysEnded();
      clientClosed = true;
      await backend.closedByProxy(0, 30_000);
      // Closed at once, only what the kernel buffers held arrives; today the whole 64 MiB queue does.
      assertBetween(received, 0, 32 * MIB, "bytes the backend read after the cap");
    });
  },
});
