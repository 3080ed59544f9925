/**
 * Certificate inspection against the test certificates in `tests/fixtures/tls/`
 * (matching and mismatched keys, expiry, garbage, memoisation).
 *
 * @module
 */

import { assert, assertEquals, assertNotEquals } from "../../tests/support/assert.ts";
import { createCertificateInspector, inspectCertificate } from "./certificate_inspector.ts";

const dir = new URL("../../tests/fixtures/tls/", import.meta.url);
const read = (name: string) => Deno.readTextFileSync(new URL(name, dir));
const NOW = Date.parse("2030-01-01T00:00:00Z");

Deno.test("inspectCertificate() accepts a matching EC pair and reports dates, names and fingerprint", () => {
  const result = inspectCertificate({ certPem: read("shop.crt"), keyPem: read("shop.key") }, {
    now: NOW,
  });
  assert(result.ok, JSON.stringify(result));
  assertEquals(result.dnsNames, ["shop.example.com", "www.shop.example.com"]);
  assert(result.notAfter.startsWith("2126-"), result.notAfter);
  assert(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/.test(result.notBefore), result.notBefore);
  assert(/^([0-9A-F]{2}:){31}[0-9A-F]{2}$/.test(result.fingerprint), result.fingerprint);
});

Deno.test("inspectCertificate() accepts RSA keys in PKCS#8 and PKCS#1 form", () => {
  for (const key of ["rsa.key", "rsa_pkcs1.key"]) {
    const result = inspectCertificate({ certPem: read("rsa.crt"), keyPem: read(key) }, {
      now: NOW,
    });
    assert(result.ok, `${key}: ${JSON.stringify(result)}`);
  }
});

Deno.test("inspectCertificate() rejects a key that does not match the certificate", () => {
  const cases = [
    ["shop.crt", "other.key"], // same curve, different key
    ["shop.crt", "wildcard.key"],
    ["shop.crt", "rsa.key"], // different algorithm
    ["rsa.crt", "shop.key"],
  ];
  for (const [cert, key] of cases) {
    const result = inspectCertificate({ certPem: read(cert!), keyPem: read(key!) }, { now: NOW });
    assertEquals(
      result,
      { ok: false, reason: "tls.key does not match the certificate in tls.crt" },
      `${cert} with ${key}`,
    );
  }
});

Deno.test("inspectCertificate() rejects an expired certificate, judged by the injected now", () => {
  const pems = { certPem: read("expired.crt"), keyPem: read("expired.key") };
  assertEquals(inspectCertificate(pems, { now: NOW }), {
    ok: false,
    reason: "the certificate expired at 2021-01-01T00:00:00Z",
  });
  const before = inspectCertificate(pems, { now: Date.parse("2020-06-01T00:00:00Z") });
  assert(before.ok);
  assertEquals(before.notBefore, "2020-01-01T00:00:00Z");
});

Deno.test("inspectCertificate() names what is missing or unparsable", () => {
  const cert = read("shop.crt");
  const key = read("shop.key");
  const cases: [Parameters<typeof inspectCertificate>[0], string][] = [
    [{ keyPem: key }, "tls.crt is missing"],
    [{ certPem: cert }, "tls.key is missing"],
    [{ certPem: "  \n", keyPem: key }, "tls.crt is missing"],
    [{ certPem: "garbage", keyPem: key }, "tls.crt holds no PEM certificate"],
    [
      { certPem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", keyPem: key },
      "tls.crt is not a valid certificate",
    ],
    [{ certPem: cert, keyPem: "garbage" }, "tls.key holds no PEM private key"],
    [
      { certPem: cert, keyPem: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n" },
      "tls.key is not a valid private key",
    ],
    [
      {
        certPem: cert + "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        keyPem: key,
      },
      "tls.crt certificate #2 (of the chain) is not a valid certificate",
    ],
    [
      { certPem: cert.repeat(11), keyPem: key },
      "tls.crt holds 11 certificates; at most 10 (the leaf and its intermediates) are served",
    ],
  ];
  for (const [pems, reason] of cases) {
    assertEquals(inspectCertificate(pems, { now: NOW }), { ok: false, reason }, reason);
  }
});

Deno.test("inspectCertificate() uses the first certificate of a chain as the leaf", () => {
  const chain = read("shop.crt") + read("wildcard.crt");
  const result = inspectCertificate({ certPem: chain, keyPem: read("shop.key") }, { now: NOW });
  assert(result.ok);
  assertEquals(result.dnsNames, ["shop.example.com", "www.shop.example.com"]);
  const leafOnly = inspectCertificate({ certPem: read("shop.crt"), keyPem: read("shop.key") }, {
    now: NOW,
  });
  assert(leafOnly.ok);
  assertEquals(result.fingerprint, leafOnly.fingerprint);
  assert(/^[0-9a-f]{64}$/.test(result.chainFingerprint ?? ""), result.chainFingerprint);
  assertNotEquals(result.chainFingerprint, leafOnly.chainFingerprint);
});

Deno.test("createCertificateInspector() parses each pair once but judges expiry on every call", () => {
  const inspect = createCertificateInspector();
  const pems = { certPem: read("expired.crt"), keyPem: read("expired.key") };
  assert(inspect(pems, { now: Date.parse("2020-06-01T00:00:00Z") }).ok);
  assert(!inspect({ ...pems }, { now: NOW }).ok);
  assert(inspect(pems, { now: Date.parse("2020-07-01T00:00:00Z") }).ok);
  assertEquals(inspect.parses(), 1);
  inspect({ certPem: read("shop.crt"), keyPem: read("shop.key") }, { now: NOW });
  assertEquals(inspect.parses(), 2);
});

Deno.test("createCertificateInspector() forgets the least recently used pair beyond maxEntries", () => {
  const inspect = createCertificateInspector({ maxEntries: 2 });
  const shop = { certPem: read("shop.crt"), keyPem: read("shop.key") };
  const rsa = { certPem: read("rsa.crt"), keyPem: read("rsa.key") };
  const wildcard = { certPem: read("wildcard.crt"), keyPem: read("wildcard.key") };
  inspect(shop, { now: NOW });
  inspect(rsa, { now: NOW });
  inspect(shop, { now: NOW }); // shop is now the most recently used
  inspect(wildcard, { now: NOW }); // evicts rsa
  assertEquals(inspect.parses(), 3);
  inspect(shop, { now: NOW });
  assertEquals(inspect.parses(), 3);
  inspect(rsa, { now: NOW });
  assertEquals(inspect.parses(), 4);
});
