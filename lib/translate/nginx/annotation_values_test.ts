/**
 * The strict grammars of ingress-nginx annotation values: one table per
 * grammar, valid values with what they parse to, invalid ones refused.
 *
 * @module
 */

import { assert, assertEquals } from "../../../tests/support/assert.ts";
import {
  parseBool,
  parseCidrList,
  type Parsed,
  parseEnum,
  parseHeaderName,
  parseHeaderNames,
  parseHttpUrl,
  parseInteger,
  parsePath,
  parseSeconds,
  parseSize,
  parseStatusCode,
} from "./annotation_values.ts";

/** `[text, value]` for a valid value, `[text]` for a refused one. */
type Row<T> = readonly [text: string, value?: T];

function table<T>(name: string, parse: (text: string) => Parsed<T>, rows: readonly Row<T>[]) {
  for (const [text, expected] of rows) {
    const verb = expected === undefined ? "refuses" : "accepts";
    Deno.test(`${name}() ${verb} ${JSON.stringify(text)}`, () => {
      const parsed = parse(text);
      if (expected === undefined) {
        assertEquals(parsed.value, undefined, JSON.stringify(text));
        assert(
          typeof parsed.problem === "string" && parsed.problem.length > 0,
          `no problem for ${JSON.stringify(text)}`,
        );
      } else {
        assertEquals(parsed, { value: expected });
      }
    });
  }
}

table("parseBool", parseBool, [
  ["true", true],
  ["True", true],
  ["TRUE", true],
  ["t", true],
  ["T", true],
  ["1", true],
  ["false", false],
  ["False", false],
  ["FALSE", false],
  ["f", false],
  ["F", false],
  ["0", false],
  ["yes"],
  ["no"],
  ["on"],
  ["off"],
  [" true"],
  ["true "],
  ["tRUE"],
  ["fALSE"],
  [""],
  ["2"],
]);

table("parseInteger", (t) => parseInteger(t, 1, 100), [
  ["1", 1],
  ["100", 100],
  ["007", 7],
  ["0"],
  ["101"],
  ["-1"],
  ["+1"],
  [" 1"],
  ["1.0"],
  ["1e2"],
  ["0x10"],
  [""],
  ["12345678901"],
]);

table("parseSize", parseSize, [
  ["0", 0],
  ["1", 1],
  ["1024", 1024],
  ["8k", 8 * 1024],
  ["8K", 8 * 1024],
  ["8m", 8 * 1024 ** 2],
  ["8M", 8 * 1024 ** 2],
  ["1g", 1024 ** 3],
  ["2G", 2 * 1024 ** 3],
  ["100m", 100 * 1024 ** 2],
  ["999999999999", 999_999_999_999],
  ["1.5m"],
  ["-1"],
  ["+8m"],
  ["8 m"],
  [" 8m"],
  ["8m "],
  ["8mb"],
  ["8MB"],
  ["8t"],
  ["m"],
  [""],
  ["0x10"],
  ["1e3"],
  // 12 digits of gigabytes: beyond 2^53 bytes.
  ["999999999999g"],
  ["9999999999999"],
]);

table("parseSeconds", parseSeconds, [
  ["1", 1],
  ["60", 60],
  ["60s", 60],
  ["86400", 86_400],
  ["0"],
  ["86401"],
  ["1m"],
  ["-5"],
  ["1.5"],
  [" 60"],
  ["s"],
  [""],
]);

table("parseCidrList", parseCidrList, [
  ["10.0.0.0/8", ["10.0.0.0/8"]],
  ["10.0.0.1", ["10.0.0.1"]],
  ["10.0.0.0/0", ["10.0.0.0/0"]],
  ["10.0.0.0/32", ["10.0.0.0/32"]],
  ["10.0.0.0/8, 192.168.0.0/16", ["10.0.0.0/8", "192.168.0.0/16"]],
  [" 10.0.0.0/8 ,192.168.0.0/16 ", ["10.0.0.0/8", "192.168.0.0/16"]],
  ["2001:db8::/32", ["2001:db8::/32"]],
  ["::1", ["::1"]],
  ["::/0", ["::/0"]],
  ["2001:db8::/128", ["2001:db8::/128"]],
  ["10.0.0.0/8,2001:db8::/32", ["10.0.0.0/8", "2001:db8::/32"]],
  // Go's net.ParseCIDR: an IPv4-mapped IPv6 prefix has 128 bits.
  ["::ffff:10.0.0.0/104", ["::ffff:10.0.0.0/104"]],
  ["::ffff:10.0.0.1", ["::ffff:10.0.0.1"]],
  ["10.0.0.0/33"],
  ["10.0.0.0/-1"],
  ["10.0.0.0/"],
  ["10.0.0.0/8/8"],
  ["10.0.0.0/ 8"],
  ["10.0.0.0/0x8"],
  ["2001:db8::/129"],
  ["::ffff:10.0.0.0/129"],
  ["10.0.0.256"],
  ["10.0.0"],
  ["010.0.0.1"],
  ["10.0.0.0 /8"],
  ["10.0.0.0/8 192.168.0.0/16"],
  ["10.0.0.0/8;192.168.0.0/16"],
  ["10.0.0.0/8,,192.168.0.0/16"],
  ["10.0.0.0/8,"],
  [",10.0.0.0/8"],
  [""],
  [" "],
  [","],
  ["all"],
  ["0.0.0.0/0 deny"],
  ["fe80::1%eth0"],
  ["localhost"],
]);

