/**
 * Which TLS Secrets are served: Secrets of every shape taken all the way from
 * Secret data through translation and the certificate table to a real HTTPS
 * listener (CRLF and text around the PEM, other Secret types, a 5 MB tls.crt,
 * wildcard and uppercase SANs, Unicode hosts, every key encoding rustls reads),
 * and the broken ones reported with their hosts given the default certificate
 * (encrypted keys, keys rustls cannot load, a corrupt intermediate, no
 * subjectAltName) while other names carry on. Tests whose comment starts "Was a
 * bug" pin a fix.
 *
 * @module
 */
import { assert, assertEquals, assertStringIncludes } from "../../tests/support/assert.ts";
import { waitFor } from "../../tests/support/wait.ts";
import { createCertificateInspector } from "../tls/certificate_inspector.ts";
import type { InspectCertificate } from "../translate/translation.ts";
import {
  base64,
  HAS_OPENSSL,
  opensslCertificate,
  type PemPair,
  probeCertificate,
  tlsData,
  tlsIngress,
  tlsSecret,
} from "../../tests/support/tls_material.ts";
import {
  dataOf,
  DEFAULT,
  issueFor,
  leafIs,
  pairA,
  pairB,
  pairExpired,
  pairFuture,
  pairNoSan,
  pairUpper,
  perHost,
  tableOf,
  withTlsListener,
} from "../../tests/support/tls_world.ts";

Deno.test("TLS Secrets with CRLF line endings, trailing spaces, blank lines or text around the PEM are served", async () => {
  const a = pairA!;
  const crlf = (s: string) => s.replaceAll("\n", "\r\n");
  const variants: Record<string, PemPair> = {
    "crlf.a.test": { certPem: crlf(a.certPem), keyPem: crlf(a.keyPem) },
    "spaces.a.test": { certPem: a.certPem.replaceAll("\n", "   \n"), keyPem: a.keyPem },
    "blank.a.test": { certPem: a.certPem.replace("\n", "\n\n"), keyPem: `\n\n${a.keyPem}\n\n` },
    "text.a.test": {
      certPem: `subject=CN = a.test\nissuer=CN = a.test\n${a.certPem}trailing words\n`,
      keyPem: `# the key\n${a.keyPem}`,
    },
    "nonewline.a.test": { certPem: a.certPem.trimEnd(), keyPem: a.keyPem.trimEnd() },
  };
  const { table, issues } = tableOf(perHost(dataOf(variants)));
  // The certificate covers a.test only: each host gets the "does not cover" warning, nothing else.
  for (const issue of issues) assertStringIncludes(issue.message, "does not cover host");
  await withTlsListener(() => table, {}, async (_listener, port) => {
    for (const host of Object.keys(variants)) {
      assertEquals(table.resolve(host).source, `tls/${host}`, host);
      const flight = await probeCertificate(port, { serverName: host });
      assert(leafIs(flight, a), `${host}: ${JSON.stringify({ ...flight, certificates: [] })}`);
    }
  });
});

Deno.test("broken TLS Secrets are reported and their hosts get the default certificate; good hosts are unaffected", async () => {
  const a = pairA!;
  const b = pairB!;
  const cases: Record<string, Record<string, string>> = {
    "good.a.test": tlsData(a),
    "mismatch.test": tlsData({ certPem: a.certPem, keyPem: b.keyPem }),
    "wrong-order.test": tlsData({ certPem: b.certPem + a.certPem, keyPem: a.keyPem }),
    "expired.test": tlsData(pairExpired!),
    "empty.test": {},
    "empty-values.test": { "tls.crt": "", "tls.key": "" },
    "not-base64.test": { "tls.crt": "%%%not base64%%%", "tls.key": "%%%" },
    "not-pem.test": { "tls.crt": base64("garbage"), "tls.key": base64("garbage") },
    "indented.test": tlsData({
      certPem: a.certPem.replace(/^/gm, "  "),
      keyPem: a.keyPem.replace(/^/gm, "  "),
    }),
    "trusted.test": tlsData({
      certPem: a.certPem.replaceAll(" CERTIFICATE-----", " TRUSTED CERTIFICATE-----"),
      keyPem: a.keyPem,
    }),
    "swapped.test": { "tls.crt": tlsData(a)["tls.key"]!, "tls.key": tlsData(a)["tls.crt"]! },
  };
  const { table, issues } = tableOf(perHost(cases));
  const expected: Record<string, string> = {
    "mismatch.test": "tls.key does not match the certificate in tls.crt",
    "wrong-order.test": "tls.key does not match the certificate in tls.crt",
    "expired.test": "the certificate expired at",
    "empty.test": "tls.crt is missing",
    "empty-values.test": "tls.crt is missing",
    "not-base64.test": "tls.crt is not valid base64",
    "not-pem.test": "tls.crt holds no PEM certificate",
    "indented.test": "tls.crt is not a valid certificate",
    "trusted.test": "tls.crt holds no PEM certificate",
    "swapped.test": "tls.crt holds no PEM certificate",
  };
  for (const [host, reason] of Object.entries(expected)) {
    const message = issueFor(issues, host);
    assert(message !== undefined, `no issue for ${host}: ${JSON.stringify(issues)}`);
    assertStringIncludes(message, reason, host);
    assertStringIncludes(message, "the default certificate is served instead", host);
    assertEquals(table.resolve(host).source, DEFAULT.source, host);
  }
  assertEquals(issueFor(issues, "good.a.test")?.includes("does not cover"), true);
  await withTlsListener(() => table, {}, async (_listener, port) => {
    for (const host of Object.keys(expected)) {
      assert(leafIs(await probeCertificate(port, { serverName: host }), DEFAULT), host);
    }
    assert(leafIs(await probeCertificate(port, { serverName: "good.a.test" }), a));
  });
});

