/**
 * What an Ingress's ingress-nginx annotations mean for serving it: which are
 * served, accepted, ignored or refused (`reviewAnnotations`), and the verdict
 * with its issues (`judgeAnnotations`): one table of annotation sets, and the
 * exact messages.
 *
 * @module
 */

import { assert, assertEquals, assertStringIncludes } from "../../../tests/support/assert.ts";
import { annotationEntry, NGINX_ANNOTATIONS } from "./catalogue.ts";
import { judgeAnnotations, NGINX_PREFIX, reviewAnnotations } from "./ingress_annotations.ts";

const N = NGINX_PREFIX;

interface Case {
  readonly name: string;
  readonly annotations: unknown;
  /** Names without the prefix, by what Sluice does with them. */
  readonly refused?: readonly string[];
  readonly served?: readonly string[];
  readonly accepted?: readonly string[];
  readonly ignored?: readonly string[];
}

const CASES: readonly Case[] = [
  { name: "no annotations", annotations: undefined },
  { name: "annotations null", annotations: null },
  { name: "annotations a string", annotations: "auth-url" },
  { name: "annotations an array", annotations: [`${N}auth-url`] },
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
  },
  {
    name: "behaviour only",
    annotations: {
      [`${N}rewrite-target`]: "/$2",
      [`${N}use-regex`]: "true",
      [`${N}ssl-redirect`]: "false",
      [`${N}backend-protocol`]: "HTTPS",
      [`${N}proxy-body-size`]: "8m",
      [`${N}proxy-buffering`]: "off",
      [`${N}affinity`]: "cookie",
      [`${N}canary`]: "true",
      [`${N}limit-rps`]: "5",
      [`${N}enable-cors`]: "true",
    },
    served: ["canary", "enable-cors", "limit-rps", "proxy-body-size", "ssl-redirect"],
    accepted: ["proxy-buffering"],
    ignored: ["affinity", "backend-protocol", "rewrite-target", "use-regex"],
  },
  {
    name: "external auth",
    annotations: { [`${N}auth-url`]: "http://oauth2-proxy.auth/oauth2/auth" },
    refused: ["auth-url"],
  },
  {
    name: "external auth with its companions",
    annotations: {
      [`${N}auth-url`]: "http://oauth2-proxy.auth/oauth2/auth",
      [`${N}auth-signin`]: "https://auth.example/start?rd=$escaped_request_uri",
      [`${N}auth-response-headers`]: "X-User",
    },
    refused: ["auth-response-headers", "auth-signin", "auth-url"],
  },
  {
    name: "client certificates",
    annotations: {
      [`${N}auth-tls-secret`]: "shop/ca",
      [`${N}auth-tls-verify-client`]: "on",
      [`${N}auth-tls-pass-certificate-to-upstream`]: "true",
    },
    refused: ["auth-tls-pass-certificate-to-upstream", "auth-tls-secret", "auth-tls-verify-client"],
  },
  {
    name: "source ranges, old and new names, served; satisfy refused",
    annotations: {
      [`${N}whitelist-source-range`]: "10.0.0.0/8",
      [`${N}allowlist-source-range`]: "10.0.0.0/8",
      [`${N}denylist-source-range`]: "192.0.2.0/24",
      [`${N}satisfy`]: "any",
    },
    refused: ["satisfy"],
    served: ["allowlist-source-range", "denylist-source-range", "whitelist-source-range"],
  },
  {
    name: "snippets and ModSecurity",
    annotations: {
      [`${N}configuration-snippet`]: "deny all;",
      [`${N}server-snippet`]: "location /metrics { deny all; }",
      [`${N}enable-modsecurity`]: "true",
    },
    refused: ["configuration-snippet", "enable-modsecurity", "server-snippet"],
  },
  {
    name: "global auth: on unless a ParseBool false",
    annotations: {
      [`${N}enable-global-auth`]: "true",
      [`${N}global-auth-url`]: "https://auth.example",
    },
    refused: ["enable-global-auth", "global-auth-url"],
  },
  ...["false", "False", "FALSE", "0", "f", "F"].map((value) => ({
    name: `enable-global-auth "${value}" is off`,
    annotations: { [`${N}enable-global-auth`]: value },
    ignored: ["enable-global-auth"],
  })),
  ...[" false", "no", "off", "yes", "fALSE"].map((value) => ({
    name: `enable-global-auth "${value}" is not a ParseBool false, so on`,
    annotations: { [`${N}enable-global-auth`]: value },
    refused: ["enable-global-auth"],
  })),
  {
    name: "auth-tls-verify-client off and pass-certificate false are off",
    annotations: {
      [`${N}auth-tls-verify-client`]: "off",
      [`${N}auth-tls-pass-certificate-to-upstream`]: "false",
    },
    ignored: ["auth-tls-pass-certificate-to-upstream", "auth-tls-verify-client"],
  },
  {
    name: "empty values are unset, whitespace is not",
    annotations: {
      [`${N}auth-url`]: "",
      [`${N}proxy-body-size`]: "",
      [`${N}whitelist-source-range`]: " ",
    },
    served: ["whitelist-source-range"],
    ignored: ["auth-url"],
  },
  {
    name: "non-string values from hand-written manifests",
    annotations: {
      [`${N}enable-global-auth`]: false,
      [`${N}enable-modsecurity`]: true,
      [`${N}auth-tls-verify-depth`]: 2,
      [`${N}auth-url`]: null,
      [`${N}auth-signin`]: { url: "https://auth.example" },
      [`${N}whitelist-source-range`]: ["10.0.0.0/8"],
      [`${N}proxy-body-size`]: 0,
    },
    refused: ["auth-signin", "auth-tls-verify-depth", "enable-modsecurity"],
    served: ["proxy-body-size", "whitelist-source-range"],
    ignored: ["auth-url", "enable-global-auth"],
  },
  {
    name: "names are case-sensitive, as Kubernetes keys are",
    annotations: { "NGINX.ingress.kubernetes.io/auth-url": "x", [`${N}Auth-Url`]: "x" },
    ignored: ["Auth-Url"],
  },
  {
    name: "an inherited or __proto__ key is read as data, never from the prototype",
    annotations: JSON.parse(`{"__proto__": {"${N}auth-url": "x"}, "${N}toString": "x"}`),
    ignored: ["toString"],
  },
];

