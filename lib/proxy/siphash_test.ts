import { assertEquals, assertThrows } from "../../tests/support/assert.ts";
import { sipHash24, sipKey } from "./siphash.ts";

Deno.test("sipHash24() gives the reference vectors (key 00..0f, message 00..n-1)", () => {
  // From the SipHash reference implementation's vectors.h (64-bit output, as a number).
  const key = sipKey(Uint8Array.from({ length: 16 }, (_, i) => i));
  const cases: [number, string][] = [
    [0, "726fdb47dd0e0e31"],
    [1, "74f839c593dc67fd"],
    [8, "93f5f5799a932462"],
    [15, "a129ca6149be45e5"],
  ];
  for (const [length, expected] of cases) {
    const message = Uint8Array.from({ length }, (_, i) => i);
    assertEquals(sipHash24(key, message), expected, `${length} bytes`);
  }
});

Deno.test("sipHash24() depends on every byte of key and message", () => {
  const key = sipKey(new Uint8Array(16));
  const message = new TextEncoder().encode("5:alice6:secret{SHA}x");
  const base = sipHash24(key, message);
  for (let i = 0; i < message.length; i++) {
    const changed = message.slice();
    changed[i]! ^= 1;
    assertEquals(sipHash24(key, changed) === base, false, `message byte ${i}`);
  }
  for (let i = 0; i < 16; i++) {
    const bytes = new Uint8Array(16);
    bytes[i] = 1;
    assertEquals(sipHash24(sipKey(bytes), message) === base, false, `key byte ${i}`);
  }
  assertThrows(() => sipKey(new Uint8Array(8)));
});
