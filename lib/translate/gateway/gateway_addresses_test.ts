import { assertEquals } from "../../../tests/support/assert.ts";
import { assignGatewayAddresses, heldAddresses } from "./gateway_addresses.ts";

const POOL = ["127.0.1.1", "127.0.1.2", "127.0.1.3"];

Deno.test("assignGatewayAddresses() gives each Gateway its own address, by age then key", () => {
  const cases: {
    name: string;
    gateways: { key: string; created: string; held: string[] }[];
    pool?: string[];
    expected: Record<string, string>;
  }[] = [
    {
      name: "first free address in pool order, oldest first",
      gateways: [
        { key: "b/new", created: "2026-12-02T10:00:00Z", held: [] },
        { key: "a/old", created: "2026-12-01T10:00:00Z", held: [] },
      ],
      expected: { "a/old": "127.0.1.1", "b/new": "127.0.1.2" },
    },
    {
      name: "same age: by key",
      gateways: [
        { key: "ns/b", created: "2026-12-01T10:00:00Z", held: [] },
        { key: "ns/a", created: "2026-12-01T10:00:00Z", held: [] },
      ],
      expected: { "ns/a": "127.0.1.1", "ns/b": "127.0.1.2" },
    },
    {
      name: "an address shown in status is kept, even by a younger Gateway",
      gateways: [
        { key: "ns/old", created: "2026-12-01T10:00:00Z", held: [] },
        { key: "ns/young", created: "2026-12-02T10:00:00Z", held: ["127.0.1.1"] },
      ],
      expected: { "ns/young": "127.0.1.1", "ns/old": "127.0.1.2" },
    },
    {
      name: "two Gateways showing one address: the older keeps it",
      gateways: [
        { key: "ns/young", created: "2026-12-02T10:00:00Z", held: ["127.0.1.2"] },
        { key: "ns/old", created: "2026-12-01T10:00:00Z", held: ["127.0.1.2"] },
      ],
      expected: { "ns/old": "127.0.1.2", "ns/young": "127.0.1.1" },
    },
    {
      name: "an address outside the pool (the published one) is not kept",
      gateways: [{ key: "ns/a", created: "", held: ["192.0.2.1", "127.0.1.3"] }],
      expected: { "ns/a": "127.0.1.3" },
    },
    {
      name: "pool exhausted: the youngest go without",
      gateways: [
        { key: "ns/a", created: "2026-12-01T10:00:00Z", held: [] },
        { key: "ns/b", created: "2026-12-02T10:00:00Z", held: [] },
        { key: "ns/c", created: "2026-12-03T10:00:00Z", held: [] },
      ],
      pool: ["127.0.1.1", "127.0.1.2"],
      expected: { "ns/a": "127.0.1.1", "ns/b": "127.0.1.2" },
    },
    {
      name: "no pool: nobody gets one",
      gateways: [{ key: "ns/a", created: "", held: ["127.0.1.1"] }],
      pool: [],
      expected: {},
    },
  ];
  for (const c of cases) {
    assertEquals(
      Object.fromEntries(assignGatewayAddresses(c.gateways, c.pool ?? POOL)),
      c.expected,
      c.name,
    );
  }
});

Deno.test("assignGatewayAddresses() does not depend on input order", () => {
  const gateways = Array.from({ length: 5 }, (_, i) => ({
    key: `ns/g${i}`,
    created: `2026-12-0${(i * 3) % 5 + 1}T00:00:00Z`,
    held: i === 4 ? ["127.0.1.3"] : [],
  }));
  const forward = Object.fromEntries(assignGatewayAddresses(gateways, POOL));
  const backward = Object.fromEntries(assignGatewayAddresses([...gateways].reverse(), POOL));
  assertEquals(forward, backward);
  assertEquals(Object.keys(forward).length, 3);
});

Deno.test("heldAddresses() reads status.addresses values and skips anything else", () => {
  assertEquals(heldAddresses(undefined), []);
  assertEquals(heldAddresses({ addresses: "127.0.1.1" }), []);
  assertEquals(
    heldAddresses({
      addresses: [{ type: "IPAddress", value: "127.0.1.1" }, null, { value: 7 }, {
        value: "gw.example",
      }],
    }),
    ["127.0.1.1", "gw.example"],
  );
});
