/**
 * Strict grammars for ingress-nginx annotation values: each value is parsed
 * into typed data or refused with a reason, never concatenated into
 * configuration or evaluated. Where ingress-nginx's own parser is looser than
 * nginx (which then fails to load the generated configuration and keeps the
 * old one), the stricter grammar is used here, so that what is accepted is
 * what ingress-nginx would have served.
 *
 * Pure: no I/O. Each parser returns `{ value }` or `{ problem }`.
 *
 * @module
 */

import { parseIp } from "../../net/cidr.ts";

/** A parsed value, or why it is refused. */
export type Parsed<T> = { readonly value: T; readonly problem?: never } | {
  readonly value?: never;
  readonly problem: string;
};

const ok = <T>(value: T): Parsed<T> => ({ value });
/** A value quoted for a message: control characters escaped, never written raw into an Event. */
const q = (text: string): string => JSON.stringify(text);
const no = <T>(problem: string): Parsed<T> => ({ problem });

/**
 * A boolean as ingress-nginx reads it (Go's `strconv.ParseBool`): `1 t T TRUE
 * true True` and `0 f F FALSE false False`; anything else is refused.
 */
export function parseBool(text: string): Parsed<boolean> {
  if (["1", "t", "T", "TRUE", "true", "True"].includes(text)) return ok(true);
  if (["0", "f", "F", "FALSE", "false", "False"].includes(text)) return ok(false);
  return no(`${q(text)} is not a boolean (true or false)`);
}

/** A decimal integer within `[min, max]`, digits only (no sign, no spaces, no leading `+`). */
export function parseInteger(text: string, min: number, max: number): Parsed<number> {
  if (!/^[0-9]{1,10}$/.test(text)) return no(`${q(text)} is not a whole number`);
  const n = Number(text);
  if (n < min || n > max) return no(`${n} is not between ${min} and ${max}`);
  return ok(n);
}

const SIZE_UNITS: Readonly<Record<string, number>> = {
  "": 1,
  k: 1024,
  K: 1024,
  m: 1024 ** 2,
  M: 1024 ** 2,
  g: 1024 ** 3,
  G: 1024 ** 3,
};

/**
 * An nginx size (`client_max_body_size`): digits with an optional `k`, `m` or
 * `g` (either case), in bytes; `0` means no limit.
 */
export function parseSize(text: string): Parsed<number> {
  const m = /^([0-9]{1,12})([kKmMgG]?)$/.exec(text);
  if (m === null) return no(`${q(text)} is not a size (a number, optionally with k, m or g)`);
  const bytes = Number(m[1]) * SIZE_UNITS[m[2]!]!;
  if (!Number.isSafeInteger(bytes)) return no(`${q(text)} is too large`);
  return ok(bytes);
}

/** ingress-nginx's timeouts (`proxy-*-timeout`): whole seconds, 1 to 86,400 (nginx also takes `60s`). */
export function parseSeconds(text: string): Parsed<number> {
  const m = /^([0-9]{1,6})s?$/.exec(text);
  if (m === null) return no(`${q(text)} is not a number of seconds`);
  const seconds = Number(m[1]);
  if (seconds < 1 || seconds > 86_400) return no(`${seconds} s is not between 1 s and 1 day`);
  return ok(seconds);
}

/**
 * A comma-separated list of CIDRs or single addresses (ingress-nginx's
 * `net.ParseCIDRs`: spaces around items allowed, an empty list refused).
 * Returned as written, trimmed.
 */
export function parseCidrList(text: string): Parsed<string[]> {
  const items = text.split(",").map((s) => s.trim());
  if (items.every((s) => s === "")) return no("the list of CIDRs is empty");
  const out: string[] = [];
  for (const item of items) {
    if (item === "") return no(`${q(text)} has an empty item`);
    // deno-lint-ignore no-control-regex
    if (/[\u0000-\u0020\u007f]/.test(item)) {
      return no(`${q(item)} is not an IP address or a CIDR (items are separated by commas)`);
    }
    const slash = item.indexOf("/");
    const address = slash < 0 ? item : item.slice(0, slash);
    const ip = parseIp(address);
    if (ip === undefined) return no(`${q(item)} is not an IP address or a CIDR`);
    if (slash >= 0) {
      const bits = item.slice(slash + 1);
      // An IPv4-mapped IPv6 address (::ffff:10.0.0.0/104) has IPv6's 128 bits, as in Go.
      const max = address.includes(":") ? 128 : ip.length * 8;
      if (!/^[0-9]{1,3}$/.test(bits) || Number(bits) > max) {
        return no(`${q(item)} has a prefix length outside 0 to ${max}`);
      }
    }
    out.push(item);
  }
  return ok(out);
}

/** ingress-nginx's header-name grammar (`^[A-Za-z0-9-_]+$`), lowercased. */
export function parseHeaderName(text: string): Parsed<string> {
  if (!/^[A-Za-z0-9_-]{1,256}$/.test(text)) return no(`${q(text)} is not a header name`);
  return ok(text.toLowerCase());
}

/** A comma-separated list of header names (spaces around items allowed). */
export function parseHeaderNames(text: string): Parsed<string[]> {
  const out: string[] = [];
  for (const item of text.split(",").map((s) => s.trim())) {
    if (item === "") continue;
    const parsed = parseHeaderName(item);
    if (parsed.problem !== undefined) return no(parsed.problem);
    out.push(parsed.value);
  }
  if (out.length === 0) return no("the list of header names is empty");
  return ok(out);
}

/**
 * An absolute `http` or `https` URL with a host, and no whitespace or control
 * characters (which nginx would write into a `Location` or a request line).
 */
export function parseHttpUrl(text: string): Parsed<string> {
  // deno-lint-ignore no-control-regex
  if (/[\u0000-\u0020\u007f]/.test(text)) {
    return no(`${q(text)} contains spaces or control characters`);
  }
  // The host written out: the WHATWG parser would read `https:///x` as host "x".
  if (!/^https?:\/\/[^/?#@\\]/i.test(text)) {
    return no(`${q(text)} does not start with http:// or https:// and a host`);
  }
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return no(`${q(text)} is not a URL`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return no(`${q(text)} is not an http or https URL`);
  }
  if (url.hostname === "") return no(`${q(text)} has no host`);
  return ok(text);
}

/** An absolute path (`/…`), no whitespace or control characters, not `//…` (another host). */
export function parsePath(text: string): Parsed<string> {
  // deno-lint-ignore no-control-regex
  if (/[\u0000-\u0020\u007f\\]/.test(text)) {
    return no(`${q(text)} contains spaces, backslashes or control characters`);
  }
  if (!text.startsWith("/") || text.startsWith("//")) {
    return no(`${q(text)} is not an absolute path`);
  }
  // It goes into a `Location` field, which holds printable ASCII only (escape the rest).
  if (/[^\x21-\x7e]/.test(text)) return no(`${q(text)} holds characters other than ASCII`);
  return ok(text);
}

/** One of `codes`, written as a number. */
export function parseStatusCode(text: string, codes: readonly number[]): Parsed<number> {
  const parsed = parseInteger(text, 100, 599);
  if (parsed.problem !== undefined || !codes.includes(parsed.value)) {
    return no(`${q(text)} is not one of the status codes ${codes.join(", ")}`);
  }
  return ok(parsed.value);
}

/** One of `values`, exactly as written. */
export function parseEnum<T extends string>(text: string, values: readonly T[]): Parsed<T> {
  return (values as readonly string[]).includes(text)
    ? ok(text as T)
    : no(`${q(text)} is not one of ${values.join(", ")}`);
}
