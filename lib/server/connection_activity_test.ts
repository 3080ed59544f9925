import { assertEquals, assertNotEquals } from "../../tests/support/assert.ts";
import { ConnectionActivity } from "./connection_activity.ts";

// The listeners know a client by Deno's text, the reaper by the socket's bytes (an IPv4 client of
// a dual-stack socket comes as 4 bytes, see native_socket.ts): both must land in one slot.
const SAME_CLIENT: readonly [text: string, bytes: number[]][] = [
  ["10.1.2.3", [10, 1, 2, 3]],
  ["::ffff:10.1.2.3", [10, 1, 2, 3]],
  ["127.0.0.1", [127, 0, 0, 1]],
  ["0.0.0.0", [0, 0, 0, 0]],
  ["255.255.255.255", [255, 255, 255, 255]],
  ["::1", [...new Array(15).fill(0), 1]],
  ["2001:db8::7", [0x20, 0x01, 0x0d, 0xb8, ...new Array(11).fill(0), 7]],
  ["fe80::1:2", [0xfe, 0x80, ...new Array(10).fill(0), 0, 1, 0, 2]],
];

Deno.test("a client's slot is the same from Deno's text and from the socket's address bytes", () => {
  const activity = new ConnectionActivity();
  for (const [text, bytes] of SAME_CLIENT) {
    for (const port of [1, 40_000, 65_535]) {
      const slot = activity.begin({ hostname: text, port });
      assertEquals(activity.slotOf(Uint8Array.from(bytes), port), slot, `${text}:${port}`);
      assertEquals(activity.inFlight(slot), 1, text);
      activity.end(slot);
      assertEquals(activity.inFlight(slot), 0, text);
    }
  }
});

Deno.test("requests are counted per client: in flight until each ends, begun for good", () => {
  const activity = new ConnectionActivity();
  const a = { hostname: "10.0.0.1", port: 5000 };
  const slot = activity.begin(a);
  activity.begin(a);
  assertEquals([activity.inFlight(slot), activity.seen(slot)], [2, 2]);
  activity.end(slot);
  activity.end(slot);
  assertEquals([activity.inFlight(slot), activity.seen(slot), activity.totalInFlight()], [0, 2, 0]);
  // Another address on the same port, or the same address on another port, is another client.
  assertNotEquals(activity.slotOf(Uint8Array.from([10, 0, 0, 2]), 5000), slot);
  assertNotEquals(activity.slotOf(Uint8Array.from([10, 0, 0, 1]), 5001), slot);
});

Deno.test("counters written through one wrapper are read through another over the same memory", () => {
  const activity = new ConnectionActivity();
  const other = new ConnectionActivity(activity.buffer);
  const slot = activity.begin({ hostname: "192.0.2.9", port: 1234 });
  assertEquals(other.inFlight(slot), 1);
  other.end(slot);
  assertEquals(activity.totalInFlight(), 0);
});
