/**
 * Table of `namespace/name[:port]` option parsing cases.
 *
 * @module
 */

import { assertEquals } from "../../tests/support/assert.ts";
import { parseObjectRefOption } from "./option_refs.ts";

Deno.test("parseObjectRefOption() reads namespace/name and, when allowed, namespace/name:port", () => {
  const cases: [string, boolean, unknown][] = [
    ["ns/name", false, { namespace: "ns", name: "name" }],
    ["ns/name", true, { namespace: "ns", name: "name" }],
    ["ns/name:80", true, { namespace: "ns", name: "name", port: 80 }],
    ["ns/name:http", true, { namespace: "ns", name: "name", port: "http" }],
    ["ns/name:80", false, undefined],
    ["ns/name:0", true, undefined],
    ["ns/name:70000", true, undefined],
    ["name", true, undefined],
    ["ns/", true, undefined],
    ["a/b/c", true, undefined],
    ["NS/name", true, undefined],
  ];
  for (const [value, allowPort, expected] of cases) {
    assertEquals(parseObjectRefOption(value, { allowPort }), expected, `${value} ${allowPort}`);
  }
});
