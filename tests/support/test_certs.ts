/**
 * A fixed, long-lived (100 years) ECDSA certificate and key for
 * `web.example.com`, for tests that need well-formed TLS Secret data.
 * Test data only: never trusted by anything.
 *
 * @module
 */

/** Certificate for `web.example.com`, PEM. */
export const TEST_CERT_PEM = `-----BEGIN CERTIFICATE-----
MIIBpzCCAU2gAwIBAgIUISoIepV3mRypdiSThAmW45TNfEwwCgYIKoZIzj0EAwIw
GjEYMBYGA1UEAwwPd2ViLmV4YW1wbGUuY29tMCAXDTI2MTEyOTA3MzE0NloYDzIx
MjYxMTA1MDczMTQ2WjAaMRgwFgYDVQQDDA93ZWIuZXhhbXBsZS5jb20wWTATBgcq
hkjOPQIBBggqhkjOPQMBBwNCAAR6t5ejB5rgDytaMLDtLkUMvn2JtA+m4EbIAZdn
3dfWiaAZGTfY1BjgTB92/8AP6kgAKRTFHP90EeTJ6Muq+8JKo28wbTAdBgNVHQ4E
FgQU+tbJRTWBqzCsRpkEuOfTTp4scLcwHwYDVR0jBBgwFoAU+tbJRTWBqzCsRpkE
uOfTTp4scLcwDwYDVR0TAQH/BAUwAwEB/zAaBgNVHREEEzARgg93ZWIuZXhhbXBs
ZS5jb20wCgYIKoZIzj0EAwIDSAAwRQIhAIcx+rndK/Ve9A7yjK9R0ao6BvmbI/Ha
tRr3NwBp6R9GAiBVEjALfP9P2IzEPApQB+HY5n3RXp31s62ObVnuNGGwZQ==
-----END CERTIFICATE-----
`;

/** Its private key, PEM (test data). */
export const TEST_KEY_PEM = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgZlfF+LsR9nY/kFzL
K+4Rw3dvh5h5FBd85L43HM3xOLehRANCAAR6t5ejB5rgDytaMLDtLkUMvn2JtA+m
4EbIAZdn3dfWiaAZGTfY1BjgTB92/8AP6kgAKRTFHP90EeTJ6Muq+8JK
-----END PRIVATE KEY-----
`;
