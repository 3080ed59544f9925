import { deepStrictEqual as assertEquals } from "node:assert/strict";
import { normalizeRoutePath, parseRequestTarget } from "./request_target.ts";

Deno.test("parseRequestTarget() takes the authority from Host and the target verbatim", () => {
  assertEquals(
    parseRequestTarget("http://Shop.Example.com:8080/a/../b?x=%20", "Shop.Example.com:8080"),
    {
      authority: "Shop.Example.com:8080",
      hostname: "Shop.Example.com",
      target: "/a/../b?x=%20",
      routePath: "/b",
    },
  );
  assertEquals(parseRequestTarget("http://[::1]:80/", "[::1]:80")?.hostname, "[::1]");
  assertEquals(parseRequestTarget("http://a.com?q", "a.com")?.target, "/?q");
  assertEquals(parseRequestTarget("http://a.com", "a.com")?.target, "/");
});

Deno.test("parseRequestTarget() lets an absolute-form target's authority win over Host", () => {
  const where = parseRequestTarget("http://other.example/p?q", "x");
  assertEquals([where?.authority, where?.target], ["other.example", "/p?q"]);
});

Deno.test("parseRequestTarget() uses the URL authority for HTTP/2 (no Host field)", () => {
  assertEquals(parseRequestTarget("https://h2.example/x", undefined)?.authority, "h2.example");
});

Deno.test("parseRequestTarget() refuses hosts that would change what the URL means", () => {
  for (
    const [url, host] of [
      ["http://a.com/zz/a", "a.com/zz"],
      ["http://evil@a.com/a", "evil@a.com"],
      ["http://a b/a", "a b"],
      ["http://a.com:99999x/", "a.com:99999x"],
      ["http://a.com/a#frag", "a.com"],
      ["http://-a.com/", "-a.com"],
    ]
  ) {
    assertEquals(parseRequestTarget(url as string, host), undefined, `${url} ${host}`);
  }
});

Deno.test("normalizeRoutePath() merges slashes, resolves dots, decodes unreserved escapes and uppercases the others", () => {
  const cases: [string, string][] = [
    ["/", "/"],
    ["/a//b", "/a/b"],
    ["//admin", "/admin"],
    ["/public/../admin", "/admin"],
    ["/public/%2e%2e/admin", "/admin"],
    ["/public/%2E%2E/admin", "/admin"],
    ["/a//../b", "/b"],
    ["/%61dmin", "/admin"],
    ["/a%2Fb", "/a%2Fb"],
    ["/%7Euser/%5F", "/~user/_"],
    ["/caf\u00e9", "/caf%C3%A9"],
    ["/a/./b/.", "/a/b/"],
    ["/a%20b", "/a%20b"],
    ["/%c3%bcber", "/%C3%BCber"],
    ["/a%2fb%7e", "/a%2Fb~"],
  ];
  for (const [input, want] of cases) assertEquals(normalizeRoutePath(input), want, input);
});

Deno.test("normalizeRoutePath() returns plain paths as the URL parser would", () => {
  const paths = [
    "/",
    "/a/b-c_d~e",
    "/api/v1/users:batch",
    "/x;y=1,z@w!$&'()*+=",
    "/UPPER/lower/123",
    "/1k.bin",
    "/a.../.b/c../...",
    "/trailing/",
  ];
  for (const path of paths) {
    assertEquals(normalizeRoutePath(path), new URL("http://h" + path).pathname, path);
  }
  // Not plain: these go through the full normalisation.
  assertEquals(normalizeRoutePath("//a//b"), "/a/b");
  assertEquals(normalizeRoutePath("/a/./b/../c"), "/a/c");
  assertEquals(normalizeRoutePath("/a/.."), "/");
  assertEquals(normalizeRoutePath("/a/."), "/a/");
  assertEquals(normalizeRoutePath("/%61dmin"), "/admin");
  assertEquals(normalizeRoutePath("/caf\u00e9"), "/caf%C3%A9");
});
