/**
 * Basic authentication (ingress-nginx `auth-type: basic`): the credentials
 * read as nginx reads them, the hashes verified with vectors made by Apache's
 * `htpasswd`, the cache of successful verifications, and the step in the
 * real handler behind a real listener: 401 with the challenge without the
 * right password, 200 with it, the backend never given `Authorization`, and
 * hostile requests that must not get through.
 *
 * @module
 */
import { assert, assertEquals } from "../../tests/support/assert.ts";
import { ask, echoOf } from "../../tests/support/echo_world.ts";
import { headerValues, RawConnection } from "../../tests/support/raw_http.ts";
import { type LoggedRequest, startEchoBackend } from "../../tests/support/echo_backend.ts";
import { compileBasicAuth, compileRouteBehaviour } from "../routing/route_behaviour.ts";
import { compileRouteTable } from "../routing/route_table.ts";
import type { CertificateTable, Snapshot } from "../routing/snapshot.ts";
import { listenHttp } from "../server/http_listener.ts";
import type { IngressBehaviour } from "../translate/nginx/ingress_behaviour.ts";
import {
  type BasicAuthVerifier,
  constantTimeEqual,
  createBasicAuthVerifier,
  MAX_CREDENTIALS,
  parseBasicCredentials,
  verifyPassword,
} from "./basic_auth.ts";
import { createProxyHandler } from "./proxy_handler.ts";

// Vectors made with Apache's htpasswd 2.4 (apache2-utils): `-nbm` (apr1), `-nbs` (SHA-1),
// `-nbB -C 4` and `-nbB` (bcrypt, cost 4 and its default 5).
const VECTORS: [password: string, hash: string][] = [
  ["bar", "$apr1$Dvr8tLvp$s7FUwjev/NI.SuXEKB56x1"],
  ["bar", "{SHA}Ys23Ag/5IOWqZCw9QGaVDdHwH00="],
  ["bar", "$2y$04$7LZxjdM/vPGHL/ykoix6teMbj9R59U7ek9D9TANnXFTc64RJIoQRm"],
  ["pässwörd", "$apr1$SA0M65p9$0O2o6zexyC9KNJ4CFPkLB0"],
  ["pässwörd", "{SHA}9Rfd8dMqES/xrVXGbRsSyzjn6Pc="],
  ["pässwörd", "$2y$04$moc.lUgqmmQnTDIvfegSbexkUrH1.r63ZX1pdJ4uXSgsEtNAN14B6"],
  ["", "$apr1$GHjQu0v2$nW1v.Id5F88K1f6Kc8CWO1"],
  ["", "{SHA}2jmj7l5rSw0yVb/vlWAYkK/YBwk="],
  ["", "$2y$04$WFRpzAFQxIy3FohjsEdIjO39tXbS6Xhg0cQSUt/F72x9F02K1mgZy"],
  ["a:b:c", "$apr1$TyM.nm.I$uen0ygWVypVSJTRnwrgi9/"],
  ["a:b:c", "{SHA}cLzgnoJ6mP5qz3w+mwvPE2vDgu0="],
  ["a:b:c", "$2y$04$9WyLpth104Z5HD2ah2MB7.VjmeeD4KTizF/3DfwQqrra49CIfOD/O"],
  ["x", "$apr1$SRuAOLGw$VPJlhA3be0Grc/tqMoix3/"],
  ["x", "{SHA}EfatjsUqKYSrqv18O1FlA3hcIHI="],
  ["x", "$2y$04$KgyMYOBlfWK6koWqoIWu8eBCv6nVwYDQAklD/j39.CmfTw4aYACQq"],
  ["correct horse battery staple, a long passphrase", "$apr1$uojdmcEA$HCICRE/RL7TFpmX3C.MaX/"],
  ["correct horse battery staple, a long passphrase", "{SHA}G+Ieq2NBi1Ju/E+52p0JTxE/MMQ="],
  ["secret", "$2y$05$BSrw9AKTzCjsryoRTnlW0egvqhiOaa7ddFYtWAOXJc9xkEGZN4XZy"],
];

