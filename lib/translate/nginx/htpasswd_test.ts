import { assertEquals } from "../../../tests/support/assert.ts";
import { hashScheme, parseAuthMap, parseHtpasswd } from "./htpasswd.ts";

// Made with `htpasswd -nbm`, `-nbs`, `-nbB -C 4`, `-nbd`, `-nbp`, `-nb -5` (apache2-utils).
const APR1 = "$apr1$Dvr8tLvp$s7FUwjev/NI.SuXEKB56x1";
const SHA1 = "{SHA}Ys23Ag/5IOWqZCw9QGaVDdHwH00=";
const BCRYPT_Y = "$2y$04$7LZxjdM/vPGHL/ykoix6teMbj9R59U7ek9D9TANnXFTc64RJIoQRm";
const BCRYPT_B = "$2b$04$7LZxjdM/vPGHL/ykoix6teMbj9R59U7ek9D9TANnXFTc64RJIoQRm";
const BCRYPT_A = "$2a$04$7LZxjdM/vPGHL/ykoix6teMbj9R59U7ek9D9TANnXFTc64RJIoQRm";
const CRYPT = "M8C9XuLcBCPKs";
const SHA512_CRYPT =
  "$6$.c6A4lXyapGPFKwa$5vTtZMijs3RF9Am6L6Ova4vptbMYOV0hFA4BYhBbJ4jB9lSahus954DlmrllrrrhzsNh0qVDuumKEoRorP9f9.";
const MD5_CRYPT = "$1$Dvr8tLvp$s7FUwjev/NI.SuXEKB56x1";

Deno.test("hashScheme() knows bcrypt, apr1 and SHA-1 and nothing else", () => {
  const cases: [string, string | undefined][] = [
    [BCRYPT_Y, "bcrypt"],
    [BCRYPT_B, "bcrypt"],
    [BCRYPT_A, "bcrypt"],
    [APR1, "apr1"],
    [SHA1, "sha1"],
    [CRYPT, undefined],
    [SHA512_CRYPT, undefined],
    [MD5_CRYPT, undefined],
    ["secret", undefined],
    ["", undefined],
    [`${BCRYPT_Y} `, undefined],
    [BCRYPT_Y.replace("$04$", "$03$"), undefined],
    [BCRYPT_Y.replace("$04$", "$32$"), undefined],
    [BCRYPT_Y.slice(0, -1), undefined],
    ["$2x$04$7LZxjdM/vPGHL/ykoix6teMbj9R59U7ek9D9TANnXFTc64RJIoQRm", undefined],
    ["$apr1$$s7FUwjev/NI.SuXEKB56x1", undefined],
    ["$apr1$123456789$s7FUwjev/NI.SuXEKB56x1", undefined],
    ["{SHA}Ys23Ag/5IOWqZCw9QGaVDdHwH00", undefined],
    ["{sha}Ys23Ag/5IOWqZCw9QGaVDdHwH00=", undefined],
    ["{SSHA}Ys23Ag/5IOWqZCw9QGaVDdHwH00=", undefined],
  ];
  for (const [hash, scheme] of cases) assertEquals(hashScheme(hash), scheme, hash);
});

Deno.test("parseHtpasswd() reads each format, skips comments and blank lines, and takes CRLF", () => {
  const cases: [string, string, Record<string, string>][] = [
    ["bcrypt", `alice:${BCRYPT_Y}\n`, { alice: BCRYPT_Y }],
    ["apr1", `alice:${APR1}`, { alice: APR1 }],
    ["SHA-1", `alice:${SHA1}\n`, { alice: SHA1 }],
    [
      "three users, comments, blank lines",
      `# admins\n\nalice:${BCRYPT_Y}\n   \n#bob:plain\nbob:${APR1}\ncarol:${SHA1}\n\n`,
      { alice: BCRYPT_Y, bob: APR1, carol: SHA1 },
    ],
    ["CRLF", `alice:${BCRYPT_Y}\r\nbob:${APR1}\r\n`, { alice: BCRYPT_Y, bob: APR1 }],
    ["nginx comment field", `alice:${APR1}:Alice Smith\n`, { alice: APR1 }],
    ["unicode user", `jürgen:${SHA1}\n`, { "jürgen": SHA1 }],
    [
      "names an object has",
      `__proto__:${SHA1}\nconstructor:${APR1}\n`,
      Object.fromEntries([["__proto__", SHA1], ["constructor", APR1]]),
    ],
    ["a user with spaces", `John Doe:${SHA1}`, { "John Doe": SHA1 }],
  ];
  for (const [name, text, users] of cases) {
    const parsed = parseHtpasswd(text);
    assertEquals(parsed.problem, undefined, name);
    assertEquals(parsed.value, users, name);
    assertEquals(Object.getPrototypeOf(parsed.value), Object.prototype, name);
  }
});

