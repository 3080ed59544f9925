/**
 * Controller annotations on an Ingress, which Sluice does not implement: which
 * ones ask for access control (so serving the Ingress without them would open
 * it to everyone) and which ones only change behaviour.
 *
 * Owns the explicit list of ingress-nginx access-control annotations, with the
 * reason for each, and the issues an Ingress's annotations earn. Knows nothing
 * about rules, backends, TLS or how a refused Ingress is kept from serving
 * (that is `translate.ts`).
 *
 * Only `nginx.ingress.kubernetes.io/` is examined: that is the controller
 * users migrate from by switching `ingressClassName`. Other vendors'
 * annotations are not: Traefik's `router.middlewares` may name an auth
 * middleware or a harmless path rewrite, and which one is only known from
 * its Middleware objects, which Sluice does not read.
 *
 * @module
 */

import type { Issue } from "./issues.ts";

/** The annotation prefix of ingress-nginx (its `--annotations-prefix` default). */
export const NGINX_PREFIX = "nginx.ingress.kubernetes.io/";

/** An access-control annotation of ingress-nginx. */
export interface AccessControlRule {
  /** Why serving the Ingress without it would let in requests ingress-nginx refused. */
  readonly reason: string;
  /** Values that leave it off (Go's `strconv.ParseBool` false values for a boolean); any other non-empty value counts. */
  readonly off?: readonly string[];
}

/** ingress-nginx reads booleans with Go's `strconv.ParseBool`: these mean false, anything else unparsable means its default. */
const PARSE_BOOL_FALSE: readonly string[] = ["0", "f", "F", "false", "FALSE", "False"];

const BASIC_AUTH =
  "part of basic or digest authentication (auth-type with the users of auth-secret)";
const EXTERNAL_AUTH = "part of external authentication (auth-url asks another service first)";
const CLIENT_CERTIFICATES = "part of client-certificate authentication (auth-tls-secret)";
const SNIPPET =
  "raw nginx configuration, which may allow, deny or authenticate: Sluice cannot tell which";
const MODSECURITY = "ModSecurity, a web application firewall that refuses requests it matches";

/**
 * The ingress-nginx annotations (names without the prefix) that decide who may
 * reach the backend. An Ingress carrying one with a value that turns it on is
 * not served. Everything else under the prefix only changes behaviour
 * (rewrites, regex paths, redirects, timeouts, body size, affinity, canaries,
 * CORS, rate limits, upstream TLS…) and is reported as ignored.
 *
 * Settings of an access control (`auth-realm`, `auth-signin`,
 * `auth-tls-verify-depth`…) are listed too: alone they restrict nothing in
 * ingress-nginx, but they say the author believed the Ingress was protected,
 * and removing one changes nothing for Sluice.
 */