table("parseHeaderName", parseHeaderName, [
  ["X-Request-Id", "x-request-id"],
  ["x_custom", "x_custom"],
  ["A", "a"],
  ["X Custom"],
  ["X-Custom:"],
  ["X-Custom\r\nInjected"],
  ["Ä"],
  [""],
  ["x".repeat(257)],
]);

table("parseHeaderNames", parseHeaderNames, [
  ["X-A", ["x-a"]],
  ["X-A, X-B", ["x-a", "x-b"]],
  ["X-A,,X-B", ["x-a", "x-b"]],
  ["X-A, X B"],
  [""],
  [" , "],
]);

table("parseHttpUrl", parseHttpUrl, [
  ["https://auth.example.com/verify", "https://auth.example.com/verify"],
  ["http://10.0.0.1:8080/", "http://10.0.0.1:8080/"],
  ["http://[::1]:8080/x?y=1", "http://[::1]:8080/x?y=1"],
  ["https://auth.example.com/a b"],
  ["https://auth.example.com/a\tb"],
  ["https://auth.example.com/\r\nX-Injected: 1"],
  ["https://auth.example.com/\u0000"],
  ["https://auth.example.com/\u007f"],
  [" https://auth.example.com/"],
  ["ftp://auth.example.com/"],
  ["javascript:alert(1)"],
  ["file:///etc/passwd"],
  ["//auth.example.com/"],
  ["/verify"],
  ["https://"],
  ["https:///path"],
  ["https://@evil.example/"],
  ["https:/auth.example.com/"],
  ["https:\\\\auth.example.com/"],
  ["not a url"],
  [""],
]);

table("parsePath", parsePath, [
  ["/app", "/app"],
  ["/", "/"],
  ["/app/index.html?x=1", "/app/index.html?x=1"],
  ["//evil.example"],
  ["/\\evil.example"],
  ["app"],
  ["https://evil.example/"],
  ["/a b"],
  ["/a\r\nSet-Cookie: x=1"],
  ["/a\u0000"],
  [""],
]);

table("parseStatusCode", (t) => parseStatusCode(t, [301, 302, 308]), [
  ["301", 301],
  ["308", 308],
  ["200"],
  // Go's strconv.Atoi, as ingress-nginx reads it.
  ["0301", 301],
  ["30"],
  ["308 "],
  ["-301"],
  [""],
]);

table("parseEnum", (t) => parseEnum(t, ["HTTP", "HTTPS"] as const), [
  ["HTTP", "HTTP"],
  ["HTTPS", "HTTPS"],
  ["http"],
  ["HTTP "],
  [""],
]);

Deno.test("a refusal quotes the value it refuses", () => {
  assertEquals(
    parseSize("1.5m").problem,
    `"1.5m" is not a size (a number, optionally with k, m or g)`,
  );
  assertEquals(
    parseCidrList("10.0.0.0/33").problem,
    `"10.0.0.0/33" has a prefix length outside 0 to 32`,
  );
  assertEquals(
    parseCidrList("2001:db8::/129").problem,
    `"2001:db8::/129" has a prefix length outside 0 to 128`,
  );
  assertEquals(
    parseCidrList("10.0.0.0/8,,10.1.0.0/16").problem,
    `"10.0.0.0/8,,10.1.0.0/16" has an empty item`,
  );
  assertEquals(parseCidrList(" , ").problem, "the list of CIDRs is empty");
  assertEquals(parseBool("yes").problem, `"yes" is not a boolean (true or false)`);
  assertEquals(
    parseCidrList("10.0.0.0/8 192.168.0.0/16").problem,
    `"10.0.0.0/8 192.168.0.0/16" is not an IP address or a CIDR (items are separated by commas)`,
  );
  // Control characters are escaped, never written raw into an Event or a log line.
  assertEquals(
    parseSize("8m\nX: y").problem,
    `"8m\\nX: y" is not a size (a number, optionally with k, m or g)`,
  );
});
