/**
 * Reading one cookie of a request (RFC 6265 section 5.4 `Cookie` fields, all
 * of them, in order): the first pair of that name wins, as nginx's
 * `$cookie_<name>` does. Values are returned as sent (no decoding).
 *
 * @module
 */

/** The value of cookie `name` in the request's `Cookie` fields, or undefined. */
export function requestCookie(
  headers: readonly (readonly [string, string])[],
  name: string,
): string | undefined {
  for (const [field, value] of headers) {
    if (field.length !== 6 || field.toLowerCase() !== "cookie") continue;
    for (const pair of value.split(";")) {
      const eq = pair.indexOf("=");
      if (eq < 0) continue;
      if (pair.slice(0, eq).trim() !== name) continue;
      let v = pair.slice(eq + 1).trim();
      if (v.length >= 2 && v.startsWith('"') && v.endsWith('"')) v = v.slice(1, -1);
      return v;
    }
  }
  return undefined;
}
