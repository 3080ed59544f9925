import { assert, assertEquals, assertStringIncludes } from "../../tests/support/assert.ts";
import type { Ingress, Secret } from "../k8s/objects.ts";
import { annotationEntry, NGINX_ANNOTATIONS } from "../translate/nginx/catalogue.ts";
import { judgeAnnotations } from "../translate/nginx/ingress_annotations.ts";
import {
  type AnnotationCheck,
  checkIngress,
  checkIngresses,
  exitCodeOf,
  type IngressVerdict,
  reportJson,
  reportText,
  secretsAskedFor,
} from "./migrate_check.ts";

const P = "nginx.ingress.kubernetes.io/";

function ingress(
  annotations: Record<string, unknown> | undefined,
  options: { namespace?: string; name?: string; className?: string } = {},
): Ingress {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "Ingress",
    metadata: {
      name: options.name ?? "web",
      namespace: options.namespace ?? "shop",
      ...(annotations === undefined ? {} : { annotations: annotations as Record<string, string> }),
    },
    spec: options.className === undefined ? {} : { ingressClassName: options.className },
  };
}

/** The catalogue's note of an annotation (the tests read it, so a reworded note changes nothing). */
function note(name: string): string {
  const entry = annotationEntry(name);
  if (entry === undefined) throw new Error(`No catalogue entry "${name}"`);
  return entry.note;
}

interface Case {
  readonly name: string;
  readonly annotations: Record<string, unknown> | undefined;
  readonly waived?: boolean;
  readonly verdict: IngressVerdict;
  /** Expected annotations, by short name: [verdict, note (a function of the catalogue)]. */
  readonly expected: Record<string, readonly [AnnotationCheck["verdict"], string]>;
}

const CASES: readonly Case[] = [
  {
    name: "an Ingress without annotations is served as ingress-nginx did",
    annotations: undefined,
    verdict: "same",
    expected: {},
  },
  {
    name: "other tools' annotations are not listed",
    annotations: {
      "kubectl.kubernetes.io/last-applied-configuration": "{}",
      "traefik.ingress.kubernetes.io/router.middlewares": "auth@kubernetescrd",
    },
    verdict: "same",
    expected: {},
  },
  {
    name: "a served annotation with a valid value is served",
    annotations: { [`${P}ssl-redirect`]: "false" },
    verdict: "same",
    expected: { "ssl-redirect": ["served", note("ssl-redirect")] },
  },
  {
    name: "an accepted annotation leaves the Ingress as ingress-nginx served it",
    annotations: { [`${P}proxy-buffering`]: "on" },
    verdict: "same",
    expected: { "proxy-buffering": ["accepted", note("proxy-buffering")] },
  },
  {
    name: "an ignored annotation says how behaviour differs",
    annotations: { [`${P}http2-push-preload`]: "true" },
    verdict: "differs",
    expected: { "http2-push-preload": ["ignored", note("http2-push-preload")] },
  },
  {
    name: "an annotation the catalogue does not know is ignored",
    annotations: { [`${P}frobnicate`]: "yes" },
    verdict: "differs",
    expected: { frobnicate: ["ignored", "not an annotation Sluice knows: ignored"] },
  },
  {
    name: "a refused annotation refuses the Ingress, with the catalogue's reason",
    annotations: { [`${P}configuration-snippet`]: "deny all;" },
    verdict: "refused",
    expected: { "configuration-snippet": ["refused", note("configuration-snippet")] },
  },
  {
    name: "a refused prefix (global-auth-*) refuses the Ingress",
    annotations: { [`${P}global-auth-url`]: "http://auth/" },
    verdict: "refused",
    expected: { "global-auth-url": ["refused", note("global-auth-url")] },
  },
  {
    name: "a refused annotation that is off is ignored",
    annotations: { [`${P}enable-modsecurity`]: "false" },
    verdict: "differs",
    expected: { "enable-modsecurity": ["ignored", "off: nothing to enforce"] },
  },
  {
    name: "a refused annotation with an empty value is off",
    annotations: { [`${P}server-snippet`]: "" },
    verdict: "differs",
    expected: { "server-snippet": ["ignored", "off: nothing to enforce"] },
  },
  {
    name: 'an off value must match exactly: " false" turns it on',
    annotations: { [`${P}enable-modsecurity`]: " false" },
    verdict: "refused",
    expected: { "enable-modsecurity": ["refused", note("enable-modsecurity")] },
  },
  {
    name: "a served annotation whose value does not parse refuses the Ingress, with the problem",
    annotations: { [`${P}proxy-body-size`]: "8q" },
    verdict: "refused",
    expected: {
      "proxy-body-size": [
        "refused",
        'invalid value: "8q" is not a size (a number, optionally with k, m or g)',
      ],
    },
  },
  {
    name: "a hand-written number counts as its text",
    annotations: { [`${P}proxy-body-size`]: 1024 },
    verdict: "same",
    expected: { "proxy-body-size": ["served", note("proxy-body-size")] },
  },
  {
    name: "--ignore-access-annotations: a refused annotation is not enforced, so ignored",
    annotations: { [`${P}configuration-snippet`]: "deny all;" },
    waived: true,
    verdict: "differs",
    expected: {
      "configuration-snippet": [
        "ignored",
        `${note("configuration-snippet")}; not enforced (--ignore-access-annotations)`,
      ],
    },
  },
  {
    name: "--ignore-access-annotations does not waive an invalid value",
    annotations: { [`${P}proxy-body-size`]: "-1" },
    waived: true,
    verdict: "refused",
    expected: { "proxy-body-size": ["refused", ""] },
  },
  {
    name: "annotations are listed sorted; the worst one decides the Ingress",
    annotations: {
      [`${P}ssl-redirect`]: "true",
      [`${P}http2-push-preload`]: "true",
      [`${P}configuration-snippet`]: "x",
    },
    verdict: "refused",
    expected: {
      "configuration-snippet": ["refused", note("configuration-snippet")],
      "http2-push-preload": ["ignored", note("http2-push-preload")],
      "ssl-redirect": ["served", note("ssl-redirect")],
    },
  },
];