Deno.test("verifyPassword() accepts htpasswd's own hashes and nothing near them", async () => {
  for (const [password, hash] of VECTORS) {
    assertEquals(await verifyPassword(password, hash), true, `${password} ${hash}`);
    for (const wrong of [`${password}x`, password.toUpperCase() + "!", ` ${password}`]) {
      assertEquals(await verifyPassword(wrong, hash), false, `${wrong} ${hash}`);
    }
  }
  // $2b$ and $2a$ spell the same bcrypt for ASCII passwords.
  const y = "$2y$04$7LZxjdM/vPGHL/ykoix6teMbj9R59U7ek9D9TANnXFTc64RJIoQRm";
  assertEquals(await verifyPassword("bar", y.replace("$2y$", "$2b$")), true);
  assertEquals(await verifyPassword("bar", y.replace("$2y$", "$2a$")), true);
  // Schemes Sluice does not verify never match, whatever the password.
  for (const hash of ["bar", "M8C9XuLcBCPKs", "$1$Dvr8tLvp$s7FUwjev/NI.SuXEKB56x1", ""]) {
    assertEquals(await verifyPassword("bar", hash), false, hash);
    assertEquals(await verifyPassword(hash, hash), false, hash);
  }
});

Deno.test("constantTimeEqual() compares whole strings", () => {
  const cases: [string, string, boolean][] = [
    ["", "", true],
    ["abc", "abc", true],
    ["abc", "abd", false],
    ["abc", "ab", false],
    ["ab", "abc", false],
    ["\u0100", "\u0000", false],
  ];
  for (const [a, b, equal] of cases) assertEquals(constantTimeEqual(a, b), equal, `${a} ${b}`);
});

const b64 = (text: string) => btoa(String.fromCharCode(...new TextEncoder().encode(text)));

Deno.test("parseBasicCredentials() reads Authorization as nginx does", () => {
  const cases: [string, { user: string; password: string } | undefined][] = [
    [`Basic ${b64("alice:bar")}`, { user: "alice", password: "bar" }],
    [`basic ${b64("alice:bar")}`, { user: "alice", password: "bar" }],
    [`BASIC   ${b64("alice:bar")}`, { user: "alice", password: "bar" }],
    [`Basic ${b64("alice:a:b:c")}`, { user: "alice", password: "a:b:c" }],
    [`Basic ${b64("alice:")}`, { user: "alice", password: "" }],
    [`Basic ${b64("jürgen:pässwörd")}`, { user: "jürgen", password: "pässwörd" }],
    [`Basic ${b64("alice:bar").replace(/=+$/, "")}`, { user: "alice", password: "bar" }],
    [`Basic ${b64("alice")}`, undefined],
    [`Basic ${b64(":bar")}`, undefined],
    [`Basic ${b64("")}`, undefined],
    ["Basic", undefined],
    ["Basic ", undefined],
    [`Basic\t${b64("alice:bar")}`, undefined],
    [`Basic${b64("alice:bar")}`, undefined],
    [`Bearer ${b64("alice:bar")}`, undefined],
    [`Digest ${b64("alice:bar")}`, undefined],
    [`Basic ${b64("alice:bar")} `, undefined],
    [`Basic ${b64("alice:bar")},x`, undefined],
    ["Basic !!!!", undefined],
    ["Basic YWxpY2U6YmFyA", undefined],
    [`Basic ${btoa("j\xfcrgen:x")}`, undefined], // Latin-1, not UTF-8
    [`Basic ${"A".repeat(MAX_CREDENTIALS + 4)}`, undefined],
  ];
  for (const [value, expected] of cases) {
    assertEquals(parseBasicCredentials(value), expected, value);
  }
});

const USERS = compileBasicAuth({
  realm: "Shop admins",
  users: {
    alice: "$2y$04$7LZxjdM/vPGHL/ykoix6teMbj9R59U7ek9D9TANnXFTc64RJIoQRm", // bar
    bob: "$apr1$SRuAOLGw$VPJlhA3be0Grc/tqMoix3/", // x
    carol: "{SHA}cLzgnoJ6mP5qz3w+mwvPE2vDgu0=", // a:b:c
    "jürgen": "$2y$04$ZfC3kgscPDTbOMY/GimdW.aOD0yHlXtgh2bLWAlNyCkCMryFmJYjS", // pässwörd
  },
});