for (const c of CASES) {
  Deno.test(`reviewAnnotations() sorts ${c.name}`, () => {
    const full = (names: readonly string[] | undefined) => (names ?? []).map((n) => N + n);
    assertEquals(reviewAnnotations(c.annotations), {
      refused: full(c.refused),
      served: full(c.served),
      accepted: full(c.accepted),
      ignored: full(c.ignored),
    });
  });
}

Deno.test("every refused catalogue entry says why ignoring it would be unsafe", () => {
  const entries = Object.entries(NGINX_ANNOTATIONS);
  assert(entries.length >= 100, `${entries.length} entries`);
  for (const [name, entry] of entries) {
    assertEquals(name, name.toLowerCase());
    assert(!name.startsWith(N), name);
    if (entry.support === "refused") assert(entry.note.length >= 20, `${name}: ${entry.note}`);
  }
  for (
    const name of [
      "auth-url",
      "auth-tls-secret",
      "auth-tls-verify-client",
      "satisfy",
      "enable-global-auth",
      "global-auth-url",
      "global-auth-anything",
      "configuration-snippet",
    ]
  ) {
    assertEquals(annotationEntry(name)?.support, "refused", name);
  }
  for (
    const name of [
      "whitelist-source-range",
      "allowlist-source-range",
      "denylist-source-range",
      "proxy-body-size",
      "enable-cors",
      "permanent-redirect",
      "app-root",
    ]
  ) {
    assertEquals(annotationEntry(name)?.support, "served", name);
  }
  for (const name of ["toString", "constructor", "__proto__", "hasOwnProperty"]) {
    assertEquals(annotationEntry(name), undefined, name);
  }
});

