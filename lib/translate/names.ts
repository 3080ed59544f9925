/**
 * Kubernetes name rules (apimachinery validation), shared by translation and
 * the command line: DNS-1123 labels (namespaces), subdomains (most object
 * names, ExternalNames) and IANA service names (port names). Pure.
 *
 * @module
 */

const LABEL = /^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?$/;
const SUBDOMAIN = /^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$/;

/** A DNS-1123 label: at most 63 lowercase letters, digits and `-`, alphanumeric at both ends. */
export function isDnsLabel(value: string): boolean {
  return value.length <= 63 && LABEL.test(value);
}

/** A DNS-1123 subdomain: dot-separated labels, at most 253 characters. */
export function isDnsSubdomain(value: string): boolean {
  return value.length <= 253 && SUBDOMAIN.test(value);
}

/**
 * A port name (IANA_SVC_NAME): at most 15 characters of lowercase letters,
 * digits and `-`, at least one letter, no `-` at either end and no `--`. So a
 * name never reads as a port number (`"80"` is not a name).
 */
export function isPortName(value: unknown): value is string {
  return typeof value === "string" && value.length <= 15 && LABEL.test(value) &&
    /[a-z]/.test(value) && !value.includes("--");
}
