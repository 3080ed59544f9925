/**
 * `parseRequestTarget()` and `normalizeRoutePath()`: the authority a request is
 * routed on, the path in the normal form rules are compiled in, the path and
 * query forwarded, and the targets refused or marked ambiguous; request hosts
 * with IPv6 literals.
 *
 * @module
 */
import { assertEquals } from "../../tests/support/assert.ts";
import { normalizeRoutePath, parseRequestTarget } from "./request_target.ts";
import { normaliseRequestHost } from "../routing/host.ts";

Deno.test("parseRequestTarget() takes the authority from Host and the target verbatim", () => {
  assertEquals(
    parseRequestTarget("http://Shop.Example.com:8080/a/../b?x=%20", "Shop.Example.com:8080"),
    {
      authority: "Shop.Example.com:8080",
      hostname: "Shop.Example.com",
      target: "/a/../b?x=%20",
      routePath: "/b",
      matchPath: "/b",
      forward: "/b?x=%20",
      ambiguous: false,
    },
  );
  assertEquals(parseRequestTarget("http://[::1]:80/", "[::1]:80")?.hostname, "[::1]");
  assertEquals(parseRequestTarget("http://a.com?q", "a.com")?.target, "/?q");
  assertEquals(parseRequestTarget("http://a.com", "a.com")?.target, "/");
});

Deno.test("parseRequestTarget() matches an escaped slash as a slash, and forwards it escaped", () => {
  const cases: [string, string, string][] = [
    // [target, matchPath, forward]
    ["/admin%2Fusers", "/admin/users", "/admin%2Fusers"],
    ["/admin%2fusers?x=1", "/admin/users", "/admin%2Fusers?x=1"],
    ["/%2Fadmin", "/admin", "/%2Fadmin"],
    ["/%2F%2Fadmin/x", "/admin/x", "/%2F%2Fadmin/x"],
    [
      "/api/v4/projects/group%2Fproject",
      "/api/v4/projects/group/project",
      "/api/v4/projects/group%2Fproject",
    ],
    ["/plain/path", "/plain/path", "/plain/path"],
  ];
  for (const [target, matchPath, forward] of cases) {
    const where = parseRequestTarget(`http://a.com${target}`, "a.com");
    assertEquals([where?.matchPath, where?.forward], [matchPath, forward], target);
  }
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

Deno.test("parseRequestTarget() forwards the routed path with the query as received", () => {
  const cases: [string, string][] = [
    ["/plain/path?q=%2F..%2F", "/plain/path?q=%2F..%2F"],
    ["/admin/%2e%2e/public?a=/../b", "/public?a=/../b"],
    ["//public/admin", "/public/admin"],
    ["/admin/a//../..", "/"],
    ["/%61dmin/%c3%bc", "/admin/%C3%BC"],
    ["/a\\..\\b", "/b"],
    ["/\u00fc?x", "/%C3%BC?x"],
    ["?only=query", "/?only=query"],
  ];
  for (const [target, forward] of cases) {
    const url = "http://a.com" + target;
    assertEquals(parseRequestTarget(url, "a.com")?.forward, forward, target);
  }
});

Deno.test("parseRequestTarget() refuses %00 and dot segments carrying ;parameters", () => {
  for (
    const target of [
      "/admin%00.html",
      "/a/%00/b",
      "/public/..;/admin",
      "/public/..;jsessionid=1/admin",
      "/public/.;/admin",
      "/public/%2e%2e;/admin",
      "/public/.%2E;x/admin",
      "/..;",
    ]
  ) {
    assertEquals(parseRequestTarget("http://a.com" + target, "a.com"), undefined, target);
  }
  // `;` elsewhere, and "%00" in the query, are ordinary.
  for (const target of ["/a;b/c", "/a/b..;c", "/.x;/y", "/...;/z", "/a?x=%00", "/a;/..;x"]) {
    const where = parseRequestTarget("http://a.com" + target, "a.com");
    if (target === "/a;/..;x") assertEquals(where, undefined, target);
    else assertEquals(where?.target, target, target);
  }
});

Deno.test("parseRequestTarget() marks a dot segment hidden behind an escaped slash or backslash as ambiguous", () => {
  const ambiguous = [
    "/public/..%2Fadmin",
    "/public/..%2fadmin",
    "/public%2F..%2Fadmin",
    "/public/..%5Cadmin",
    "/public/%2e%2e%2Fadmin",
    "/public/.%2E%5cadmin",
    "/public%2F..",
    "/public%2F.",
    "/x%2F..;y/z",
  ];
  for (const target of ambiguous) {
    assertEquals(parseRequestTarget("http://a.com" + target, "a.com")?.ambiguous, true, target);
  }
  for (
    const target of ["/group%2Fproject", "/a%2F...%2Fb", "/a%2F.x", "/a..%2Fb", "/a/..", "/x%5C"]
  ) {
    assertEquals(parseRequestTarget("http://a.com" + target, "a.com")?.ambiguous, false, target);
  }
});

Deno.test("request hosts with IPv6 literals keep their brackets and lose only their port", () => {
  assertEquals(normaliseRequestHost("[::1]:8080"), "[::1]");
  assertEquals(normaliseRequestHost("[FD00::1]"), "[fd00::1]");
  assertEquals(normaliseRequestHost("[::ffff:10.0.0.1]:443"), "[::ffff:10.0.0.1]");
  const target = parseRequestTarget("http://[fd00::1]:8080/a", "[fd00::1]:8080");
  assertEquals(target?.authority, "[fd00::1]:8080");
  assertEquals(target?.hostname, "[fd00::1]");
  assertEquals(parseRequestTarget("http://[fd00::1/a", "[fd00::1"), undefined);
});
