/**
 * Ingress rule hosts: validation and normalisation.
 *
 * Owns what a valid `spec.rules[].host` / `spec.tls[].hosts[]` is and its
 * canonical form (lowercase, no trailing dot). Knows nothing about requests:
 * request hosts are normalised by the routing table.
 *
 * @module
 */

/** A normalised rule host, or why the host is invalid. */
export type HostResult =
  | { readonly ok: true; readonly host: string }
  | { readonly ok: false; readonly message: string };

const LABEL = "[a-z0-9](?:[-a-z0-9]*[a-z0-9])?";
const DNS_SUBDOMAIN = new RegExp(`^${LABEL}(?:\\.${LABEL})*$`);
const IPV4 = /^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$/;
const MAX_HOST_LENGTH = 253;

/**
 * Normalises a rule host. An absent or empty host is `""` (any host).
 *
 * Kubernetes rule (IngressRule.host, networking.k8s.io/v1): the host is a
 * fully qualified domain name, "precise" (`foo.bar.com`) or "wildcard" — a
 * single `*` label first (`*.foo.com`); IP addresses and ports are not allowed,
 * and `*` alone is not allowed. Host names are case-insensitive (RFC 4343), so
 * we lowercase; a trailing dot names the same host, so we drop it.
 */
export function normaliseRuleHost(raw: unknown): HostResult {
  if (raw === undefined || raw === null || raw === "") return { ok: true, host: "" };
  if (typeof raw !== "string") {
    return { ok: false, message: `Cannot use host ${JSON.stringify(raw)}: not a string` };
  }
  let host = raw.toLowerCase();
  if (host.endsWith(".")) host = host.slice(0, -1);
  const fail = (detail: string): HostResult => ({
    ok: false,
    message: `Cannot use host "${raw}": ${detail}`,
  });
  if (host.includes(":")) return fail("ports and IPv6 addresses are not allowed");
  const wildcard = host.startsWith("*.");
  const name = wildcard ? host.slice(2) : host;
  if (name.includes("*")) {
    return fail('a wildcard must be the whole first label, as in "*.example.com"');
  }
  if (name === "" || name.length > MAX_HOST_LENGTH || !DNS_SUBDOMAIN.test(name)) {
    return fail("not a valid DNS name");
  }
  if (!wildcard && IPV4.test(name)) return fail("IP addresses are not allowed");
  return { ok: true, host };
}

/** Whether a normalised host is a wildcard (`*.example.com`). */
export function isWildcardHost(host: string): boolean {
  return host.startsWith("*.");
}

/**
 * Whether a normalised host is covered by a normalised pattern: equal, or the
 * pattern is `*.suffix` and the host is exactly one label followed by `.suffix`.
 *
 * Kubernetes rule (IngressRule.host): "the wildcard character '*' must appear by
 * itself as the first DNS label and matches only a single label".
 */
export function hostCoveredBy(host: string, pattern: string): boolean {
  if (host === pattern) return true;
  if (!isWildcardHost(pattern)) return false;
  const dot = host.indexOf(".");
  return dot > 0 && host.slice(dot + 1) === pattern.slice(2) && !host.startsWith("*");
}
