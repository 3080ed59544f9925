import { assert, assertEquals, assertThrows } from "../../tests/support/assert.ts";
import {
  decodeClosePayload,
  encodeClosePayload,
  encodeFrame,
  FrameDecoder,
  isSendableCloseCode,
  MessageAssembler,
  OP_BINARY,
  OP_CLOSE,
  OP_CONTINUATION,
  OP_PING,
  OP_TEXT,
  WsProtocolError,
} from "./ws_frame.ts";

Deno.test("encodeFrame() and FrameDecoder round-trip every length class, masked and not", () => {
  for (const mask of [true, false]) {
    for (const length of [0, 1, 125, 126, 65535, 65536, 200_000]) {
      const payload = Uint8Array.from({ length }, (_, i) => i & 0xff);
      const frame = encodeFrame(OP_BINARY, payload, { mask });
      const decoder = new FrameDecoder({ maxPayload: 1 << 20, expectMasked: mask });
      // Feed in awkward pieces.
      for (let i = 0; i < frame.length; i += 7_001) decoder.push(frame.subarray(i, i + 7_001));
      const got = decoder.next();
      assertEquals(got?.opcode, OP_BINARY);
      assertEquals(got?.fin, true);
      assertEquals(got?.payload, payload, `length ${length} mask ${mask}`);
      assertEquals(decoder.next(), undefined);
    }
  }
});

Deno.test("FrameDecoder holds a large frame in its declared size, not twice, and hands it over", () => {
  // Was a bug: the buffer doubled as bytes arrived, so one declared 64 MiB frame held about
  // 128 MiB, and the payload was then copied out of it.
  for (const mask of [true, false]) {
    const length = 1 << 20;
    const payload = Uint8Array.from({ length }, (_, i) => (i * 7) & 0xff);
    const frame = encodeFrame(OP_BINARY, payload, { mask });
    const next = encodeFrame(OP_TEXT, Uint8Array.of(104, 105), { mask });
    const decoder = new FrameDecoder({ maxPayload: length, expectMasked: mask });
    let peak = 0;
    const stream = new Uint8Array(frame.length + next.length);
    stream.set(frame, 0);
    stream.set(next, frame.length);
    for (let i = 0; i < stream.length; i += 4_096) {
      decoder.push(stream.subarray(i, i + 4_096));
      peak = Math.max(peak, decoder.capacity);
    }
    assert(peak <= frame.length + 4_096, `peak ${peak} for a frame of ${frame.length} bytes`);
    assertEquals(decoder.next()?.payload, payload);
    assert(decoder.capacity <= 16 * 1024, `capacity ${decoder.capacity} after the handover`);
    assertEquals(decoder.next()?.payload, Uint8Array.of(104, 105));
    assertEquals(decoder.next(), undefined);
  }
});

Deno.test("FrameDecoder refuses wrong masking, RSV bits, bad opcodes, long control frames, oversize", () => {
  const cases: [Uint8Array, boolean, number][] = [
    [encodeFrame(OP_TEXT, new Uint8Array(1), { mask: false }), true, 1002],
    [encodeFrame(OP_TEXT, new Uint8Array(1), { mask: true }), false, 1002],
    [Uint8Array.of(0xc1, 0x00), false, 1002],
    [Uint8Array.of(0x83, 0x00), false, 1002],
    [encodeFrame(OP_PING, new Uint8Array(126), { mask: false }), false, 1002],
    [encodeFrame(OP_PING, new Uint8Array(1), { mask: false, fin: false }), false, 1002],
    [encodeFrame(OP_BINARY, new Uint8Array(2000), { mask: false }), false, 1009],
  ];
  for (const [bytes, expectMasked, code] of cases) {
    const decoder = new FrameDecoder({ maxPayload: 1000, expectMasked });
    decoder.push(bytes);
    assertEquals(assertThrows(() => decoder.next(), WsProtocolError).code, code);
  }
});

Deno.test("MessageAssembler joins fragments and refuses interleaved or oversized messages", () => {
  const assembler = new MessageAssembler(10);
  const te = new TextEncoder();
  assertEquals(assembler.add({ fin: false, opcode: OP_TEXT, payload: te.encode("ab") }), undefined);
  assertEquals(assembler.add({ fin: true, opcode: OP_CONTINUATION, payload: te.encode("cd") }), {
    opcode: OP_TEXT,
    data: te.encode("abcd"),
  });
  assertThrows(
    () => assembler.add({ fin: true, opcode: OP_CONTINUATION, payload: te.encode("x") }),
    WsProtocolError,
  );
  const fresh = new MessageAssembler(10);
  fresh.add({ fin: false, opcode: OP_BINARY, payload: new Uint8Array(5) });
  assertThrows(
    () => fresh.add({ fin: true, opcode: OP_TEXT, payload: new Uint8Array(1) }),
    WsProtocolError,
  );
  const small = new MessageAssembler(10);
  small.add({ fin: false, opcode: OP_BINARY, payload: new Uint8Array(6) });
  const tooLarge = assertThrows(
    () => small.add({ fin: true, opcode: OP_CONTINUATION, payload: new Uint8Array(6) }),
    WsProtocolError,
  );
  assertEquals(tooLarge.code, 1009);
});

Deno.test("close payloads carry code and reason; empty means 1005", () => {
  assertEquals(decodeClosePayload(encodeClosePayload(4001, "bye")), { code: 4001, reason: "bye" });
  assertEquals(decodeClosePayload(encodeClosePayload()), { code: 1005, reason: "" });
  assertThrows(() => decodeClosePayload(Uint8Array.of(3)), WsProtocolError);
  assertEquals(encodeFrame(OP_CLOSE, encodeClosePayload(1000), { mask: false }).length, 4);
});

Deno.test("isSendableCloseCode() excludes reserved codes", () => {
  assertEquals([1000, 1001, 1011, 1014, 3000, 4999].every(isSendableCloseCode), true);
  assertEquals([999, 1004, 1005, 1006, 1015, 2999, 5000].some(isSendableCloseCode), false);
});
