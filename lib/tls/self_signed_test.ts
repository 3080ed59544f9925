import { createPrivateKey, X509Certificate } from "node:crypto";
import { assert, assertEquals, assertRejects } from "../../tests/support/assert.ts";
import { httpsGet } from "../../tests/support/tls_client.ts";
import { generateSelfSignedCertificate, SELF_SIGNED_SOURCE } from "./self_signed.ts";

Deno.test("generateSelfSignedCertificate() makes an ECDSA P-256 end-entity certificate for the names", async () => {
  const now = Date.UTC(2030, 0, 15, 12);
  const generated = await generateSelfSignedCertificate({
    hostnames: ["a.test", "*.b.test"],
    validityDays: 10,
    now: () => now,
  });
  assertEquals(generated.source, SELF_SIGNED_SOURCE);
  const cert = new X509Certificate(generated.certPem);
  assertEquals(cert.subjectAltName, "DNS:a.test, DNS:*.b.test");
  assertEquals(cert.subject, "CN=Sluice Default Certificate");
  assertEquals(cert.issuer, cert.subject);
  assertEquals(cert.ca, false);
  assertEquals(cert.publicKey.asymmetricKeyType, "ec");
  assertEquals(cert.publicKey.asymmetricKeyDetails?.namedCurve, "prime256v1");
  assertEquals(Date.parse(cert.validFrom), now - 3_600_000);
  assertEquals(Date.parse(cert.validTo), now + 10 * 86_400_000);
  assert(cert.verify(cert.publicKey), "the certificate is signed by its own key");
  assert(cert.checkPrivateKey(createPrivateKey(generated.keyPem)), "the key matches");
});

Deno.test("generateSelfSignedCertificate() makes a new key and serial number each time", async () => {
  const [one, two] = await Promise.all([
    generateSelfSignedCertificate(),
    generateSelfSignedCertificate(),
  ]);
  assert(one.keyPem !== two.keyPem);
  assert(
    new X509Certificate(one.certPem).serialNumber !== new X509Certificate(two.certPem).serialNumber,
  );
  assertEquals(new X509Certificate(one.certPem).subjectAltName, "DNS:sluice.invalid");
});

Deno.test("generateSelfSignedCertificate() output serves TLS to a client that trusts it", async () => {
  const generated = await generateSelfSignedCertificate({ hostnames: ["a.test"] });
  const server = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    cert: generated.certPem,
    key: generated.keyPem,
    onListen: () => {},
  }, () => new Response("hello"));
  try {
    const response = await httpsGet(server.addr.port, "/", {
      serverName: "a.test",
      caCerts: [generated.certPem],
    });
    assertEquals([response.status, response.body], [200, "hello"]);
  } finally {
    await server.shutdown();
  }
});

Deno.test("generateSelfSignedCertificate() rejects a validity that is not positive", async () => {
  await assertRejects(
    () => generateSelfSignedCertificate({ validityDays: 0 }),
    RangeError,
    'validityDays "0" is not positive',
  );
});