const SHOP = { namespace: "shop", name: "web" };
const AT = { kind: "Ingress", namespace: "shop", name: "web", field: "metadata.annotations" };

Deno.test("judgeAnnotations() refuses an Ingress with one access-control annotation, naming it and the Ingress", () => {
  const verdict = judgeAnnotations({
    ...SHOP,
    annotations: { [`${N}auth-url`]: "https://auth.example", [`${N}rewrite-target`]: "/" },
  });
  assertEquals(verdict, {
    refused: true,
    issues: [{
      ...AT,
      message: `Cannot serve Ingress "shop/web": annotation "${N}auth-url" asks for access ` +
        "control Sluice does not enforce, so its routes answer 503; remove it or put the " +
        "control in front of Sluice",
    }],
  });
});

Deno.test("judgeAnnotations() names several access-control annotations in one issue", () => {
  const verdict = judgeAnnotations({
    ...SHOP,
    annotations: { [`${N}auth-url`]: "https://auth.example", [`${N}satisfy`]: "any" },
  });
  assertEquals(verdict.refused, true);
  assertEquals(verdict.issues.length, 1);
  assertStringIncludes(
    verdict.issues[0]!.message,
    `annotations "${N}auth-url", "${N}satisfy" ask for access control`,
  );
  assertStringIncludes(verdict.issues[0]!.message, "remove them or put");
});

Deno.test("judgeAnnotations() serves ignored annotations with one warning listing them", () => {
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
      ...AT,
      message: `Ingress "shop/web": annotations ignored: ${N}rewrite-target, ${N}use-regex`,
    }],
  });
});

Deno.test("judgeAnnotations() serves served annotations with their behaviour and no issue", () => {
  const verdict = judgeAnnotations({
    ...SHOP,
    annotations: {
      [`${N}whitelist-source-range`]: "10.0.0.0/8",
      [`${N}proxy-body-size`]: "1m",
      [`${N}proxy-buffering`]: "off",
      [`${N}ssl-redirect`]: "",
    },
  });
  assertEquals(verdict, {
    refused: false,
    behaviour: { allow: ["10.0.0.0/8"], maxBodyBytes: 1024 * 1024 },
    issues: [],
  });
});

Deno.test("judgeAnnotations() refuses an Ingress whose served annotation does not parse, naming the annotation and the reason", () => {
  const verdict = judgeAnnotations({
    ...SHOP,
    annotations: {
      [`${N}whitelist-source-range`]: "10.0.0.0/33",
      [`${N}proxy-body-size`]: "8m",
      [`${N}use-regex`]: "true",
    },
  });
  assertEquals(verdict, {
    refused: true,
    issues: [
      {
        ...AT,
        field: `metadata.annotations.${N}whitelist-source-range`,
        message: `Cannot serve Ingress "shop/web": annotation "${N}whitelist-source-range": ` +
          `"10.0.0.0/33" has a prefix length outside 0 to 32, so its routes answer 503`,
      },
      { ...AT, message: `Ingress "shop/web": annotations ignored: ${N}use-regex` },
    ],
  });
});

Deno.test("judgeAnnotations() refuses an allowlist that is not a string: an odd value never opens access", () => {
  for (const value of [["10.0.0.0/8"], { cidr: "10.0.0.0/8" }, " ", ",", true]) {
    const verdict = judgeAnnotations({
      ...SHOP,
      annotations: { [`${N}whitelist-source-range`]: value },
    });
    assertEquals(verdict.refused, true, JSON.stringify(value));
    assertEquals(verdict.behaviour, undefined);
    assertEquals(verdict.issues.length, 1);
  }
});

