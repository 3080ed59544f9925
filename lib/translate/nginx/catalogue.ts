/**
 * Every ingress-nginx annotation Sluice knows (names without the
 * `nginx.ingress.kubernetes.io/` prefix), and what Sluice does with it:
 *
 * - `served`: implemented with ingress-nginx's meaning (`ingress_annotations.ts`
 *   parses it, the data plane applies it);
 * - `accepted`: nothing to do, Sluice already behaves so (it streams bodies,
 *   so buffering settings change nothing a client can see);
 * - `ignored`: not implemented; the Ingress is served without it, and an
 *   issue says so (behaviour differs from ingress-nginx's);
 * - `refused`: not implemented, and serving without it would let requests
 *   through that ingress-nginx refused, or it is raw nginx configuration:
 *   the Ingress's routes answer 503, with the reason in an issue.
 *
 * The one list `sluice migrate-check` and the README's migration table are
 * made from. Pure data.
 *
 * @module
 */

/** What Sluice does with an annotation. */
export type AnnotationSupport = "served" | "accepted" | "ignored" | "refused";

/** One annotation's entry. */
export interface AnnotationEntry {
  readonly support: AnnotationSupport;
  /** The feature it belongs to, as the README's table groups them. */
  readonly group: string;
  /** For `refused`: why serving without it is unsafe. For the others: a short note. */
  readonly note: string;
  /**
   * For access-control annotations refused: values that leave it off (Go's
   * `strconv.ParseBool` false values for a boolean); any other non-empty value counts.
   */
  readonly off?: readonly string[];
}

/** ingress-nginx reads booleans with Go's `strconv.ParseBool`: these mean false. */
export const PARSE_BOOL_FALSE: readonly string[] = ["0", "f", "F", "false", "FALSE", "False"];

const SNIPPET =
  "raw nginx configuration, which may allow, deny or authenticate: Sluice cannot tell which";
const MODSECURITY = "ModSecurity, a web application firewall that refuses requests it matches";
const EXTERNAL_AUTH = "part of external authentication (auth-url asks another service first)";
const CLIENT_CERTIFICATES = "part of client-certificate authentication (auth-tls-secret)";
const MIRROR = "mirrors requests to another backend: not implemented yet";
const STREAMS = "Sluice streams request and response bodies; nothing is buffered";

function entries(
  group: string,
  support: AnnotationSupport,
  names: readonly string[],
  note: string,
): [string, AnnotationEntry][] {
  return names.map((name) => [name, Object.freeze({ support, group, note })]);
}

function refused(
  group: string,
  name: string,
  note: string,
  off?: readonly string[],
): [string, AnnotationEntry] {
  return [
    name,
    Object.freeze({ support: "refused", group, note, ...(off === undefined ? {} : { off }) }),
  ];
}

