/**
 * `compileRouteBehaviour()`: CORS origin matching as ingress-nginx's
 * `buildCorsOriginRegex` (without its unanchored start), and the source
 * ranges as address matchers (IPv4-mapped clients against IPv4 ranges).
 *
 * @module
 */

import { assert, assertEquals } from "../../tests/support/assert.ts";
import { CORS_DEFAULTS, type IngressBehaviour } from "../translate/nginx/ingress_behaviour.ts";
import { compileRouteBehaviour } from "./route_behaviour.ts";

function corsFor(origins: "*" | readonly string[]) {
  const compiled = compileRouteBehaviour({ cors: { ...CORS_DEFAULTS, origins } }).cors;
  assert(compiled !== undefined);
  return compiled;
}

/** `[allowed origins, request Origin, Access-Control-Allow-Origin or undefined]`. */
const ORIGIN_CASES: readonly [readonly string[] | "*", string | undefined, string | undefined][] = [
  // `*`: every request, with or without Origin, gets `*`.
  ["*", "https://a.example.com", "*"],
  ["*", undefined, "*"],
  ["*", "null", "*"],
  // Exact origins, echoed as sent.
  [["https://a.example.com"], "https://a.example.com", "https://a.example.com"],
  [["https://a.example.com"], "https://A.Example.COM", "https://A.Example.COM"],
  [["https://a.example.com"], "HTTPS://a.example.com", "HTTPS://a.example.com"],
  [["https://a.example.com"], undefined, undefined],
  [["https://a.example.com"], "", undefined],
  [["https://a.example.com"], "null", undefined],
  [["https://a.example.com"], "http://a.example.com", undefined],
  [["https://a.example.com"], "https://a.example.com:443", undefined],
  [["https://a.example.com"], "https://a.example.com:8443", undefined],
  [["https://a.example.com"], "https://a.example.com.", undefined],
  [["https://a.example.com"], "https://a.example.com/", undefined],
  [["https://a.example.com"], "https://b.example.com", undefined],
  [["https://a.example.com"], "https://xa.example.com", undefined],
  [["https://a.example.com"], "https://a.example.com.evil.example", undefined],
  // ingress-nginx's regex is anchored only at the end: not repeated here.
  [["https://a.example.com"], "https://evil.example/https://a.example.com", undefined],
  [["https://a.example.com"], "https://evil.examplehttps://a.example.com", undefined],
  [["https://a.example.com"], " https://a.example.com", undefined],
  [["https://a.example.com:8443"], "https://a.example.com:8443", "https://a.example.com:8443"],
  [["https://a.example.com:8443"], "https://a.example.com", undefined],
  [["https://a.example.com:8443"], "https://a.example.com:84430", undefined],
  [
    ["http://localhost:3000", "https://a.example.com"],
    "http://localhost:3000",
    "http://localhost:3000",
  ],
  [
    ["http://localhost:3000", "https://a.example.com"],
    "https://a.example.com",
    "https://a.example.com",
  ],
  [["http://localhost:3000", "https://a.example.com"], "http://localhost:3001", undefined],
  // `*.` stands for exactly one label.
  [["https://*.example.com"], "https://a.example.com", "https://a.example.com"],
  [["https://*.example.com"], "https://A-1.EXAMPLE.com", "https://A-1.EXAMPLE.com"],
  [["https://*.example.com"], "https://a.b.example.com", undefined],
  [["https://*.example.com"], "https://example.com", undefined],
  [["https://*.example.com"], "https://.example.com", undefined],
  [["https://*.example.com"], "https://a_b.example.com", undefined],
  [["https://*.example.com"], "https://a.example.com.evil.example", undefined],
  [["https://*.example.com"], "https://evil.example/.example.com", undefined],
  [["https://*.example.com"], "https://evil.example?.example.com", undefined],
  [["https://*.example.com"], "https://evil.example#.example.com", undefined],
  [["https://*.example.com"], "https://evil@a.example.com", undefined],
  [["https://*.example.com"], "https://a:1.example.com", undefined],
  [["https://*.example.com"], "https://aexample.com", undefined],
  [["https://*.example.com"], "https://a.example.com:443", undefined],
  [["https://*.example.com"], "http://a.example.com", undefined],
  [["https://*.example.com:8443"], "https://a.example.com:8443", "https://a.example.com:8443"],
  [["https://*.example.com:8443"], "https://a.example.com", undefined],
  [["https://*.example.com:8443"], "https://a.b.example.com:8443", undefined],
  [["https://*.example.com", "https://example.com"], "https://example.com", "https://example.com"],
];

