import { assert, assertEquals } from "../../tests/support/assert.ts";
import { ClientLimits, type RateZone, zoneId } from "./client_limits.ts";

function clock(start = 1_700_000_000_000) {
  let now = start;
  return { now: () => now, advance: (ms: number) => now += ms };
}

/** How many of `count` requests at the current instant `limits` admits. */
function admitted(limits: ClientLimits, zone: RateZone, address: string, count: number): number {
  let n = 0;
  for (let i = 0; i < count; i++) if (limits.admit(zone, address)) n++;
  return n;
}

Deno.test("admit() lets a burst through at once, as nginx limit_req with nodelay, then the rate", () => {
  const cases: {
    name: string;
    perSecond: number;
    burst: number;
    first: number;
    afterMs: number;
    then: number;
  }[] = [
    // nginx: the first request leaves the bucket empty, each next adds one, up to the burst.
    {
      name: "limit-rps 10, multiplier 5",
      perSecond: 10,
      burst: 50,
      first: 51,
      afterMs: 100,
      then: 1,
    },
    { name: "limit-rps 1, burst 0", perSecond: 1, burst: 0, first: 1, afterMs: 1_000, then: 1 },
    {
      name: "limit-rps 1, half a second is not enough",
      perSecond: 1,
      burst: 0,
      first: 1,
      afterMs: 500,
      then: 0,
    },
    {
      name: "limit-rpm 60 (1/s), burst 5",
      perSecond: 1,
      burst: 5,
      first: 6,
      afterMs: 3_000,
      then: 3,
    },
    {
      name: "limit-rps 100, drained fully after a second",
      perSecond: 100,
      burst: 10,
      first: 11,
      afterMs: 1_000,
      then: 11,
    },
  ];
  for (const c of cases) {
    const time = clock();
    const limits = new ClientLimits({ slotBits: 8, now: time.now });
    const zone = { id: zoneId(`ns/web ${c.name}`), perSecond: c.perSecond, burst: c.burst };
    assertEquals(admitted(limits, zone, "192.0.2.1", c.first + 5), c.first, `${c.name}: first`);
    time.advance(c.afterMs);
    assertEquals(admitted(limits, zone, "192.0.2.1", c.then + 5), c.then, `${c.name}: then`);
  }
});

Deno.test("admit() counts each client and each zone apart", () => {
  const time = clock();
  const limits = new ClientLimits({ slotBits: 8, now: time.now });
  const a = { id: zoneId("ns/a rps"), perSecond: 1, burst: 1 };
  const b = { id: zoneId("ns/b rps"), perSecond: 1, burst: 1 };
  assertEquals(admitted(limits, a, "192.0.2.1", 5), 2);
  assertEquals(admitted(limits, a, "192.0.2.2", 5), 2);
  assertEquals(admitted(limits, b, "192.0.2.1", 5), 2);
  assertEquals(admitted(limits, a, "2001:db8::1", 5), 2);
});

Deno.test("a refused request does not fill the bucket further", () => {
  const time = clock();
  const limits = new ClientLimits({ slotBits: 8, now: time.now });
  const zone = { id: zoneId("ns/web rps"), perSecond: 1, burst: 0 };
  assert(limits.admit(zone, "192.0.2.1"));
  assertEquals(admitted(limits, zone, "192.0.2.1", 1_000), 0);
  time.advance(1_000);
  assert(limits.admit(zone, "192.0.2.1"), "one second later, one more");
});

Deno.test("enter() and leave() bound the requests in flight per client", () => {
  const limits = new ClientLimits({ slotBits: 8 });
  const zone = zoneId("ns/web conn");
  const first = limits.enter(zone, "192.0.2.1", 2);
  assert(first !== undefined);
  assert(limits.enter(zone, "192.0.2.1", 2) !== undefined);
  assertEquals(limits.enter(zone, "192.0.2.1", 2), undefined, "a third at once is refused");
  assert(limits.enter(zone, "192.0.2.2", 2) !== undefined, "another client is not");
  limits.leave(first);
  assert(limits.enter(zone, "192.0.2.1", 2) !== undefined, "one left, one more may enter");
});

Deno.test("a flood of distinct addresses keeps memory fixed and never evicts a client with requests in flight", () => {
  const time = clock();
  const limits = new ClientLimits({ slotBits: 10, now: time.now });
  const zone = { id: zoneId("ns/web rps"), perSecond: 1, burst: 0 };
  const bytes = limits.buffer.byteLength;
  // A client at its limit, then 100,000 one-off addresses in the same second.
  assert(limits.admit(zone, "198.51.100.7"));
  for (let i = 0; i < 100_000; i++) {
    limits.admit(zone, `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
  }
  assertEquals(limits.buffer.byteLength, bytes);
  assertEquals(limits.slots, 1024);
  // A client in flight is never evicted.
  const conn = zoneId("ns/web conn");
  assert(limits.enter(conn, "198.51.100.8", 1) !== undefined);
  for (let i = 0; i < 50_000; i++) limits.admit(zone, `172.16.${(i >> 8) & 255}.${i & 255}`);
  assertEquals(
    limits.enter(conn, "198.51.100.8", 1),
    undefined,
    "still counted in flight after the flood",
  );
});

Deno.test("two threads share one table through its buffer", async () => {
  const limits = new ClientLimits({ slotBits: 8 });
  const zone = { id: zoneId("ns/web rps"), perSecond: 0.001, burst: 99 };
  const source = `
    import { ClientLimits } from "${new URL("./client_limits.ts", import.meta.url).href}";
    self.onmessage = (e) => {
      const limits = new ClientLimits({ buffer: e.data.buffer });
      let n = 0;
      for (let i = 0; i < 100; i++) if (limits.admit(e.data.zone, "192.0.2.1")) n++;
      self.postMessage(n);
    };`;
  const url = URL.createObjectURL(new Blob([source], { type: "application/javascript" }));
  const worker = new Worker(url, { type: "module" });
  try {
    const theirs = new Promise<number>((resolve) => worker.onmessage = (e) => resolve(e.data));
    worker.postMessage({ buffer: limits.buffer, zone });
    let ours = 0;
    for (let i = 0; i < 100; i++) if (limits.admit(zone, "192.0.2.1")) ours++;
    // The burst (99) plus the first request, split between the threads however they raced.
    assertEquals(ours + await theirs, 100);
  } finally {
    worker.terminate();
    URL.revokeObjectURL(url);
  }
});

Deno.test("a client is never counted in another's slot: with its window full of requests in flight it is refused, and nothing leaks", () => {
  // 8 slots: one window. Eight clients with a request in flight fill it.
  const limits = new ClientLimits({ slotBits: 3 });
  const zone = zoneId("ns/web conn");
  const tickets = Array.from({ length: 8 }, (_, i) => limits.enter(zone, `10.0.0.${i}`, 1));
  assert(tickets.every((t) => t !== undefined));
  assertEquals(limits.enter(zone, "10.0.1.1", 1), undefined, "the ninth is refused");
  for (const ticket of tickets) limits.leave(ticket!);
  // Every slot is free again: each client may enter once more, and the newcomer too.
  for (let i = 0; i < 8; i++) {
    const again = limits.enter(zone, `10.0.0.${i}`, 1);
    assert(again !== undefined, `10.0.0.${i}`);
    limits.leave(again);
  }
  assert(limits.enter(zone, "10.0.1.1", 1) !== undefined);
});
