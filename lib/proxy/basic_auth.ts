/**
 * The basic-authentication step of an Ingress (ingress-nginx `auth-type:
 * basic`, nginx `auth_basic`): reads `Authorization: Basic …` as nginx does
 * and verifies the password against the user's stored hash.
 *
 * - The scheme is matched without case and may be followed by several
 *   spaces; the credentials are base64 (padding optional) of UTF-8
 *   `user:password`, split at the first colon; an empty user, no colon,
 *   bytes that are not UTF-8 or more than {@linkcode MAX_CREDENTIALS}
 *   characters are refused (401) without hashing anything.
 * - Two `Authorization` fields: 400, as nginx (a duplicate of a unique header).
 * - bcrypt through `bcryptjs` (asynchronous, so a verification does not hold
 *   the event loop), apr1 through `apache-md5` (on the password's UTF-8
 *   bytes), SHA-1 through Web Crypto; results compared in constant time.
 * - Successful verifications are remembered in a bounded LRU keyed by a
 *   SipHash-2-4 (`siphash.ts`, a keyed pseudorandom function, its 128-bit
 *   key made per verifier; an HMAC-SHA-256 cost 15 µs a request) of user,
 *   password and stored hash: the
 *   password itself is never kept, a changed hash or password misses, and a
 *   failure is never remembered. So bcrypt's cost is paid once per user and
 *   password, not per request.
 *
 * Never logs: credentials must not reach a log line.
 *
 * @module
 */

import { randomBytes } from "node:crypto";
import { sipHash24, sipKey } from "./siphash.ts";
import bcrypt from "bcryptjs";
import apacheMd5Module from "apache-md5";
import type { CompiledBasicAuth } from "../routing/route_behaviour.ts";
import { hashScheme } from "../translate/nginx/htpasswd.ts";

/** The longest credentials token (base64) read; longer ones are refused unread. */
export const MAX_CREDENTIALS = 4096;

/** What the step says: let the request through, or answer with this status. */
export type BasicAuthVerdict = "pass" | 400 | 401;

/** Verifies requests against an Ingress's users; one per proxy handler. */
export interface BasicAuthVerifier {
  /** Judges a request by its `Authorization` field values (all of them, in order). */
  check(auth: CompiledBasicAuth, authorization: readonly string[]): Promise<BasicAuthVerdict>;
  /** How many successful verifications are remembered (for tests). */
  readonly cached: number;
}

/** Options of {@linkcode createBasicAuthVerifier}. */
export interface BasicAuthVerifierOptions {
  /** Successful verifications remembered; default 10,000. */
  readonly maxCached?: number;
}

/** The user and password of `Authorization: Basic …`. */
export interface BasicCredentials {
  readonly user: string;
  readonly password: string;
}

// apache-md5 is CommonJS (`module.exports = fn`) typed as an ES default export: Deno's default
// import is then the function at run time but the module to the type checker.
const apacheMd5 = apacheMd5Module as unknown as (password: string, salt: string) => string;

const UTF8 = new TextDecoder("utf-8", { fatal: true });
const ENCODER = new TextEncoder();
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/**
 * Reads one `Authorization` value as nginx's `ngx_http_auth_basic_user`
 * does; undefined when it is not basic credentials Sluice can check.
 */
export function parseBasicCredentials(value: string): BasicCredentials | undefined {
  const m = /^basic +/i.exec(value);
  if (m === null) return undefined;
  const token = value.slice(m[0].length);
  if (token.length > MAX_CREDENTIALS || !BASE64.test(token) || token.length % 4 === 1) {
    return undefined;
  }
  let text: string;
  try {
    text = UTF8.decode(Uint8Array.from(atob(token), (c) => c.charCodeAt(0)));
  } catch {
    return undefined;
  }
  const colon = text.indexOf(":");
  if (colon <= 0) return undefined;
  return { user: text.slice(0, colon), password: text.slice(colon + 1) };
}

/** Whether `password` matches `hash` (bcrypt, apr1 or SHA-1; anything else never matches). */
export async function verifyPassword(password: string, hash: string): Promise<boolean> {
  switch (hashScheme(hash)) {
    case "bcrypt":
      // bcryptjs compares in constant time; it reads `$2y$` as `$2b$`, as htpasswd means it.
      return await bcrypt.compare(password, hash);
    case "apr1": {
      // apache-md5 hashes each character as one byte: give it the UTF-8 bytes, as htpasswd did.
      const bytes = String.fromCharCode(...ENCODER.encode(password));
      return constantTimeEqual(apacheMd5(bytes, hash), hash);
    }
    case "sha1": {
      const digest = await crypto.subtle.digest("SHA-1", ENCODER.encode(password));
      const encoded = btoa(String.fromCharCode(...new Uint8Array(digest)));
      return constantTimeEqual(`{SHA}${encoded}`, hash);
    }
    case undefined:
      return false;
  }
}

/** Whether two strings are equal, in time that depends only on their lengths. */
export function constantTimeEqual(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** Creates a verifier with its own cache of successful verifications. */
export function createBasicAuthVerifier(options: BasicAuthVerifierOptions = {}): BasicAuthVerifier {
  const maxCached = Math.max(0, options.maxCached ?? 10_000);
  const secret = sipKey(randomBytes(16));
  // Insertion order is recency: a hit moves its key to the end, the first key is the oldest.
  const passed = new Map<string, true>();
  // Length-prefixed, so no two (user, password, hash) triples spell the same message.
  const cacheKey = (user: string, password: string, hash: string) =>
    sipHash24(
      secret,
      ENCODER.encode(`${user.length}:${user}${password.length}:${password}${hash}`),
    );

  return {
    get cached() {
      return passed.size;
    },
    async check(auth, authorization) {
      if (authorization.length > 1) return 400;
      const value = authorization[0];
      if (value === undefined) return 401;
      const credentials = parseBasicCredentials(value);
      if (credentials === undefined) return 401;
      const hash = auth.users.get(credentials.user);
      if (hash === undefined) return 401;
      const key = cacheKey(credentials.user, credentials.password, hash);
      if (passed.has(key)) {
        passed.delete(key);
        passed.set(key, true);
        return "pass";
      }
      if (!await verifyPassword(credentials.password, hash)) return 401;
      if (maxCached > 0) {
        passed.set(key, true);
        if (passed.size > maxCached) passed.delete(passed.keys().next().value!);
      }
      return "pass";
    },
  };
}