Deno.test("a certificate not valid yet is served (clock skew), with no issue", async () => {
  const { table, issues } = tableOf(perHost({ "future.test": tlsData(pairFuture!) }));
  assertEquals(issues, []);
  await withTlsListener(() => table, {}, async (_listener, port) => {
    assert(leafIs(await probeCertificate(port, { serverName: "future.test" }), pairFuture!));
  });
});

Deno.test("a Secret of another type holding tls.crt and tls.key is not served, and is reported as the wrong type", () => {
  // The sources read Opaque Secrets too (ingress-nginx auth-secret users): type decides.
  const { table, issues } = tableOf(perHost({ "a.test": tlsData(pairA!) }, "Opaque"));
  assertEquals(issues.length, 1);
  assertStringIncludes(issues[0]!.message, 'no such Secret of type "kubernetes.io/tls"');
  assert(table.resolve("a.test").source !== "tls/a.test");
});

Deno.test("a 5 MB tls.crt (the certificate padded with text) is translated and served without crashing", async () => {
  const padding = "# padding line of a very large tls.crt\n".repeat(5 * 1024 * 1024 / 40);
  const certPem = padding + pairA!.certPem + padding;
  assert(certPem.length > 5 * 1024 * 1024);
  const { table, issues } = tableOf(
    perHost({ "a.test": tlsData({ certPem, keyPem: pairA!.keyPem }) }),
  );
  assertEquals(issues, []);
  await withTlsListener(() => table, {}, async (_listener, port) => {
    assert(leafIs(await probeCertificate(port, { serverName: "a.test" }), pairA!));
  });
});

Deno.test("wildcard and uppercase SANs: *.x serves one label only; case in the certificate does not matter", async () => {
  const { table, issues } = tableOf({
    ingresses: [tlsIngress("upper", ["upper.test", "*.wild.upper.test"], "upper")],
    secrets: [tlsSecret("upper", tlsData(pairUpper!))],
  });
  // Certificate names are compared case-insensitively: no "does not cover" warning.
  assertEquals(issues, []);
  await withTlsListener(() => table, {}, async (_listener, port) => {
    for (const name of ["upper.test", "UPPER.TEST", "x.wild.upper.test", "X.Wild.Upper.Test"]) {
      assert(leafIs(await probeCertificate(port, { serverName: name }), pairUpper!), name);
    }
    for (const name of ["wild.upper.test", "y.x.wild.upper.test", "other.test"]) {
      assert(leafIs(await probeCertificate(port, { serverName: name }), DEFAULT), name);
    }
  });
});

Deno.test("a TLS host in Unicode is reported; its punycode form is served", () => {
  const { table, issues } = tableOf({
    ingresses: [tlsIngress("idn", ["bücher.test", "xn--bcher-kva.test"], "idn")],
    secrets: [tlsSecret("idn", tlsData(pairA!))],
  });
  const unicode = issues.find((issue) => issue.field === "spec.tls[0].hosts[0]");
  assert(unicode !== undefined, JSON.stringify(issues));
  assertStringIncludes(unicode.message, "bücher.test");
  assertEquals(table.resolve("xn--bcher-kva.test").source, "tls/idn");
});

Deno.test(
  "the key encodings rustls and Node both read are accepted and served (PKCS#1, PKCS#8, SEC1, Ed25519, P-384)",
  {
    ignore: !HAS_OPENSSL,
  },
  async () => {
    const [rsa, ec, p384, ed] = await Promise.all([
      opensslCertificate("rsa-2048", "rsa.test"),
      opensslCertificate("ec-p256", "ec.test"),
      opensslCertificate("ec-p384", "p384.test"),
      opensslCertificate("ed25519", "ed.test"),
    ]);
    const served: Record<string, PemPair> = {
      "rsa.test": rsa,
      "rsa-pkcs1.test": { certPem: rsa.certPem, keyPem: rsa.pkcs1KeyPem! },
      "ec.test": ec,
      "ec-sec1.test": { certPem: ec.certPem, keyPem: ec.sec1KeyPem! },
      "p384.test": p384,
      "ed.test": ed,
    };
    const { table, issues } = tableOf(perHost(dataOf(served)));
    for (const issue of issues) assertStringIncludes(issue.message, "does not cover host");
    await withTlsListener(() => table, {}, async (_listener, port) => {
      for (const [host, pair] of Object.entries(served)) {
        assertEquals(table.resolve(host).source, `tls/${host}`);
        assert(leafIs(await probeCertificate(port, { serverName: host }), pair), host);
      }
    });
  },
);

