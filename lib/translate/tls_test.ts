/**
 * TLS entries of Ingresses (`tls.ts`): broken TLS Secrets are reported and their
 * hosts get the default certificate, beside a good cluster whose route must
 * stay intact. (Which Secrets a listener then serves is pinned in
 * `lib/server/tls_secrets_test.ts`.)
 *
 * @module
 */
import {
  badIngress,
  issuesOf,
  onePath,
  PREFIX,
  routesOf,
  runBesideGood,
  SVC,
} from "../../tests/support/good_cluster.ts";
import { assertEquals, assertMatch } from "../../tests/support/assert.ts";

Deno.test("translate() reports broken TLS Secrets and serves the default certificate for their hosts", () => {
  const secret = (name: string, fields: Record<string, unknown>) => ({
    metadata: { namespace: "bad", name },
    ...fields,
  });
  const cases: [string, unknown, RegExp][] = [
    ["data null", secret("s", { data: null }), /missing/],
    ["data a string", secret("s", { data: "tls.crt" }), /missing/],
    [
      "tls.crt not base64",
      secret("s", { data: { "tls.crt": "%%%", "tls.key": "a2V5" } }),
      /base64/,
    ],
    ["tls.key a number", secret("s", { data: { "tls.crt": "Y2VydA==", "tls.key": 5 } }), /missing/],
    [
      "inspector throws",
      secret("s", { stringData: { "tls.crt": "garbage", "tls.key": "k" } }),
      /could not be inspected/,
    ],
    ["no such Secret", secret("other", {}), /no such Secret/],
  ];
  for (const [what, s, reason] of cases) {
    const translation = runBesideGood(
      {
        ingresses: [badIngress("tls", {
          tls: [{ hosts: ["tls.test"], secretName: "s" }],
          ...onePath(PREFIX(SVC({ number: 80 })), "tls.test"),
        })],
        secrets: [s],
      },
      {},
      what,
    );
    assertEquals(translation.certificates, [], what);
    assertEquals(translation.tlsHosts, ["tls.test"], what);
    const [issue] = issuesOf(translation, "bad", "tls").filter((i) =>
      i.field.startsWith("spec.tls")
    );
    assertMatch(issue?.message ?? "", reason, what);
    assertEquals(routesOf(translation, "bad/tls").length, 1, what);
  }
});