for (const c of CASES) {
  Deno.test(`checkIngress(): ${c.name}`, () => {
    const check = checkIngress(ingress(c.annotations), {
      ignoreAccessAnnotations: c.waived === true,
    });
    assertEquals(check.verdict, c.verdict);
    const names = check.annotations.map((a) => a.name);
    assertEquals(names, Object.keys(c.expected).map((short) => P + short).sort());
    for (const a of check.annotations) {
      const [verdict, expectedNote] = c.expected[a.name.slice(P.length)]!;
      assertEquals(a.verdict, verdict, a.name);
      if (expectedNote !== "") assertEquals(a.note, expectedNote, a.name);
      assertEquals(a.problem !== undefined, a.note.startsWith("invalid"), a.name);
    }
  });
}

Deno.test("checkIngress() keeps the value as text", () => {
  const check = checkIngress(ingress({ [`${P}proxy-body-size`]: 8 }));
  assertEquals(check.annotations[0]?.value, "8");
});

Deno.test("checkIngress() says which class an Ingress names, and where", () => {
  assertEquals(
    pickClass(checkIngress(ingress(undefined, { className: "nginx" }))),
    ["nginx", "spec.ingressClassName"],
  );
  assertEquals(
    pickClass(checkIngress(ingress({ "kubernetes.io/ingress.class": "nginx" }))),
    ["nginx", "kubernetes.io/ingress.class"],
  );
  // spec.ingressClassName wins over the legacy annotation, as in class selection.
  assertEquals(
    pickClass(
      checkIngress(ingress({ "kubernetes.io/ingress.class": "old" }, { className: "new" })),
    ),
    ["new", "spec.ingressClassName"],
  );
  assertEquals(pickClass(checkIngress(ingress(undefined))), [null, null]);
});

function pickClass(check: { ingressClass: string | null; classField: string | null }) {
  return [check.ingressClass, check.classField];
}

Deno.test("checkIngresses() sorts by namespace/name, counts verdicts, and filters by class", () => {
  const objects = [
    { object: ingress({ [`${P}server-snippet`]: "x" }, { namespace: "b", name: "a" }) },
    { object: ingress(undefined, { namespace: "a", name: "z", className: "nginx" }) },
    { object: ingress({ [`${P}canary-weight`]: "5" }, { namespace: "a", name: "b" }) },
  ];
  const report = checkIngresses(objects);
  assertEquals(report.ingresses.map((i) => `${i.namespace}/${i.name}`), ["a/b", "a/z", "b/a"]);
  assertEquals(report.summary.ingresses, 3);
  assertEquals(report.summary.refused, 1);
  assertEquals(report.summary.same + report.summary.differs, 2);
  assertEquals(exitCodeOf(report), 1);

  const nginx = checkIngresses(objects, { ingressClasses: ["nginx"] });
  assertEquals(nginx.ingresses.map((i) => i.name), ["z"]);
  assertEquals(exitCodeOf(nginx), 0);
  assertEquals(checkIngresses([]).summary, { ingresses: 0, same: 0, differs: 0, refused: 0 });
});

Deno.test("an Ingress's namespace defaults to default", () => {
  const object = ingress(undefined);
  delete object.metadata!.namespace;
  assertEquals(checkIngress(object).namespace, "default");
});

