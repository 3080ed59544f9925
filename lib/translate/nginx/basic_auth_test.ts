import { assertEquals } from "../../../tests/support/assert.ts";
import type { Secret } from "../../k8s/objects.ts";
import {
  type AuthProblem,
  type BasicAuth,
  readBasicAuth,
  type SecretContext,
} from "./basic_auth.ts";

const BCRYPT = "$2y$04$7LZxjdM/vPGHL/ykoix6teMbj9R59U7ek9D9TANnXFTc64RJIoQRm";
const APR1 = "$apr1$Dvr8tLvp$s7FUwjev/NI.SuXEKB56x1";

function secret(namespace: string, name: string, fields: Partial<Secret>): Secret {
  return { metadata: { namespace, name }, ...fields };
}

const SECRETS = new Map<string, Secret>([
  ["shop/users", secret("shop", "users", { data: { auth: btoa(`alice:${BCRYPT}\n`) } })],
  ["shop/plain", secret("shop", "plain", { stringData: { auth: `bob:${APR1}` } })],
  ["shop/map", secret("shop", "map", { data: { alice: btoa(BCRYPT), bob: btoa(APR1) } })],
  ["shop/no-auth-key", secret("shop", "no-auth-key", { data: { users: btoa(`a:${APR1}`) } })],
  ["shop/bad-line", secret("shop", "bad-line", { data: { auth: btoa("alice:hunter2\n") } })],
  ["shop/bad-base64", secret("shop", "bad-base64", { data: { auth: "!!!" } })],
  ["shop/latin1", secret("shop", "latin1", { data: { auth: btoa("j\xfcrgen:x") } })],
  ["shop/empty", secret("shop", "empty", { data: { auth: "" } })],
  ["other/users", secret("other", "users", { data: { auth: btoa(`carol:${APR1}`) } })],
]);

const CONTEXT: SecretContext = { namespace: "shop", secret: (key) => SECRETS.get(key) };

function readWith(
  annotations: Record<string, string>,
  context: SecretContext = CONTEXT,
): { basicAuth?: BasicAuth; problems: AuthProblem[] } {
  return readBasicAuth((name) => annotations[name], context);
}

Deno.test("readBasicAuth() reads the users of auth-file and auth-map Secrets, with the realm", () => {
  const cases: [string, Record<string, string>, BasicAuth, SecretContext?][] = [
    [
      "auth-file by default, realm empty (ingress-nginx)",
      { "auth-type": "basic", "auth-secret": "users" },
      { realm: "", users: { alice: BCRYPT } },
    ],
    [
      "stringData (manifests) and a realm",
      { "auth-type": "basic", "auth-secret": "plain", "auth-realm": "Shop admins: /admin" },
      { realm: "Shop admins: /admin", users: { bob: APR1 } },
    ],
    [
      "auth-map",
      { "auth-type": "basic", "auth-secret": "map", "auth-secret-type": "auth-map" },
      { realm: "", users: { alice: BCRYPT, bob: APR1 } },
    ],
    [
      "the own namespace written out",
      { "auth-type": "basic", "auth-secret": "shop/users" },
      { realm: "", users: { alice: BCRYPT } },
    ],
    [
      "another namespace, allowed",
      { "auth-type": "basic", "auth-secret": "other/users" },
      { realm: "", users: { carol: APR1 } },
      { ...CONTEXT, allowCrossNamespaceSecrets: true },
    ],
  ];
  for (const [name, annotations, expected, context] of cases) {
    assertEquals(readWith(annotations, context), { basicAuth: expected, problems: [] }, name);
  }
});

Deno.test("readBasicAuth() without auth-type reads nothing, as ingress-nginx", () => {
  assertEquals(readWith({ "auth-secret": "missing", "auth-realm": "x" }), { problems: [] });
});