export const NGINX_ACCESS_CONTROL: Readonly<Record<string, AccessControlRule>> = Object.freeze({
  // Basic and digest authentication.
  "auth-type": { reason: "turns on basic or digest authentication with the users of auth-secret" },
  "auth-secret": { reason: "names the users of basic or digest authentication" },
  "auth-secret-type": { reason: BASIC_AUTH },
  "auth-realm": { reason: BASIC_AUTH },
  // External authentication (oauth2-proxy and the like).
  "auth-url": { reason: "sends every request to an authentication service first" },
  "auth-method": { reason: EXTERNAL_AUTH },
  "auth-signin": { reason: EXTERNAL_AUTH },
  "auth-signin-redirect-param": { reason: EXTERNAL_AUTH },
  "auth-request-redirect": { reason: EXTERNAL_AUTH },
  "auth-response-headers": {
    reason: "passes the identity found by auth-url to the backend, which may trust the headers",
  },
  "auth-proxy-set-headers": { reason: EXTERNAL_AUTH },
  "auth-cache-key": { reason: EXTERNAL_AUTH },
  "auth-cache-duration": { reason: EXTERNAL_AUTH },
  "auth-keepalive": { reason: EXTERNAL_AUTH },
  "auth-keepalive-share-vars": { reason: EXTERNAL_AUTH },
  "auth-keepalive-requests": { reason: EXTERNAL_AUTH },
  "auth-keepalive-timeout": { reason: EXTERNAL_AUTH },
  "auth-always-set-cookie": { reason: EXTERNAL_AUTH },
  "auth-snippet": { reason: SNIPPET },
  // Global external authentication (configured in ingress-nginx's ConfigMap, on by default).
  "enable-global-auth": {
    reason: "keeps the ConfigMap's global-auth-url in force for this Ingress",
    off: PARSE_BOOL_FALSE,
  },
  // Client certificates (mutual TLS).
  "auth-tls-secret": { reason: "requires a client certificate signed by the CA of this Secret" },
  "auth-tls-verify-client": { reason: CLIENT_CERTIFICATES, off: ["off"] },
  "auth-tls-verify-depth": { reason: CLIENT_CERTIFICATES },
  "auth-tls-match-cn": { reason: "accepts only client certificates whose subject matches" },
  "auth-tls-error-page": { reason: CLIENT_CERTIFICATES },
  "auth-tls-pass-certificate-to-upstream": {
    reason: "gives the backend the client certificate it may authorise on; Sluice sends none",
    off: PARSE_BOOL_FALSE,
  },
  // Source addresses.
  "whitelist-source-range": { reason: "refuses clients outside these CIDRs (the older name)" },
  "allowlist-source-range": { reason: "refuses clients outside these CIDRs" },
  "denylist-source-range": { reason: "refuses clients inside these CIDRs" },
  "satisfy": { reason: "combines authentication with the source-address rules (any or all)" },
  // Raw nginx configuration.
  "configuration-snippet": { reason: SNIPPET },
  "server-snippet": { reason: SNIPPET },
  "stream-snippet": { reason: SNIPPET },
  // Web application firewall.
  "enable-modsecurity": { reason: MODSECURITY, off: PARSE_BOOL_FALSE },
  "enable-owasp-core-rules": { reason: MODSECURITY, off: PARSE_BOOL_FALSE },
  "modsecurity-snippet": { reason: MODSECURITY },
});

/**
 * Name prefixes (after the nginx prefix) that ask for access control. The
 * `global-auth-*` keys belong in ingress-nginx's ConfigMap, where they protect
 * every Ingress; written on an Ingress they still say it was meant to be protected.
 */
export const NGINX_ACCESS_CONTROL_PREFIXES: Readonly<Record<string, AccessControlRule>> = Object
  .freeze({
    "global-auth-": { reason: "global external authentication, from ingress-nginx's ConfigMap" },
  });

/** How many annotation names one issue lists before it says how many more there are. */
const MAX_LISTED = 20;

/** The ingress-nginx annotations of one Ingress, sorted by name. */
export interface AnnotationReview {
  /** Access-control annotations with a value that turns them on (full names). */
  readonly accessControl: readonly string[];
  /** Every ingress-nginx annotation Sluice ignores, access-control ones included (full names). */
  readonly ignored: readonly string[];
}

const NO_ANNOTATIONS: AnnotationReview = Object.freeze({
  accessControl: Object.freeze([]),
  ignored: Object.freeze([]),
});

/** The access-control rule of an ingress-nginx annotation (name without prefix), if it is one. */
export function accessControlRule(name: string): AccessControlRule | undefined {
  if (Object.hasOwn(NGINX_ACCESS_CONTROL, name)) return NGINX_ACCESS_CONTROL[name];
  for (const [prefix, rule] of Object.entries(NGINX_ACCESS_CONTROL_PREFIXES)) {
    if (name.startsWith(prefix)) return rule;
  }
  return undefined;
}

