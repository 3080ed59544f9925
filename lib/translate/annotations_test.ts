/**
 * Which ingress-nginx annotations ask for access control, which are only
 * ignored, and the issue each Ingress gets: one table of annotation sets, and
 * the exact messages.
 *
 * @module
 */

import { assert, assertEquals, assertStringIncludes } from "../../tests/support/assert.ts";
import {
  accessControlRule,
  judgeAnnotations,
  NGINX_ACCESS_CONTROL,
  NGINX_PREFIX,
  reviewAnnotations,
} from "./annotations.ts";

const N = NGINX_PREFIX;

interface Case {
  readonly name: string;
  readonly annotations: unknown;
  /** Access-control annotations that are on, without the prefix. */
  readonly accessControl: readonly string[];
  /** Every ingress-nginx annotation, without the prefix. */
  readonly ignored: readonly string[];
}

const CASES: readonly Case[] = [
  { name: "no annotations", annotations: undefined, accessControl: [], ignored: [] },
  { name: "annotations null", annotations: null, accessControl: [], ignored: [] },
  { name: "annotations a string", annotations: "auth-url", accessControl: [], ignored: [] },
  {
    name: "annotations an array",
    annotations: [`${N}auth-url`],
    accessControl: [],
    ignored: [],
  },
  {
    name: "other tools' annotations only",
    annotations: {
      "kubectl.kubernetes.io/last-applied-configuration": "{}",
      "argocd.argoproj.io/sync-wave": "1",
      "meta.helm.sh/release-name": "shop",
      "kubernetes.io/ingress.class": "sluice",
      "traefik.ingress.kubernetes.io/router.middlewares": "auth-basic@kubernetescrd",
      "nginx.org/basic-auth-secret": "users",
      "ingress.kubernetes.io/auth-url": "https://auth.example",
    },
    accessControl: [],
    ignored: [],
  },
  {
    name: "behaviour only",
    annotations: {
      [`${N}rewrite-target`]: "/$2",
      [`${N}use-regex`]: "true",
      [`${N}ssl-redirect`]: "false",
      [`${N}backend-protocol`]: "HTTPS",
      [`${N}proxy-body-size`]: "8m",
      [`${N}affinity`]: "cookie",
      [`${N}canary`]: "true",
      [`${N}limit-rps`]: "5",
      [`${N}enable-cors`]: "true",
    },
    accessControl: [],
    ignored: [
      "affinity",
      "backend-protocol",
      "canary",
      "enable-cors",
      "limit-rps",
      "proxy-body-size",
      "rewrite-target",
      "ssl-redirect",
      "use-regex",
    ],
  },
  {
    name: "external auth",
    annotations: { [`${N}auth-url`]: "http://oauth2-proxy.auth/oauth2/auth" },
    accessControl: ["auth-url"],
    ignored: ["auth-url"],
  },
  {
    name: "basic auth",
    annotations: { [`${N}auth-type`]: "basic", [`${N}auth-secret`]: "users" },
    accessControl: ["auth-secret", "auth-type"],
    ignored: ["auth-secret", "auth-type"],
  },
  {
    name: "client certificates",
    annotations: {
      [`${N}auth-tls-secret`]: "shop/ca",
      [`${N}auth-tls-verify-client`]: "on",
      [`${N}auth-tls-pass-certificate-to-upstream`]: "true",
    },
    accessControl: [
      "auth-tls-pass-certificate-to-upstream",
      "auth-tls-secret",
      "auth-tls-verify-client",
    ],
    ignored: ["auth-tls-pass-certificate-to-upstream", "auth-tls-secret", "auth-tls-verify-client"],
  },
  {
    name: "source ranges, old and new names",
    annotations: {
      [`${N}whitelist-source-range`]: "10.0.0.0/8",
      [`${N}allowlist-source-range`]: "10.0.0.0/8",
      [`${N}denylist-source-range`]: "192.0.2.0/24",
      [`${N}satisfy`]: "any",
    },
    accessControl: [
      "allowlist-source-range",
      "denylist-source-range",
      "satisfy",
      "whitelist-source-range",
    ],
    ignored: [
      "allowlist-source-range",
      "denylist-source-range",
      "satisfy",
      "whitelist-source-range",
    ],
  },
  {
    name: "snippets and ModSecurity",
    annotations: {
      [`${N}configuration-snippet`]: "deny all;",
      [`${N}server-snippet`]: "location /metrics { deny all; }",
      [`${N}enable-modsecurity`]: "true",
    },
    accessControl: ["configuration-snippet", "enable-modsecurity", "server-snippet"],
    ignored: ["configuration-snippet", "enable-modsecurity", "server-snippet"],
  },
  {
    name: "global auth: on unless a ParseBool false",
    annotations: {
      [`${N}enable-global-auth`]: "true",
      [`${N}global-auth-url`]: "https://auth.example",
    },
    accessControl: ["enable-global-auth", "global-auth-url"],
    ignored: ["enable-global-auth", "global-auth-url"],
  },
  ...["false", "False", "FALSE", "0", "f", "F"].map((value) => ({
    name: `enable-global-auth "${value}" is off`,
    annotations: { [`${N}enable-global-auth`]: value },
    accessControl: [],
    ignored: ["enable-global-auth"],
  })),
  ...[" false", "no", "off", "yes", "fALSE"].map((value) => ({
    name: `enable-global-auth "${value}" is not a ParseBool false, so on`,
    annotations: { [`${N}enable-global-auth`]: value },
    accessControl: ["enable-global-auth"],
    ignored: ["enable-global-auth"],
  })),
  {
    name: "auth-tls-verify-client off and pass-certificate false are off",
    annotations: {
      [`${N}auth-tls-verify-client`]: "off",
      [`${N}auth-tls-pass-certificate-to-upstream`]: "false",
    },
    accessControl: [],
    ignored: ["auth-tls-pass-certificate-to-upstream", "auth-tls-verify-client"],
  },
  {
    name: "empty values are unset, whitespace is not",
    annotations: { [`${N}auth-url`]: "", [`${N}whitelist-source-range`]: " " },
    accessControl: ["whitelist-source-range"],
    ignored: ["auth-url", "whitelist-source-range"],
  },
  {
    name: "non-string values from hand-written manifests",
    annotations: {
      [`${N}enable-global-auth`]: false,
      [`${N}enable-modsecurity`]: true,
      [`${N}auth-tls-verify-depth`]: 2,
      [`${N}auth-url`]: null,
      [`${N}auth-secret`]: { name: "users" },
      [`${N}whitelist-source-range`]: ["10.0.0.0/8"],
    },
    accessControl: [
      "auth-secret",
      "auth-tls-verify-depth",
      "enable-modsecurity",
      "whitelist-source-range",
    ],
    ignored: [
      "auth-secret",
      "auth-tls-verify-depth",
      "auth-url",
      "enable-global-auth",
      "enable-modsecurity",
      "whitelist-source-range",
    ],
  },
  {
    name: "names are case-sensitive, as Kubernetes keys are",
    annotations: { "NGINX.ingress.kubernetes.io/auth-url": "x", [`${N}Auth-Url`]: "x" },
    accessControl: [],
    ignored: ["Auth-Url"],
  },
  {
    name: "an inherited or __proto__ key is read as data, never from the prototype",
    annotations: JSON.parse(`{"__proto__": {"${N}auth-url": "x"}, "${N}toString": "x"}`),
    accessControl: [],
    ignored: ["toString"],
  },
];