Deno.test("judgeAnnotations() lists every invalid served annotation, plus the refused ones", () => {
  const verdict = judgeAnnotations({
    ...SHOP,
    annotations: {
      [`${N}proxy-body-size`]: "1.5m",
      [`${N}permanent-redirect`]: "https://$host/",
      [`${N}auth-url`]: "https://auth.example",
    },
  });
  assertEquals(verdict.refused, true);
  assertEquals(verdict.issues.map((i) => i.field), [
    `metadata.annotations.${N}permanent-redirect`,
    `metadata.annotations.${N}proxy-body-size`,
    "metadata.annotations",
  ]);
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
    {
      ...SHOP,
      annotations: {
        [`${N}auth-url`]: "x",
        [`${N}use-regex`]: "true",
        [`${N}ssl-redirect`]: "false",
      },
    },
    { ignoreAccessAnnotations: true },
  );
  assertEquals(verdict, {
    refused: false,
    behaviour: { sslRedirect: false },
    issues: [{
      ...AT,
      message: `Ingress "shop/web": annotations ignored: ${N}use-regex; ` +
        `access control not enforced (--ignore-access-annotations): ${N}auth-url`,
    }],
  });
  // The option has no say when nothing asks for access control.
  assertEquals(
    judgeAnnotations({ ...SHOP, annotations: { [`${N}auth-url`]: "x" } }, {
      ignoreAccessAnnotations: false,
    }).refused,
    true,
  );
});

Deno.test("judgeAnnotations() still refuses an invalid served annotation when told to ignore access control", () => {
  const verdict = judgeAnnotations(
    { ...SHOP, annotations: { [`${N}denylist-source-range`]: "not-a-cidr" } },
    { ignoreAccessAnnotations: true },
  );
  assertEquals(verdict.refused, true);
  assertEquals(verdict.behaviour, undefined);
});

Deno.test("judgeAnnotations() lists at most 20 names and counts the rest", () => {
  const annotations: Record<string, string> = {};
  for (let i = 0; i < 1000; i++) annotations[`${N}x-${String(i).padStart(4, "0")}`] = "1";
  for (let i = 0; i < 25; i++) annotations[`${N}global-auth-${String(i).padStart(2, "0")}`] = "1";
  const refused = judgeAnnotations({ ...SHOP, annotations });
  assertEquals(refused.refused, true);
  assertEquals(refused.issues.length, 1);
  assertStringIncludes(refused.issues[0]!.message, `"${N}global-auth-19" and 5 more ask`);
  const served = judgeAnnotations({ ...SHOP, annotations }, { ignoreAccessAnnotations: true });
  assertStringIncludes(served.issues[0]!.message, `${N}x-0019 and 980 more;`);
  assert(served.issues[0]!.message.endsWith(`${N}global-auth-19 and 5 more`));
  assert(served.issues[0]!.message.length < 3000, `${served.issues[0]!.message.length} characters`);
});

// Found by review: an empty allowlist served the protected Ingress to everyone.
Deno.test("judgeAnnotations() refuses an empty value of a served access-control annotation, as ingress-nginx", () => {
  for (
    const name of [
      "whitelist-source-range",
      "allowlist-source-range",
      "denylist-source-range",
      "auth-type",
    ]
  ) {
    const verdict = judgeAnnotations({
      namespace: "shop",
      name: "admin",
      annotations: { [`nginx.ingress.kubernetes.io/${name}`]: "" },
    });
    assertEquals(verdict.refused, true, name);
  }
  // With basic auth on, an empty Secret name or type too (without auth-type they mean nothing).
  for (const name of ["auth-secret", "auth-secret-type"]) {
    const verdict = judgeAnnotations({
      namespace: "shop",
      name: "admin",
      annotations: {
        "nginx.ingress.kubernetes.io/auth-type": "basic",
        "nginx.ingress.kubernetes.io/auth-secret": "users",
        [`nginx.ingress.kubernetes.io/${name}`]: "",
      },
    });
    assertEquals(verdict.refused, true, name);
  }
  // Elsewhere an empty value is unset.
  for (const name of ["ssl-redirect", "proxy-body-size", "enable-cors", "auth-url"]) {
    const verdict = judgeAnnotations({
      namespace: "shop",
      name: "web",
      annotations: { [`nginx.ingress.kubernetes.io/${name}`]: "" },
    });
    assertEquals(verdict.refused, false, name);
  }
});
