/**
 * Request hosts as the routing and certificate tables see them.
 *
 * Owns the normalisation of a request's host (`Host` / `:authority` / SNI):
 * lowercase, port stripped (IPv6 literals kept whole), trailing dot dropped,
 * and the wildcard suffix used to find `*.example.com` entries. Knows nothing
 * about routes or Kubernetes.
 *
 * @module
 */

/**
 * Normalises a request host: `Shop.Example.COM.:8080` → `shop.example.com`,
 * `[::1]:8080` → `[::1]`.
 *
 * Host names are case-insensitive (RFC 4343); the port is not part of the host
 * Ingress rules match; a trailing dot names the same host (RFC 1034 absolute
 * name). A bare IPv6 address (several colons, no brackets) is left alone.
 */
export function normaliseRequestHost(host: string): string {
  // Fast path: nothing to change (the common case), no allocation.
  let clean = true;
  for (let i = 0; i < host.length; i++) {
    const c = host.charCodeAt(i);
    if ((c >= 65 && c <= 90) || c === 58 /* ":" */) {
      clean = false;
      break;
    }
  }
  if (clean && host.charCodeAt(host.length - 1) !== 46 /* "." */) return host;

  let name = host;
  if (name.startsWith("[")) {
    const end = name.indexOf("]");
    if (end > 0) name = name.slice(0, end + 1);
  } else {
    const colon = name.indexOf(":");
    if (colon >= 0 && name.indexOf(":", colon + 1) < 0) name = name.slice(0, colon);
  }
  name = name.toLowerCase();
  if (name.endsWith(".")) name = name.slice(0, -1);
  return name;
}

/**
 * The part of a normalised host a one-label wildcard would match:
 * `a.example.com` → `example.com` (matched by `*.example.com`); `undefined`
 * when the host has no dot or an empty first label.
 *
 * Kubernetes rule (IngressRule.host): a wildcard host `*.foo.com` matches a
 * request host whose suffix after the first label equals `foo.com`, and `*`
 * "matches only a single label".
 */
export function wildcardSuffix(host: string): string | undefined {
  const dot = host.indexOf(".");
  return dot > 0 ? host.slice(dot + 1) : undefined;
}