Deno.test("reportText() shows each Ingress with its class, verdict and annotations, then a summary", () => {
  const report = checkIngresses([
    {
      object: ingress(
        { [`${P}configuration-snippet`]: "deny all;", [`${P}ssl-redirect`]: "true" },
        {
          className: "nginx",
        },
      ),
      source: "web.yaml",
    },
    { object: ingress(undefined, { name: "plain" }) },
  ]);
  assertEquals(
    reportText(report),
    [
      "Ingress shop/plain: no class",
      "  served as ingress-nginx did",
      "  no ingress-nginx annotations",
      "",
      'Ingress shop/web: class "nginx" (spec.ingressClassName), file web.yaml',
      "  REFUSED: its routes would answer 503",
      `  refused  configuration-snippet: "deny all;"  (${note("configuration-snippet")})`,
      `  served   ssl-redirect: "true"  (${note("ssl-redirect")})`,
      "",
      "2 Ingresses: 1 served as ingress-nginx did, 0 served with differences, 1 refused.",
      "",
    ].join("\n"),
  );
  assertEquals(reportText(checkIngresses([])), "No Ingresses found.\n");
});

Deno.test("reportText() shortens long values to one line; reportJson() keeps them whole", () => {
  const long = "more_set_headers 'X: y';\n".repeat(10);
  const report = checkIngresses([{ object: ingress({ [`${P}configuration-snippet`]: long }) }]);
  const line = reportText(report).split("\n").find((l) => l.includes("configuration-snippet"))!;
  assert(line.length < 200, line);
  assert(line.includes('…"'), line);
  const json = JSON.parse(reportJson(report));
  assertEquals(json.ingresses[0].annotations[0].value, long);
});

Deno.test("for every catalogue annotation, checkIngress() refuses exactly when serving does", () => {
  for (const name of [...Object.keys(NGINX_ANNOTATIONS), "global-auth-url"]) {
    for (const value of ["x", "true", "false", "1", "off", "", "10m", "basic"]) {
      for (const waived of [false, true]) {
        const object = ingress({ [P + name]: value });
        const check = checkIngress(object, { ignoreAccessAnnotations: waived });
        const served = judgeAnnotations(
          { namespace: "shop", name: "web", annotations: object.metadata!.annotations },
          { ignoreAccessAnnotations: waived },
        );
        assertEquals(
          check.verdict === "refused",
          served.refused,
          `${name}: ${JSON.stringify(value)}${waived ? " (waived)" : ""}`,
        );
        assertEquals(
          check.annotations.some((a) => a.verdict === "refused"),
          served.refused,
          `${name}: ${JSON.stringify(value)}${waived ? " (waived)" : ""}`,
        );
      }
    }
  }
});

const BASIC_AUTH = {
  [`${P}auth-type`]: "basic",
  [`${P}auth-secret`]: "users",
};
/** htpasswd of alice, password "secret" (SHA-1). */
const USERS: Secret = {
  apiVersion: "v1",
  kind: "Secret",
  metadata: { namespace: "shop", name: "users" },
  stringData: { auth: "alice:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n" },
} as Secret;

Deno.test("secretsAskedFor() names the Secrets annotations refer to, as namespace/name", () => {
  const objects = [
    { object: ingress(BASIC_AUTH) },
    { object: ingress({ ...BASIC_AUTH, [`${P}auth-secret`]: "other/users" }, { name: "b" }) },
    { object: ingress({ [`${P}ssl-redirect`]: "true" }, { name: "c" }) },
  ];
  assertEquals(secretsAskedFor(objects, { allowCrossNamespaceSecrets: true }), [
    "other/users",
    "shop/users",
  ]);
});

Deno.test("checkIngress() judges basic authentication with the Secret it names", () => {
  const found = checkIngress(ingress(BASIC_AUTH), {
    secret: (key) => key === "shop/users" ? USERS : undefined,
  });
  assertEquals(found.verdict, "same");
  assertEquals(found.annotations.map((a) => a.verdict), ["served", "served"]);

  const missing = checkIngress(ingress(BASIC_AUTH));
  assertEquals(missing.verdict, "refused");
  const secret = missing.annotations.find((a) => a.name === `${P}auth-secret`)!;
  assertEquals(secret.verdict, "refused");
  assertStringIncludes(secret.note, '"shop/users"');
});

Deno.test("checkIngress() names a missing annotation a served one needs", () => {
  const check = checkIngress(ingress({ [`${P}auth-type`]: "basic" }));
  assertEquals(check.verdict, "refused");
  const missing = check.annotations.find((a) => a.name === `${P}auth-secret`);
  assertEquals(missing?.verdict, "refused");
  assertEquals(missing?.value, "");
  assert(missing?.note.startsWith("invalid: ") === true, missing?.note);
});
