/**
 * The Gateway API features Sluice claims in `GatewayClass`
 * `status.supportedFeatures` (GEP-2162): the conformance suite runs the
 * tests of exactly these. A feature is listed only once its conformance
 * tests pass (see `docs/gateway-api.md`); features implemented but not yet
 * proven by the suite are listed there, not here.
 *
 * @module
 */

/** Core features of the GATEWAY-HTTP profile. */
export const GATEWAY_SUPPORTED_FEATURES: readonly string[] = Object.freeze([
  "Gateway",
  "HTTPRoute",
  "ReferenceGrant",
]);
