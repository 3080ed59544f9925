/**
 * The users of ingress-nginx basic authentication, read strictly from a
 * Secret's text: an htpasswd file (`auth-secret-type: auth-file`, the key
 * `auth`) or one key per user (`auth-map`).
 *
 * Only hashes Sluice can verify are accepted: bcrypt (`$2a$`, `$2b$`,
 * `$2y$`), Apache's MD5 (`$apr1$`) and SHA-1 (`{SHA}`). Anything else (DES
 * crypt, `$1$` MD5-crypt, `$5$`/`$6$` SHA-crypt, plain text) is a problem
 * for its line, and one bad line refuses the whole list: serving the others
 * would silently lock that user out, or worse, guess. Problems name line
 * numbers or user names, never a hash.
 *
 * Pure: no I/O. Knows nothing of how hashes are verified
 * (`lib/proxy/basic_auth.ts`).
 *
 * @module
 */

import type { Parsed } from "./annotation_values.ts";

/** The hash schemes Sluice verifies. */
export type HashScheme = "bcrypt" | "apr1" | "sha1";

/** bcrypt: `$2a$`/`$2b$`/`$2y$`, a cost 04–31, 22 characters of salt and 31 of hash. */
const BCRYPT = /^\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}$/;
/** Apache MD5: `$apr1$`, a salt of 1–8 characters, `$`, 22 characters of hash. */
const APR1 = /^\$apr1\$[./0-9A-Za-z]{1,8}\$[./0-9A-Za-z]{22}$/;
/** SHA-1: `{SHA}` and the 20-byte digest in base64. */
const SHA1 = /^\{SHA\}[A-Za-z0-9+/]{27}=$/;

/** The scheme of a stored hash, or undefined when Sluice cannot verify it. */
export function hashScheme(hash: string): HashScheme | undefined {
  if (BCRYPT.test(hash)) return "bcrypt";
  if (APR1.test(hash)) return "apr1";
  if (SHA1.test(hash)) return "sha1";
  return undefined;
}

const UNSUPPORTED =
  "is not a bcrypt ($2a$, $2b$, $2y$), apr1 ($apr1$) or SHA-1 ({SHA}) hash; crypt, $1$ MD5, " +
  "SHA-crypt and plain-text passwords are not supported (htpasswd -B makes bcrypt)";

/** How many bad lines one problem names before it says how many more there are. */
const MAX_LISTED = 5;

/** A user name as nginx reads it: not empty, no colon, no control characters. */
// deno-lint-ignore no-control-regex
const USER = /^[^:\u0000-\u001f\u007f]+$/;

/**
 * Reads an htpasswd file: one `user:hash` a line, optionally followed by
 * `:comment` (nginx); lines starting with `#` and blank lines skipped;
 * CRLF line ends accepted. A user listed twice is a problem (nginx would use
 * the first line; a second one is usually a password change gone wrong).
 */
export function parseHtpasswd(text: string): Parsed<Record<string, string>> {
  const users = new Map<string, string>();
  const firstLine = new Map<string, number>();
  const bad: string[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const number = i + 1;
    let line = lines[i]!;
    if (line.endsWith("\r")) line = line.slice(0, -1);
    if (line.trim() === "" || line.startsWith("#")) continue;
    const colon = line.indexOf(":");
    if (colon < 0) {
      bad.push(`line ${number} has no ":" between a user and a hash`);
      continue;
    }
    const user = line.slice(0, colon);
    const rest = line.slice(colon + 1);
    const end = rest.indexOf(":");
    const hash = end < 0 ? rest : rest.slice(0, end);
    if (!USER.test(user)) {
      bad.push(`line ${number} has an empty user name or one with control characters`);
      continue;
    }
    if (hashScheme(hash) === undefined) {
      bad.push(`line ${number}: the password ${UNSUPPORTED}`);
      continue;
    }
    const first = firstLine.get(user);
    if (first !== undefined) {
      bad.push(`line ${number} lists user ${JSON.stringify(user)} again (first on line ${first})`);
      continue;
    }
    firstLine.set(user, number);
    users.set(user, hash);
  }
  if (bad.length > 0) return { problem: listProblems(bad) };
  if (users.size === 0) return { problem: "it lists no user" };
  return { value: Object.fromEntries(users) };
}

/**
 * Reads `auth-map` users: each key a user, its value the hash (one trailing
 * line end allowed, as `kubectl create secret --from-file` leaves one).
 */
export function parseAuthMap(entries: Readonly<Record<string, string>>): Parsed<
  Record<string, string>
> {
  const users = new Map<string, string>();
  const bad: string[] = [];
  for (const user of Object.keys(entries).sort()) {
    const hash = entries[user]!.replace(/\r?\n$/, "");
    if (!USER.test(user)) {
      bad.push(`the key ${JSON.stringify(user)} is not a user name`);
    } else if (hashScheme(hash) === undefined) {
      bad.push(`the password of user ${JSON.stringify(user)} ${UNSUPPORTED}`);
    } else {
      users.set(user, hash);
    }
  }
  if (bad.length > 0) return { problem: listProblems(bad) };
  if (users.size === 0) return { problem: "it lists no user" };
  return { value: Object.fromEntries(users) };
}

function listProblems(bad: readonly string[]): string {
  const shown = bad.slice(0, MAX_LISTED).join("; ");
  const more = bad.length - MAX_LISTED;
  return more > 0 ? `${shown}; and ${more} more` : shown;
}