for (const c of CASES) {
  Deno.test(`reviewAnnotations() sorts ${c.name}`, () => {
    const review = reviewAnnotations(c.annotations);
    assertEquals(review, {
      accessControl: c.accessControl.map((n) => N + n),
      ignored: c.ignored.map((n) => N + n),
    });
  });
}

Deno.test("every access-control entry says why ignoring it would let requests in", () => {
  const entries = Object.entries(NGINX_ACCESS_CONTROL);
  assert(entries.length >= 30, `${entries.length} entries`);
  for (const [name, rule] of entries) {
    assert(rule.reason.length >= 20, `${name}: ${rule.reason}`);
    assertEquals(name, name.toLowerCase());
    assert(!name.startsWith(N), name);
  }
  // The ones the migration most often carries.
  for (
    const name of [
      "auth-url",
      "auth-type",
      "auth-secret",
      "auth-tls-secret",
      "auth-tls-verify-client",
      "whitelist-source-range",
      "allowlist-source-range",
      "denylist-source-range",
      "satisfy",
      "enable-global-auth",
      "global-auth-url",
    ]
  ) {
    assert(accessControlRule(name) !== undefined, name);
  }
  for (
    const name of ["rewrite-target", "use-regex", "canary", "limit-rps", "toString", "constructor"]
  ) {
    assertEquals(accessControlRule(name), undefined, name);
  }
});