/** The catalogue, by annotation name (without prefix). */
export const NGINX_ANNOTATIONS: Readonly<Record<string, AnnotationEntry>> = Object.freeze(
  Object.fromEntries<AnnotationEntry>([
    // 1. Redirects.
    ...entries("Redirects", "served", [
      "ssl-redirect",
      "force-ssl-redirect",
      "app-root",
      "permanent-redirect",
      "permanent-redirect-code",
      "temporal-redirect",
      "temporal-redirect-code",
    ], "as ingress-nginx"),
    ...entries(
      "Redirects",
      "served",
      ["from-to-www-redirect"],
      "as ingress-nginx: the www. or bare twin of a rule host, when no Ingress serves it, " +
        "redirects to it (308)",
    ),
    // 2. Paths and rewrites.
    ...entries(
      "Paths and rewrites",
      "ignored",
      ["use-regex", "rewrite-target", "preserve-trailing-slash"],
      "not implemented yet: paths are matched and forwarded as written",
    ),
    // 3. Backend protocol.
    ...entries("Backend protocol", "ignored", [
      "backend-protocol",
      "proxy-ssl-verify",
      "proxy-ssl-secret",
      "proxy-ssl-name",
      "proxy-ssl-server-name",
      "proxy-ssl-ciphers",
      "proxy-ssl-protocols",
      "proxy-ssl-verify-depth",
      "service-upstream",
      "proxy-http-version",
    ], "not implemented yet: backends are reached over HTTP/1.1, by endpoint"),
    ...entries(
      "Paths and rewrites",
      "served",
      ["x-forwarded-prefix"],
      "as ingress-nginx: sent to the backend as X-Forwarded-Prefix (a path)",
    ),
    ...entries(
      "Backend protocol",
      "served",
      ["upstream-vhost"],
      "as ingress-nginx: the Host the backend is sent (a host name and optional port)",
    ),
    // 4. Limits and timeouts.
    ...entries("Limits and timeouts", "served", ["proxy-body-size"], "as ingress-nginx (413)"),
    ...entries("Limits and timeouts", "ignored", [
      "proxy-connect-timeout",
      "proxy-read-timeout",
      "proxy-send-timeout",
      "proxy-next-upstream",
      "proxy-next-upstream-tries",
      "proxy-next-upstream-timeout",
    ], "not implemented yet: the controller-wide timeouts and retries apply"),
    ...entries("Limits and timeouts", "accepted", [
      "proxy-buffering",
      "proxy-request-buffering",
      "proxy-buffer-size",
      "proxy-buffers-number",
      "proxy-max-temp-file-size",
      "client-body-buffer-size",
    ], STREAMS),
    // 5. Access control.
    ...entries("Access control", "served", [
      "whitelist-source-range",
      "allowlist-source-range",
      "denylist-source-range",
    ], "as ingress-nginx (403); the client address is read through --trusted-proxy-cidrs only"),
    ...entries(
      "Access control",
      "served",
      ["auth-type", "auth-secret", "auth-secret-type", "auth-realm"],
      "basic authentication as ingress-nginx (401; htpasswd bcrypt, apr1 or SHA-1 hashes, " +
        "auth-file or auth-map); auth-type digest refuses the Ingress (503)",
    ),
    refused("Access control", "auth-url", "sends every request to an authentication service first"),
    ...[
      "auth-method",
      "auth-signin",
      "auth-signin-redirect-param",
      "auth-request-redirect",
      "auth-proxy-set-headers",
      "auth-cache-key",
      "auth-cache-duration",
      "auth-keepalive",
      "auth-keepalive-share-vars",
      "auth-keepalive-requests",
      "auth-keepalive-timeout",
      "auth-always-set-cookie",
    ].map((name) => refused("Access control", name, EXTERNAL_AUTH)),
    refused(
      "Access control",
      "auth-response-headers",
      "passes the identity found by auth-url to the backend, which may trust the headers",
    ),
    refused(
      "Access control",
      "enable-global-auth",
      "keeps the ConfigMap's global-auth-url in force for this Ingress",
      PARSE_BOOL_FALSE,
    ),
    refused(
      "Access control",
      "auth-tls-secret",
      "requires a client certificate signed by the CA of this Secret",
    ),
    refused("Access control", "auth-tls-verify-client", CLIENT_CERTIFICATES, ["off"]),
    refused("Access control", "auth-tls-verify-depth", CLIENT_CERTIFICATES),
    refused(
      "Access control",
      "auth-tls-match-cn",
      "accepts only client certificates whose subject matches",
    ),
    refused("Access control", "auth-tls-error-page", CLIENT_CERTIFICATES),
    refused(
      "Access control",
      "auth-tls-pass-certificate-to-upstream",
      "gives the backend the client certificate it may authorise on; Sluice sends none",
      PARSE_BOOL_FALSE,
    ),
    refused(
      "Access control",
      "satisfy",
      "combines authentication with the source-address rules (any or all)",
    ),
    // 6. CORS.
    ...entries("CORS", "served", [
      "enable-cors",
      "cors-allow-origin",
      "cors-allow-methods",
      "cors-allow-headers",
      "cors-allow-credentials",
      "cors-expose-headers",
      "cors-max-age",
    ], "as ingress-nginx (preflight 204, the matching origin echoed)"),
    // 7. Affinity and load balancing.
    ...entries("Affinity and load balancing", "ignored", [
      "affinity",
      "affinity-mode",
      "affinity-canary-behavior",
      "session-cookie-name",
      "session-cookie-path",
      "session-cookie-domain",
      "session-cookie-samesite",
      "session-cookie-conditional-samesite-none",
      "session-cookie-secure",
      "session-cookie-max-age",
      "session-cookie-expires",
      "session-cookie-change-on-failure",
      "upstream-hash-by",
      "upstream-hash-by-subset",
      "upstream-hash-by-subset-size",
      "load-balance",
    ], "not implemented yet: requests are spread round-robin"),
    // 8. Canary.
    ...entries(
      "Canary",
      "served",
      [
        "canary",
        "canary-by-header",
        "canary-by-header-value",
        "canary-by-header-pattern",
        "canary-by-cookie",
        "canary-weight",
        "canary-weight-total",
      ],
      "as ingress-nginx (header, then cookie, then weight); a header pattern that could " +
        "backtrack without end is refused",
    ),
    // 9. Rate limits.
    ...entries(
      "Rate limits",
      "served",
      [
        "limit-rps",
        "limit-rpm",
        "limit-connections",
        "limit-burst-multiplier",
        "limit-whitelist",
        "limit-allowlist",
      ],
      "as ingress-nginx (limit_req with nodelay, limit_conn) per client address and replica, " +
        "in bounded shared memory; the answer is --limit-status-code (503)",
    ),
    ...entries(
      "Rate limits",
      "ignored",
      ["limit-rate", "limit-rate-after"],
      "not implemented yet: responses are not throttled",
    ),
    // 10. Other.
    ...entries("Other", "ignored", [
      "server-alias",
      "custom-http-errors",
      "default-backend",
      "custom-headers",
      "ssl-passthrough",
      "ssl-ciphers",
      "ssl-prefer-server-ciphers",
      "proxy-redirect-from",
      "proxy-redirect-to",
      "proxy-cookie-domain",
      "proxy-cookie-path",
      "connection-proxy-header",
      "http2-push-preload",
      "enable-opentelemetry",
      "opentelemetry-trust-incoming-span",
    ], "not implemented yet"),
    ...entries("Other", "accepted", [
      "enable-access-log",
      "enable-rewrite-log",
    ], "logging only: Sluice's access log follows --access-log"),
    // 11. Refused outright.
    ...["configuration-snippet", "server-snippet", "stream-snippet", "auth-snippet"].map((name) =>
      refused("Snippets and firewall", name, SNIPPET)
    ),
    refused("Snippets and firewall", "enable-modsecurity", MODSECURITY, PARSE_BOOL_FALSE),
    refused("Snippets and firewall", "enable-owasp-core-rules", MODSECURITY, PARSE_BOOL_FALSE),
    refused("Snippets and firewall", "modsecurity-snippet", MODSECURITY),
    refused("Snippets and firewall", "modsecurity-transaction-id", MODSECURITY),
    ...["mirror-uri", "mirror-request-body", "mirror-target", "mirror-host"].map((name) =>
      refused("Snippets and firewall", name, MIRROR)
    ),
  ]),
);

/**
 * Name prefixes (after the nginx prefix) refused: the `global-auth-*` keys
 * belong in ingress-nginx's ConfigMap, where they protect every Ingress;
 * written on an Ingress they still say it was meant to be protected.
 */
export const NGINX_REFUSED_PREFIXES: Readonly<Record<string, AnnotationEntry>> = Object.freeze({
  "global-auth-": Object.freeze({
    support: "refused",
    group: "Access control",
    note: "global external authentication, from ingress-nginx's ConfigMap",
  }),
});

/** The entry of an annotation (name without prefix), if Sluice knows it. */
export function annotationEntry(name: string): AnnotationEntry | undefined {
  if (Object.hasOwn(NGINX_ANNOTATIONS, name)) return NGINX_ANNOTATIONS[name];
  for (const [prefix, entry] of Object.entries(NGINX_REFUSED_PREFIXES)) {
    if (name.startsWith(prefix)) return entry;
  }
  return undefined;
}