Deno.test("the verifier remembers successes only, and only for the same user, password and hash", async () => {
  const verifier = createBasicAuthVerifier();
  const basic = (user: string, password: string) => [`Basic ${b64(`${user}:${password}`)}`];
  assertEquals(await verifier.check(USERS, basic("alice", "bar")), "pass");
  assertEquals(verifier.cached, 1);
  assertEquals(await verifier.check(USERS, basic("alice", "bar")), "pass");
  assertEquals(verifier.cached, 1);
  // A wrong password after a success is checked, refused, and not remembered.
  assertEquals(await verifier.check(USERS, basic("alice", "bax")), 401);
  assertEquals(await verifier.check(USERS, basic("alice", "bar ")), 401);
  // Another user's password.
  assertEquals(await verifier.check(USERS, basic("bob", "bar")), 401);
  assertEquals(verifier.cached, 1);
  // The same user and password against a changed hash: verified again, refused.
  const changed = compileBasicAuth({
    realm: "",
    users: { alice: "$apr1$SRuAOLGw$VPJlhA3be0Grc/tqMoix3/" },
  });
  assertEquals(await verifier.check(changed, basic("alice", "bar")), 401);
  assertEquals(await verifier.check(changed, basic("alice", "x")), "pass");
  assertEquals(verifier.cached, 2);
});

Deno.test("the verifier's cache is bounded, the least recently used first out", async () => {
  const verifier = createBasicAuthVerifier({ maxCached: 2 });
  const basic = (user: string, password: string) => [`Basic ${b64(`${user}:${password}`)}`];
  assertEquals(await verifier.check(USERS, basic("bob", "x")), "pass");
  assertEquals(await verifier.check(USERS, basic("carol", "a:b:c")), "pass");
  assertEquals(await verifier.check(USERS, basic("bob", "x")), "pass");
  assertEquals(await verifier.check(USERS, basic("jürgen", "pässwörd")), "pass");
  assertEquals(verifier.cached, 2);
  assertEquals(
    await createBasicAuthVerifier({ maxCached: 0 }).check(USERS, basic("bob", "x")),
    "pass",
  );
});

// The handler, behind a real listener, in front of a real echo backend.

const HOST = "shop.example.com";
const WS_HOST = "ws.example.com";
const NO_CERTIFICATES: CertificateTable = {
  fingerprint: "none",
  resolve() {
    throw new Error("no certificates here");
  },
};

interface AuthWorld {
  readonly port: number;
  readonly verifier: BasicAuthVerifier;
  readonly requests: () => number;
  readonly logged: () => readonly LoggedRequest[];
}

async function withAuthWorld(fn: (world: AuthWorld) => Promise<void>): Promise<void> {
  const backend = await startEchoBackend({ name: "shop/web", pod: "web-0" });
  const users = {
    alice: "$2y$04$7LZxjdM/vPGHL/ykoix6teMbj9R59U7ek9D9TANnXFTc64RJIoQRm", // bar
    bob: "$apr1$SRuAOLGw$VPJlhA3be0Grc/tqMoix3/", // x
    carol: "{SHA}cLzgnoJ6mP5qz3w+mwvPE2vDgu0=", // a:b:c
    "jürgen": "$2y$04$ZfC3kgscPDTbOMY/GimdW.aOD0yHlXtgh2bLWAlNyCkCMryFmJYjS", // pässwörd
  };
  const behaviours: Record<string, IngressBehaviour> = {
    "shop/admin": { basicAuth: { realm: "Shop admins", users } },
    "shop/internal": { allow: ["10.0.0.0/8"], basicAuth: { realm: "", users } },
  };
  // Compiling here as the snapshot does proves compileRouteBehaviour carries basicAuth.
  assert(compileRouteBehaviour(behaviours["shop/admin"]!).basicAuth !== undefined);
  const snapshot: Snapshot = {
    version: 1,
    routes: compileRouteTable({
      routes: [
        {
          host: HOST,
          path: "/",
          pathType: "Prefix",
          ingress: "shop/public",
          backend: "shop/web:80",
        },
        {
          host: HOST,
          path: "/admin",
          pathType: "Prefix",
          ingress: "shop/admin",
          backend: "shop/web:80",
        },
        {
          host: HOST,
          path: "/internal",
          pathType: "Prefix",
          ingress: "shop/internal",
          backend: "shop/web:80",
        },
        {
          host: WS_HOST,
          path: "/",
          pathType: "Prefix",
          ingress: "shop/admin",
          backend: "shop/web:80",
        },
      ],
      backends: [{
        key: "shop/web:80",
        service: "shop/web",
        endpoints: [{ address: "127.0.0.1", port: backend.port }],
      }],
      tlsHosts: [],
      behaviours,
    }),
    certificates: NO_CERTIFICATES,
  };
  const verifier = createBasicAuthVerifier();
  const handler = createProxyHandler({ snapshot: () => snapshot, basicAuth: verifier });
  const listener = listenHttp(handler, { hostname: "127.0.0.1", port: 0, reusePort: false });
  try {
    await fn({
      port: listener.addr.port,
      verifier,
      requests: () => backend.requests.length,
      logged: () => backend.requests,
    });
  } finally {
    await listener.shutdown({ timeoutMs: 5_000 });
    handler.close();
    await backend.close();
  }
}