Deno.test("readBasicAuth() fails closed: every problem is named and no users come out", () => {
  const cases: [string, Record<string, string>, AuthProblem[], SecretContext?][] = [
    [
      "digest",
      { "auth-type": "digest", "auth-secret": "users" },
      [{
        annotation: "auth-type",
        problem:
          '"digest" authentication is not implemented by Sluice; use "basic" with the same Secret made by htpasswd -B',
      }],
    ],
    [
      "unknown type",
      { "auth-type": "Basic", "auth-secret": "users" },
      [{ annotation: "auth-type", problem: '"Basic" is not an authentication type (basic)' }],
    ],
    [
      "no auth-secret",
      { "auth-type": "basic" },
      [{
        annotation: "auth-secret",
        problem: "it is missing; auth-type basic needs the Secret of its users",
      }],
    ],
    [
      "bad secret type",
      { "auth-type": "basic", "auth-secret": "users", "auth-secret-type": "htpasswd" },
      [{
        annotation: "auth-secret-type",
        problem: '"htpasswd" is not a secret type (auth-file or auth-map)',
      }],
    ],
    [
      "realm with a quote",
      { "auth-type": "basic", "auth-secret": "users", "auth-realm": 'a" b' },
      [{
        annotation: "auth-realm",
        problem: '"a\\" b" holds characters other than letters, digits, spaces and /-._~:',
      }],
    ],
    [
      "cross-namespace without the flag",
      { "auth-type": "basic", "auth-secret": "other/users" },
      [{
        annotation: "auth-secret",
        problem:
          'Secret "other/users" is in another namespace; set --allow-cross-namespace-secrets to allow it',
      }],
    ],
    [
      "not a name",
      { "auth-type": "basic", "auth-secret": "a/b/c" },
      [{ annotation: "auth-secret", problem: '"a/b/c" is not a Secret name or namespace/name' }],
    ],
    [
      "upper case name",
      { "auth-type": "basic", "auth-secret": "Users" },
      [{ annotation: "auth-secret", problem: '"Users" is not a Secret name or namespace/name' }],
    ],
    [
      "missing Secret",
      { "auth-type": "basic", "auth-secret": "nobody" },
      [{ annotation: "auth-secret", problem: 'Secret "shop/nobody" is not found' }],
    ],
    [
      "no Secret reader (fail closed)",
      { "auth-type": "basic", "auth-secret": "users" },
      [{ annotation: "auth-secret", problem: 'Secret "shop/users" is not found' }],
      { namespace: "shop" },
    ],
    [
      "no auth key",
      { "auth-type": "basic", "auth-secret": "no-auth-key" },
      [{ annotation: "auth-secret", problem: 'Secret "shop/no-auth-key": it has no key "auth"' }],
    ],
    [
      "a bad line",
      { "auth-type": "basic", "auth-secret": "bad-line" },
      [{
        annotation: "auth-secret",
        problem:
          'Secret "shop/bad-line": the key "auth": line 1: the password is not a bcrypt ($2a$, $2b$, $2y$), apr1 ($apr1$) or SHA-1 ({SHA}) hash; crypt, $1$ MD5, SHA-crypt and plain-text passwords are not supported (htpasswd -B makes bcrypt)',
      }],
    ],
    [
      "not base64",
      { "auth-type": "basic", "auth-secret": "bad-base64" },
      [{
        annotation: "auth-secret",
        problem: 'Secret "shop/bad-base64": the key "auth" is not valid base64',
      }],
    ],
    [
      "not UTF-8",
      { "auth-type": "basic", "auth-secret": "latin1" },
      [{
        annotation: "auth-secret",
        problem: 'Secret "shop/latin1": the key "auth" is not UTF-8 text',
      }],
    ],
    [
      "no users",
      { "auth-type": "basic", "auth-secret": "empty" },
      [{
        annotation: "auth-secret",
        problem: 'Secret "shop/empty": the key "auth": it lists no user',
      }],
    ],
    [
      "auth-map of an htpasswd Secret",
      { "auth-type": "basic", "auth-secret": "users", "auth-secret-type": "auth-map" },
      [{
        annotation: "auth-secret",
        problem:
          'Secret "shop/users": the password of user "auth" is not a bcrypt ($2a$, $2b$, $2y$), apr1 ($apr1$) or SHA-1 ({SHA}) hash; crypt, $1$ MD5, SHA-crypt and plain-text passwords are not supported (htpasswd -B makes bcrypt)',
      }],
    ],
  ];
  for (const [name, annotations, problems, context] of cases) {
    assertEquals(readWith(annotations, context), { problems }, name);
  }
});