for (const [origins, origin, expected] of ORIGIN_CASES) {
  Deno.test(`CORS allowing ${JSON.stringify(origins)} answers Origin ${JSON.stringify(origin)} with ${JSON.stringify(expected)}`, () => {
    assertEquals(corsFor(origins).allowOrigin(origin), expected);
  });
}

Deno.test("compileRouteBehaviour() compiles only what is set, and freezes it", () => {
  const source: IngressBehaviour = { maxBodyBytes: 10 };
  const compiled = compileRouteBehaviour(source);
  assertEquals(compiled, { source });
  assert(Object.isFrozen(compiled));
  assertEquals(compiled.allow, undefined);
  assertEquals(compiled.deny, undefined);
  assertEquals(compiled.cors, undefined);
});

/** `[ranges, client address, contained]`. */
const ADDRESS_CASES: readonly [readonly string[], string, boolean][] = [
  [["10.0.0.0/8"], "10.1.2.3", true],
  [["10.0.0.0/8"], "11.0.0.1", false],
  [["10.0.0.0/8"], "::ffff:10.0.0.1", true],
  [["10.0.0.0/8"], "::FFFF:10.0.0.1", true],
  [["10.0.0.0/8"], "::ffff:a00:1", true],
  [["10.0.0.0/8"], "::ffff:11.0.0.1", false],
  [["10.0.0.0/8"], "::10.0.0.1", false],
  [["10.0.0.0/8"], "64:ff9b::10.0.0.1", false],
  [["10.0.0.0/8"], "2001:db8::1", false],
  [["10.0.0.1"], "10.0.0.1", true],
  [["10.0.0.1"], "10.0.0.2", false],
  [["10.0.0.0/32"], "10.0.0.0", true],
  [["0.0.0.0/0"], "203.0.113.9", true],
  [["0.0.0.0/0"], "2001:db8::1", false],
  [["::/0"], "2001:db8::1", true],
  [["::/0"], "10.0.0.1", false],
  [["2001:db8::/32"], "2001:db8:ffff::1", true],
  [["2001:db8::/32"], "2001:DB8::1", true],
  [["2001:db8::/32"], "2001:db9::1", false],
  [["::ffff:10.0.0.0/104"], "10.1.2.3", true],
  [["::ffff:10.0.0.0/104"], "::ffff:10.1.2.3", true],
  [["::ffff:10.0.0.0/104"], "11.0.0.1", false],
  [["::ffff:10.0.0.1"], "10.0.0.1", true],
  [["10.0.0.0/8", "192.168.0.0/16"], "192.168.9.9", true],
  // Never a match for what is not an address.
  [["0.0.0.0/0"], "", false],
  [["0.0.0.0/0"], "unknown", false],
  [["0.0.0.0/0"], "10.0.0.1:1234", false],
  [["0.0.0.0/0"], "010.0.0.1", false],
];

for (const [ranges, address, contained] of ADDRESS_CASES) {
  Deno.test(`the source range ${ranges.join(",")} ${contained ? "contains" : "does not contain"} ${address || '""'}`, () => {
    const compiled = compileRouteBehaviour({ allow: ranges, deny: ranges });
    assertEquals(compiled.allow?.contains(address), contained);
    assertEquals(compiled.deny?.contains(address), contained);
  });
}