function get(path: string, ...fields: string[]): string {
  return `GET ${path} HTTP/1.1\r\nHost: ${HOST}\r\n${fields.map((f) => `${f}\r\n`).join("")}\r\n`;
}

const authorization = (user: string, password: string) =>
  `Authorization: Basic ${b64(`${user}:${password}`)}`;

Deno.test("basic auth answers 401 with the realm's challenge and lets the right password through without Authorization", async () => {
  await withAuthWorld(async (world) => {
    const refused = await ask(world.port, get("/admin/users"));
    assertEquals(refused.status, 401);
    assertEquals(headerValues(refused.headers, "www-authenticate"), ['Basic realm="Shop admins"']);
    assertEquals(world.requests(), 0);

    const wrong = await ask(world.port, get("/admin/users", authorization("alice", "baz")));
    assertEquals(wrong.status, 401);
    assertEquals(headerValues(wrong.headers, "www-authenticate"), ['Basic realm="Shop admins"']);
    assertEquals(world.requests(), 0);

    for (const [user, password] of [["alice", "bar"], ["bob", "x"], ["carol", "a:b:c"]]) {
      const passed = await ask(world.port, get("/admin/users", authorization(user!, password!)));
      assertEquals(passed.status, 200, user);
      const echo = echoOf(passed);
      assertEquals(echo.target, "/admin/users");
      assertEquals(
        echo.headers.filter(([name]) => name.toLowerCase() === "authorization"),
        [],
        `${user}: the backend was given the credentials`,
      );
    }
    assertEquals(world.requests(), 3);

    // Another Ingress on the same host: its Authorization goes through untouched.
    const open = echoOf(await ask(world.port, get("/", "Authorization: Bearer abc")));
    assertEquals(headerValues(open.headers, "authorization"), ["Bearer abc"]);
  });
});