Deno.test("encrypted keys are reported and their hosts get the default certificate", {
  ignore: !HAS_OPENSSL,
}, async () => {
  const ec = await opensslCertificate("ec-p256", "ec.test");
  const { table, issues } = tableOf(perHost({
    "pkcs8.test": tlsData({ certPem: ec.certPem, keyPem: ec.encryptedKeyPem }),
    "sec1.test": tlsData({ certPem: ec.certPem, keyPem: ec.encryptedTraditionalKeyPem! }),
  }));
  assertStringIncludes(issueFor(issues, "pkcs8.test") ?? "", "tls.key is encrypted");
  // An encrypted SEC1 key ("Proc-Type: 4,ENCRYPTED") is named as encrypted too.
  assertStringIncludes(issueFor(issues, "sec1.test") ?? "", "tls.key is encrypted");
  assertEquals(table.resolve("pkcs8.test").source, DEFAULT.source);
  assertEquals(table.resolve("sec1.test").source, DEFAULT.source);
});

// Was a bug: keys Node reads but rustls refuses passed inspection, and every handshake for the host
// then failed instead of getting the default certificate.
Deno.test({
  name:
    "a key rustls cannot load (RSA 1024, secp256k1, Ed448, RSA-PSS) is reported and its host gets the default certificate",
  fn: async () => {
    const kinds = ["rsa-1024", "ec-secp256k1", "ed448", "rsa-pss-2048"] as const;
    const pairs = await Promise.all(kinds.map((kind) => opensslCertificate(kind, `${kind}.test`)));
    const cases = Object.fromEntries(kinds.map((kind, i) => [`${kind}.test`, tlsData(pairs[i]!)]));
    const { table, issues } = tableOf(perHost(cases));
    await withTlsListener(() => table, {}, async (_listener, port) => {
      for (const kind of kinds) {
        const host = `${kind}.test`;
        assert(issueFor(issues, host) !== undefined, `${host}: no issue`);
        const flight = await probeCertificate(port, { serverName: host });
        assert(leafIs(flight, DEFAULT), `${host}: ${JSON.stringify({ alert: flight.alert })}`);
      }
    });
  },
});

// Was a bug: only the first CERTIFICATE block was parsed; a corrupt intermediate passed inspection
// and rustls then refused the whole chain.
Deno.test({
  name:
    "a tls.crt whose second (intermediate) PEM block is corrupt is reported and its host gets the default certificate",
  fn: async () => {
    const certPem = pairA!.certPem +
      "-----BEGIN CERTIFICATE-----\nAAAA!!!!not base64\n-----END CERTIFICATE-----\n";
    const { table, issues } = tableOf(
      perHost({ "a.test": tlsData({ certPem, keyPem: pairA!.keyPem }) }),
    );
    await withTlsListener(() => table, {}, async (_listener, port) => {
      assert(issueFor(issues, "a.test") !== undefined, "no issue for a.test");
      assert(leafIs(await probeCertificate(port, { serverName: "a.test" }), DEFAULT));
    });
  },
});

Deno.test(
  "a certificate rustls cannot load fails only its own server name: the listener and other names carry on",
  {
    ignore: !HAS_OPENSSL,
  },
  async () => {
    const weak = await opensslCertificate("rsa-1024", "weak.test");
    // The inspector now refuses such keys; let this one through to test the listener itself.
    const inspector = createCertificateInspector();
    const lenient: InspectCertificate = (pems, options) => {
      const real = inspector(pems, options);
      if (real.ok || pems.certPem !== weak.certPem) return real;
      const fingerprint = "weak";
      return {
        ok: true,
        notBefore: "",
        notAfter: "",
        dnsNames: ["weak.test"],
        fingerprint,
        chainFingerprint: fingerprint,
      };
    };
    const { table } = tableOf(
      perHost({ "weak.test": tlsData(weak), "a.test": tlsData(pairA!) }),
      lenient,
    );
    await withTlsListener(() => table, {}, async (listener, port) => {
      for (let i = 0; i < 3; i++) {
        const refused = await probeCertificate(port, { serverName: "weak.test" });
        assertEquals(refused.certificates.length, 0);
        assert(leafIs(await probeCertificate(port, { serverName: "a.test" }), pairA!));
        assert(leafIs(await probeCertificate(port, { serverName: "other.test" }), DEFAULT));
      }
      await waitFor("the relays to end", () => listener.stats.connections === 0);
      assertEquals(listener.stats.generation, 1);
    });
  },
);

// Was a bug: coverage was checked only when the certificate had DNS SANs; a CN-only certificate
// (which browsers, Go and rustls clients reject) raised no issue.
Deno.test({
  name: "a certificate without subjectAltName (CN only) is reported: clients will reject it",
  fn: () => {
    const { issues } = tableOf(perHost({ "nosan.test": tlsData(pairNoSan!) }));
    assert(issueFor(issues, "nosan.test") !== undefined, JSON.stringify(issues));
  },
});
