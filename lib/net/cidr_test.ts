/**
 * `parseIp()`, `normalizeIp()` and `createCidrMatcher()`: the addresses and
 * ranges `--trusted-proxy-cidrs` and X-Forwarded-For chains are read with, IPv4,
 * IPv6 and IPv4-mapped, and what is refused.
 *
 * @module
 */
import {
  assert,
  assertEquals,
  assertStringIncludes,
  assertThrows,
} from "../../tests/support/assert.ts";
import { createCidrMatcher, normalizeIp, parseIp } from "./cidr.ts";
import { realClientIp } from "../proxy/forwarded_headers.ts";

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

Deno.test("a CIDR matcher takes IPv6 ranges of every prefix length and never lets one family match the other", () => {
  const m = createCidrMatcher(["fd00::/8", "2001:db8:abcd:12::/63", "::1"]);
  for (
    const [address, expected] of [
      ["fd00::1", true],
      ["fdff:ffff::1", true],
      ["fc00::1", false],
      ["2001:db8:abcd:13::5", true],
      ["2001:db8:abcd:14::5", false],
      ["::1", true],
      ["::2", false],
      ["0.0.0.1", false], // ::1's low bits as IPv4
      ["FD00:0:0:0:0:0:0:1", true],
    ] as const
  ) {
    assertEquals(m.contains(address), expected, address);
  }
  const v4 = createCidrMatcher(["0.0.0.0/0"]);
  assertEquals(v4.contains("::1"), false);
  assertEquals(v4.contains("::ffff:1.2.3.4"), true);
  const all6 = createCidrMatcher(["::/0"]);
  // A mapped address is IPv4: an IPv6-everything range does not make IPv4 clients trusted.
  assertEquals(all6.contains("::ffff:1.2.3.4"), false);
  assertEquals(all6.contains("fd00::1"), true);
});

Deno.test("malformed IPv6 ranges are refused with the range named", () => {
  for (
    const bad of [
      "fd00::/129",
      "fd00:::/8",
      "fd00::1::/64",
      "[fd00::]/8",
      "fd00::/",
      "fe80::/10%eth0",
    ]
  ) {
    let error: unknown;
    try {
      createCidrMatcher([bad]);
    } catch (e) {
      error = e;
    }
    assert(error instanceof TypeError, `"${bad}" was accepted`);
    assertStringIncludes(error.message, bad);
  }
});

Deno.test("parseIp() refuses bracketed, ported and over-long IPv6 text, so such X-Forwarded-For entries end the chain", () => {
  for (
    const text of [
      "[::1]",
      "[::1]:80",
      "1:2:3:4:5:6:7:8:9",
      "1:2:3:4:5:6:7",
      "::1:",
      ":1::",
      "g::1",
    ]
  ) {
    assertEquals(parseIp(text), undefined, text);
  }
  const trusted = createCidrMatcher(["::1/128"]);
  // A forged, unparseable entry stops the walk: the trusted peer's left neighbour is not believed past it.
  assertEquals(realClientIp("2001:db8::1, [2001:db8::2]:443", "::1", trusted), "::1");
  assertEquals(realClientIp("2001:db8::1, 2001:db8::2", "::1", trusted), "2001:db8::2");
});

Deno.test("normalizeIp() unmaps IPv4-mapped addresses in any spelling and leaves IPv6 ones alone", () => {
  assertEquals(normalizeIp("::ffff:7f00:1"), "127.0.0.1");
  assertEquals(normalizeIp("0:0:0:0:0:FFFF:10.0.0.1"), "10.0.0.1");
  assertEquals(normalizeIp("::ffff:0:10.0.0.1"), "::ffff:0:10.0.0.1"); // IPv4-translated, not mapped
  assertEquals(normalizeIp("ffff::1"), "ffff::1");
  assertEquals(normalizeIp("fd00::1"), "fd00::1");
});

Deno.test("trusted proxy ranges: the CIDR parser the workers use refuses every malformed range", () => {
  const bad = [
    "10.0.0.0/33",
    "::/129",
    "1:2:3:4:5:6:7:8/129",
    "010.0.0.1",
    "10.0.0.00/8",
    "256.0.0.0/8",
    "10.0.0/8",
    "10.0.0.0/",
    "/8",
    "10.0.0.0/-1",
    "10.0.0.0/ 8",
    "10.0.0.0/8/8",
    "1::2::3",
    "12345::/16",
    "fe80::1%eth0",
    "[::1]/128",
    "::ffff:1.2.3.256/128",
    "localhost",
  ];
  for (const range of bad) {
    let error: unknown;
    try {
      createCidrMatcher([range]);
    } catch (e) {
      error = e;
    }
    assert(error instanceof TypeError, `"${range}" is refused`);
    assert(error.message.includes(`"${range}"`), `the message names "${range}": ${error.message}`);
  }
  // IPv4-mapped ranges match the IPv4 address, and only it.
  const mapped = createCidrMatcher(["::ffff:1.2.3.4/128"]);
  assertEquals(
    ["1.2.3.4", "::ffff:1.2.3.4", "1.2.3.5"].map((a) => mapped.contains(a)),
    [true, true, false],
  );
  const v6 = createCidrMatcher(["fd00::/8", "::1"]);
  assertEquals(
    ["fd12::1", "fe00::1", "::1", "127.0.0.1"].map((a) => v6.contains(a)),
    [true, false, true, false],
  );
});
