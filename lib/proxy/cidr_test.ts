import { assertEquals, assertThrows } from "../../tests/support/assert.ts";
import { createCidrMatcher, normalizeIp, parseIp } from "./cidr.ts";

Deno.test("parseIp() reads IPv4, IPv6 and IPv4-mapped IPv6, and rejects junk", () => {
  const cases: [string, number[] | undefined][] = [
    ["10.1.2.3", [10, 1, 2, 3]],
    ["0.0.0.0", [0, 0, 0, 0]],
    ["255.255.255.255", [255, 255, 255, 255]],
    ["::ffff:192.168.0.1", [192, 168, 0, 1]],
    ["::FFFF:c0a8:1", [192, 168, 0, 1]],
    ["::1", [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]],
    ["::", new Array(16).fill(0)],
    ["fd00::", [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]],
    ["2001:db8::1:0:0:1", [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1]],
    ["1:2:3:4:5:6:7:8", [0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7, 0, 8]],
    ["64:ff9b::1.2.3.4", [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]],
    ["256.1.1.1", undefined],
    ["01.1.1.1", undefined],
    ["1.1.1", undefined],
    ["1.1.1.1.1", undefined],
    ["1:2:3:4:5:6:7:8:9", undefined],
    ["1::2::3", undefined],
    ["12345::", undefined],
    ["fe80::1%eth0", undefined],
    ["", undefined],
    ["example.com", undefined],
    ["1:2:3:4:5:6:7::8", undefined],
  ];
  for (const [text, want] of cases) {
    const got = parseIp(text);
    assertEquals(got === undefined ? undefined : [...got], want, text);
  }
});

Deno.test("createCidrMatcher() matches v4 and v6 prefixes at bit granularity", () => {
  const m = createCidrMatcher([
    "10.0.0.0/8",
    "192.168.1.128/25",
    "fd00::/8",
    "2001:db8::5",
    "0.0.0.0/32",
  ]);
  const cases: [string, boolean][] = [
    ["10.255.1.1", true],
    ["11.0.0.1", false],
    ["192.168.1.128", true],
    ["192.168.1.255", true],
    ["192.168.1.127", false],
    ["::ffff:10.1.1.1", true],
    ["fd12::1", true],
    ["fe00::1", false],
    ["2001:db8::5", true],
    ["2001:db8::6", false],
    ["0.0.0.0", true],
    ["0.0.0.1", false],
    ["not an ip", false],
  ];
  for (const [address, want] of cases) assertEquals(m.contains(address), want, address);
});

Deno.test("createCidrMatcher() with /0 matches every address of that family only", () => {
  const v4 = createCidrMatcher(["0.0.0.0/0"]);
  assertEquals(v4.contains("203.0.113.9"), true);
  assertEquals(v4.contains("::1"), false);
  const v6 = createCidrMatcher(["::/0"]);
  assertEquals(v6.contains("::1"), true);
  assertEquals(v6.contains("203.0.113.9"), false);
});

Deno.test("createCidrMatcher() treats a mapped range like its IPv4 range", () => {
  const m = createCidrMatcher(["::ffff:10.0.0.0/104"]);
  assertEquals(m.contains("10.9.9.9"), true);
  assertEquals(m.contains("11.0.0.0"), false);
});

Deno.test("createCidrMatcher() with no ranges trusts nobody", () => {
  assertEquals(createCidrMatcher([]).contains("127.0.0.1"), false);
});

Deno.test("createCidrMatcher() rejects malformed ranges naming them", () => {
  for (const bad of ["10.0.0.0/33", "fd00::/129", "10.0.0/8", "10.0.0.0/", "10.0.0.0/-1", "x/8"]) {
    assertThrows(() => createCidrMatcher([bad]), TypeError, `"${bad}"`);
  }
});

Deno.test("normalizeIp() unmaps IPv4-mapped IPv6 and leaves others alone", () => {
  assertEquals(normalizeIp("::ffff:127.0.0.1"), "127.0.0.1");
  assertEquals(normalizeIp("::1"), "::1");
  assertEquals(normalizeIp("10.0.0.1"), "10.0.0.1");
  assertEquals(normalizeIp("ffff::1"), "ffff::1");
});