Deno.test("basic auth lets no hostile request through", async () => {
  await withAuthWorld(async (world) => {
    const cases: [string, string[], number][] = [
      ["no colon", [`Authorization: Basic ${b64("alicebar")}`], 401],
      ["empty user", [`Authorization: Basic ${b64(":bar")}`], 401],
      ["empty user and password", [`Authorization: Basic ${b64(":")}`], 401],
      ["unknown user", [authorization("mallory", "bar")], 401],
      ["another user's password", [authorization("bob", "bar")], 401],
      ["the hash as password", [authorization("carol", "{SHA}cLzgnoJ6mP5qz3w+mwvPE2vDgu0=")], 401],
      ["user with a trailing space", [authorization("alice ", "bar")], 401],
      ["user in another case", [authorization("Alice", "bar")], 401],
      ["no credentials", ["Authorization: Basic"], 401],
      ["not base64", ["Authorization: Basic !!!!"], 401],
      ["Bearer", ["Authorization: Bearer abc"], 401],
      ["Latin-1 credentials", [`Authorization: Basic ${btoa("j\xfcrgen:p\xe4ssw\xf6rd")}`], 401],
      ["a huge header", [`Authorization: Basic ${"QUFB".repeat(5_000)}`], 401],
      [
        "two Authorization fields, the second right",
        [authorization("mallory", "x"), authorization("alice", "bar")],
        400,
      ],
      [
        "two Authorization fields, both right",
        [authorization("alice", "bar"), authorization("alice", "bar")],
        400,
      ],
      ["right credentials in Proxy-Authorization", [
        `Proxy-Authorization: Basic ${b64("alice:bar")}`,
      ], 401],
    ];
    for (const [name, fields, status] of cases) {
      const response = await ask(world.port, get("/admin", ...fields));
      assertEquals(response.status, status, name);
      if (status === 401) {
        assertEquals(headerValues(response.headers, "www-authenticate"), [
          'Basic realm="Shop admins"',
        ], name);
      }
    }
    // Path spellings of the protected prefix are protected too.
    for (const path of ["/admin", "/admin/", "//admin", "/./admin", "/x/../admin", "/%61dmin"]) {
      const response = await ask(world.port, get(path));
      assert(response.status === 401 || response.status === 400, `${path}: ${response.status}`);
    }
    assertEquals(world.requests(), 0);
  });
});

Deno.test("basic auth reads the scheme without case and UTF-8 credentials, as nginx", async () => {
  await withAuthWorld(async (world) => {
    const cases: [string, string][] = [
      ["lowercase scheme", `Authorization: basic ${b64("alice:bar")}`],
      ["upper case scheme, two spaces", `Authorization: BASIC  ${b64("alice:bar")}`],
      ["unicode user and password", authorization("jürgen", "pässwörd")],
      ["no padding", `Authorization: Basic ${b64("bob:x").replace(/=+$/, "")}`],
    ];
    for (const [name, field] of cases) {
      assertEquals((await ask(world.port, get("/admin", field))).status, 200, name);
    }
  });
});

Deno.test("basic auth comes after the source ranges: a refused address gets 403 even with the right password", async () => {
  await withAuthWorld(async (world) => {
    const right = await ask(world.port, get("/internal", authorization("alice", "bar")));
    assertEquals(right.status, 403);
    assertEquals(headerValues(right.headers, "www-authenticate"), []);
    assertEquals((await ask(world.port, get("/internal"))).status, 403);
    assertEquals(world.requests(), 0);
  });
});

Deno.test("basic auth remembers a success, never a failure, and never lets a remembered success pass another password", async () => {
  await withAuthWorld(async (world) => {
    assertEquals((await ask(world.port, get("/admin", authorization("alice", "bar")))).status, 200);
    assertEquals(world.verifier.cached, 1);
    assertEquals((await ask(world.port, get("/admin", authorization("alice", "bar")))).status, 200);
    assertEquals(world.verifier.cached, 1);
    assertEquals((await ask(world.port, get("/admin", authorization("alice", "baR")))).status, 401);
    assertEquals((await ask(world.port, get("/admin", authorization("alice", "")))).status, 401);
    assertEquals((await ask(world.port, get("/admin", authorization("bob", "bar")))).status, 401);
    assertEquals(world.verifier.cached, 1);
    assertEquals(world.requests(), 2);
  });
});

Deno.test("basic auth guards WebSocket upgrades and drops Authorization from the upgrade the backend gets", async () => {
  await withAuthWorld(async (world) => {
    const upgrade = (...fields: string[]) =>
      `GET /ws HTTP/1.1\r\nHost: ${WS_HOST}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" +
      fields.map((f) => `${f}\r\n`).join("") + "\r\n";
    const refused = await ask(world.port, upgrade());
    assertEquals(refused.status, 401);
    assertEquals(world.requests(), 0);
    const conn = await RawConnection.open(world.port);
    try {
      await conn.send(upgrade(authorization("bob", "x")));
      assertEquals((await conn.readResponse()).status, 101);
    } finally {
      conn.close();
    }
    assertEquals(world.requests(), 1);
    const seen = world.logged()[0]!;
    assertEquals(seen.target, "/ws");
    assertEquals(headerValues(seen.headers, "authorization"), []);
  });
});
