/**
 * The Gateway API features Sluice claims in `GatewayClass`
 * `status.supportedFeatures` (GEP-2162): the conformance suite runs the
 * tests of exactly these. A feature is listed only once its conformance
 * tests pass (`deno task conformance`, report in `docs/conformance/`).
 *
 * @module
 */

/**
 * Core features of the GATEWAY-HTTP profile, then the Extended ones whose
 * tests pass. Not claimed though implemented: `HTTPRouteParentRefPort` (its
 * test needs a listener on port 8080, which Sluice does not open).
 */
export const GATEWAY_SUPPORTED_FEATURES: readonly string[] = Object.freeze([
  "Gateway",
  "HTTPRoute",
  "ReferenceGrant",
  "HTTPRouteQueryParamMatching",
  "HTTPRouteMethodMatching",
  "HTTPRouteResponseHeaderModification",
  "HTTPRoutePortRedirect",
  "HTTPRouteSchemeRedirect",
  "HTTPRoutePathRedirect",
  "HTTPRouteHostRewrite",
  "HTTPRoutePathRewrite",
  "HTTPRouteRequestTimeout",
  "HTTPRouteBackendTimeout",
  "HTTPRouteBackendProtocolWebSocket",
  "HTTPRoute303RedirectStatusCode",
  "HTTPRoute307RedirectStatusCode",
  "HTTPRoute308RedirectStatusCode",
  // Their tests read the mirror backends' logs through the API (`pods/log`),
  // which the test cluster's pod runner serves as a kubelet does.
  "HTTPRouteRequestMirror",
  "HTTPRouteRequestMultipleMirrors",
]);
