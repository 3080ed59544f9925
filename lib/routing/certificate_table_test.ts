/**
 * Certificate selection (exact, wildcard, default) and the table fingerprint.
 *
 * @module
 */

import {
  assert,
  assertEquals,
  assertNotEquals,
  assertStrictEquals,
} from "../../tests/support/assert.ts";
import type { CertificateBinding } from "../translate/translation.ts";
import { compileCertificateTable } from "./certificate_table.ts";
import type { ServingCertificate } from "./snapshot.ts";

function binding(
  secret: string,
  hosts: string[],
  fingerprint = `fp-${secret}`,
): CertificateBinding {
  return {
    secret,
    hosts,
    notBefore: "2024-01-01T00:00:00Z",
    notAfter: "2124-01-01T00:00:00Z",
    dnsNames: hosts,
    fingerprint,
    certPem: `cert of ${secret}`,
    keyPem: `key of ${secret}`,
  };
}

const SELF_SIGNED: ServingCertificate = {
  source: "sluice/self-signed",
  certPem: "self cert",
  keyPem: "self key",
};

const CERTIFICATES = [
  binding("shop/exact", ["shop.example.com"]),
  binding("shop/wild", ["*.example.com"]),
  binding("other/deep", ["*.a.example.com", "b.test"]),
];

Deno.test("resolve() picks the exact host, then a one-label wildcard, then the default", () => {
  const table = compileCertificateTable({ certificates: CERTIFICATES }, {
    defaultCertificate: SELF_SIGNED,
  });
  const cases: [string | undefined, string][] = [
    ["shop.example.com", "shop/exact"],
    ["SHOP.Example.com.", "shop/exact"],
    ["cart.example.com", "shop/wild"],
    ["example.com", "sluice/self-signed"],
    ["x.cart.example.com", "sluice/self-signed"],
    ["x.a.example.com", "other/deep"],
    ["a.example.com", "shop/wild"],
    ["b.test", "other/deep"],
    ["unknown.test", "sluice/self-signed"],
    ["", "sluice/self-signed"],
    [undefined, "sluice/self-signed"],
  ];
  for (const [serverName, source] of cases) {
    assertEquals(table.resolve(serverName).source, source, String(serverName));
  }
  assertEquals(table.resolve("shop.example.com").certPem, "cert of shop/exact");
  assertEquals(table.resolve("shop.example.com").keyPem, "key of shop/exact");
});

Deno.test("resolve() serves the --default-ssl-certificate Secret over the self-signed one", () => {
  const table = compileCertificateTable({
    certificates: CERTIFICATES,
    defaultCertificate: binding("sluice/default-tls", []),
  }, { defaultCertificate: SELF_SIGNED });
  assertEquals(table.resolve("unknown.test").source, "sluice/default-tls");
  assertEquals(table.resolve(undefined).certPem, "cert of sluice/default-tls");
  assertEquals(table.resolve("shop.example.com").source, "shop/exact");
});

Deno.test("resolve() returns the same frozen object for every host of one Secret", () => {
  const table = compileCertificateTable(
    { certificates: [binding("s/one", ["a.test", "b.test"])] },
    {
      defaultCertificate: SELF_SIGNED,
    },
  );
  assertStrictEquals(table.resolve("a.test"), table.resolve("b.test"));
  assert(Object.isFrozen(table.resolve("a.test")) && Object.isFrozen(table.resolve("x")));
  assert(Object.isFrozen(table));
});

Deno.test("fingerprint is stable for equal input and changes with certificates, hosts or default", () => {
  const options = { defaultCertificate: SELF_SIGNED };
  const base = compileCertificateTable({ certificates: CERTIFICATES }, options).fingerprint;
  assertEquals(
    compileCertificateTable({ certificates: [...CERTIFICATES].reverse() }, options).fingerprint,
    base,
  );
  assert(/^[0-9a-f]{16}$/.test(base), base);
  const variants = [
    compileCertificateTable({ certificates: CERTIFICATES.slice(1) }, options),
    compileCertificateTable({
      certificates: [
        binding("shop/exact", ["shop.example.com", "www.example.com"]),
        ...CERTIFICATES.slice(1),
      ],
    }, options),
    compileCertificateTable({
      certificates: [
        binding("shop/exact", ["shop.example.com"], "renewed"),
        ...CERTIFICATES.slice(1),
      ],
    }, options),
    compileCertificateTable({ certificates: CERTIFICATES }, {
      defaultCertificate: { ...SELF_SIGNED, certPem: "regenerated" },
    }),
    compileCertificateTable(
      { certificates: CERTIFICATES, defaultCertificate: binding("d/d", []) },
      options,
    ),
  ];
  for (const variant of variants) assertNotEquals(variant.fingerprint, base);
});

Deno.test("fingerprint changes when only the chain changes, the leaf staying the same", () => {
  const options = { defaultCertificate: SELF_SIGNED };
  const leafOnly = binding("shop/exact", ["shop.example.com"], "leaf");
  const base = compileCertificateTable({ certificates: [leafOnly] }, options).fingerprint;
  // An intermediate appended to tls.crt: the inspector's chain fingerprint changes…
  const withChain = compileCertificateTable({
    certificates: [{ ...leafOnly, chainFingerprint: "leaf+intermediate" }],
  }, options);
  // …and without one (a binding built elsewhere), the PEM text itself counts.
  const withChainPem = compileCertificateTable({
    certificates: [{ ...leafOnly, certPem: `${leafOnly.certPem}\nintermediate` }],
  }, options);
  assertNotEquals(withChain.fingerprint, base);
  assertNotEquals(withChainPem.fingerprint, base);
  assertEquals(compileCertificateTable({ certificates: [leafOnly] }, options).fingerprint, base);
});