const SHOP = { namespace: "shop", name: "web" };

Deno.test("judgeAnnotations() refuses an Ingress with one access-control annotation, naming it and the Ingress", () => {
  const verdict = judgeAnnotations({
    ...SHOP,
    annotations: { [`${N}auth-url`]: "https://auth.example", [`${N}rewrite-target`]: "/" },
  });
  assertEquals(verdict, {
    refused: true,
    issues: [{
      kind: "Ingress",
      namespace: "shop",
      name: "web",
      field: "metadata.annotations",
      message: `Cannot serve Ingress "shop/web": annotation "${N}auth-url" asks for access ` +
        "control Sluice does not enforce, so its routes answer 503; remove it or put the " +
        "control in front of Sluice",
    }],
  });
});

Deno.test("judgeAnnotations() names several access-control annotations in one issue", () => {
  const verdict = judgeAnnotations({
    ...SHOP,
    annotations: { [`${N}auth-type`]: "basic", [`${N}auth-secret`]: "users" },
  });
  assertEquals(verdict.refused, true);
  assertEquals(verdict.issues.length, 1);
  assertStringIncludes(
    verdict.issues[0]!.message,
    `annotations "${N}auth-secret", "${N}auth-type" ask for access control`,
  );
  assertStringIncludes(verdict.issues[0]!.message, "remove them or put");
});

Deno.test("judgeAnnotations() serves behaviour-only annotations with one warning listing them", () => {
  const verdict = judgeAnnotations({
    ...SHOP,
    annotations: {
      [`${N}use-regex`]: "true",
      [`${N}rewrite-target`]: "/$1",
      "kubectl.kubernetes.io/last-applied-configuration": "{}",
    },
  });
  assertEquals(verdict, {
    refused: false,
    issues: [{
      kind: "Ingress",
      namespace: "shop",
      name: "web",
      field: "metadata.annotations",
      message: `Ingress "shop/web": annotations ignored (Sluice supports none): ` +
        `${N}rewrite-target, ${N}use-regex`,
    }],
  });
});

Deno.test("judgeAnnotations() gives no issue to an Ingress without ingress-nginx annotations", () => {
  assertEquals(
    judgeAnnotations({ ...SHOP, annotations: { "argocd.argoproj.io/sync-wave": "1" } }),
    { refused: false, issues: [] },
  );
  assertEquals(judgeAnnotations({ ...SHOP, annotations: undefined }), {
    refused: false,
    issues: [],
  });
});

Deno.test("judgeAnnotations() serves access control when told to ignore it, and says so", () => {
  const verdict = judgeAnnotations(
    { ...SHOP, annotations: { [`${N}auth-url`]: "x", [`${N}ssl-redirect`]: "false" } },
    { ignoreAccessAnnotations: true },
  );
  assertEquals(verdict.refused, false);
  assertEquals(
    verdict.issues.map((i) => i.message),
    [
      `Ingress "shop/web": annotations ignored (Sluice supports none): ${N}auth-url, ` +
      `${N}ssl-redirect; access control not enforced (--ignore-access-annotations): ${N}auth-url`,
    ],
  );
  // The option has no say when nothing asks for access control.
  assertEquals(
    judgeAnnotations({ ...SHOP, annotations: { [`${N}auth-url`]: "x" } }, {
      ignoreAccessAnnotations: false,
    }).refused,
    true,
  );
});

Deno.test("judgeAnnotations() lists at most 20 names and counts the rest", () => {
  const annotations: Record<string, string> = {};
  for (let i = 0; i < 1000; i++) annotations[`${N}x-${String(i).padStart(4, "0")}`] = "1";
  for (let i = 0; i < 25; i++) annotations[`${N}global-auth-${String(i).padStart(2, "0")}`] = "1";
  const refused = judgeAnnotations({ ...SHOP, annotations });
  assertEquals(refused.refused, true);
  assertStringIncludes(refused.issues[0]!.message, `"${N}global-auth-19" and 5 more ask`);
  const served = judgeAnnotations({ ...SHOP, annotations }, { ignoreAccessAnnotations: true });
  assertStringIncludes(served.issues[0]!.message, `${N}global-auth-19 and 1005 more;`);
  assert(served.issues[0]!.message.endsWith(`${N}global-auth-19 and 5 more`));
  assert(served.issues[0]!.message.length < 3000, `${served.issues[0]!.message.length} characters`);
});
