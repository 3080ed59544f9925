/**
 * IP address parsing and CIDR matching for IPv4 and IPv6, used to decide
 * whether a peer is a trusted proxy whose `X-Forwarded-*` headers may be
 * believed.
 *
 * Owns: textual address parsing (including IPv4-mapped IPv6 such as
 * `::ffff:10.0.0.1`, which matches IPv4 ranges) and prefix comparison.
 * Knows nothing of HTTP, sockets or configuration sources.
 *
 * @module
 */

/** A parsed address: 4 bytes for IPv4, 16 for IPv6. */
export type IpBytes = Uint8Array;

/**
 * Parses a textual IPv4 or IPv6 address (no zone, no brackets, no port).
 * IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are returned as IPv4.
 *
 * @returns the address bytes, or `undefined` when the text is not an address.
 */
export function parseIp(text: string): IpBytes | undefined {
  if (text.includes(":")) {
    const v6 = parseIpv6(text);
    if (v6 === undefined) return undefined;
    return isV4Mapped(v6) ? v6.slice(12) : v6;
  }
  return parseIpv4(text);
}

/**
 * Normalises an address for display in forwarding headers: IPv4-mapped IPv6
 * becomes dotted IPv4, anything else is returned unchanged.
 */
export function normalizeIp(text: string): string {
  if (!text.includes(":") || !text.toLowerCase().includes("ffff")) return text;
  const bytes = parseIp(text);
  return bytes !== undefined && bytes.length === 4 ? bytes.join(".") : text;
}

/** A compiled list of CIDR ranges. */
export interface CidrMatcher {
  /** True when `address` (textual IPv4/IPv6) lies in any of the ranges. Invalid addresses never match. */
  contains(address: string): boolean;
  /** The ranges as given, for logs. */
  readonly ranges: readonly string[];
}

/**
 * Compiles CIDR ranges (`10.0.0.0/8`, `fd00::/8`, or a bare address meaning a
 * single host) into a matcher.
 *
 * @throws {TypeError} when a range is malformed, naming it.
 */
export function createCidrMatcher(ranges: readonly string[]): CidrMatcher {
  const compiled = ranges.map(parseCidr);
  const list = [...ranges];
  return {
    ranges: list,
    contains(address: string): boolean {
      if (compiled.length === 0) return false;
      const ip = parseIp(address);
      if (ip === undefined) return false;
      for (const range of compiled) {
        if (range.network.length === ip.length && prefixEquals(range.network, ip, range.bits)) {
          return true;
        }
      }
      return false;
    },
  };
}

interface CompiledCidr {
  readonly network: IpBytes;
  readonly bits: number;
}

function parseCidr(text: string): CompiledCidr {
  const trimmed = text.trim();
  const slash = trimmed.indexOf("/");
  const addressText = slash === -1 ? trimmed : trimmed.slice(0, slash);
  // A mapped range (::ffff:10.0.0.0/104) is kept as IPv6 bits on purpose: parse without unmapping.
  const raw = addressText.includes(":") ? parseIpv6(addressText) : parseIpv4(addressText);
  if (raw === undefined) {
    throw new TypeError(`Cannot parse CIDR range "${text}": invalid address`);
  }
  const maxBits = raw.length * 8;
  let bits = maxBits;
  if (slash !== -1) {
    const bitsText = trimmed.slice(slash + 1);
    if (!/^[0-9]{1,3}$/.test(bitsText) || Number(bitsText) > maxBits) {
      throw new TypeError(`Cannot parse CIDR range "${text}": invalid prefix length`);
    }
    bits = Number(bitsText);
  }
  if (raw.length === 16 && isV4Mapped(raw) && bits >= 96) {
    return { network: raw.slice(12), bits: bits - 96 };
  }
  return { network: raw, bits };
}

function prefixEquals(a: IpBytes, b: IpBytes, bits: number): boolean {
  const whole = bits >> 3;
  for (let i = 0; i < whole; i++) {
    if (a[i] !== b[i]) return false;
  }
  const rest = bits & 7;
  if (rest === 0) return true;
  const mask = (0xff << (8 - rest)) & 0xff;
  return ((a[whole] ?? 0) & mask) === ((b[whole] ?? 0) & mask);
}

function isV4Mapped(bytes: IpBytes): boolean {
  for (let i = 0; i < 10; i++) {
    if (bytes[i] !== 0) return false;
  }
  return bytes[10] === 0xff && bytes[11] === 0xff;
}

function parseIpv4(text: string): IpBytes | undefined {
  const parts = text.split(".");
  if (parts.length !== 4) return undefined;
  const out = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const part = parts[i] ?? "";
    // Decimal only, no leading zeros (which some parsers read as octal).
    if (!/^(0|[1-9][0-9]{0,2})$/.test(part)) return undefined;
    const value = Number(part);
    if (value > 255) return undefined;
    out[i] = value;
  }
  return out;
}

function parseIpv6(text: string): IpBytes | undefined {
  if (text.length === 0 || text.includes("%")) return undefined;
  const doubleColon = text.indexOf("::");
  if (doubleColon !== -1 && text.indexOf("::", doubleColon + 1) !== -1) return undefined;
  const head = doubleColon === -1 ? text : text.slice(0, doubleColon);
  const tail = doubleColon === -1 ? "" : text.slice(doubleColon + 2);
  const headGroups = head === "" ? [] : head.split(":");
  const tailGroups = tail === "" ? [] : tail.split(":");
  const words: number[] = [];
  const tailWords: number[] = [];
  if (!pushGroups(headGroups, words, tailGroups.length === 0 && doubleColon === -1)) {
    return undefined;
  }
  if (!pushGroups(tailGroups, tailWords, true)) return undefined;
  const total = words.length + tailWords.length;
  if (doubleColon === -1 ? total !== 8 : total > 7) return undefined;
  const out = new Uint8Array(16);
  words.forEach((word, i) => {
    out[i * 2] = word >> 8;
    out[i * 2 + 1] = word & 0xff;
  });
  const offset = 8 - tailWords.length;
  tailWords.forEach((word, i) => {
    out[(offset + i) * 2] = word >> 8;
    out[(offset + i) * 2 + 1] = word & 0xff;
  });
  return out;
}

/** Pushes 16-bit words; an embedded IPv4 is allowed only as the very last group. */
function pushGroups(groups: readonly string[], into: number[], lastMayBeV4: boolean): boolean {
  for (let i = 0; i < groups.length; i++) {
    const group = groups[i] ?? "";
    if (i === groups.length - 1 && lastMayBeV4 && group.includes(".")) {
      const v4 = parseIpv4(group);
      if (v4 === undefined) return false;
      into.push(((v4[0] ?? 0) << 8) | (v4[1] ?? 0), ((v4[2] ?? 0) << 8) | (v4[3] ?? 0));
      continue;
    }
    if (!/^[0-9a-fA-F]{1,4}$/.test(group)) return false;
    into.push(parseInt(group, 16));
  }
  return true;
}