/**
 * Sorts an Ingress's `metadata.annotations` into ingress-nginx access-control
 * annotations that are on, and every ingress-nginx annotation (all ignored).
 * Other annotations (kubectl, Argo CD, Helm, other controllers) are left out.
 *
 * Only an empty value leaves an annotation unset; `off` values must match
 * exactly (`" false"` is not false to ingress-nginx either). A number or
 * boolean (hand-written manifests) counts as its text; any other non-string
 * value counts as set, so an odd value never opens access.
 */
export function reviewAnnotations(annotations: unknown): AnnotationReview {
  if (annotations === null || typeof annotations !== "object" || Array.isArray(annotations)) {
    return NO_ANNOTATIONS;
  }
  // Runs for every Ingress on every rebuild: most carry no ingress-nginx annotation, so
  // select before sorting.
  const ignored = Object.keys(annotations).filter((key) => key.startsWith(NGINX_PREFIX));
  if (ignored.length === 0) return NO_ANNOTATIONS;
  ignored.sort();
  const accessControl: string[] = [];
  for (const key of ignored) {
    const rule = accessControlRule(key.slice(NGINX_PREFIX.length));
    if (rule === undefined) continue;
    const value = annotationText((annotations as Record<string, unknown>)[key]);
    if (value === "" || rule.off?.includes(value) === true) continue;
    accessControl.push(key);
  }
  return { accessControl, ignored };
}

function annotationText(value: unknown): string {
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  if (value === undefined || value === null) return "";
  return "(not a string)";
}

/** What an Ingress's annotations mean for serving it. */
export interface AnnotationVerdict {
  /** The Ingress asks for access control Sluice does not enforce: its routes must not reach its backends. */
  readonly refused: boolean;
  /** At most one issue: the refusal, or the annotations ignored. */
  readonly issues: readonly Issue[];
}

const SERVED: AnnotationVerdict = Object.freeze({ refused: false, issues: Object.freeze([]) });

/**
 * Judges one Ingress's annotations. Access control asked for and not waived
 * (`ignoreAccessAnnotations`, the `--ignore-access-annotations` flag):
 * refused, with an issue naming the annotations. Otherwise served, with one
 * issue listing the ingress-nginx annotations ignored (and, when waived, the
 * access control not enforced); no issue when there are none.
 */
export function judgeAnnotations(
  ingress: { readonly namespace: string; readonly name: string; readonly annotations: unknown },
  options: { readonly ignoreAccessAnnotations?: boolean | undefined } = {},
): AnnotationVerdict {
  const review = reviewAnnotations(ingress.annotations);
  if (review.ignored.length === 0) return SERVED;
  const { namespace, name } = ingress;
  const at = { kind: "Ingress", namespace, name, field: "metadata.annotations" };
  const ingressName = JSON.stringify(`${namespace}/${name}`);
  if (review.accessControl.length > 0 && options.ignoreAccessAnnotations !== true) {
    const one = review.accessControl.length === 1;
    const message =
      `Cannot serve Ingress ${ingressName}: annotation${one ? "" : "s"} ${
        list(review.accessControl, { quoted: true })
      } ask${
        one ? "s" : ""
      } for access control Sluice does not enforce, so its routes answer 503; ` +
      `remove ${one ? "it" : "them"} or put the control in front of Sluice`;
    return { refused: true, issues: [{ ...at, message }] };
  }
  let message = `Ingress ${ingressName}: annotations ignored (Sluice supports none): ${
    list(review.ignored, { quoted: false })
  }`;
  if (review.accessControl.length > 0) {
    message += `; access control not enforced (--ignore-access-annotations): ${
      list(review.accessControl, { quoted: false })
    }`;
  }
  return { refused: false, issues: [{ ...at, message }] };
}

function list(names: readonly string[], options: { readonly quoted: boolean }): string {
  const shown = names.slice(0, MAX_LISTED).map((n) => options.quoted ? JSON.stringify(n) : n);
  const more = names.length - shown.length;
  return shown.join(", ") + (more > 0 ? ` and ${more} more` : "");
}