Deno.test("parseHtpasswd() refuses the whole file for one bad line, naming lines and never a hash", () => {
  const cases: [string, string, string][] = [
    ["DES crypt", `alice:${BCRYPT_Y}\nbob:${CRYPT}\n`, "line 2: the password is not a bcrypt"],
    ["SHA-512 crypt", `bob:${SHA512_CRYPT}`, "line 1: the password is not"],
    ["MD5 crypt without apr1", `bob:${MD5_CRYPT}`, "line 1: the password is not"],
    ["plain text", "bob:hunter2", "line 1: the password is not"],
    ["empty hash", "bob:", "line 1: the password is not"],
    ["no colon", "# c\nhunter2", 'line 2 has no ":" between a user and a hash'],
    ["empty user", `:${SHA1}`, "line 1 has an empty user name or one with control characters"],
    ["control character in user", `a\tb:${SHA1}`, "line 1 has an empty user name"],
    ["trailing space after hash", `bob:${SHA1} `, "line 1: the password is not"],
    [
      "duplicate user",
      `bob:${SHA1}\nalice:${APR1}\nbob:${APR1}`,
      'line 3 lists user "bob" again (first on line 1)',
    ],
    ["empty file", "", "it lists no user"],
    ["only comments", "# nobody\n\n", "it lists no user"],
  ];
  for (const [name, text, start] of cases) {
    const parsed = parseHtpasswd(text);
    assertEquals(parsed.value, undefined, name);
    assertEquals(parsed.problem?.startsWith(start), true, `${name}: ${parsed.problem}`);
    for (const secret of [CRYPT, SHA512_CRYPT, MD5_CRYPT, "hunter2", SHA1, APR1]) {
      assertEquals(parsed.problem?.includes(secret), false, `${name} shows a hash`);
    }
  }
});

Deno.test("parseHtpasswd() names at most five bad lines", () => {
  const text = Array.from({ length: 8 }, (_, i) => `u${i}:plain`).join("\n");
  const problem = parseHtpasswd(text).problem!;
  assertEquals(problem.includes("line 5:"), true);
  assertEquals(problem.includes("line 6:"), false);
  assertEquals(problem.endsWith("; and 3 more"), true);
});

Deno.test("parseAuthMap() takes each key as a user and its value as the hash", () => {
  assertEquals(parseAuthMap({ alice: BCRYPT_Y, bob: `${APR1}\n`, carol: `${SHA1}\r\n` }), {
    value: { alice: BCRYPT_Y, bob: APR1, carol: SHA1 },
  });
  const cases: [string, Record<string, string>, string][] = [
    ["plain text", { alice: "hunter2" }, 'the password of user "alice" is not a bcrypt'],
    ["crypt", { alice: BCRYPT_Y, bob: CRYPT }, 'the password of user "bob" is not'],
    ["two line ends", { alice: `${SHA1}\n\n` }, 'the password of user "alice" is not'],
    ["no users", {}, "it lists no user"],
  ];
  for (const [name, entries, start] of cases) {
    const parsed = parseAuthMap(entries);
    assertEquals(parsed.problem?.startsWith(start), true, `${name}: ${parsed.problem}`);
    assertEquals(parsed.problem?.includes("hunter2"), false, name);
  }
});
