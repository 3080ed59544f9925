/**
 * ingress-nginx basic authentication (`auth-type: basic`, `auth-secret`,
 * `auth-secret-type`, `auth-realm`) read into {@linkcode BasicAuth}: the
 * realm and the users with their password hashes, from a Secret.
 *
 * As ingress-nginx (`internal/ingress/annotations/auth`): `auth-secret` names
 * a Secret `name` in the Ingress's namespace, or `namespace/name` elsewhere
 * (refused unless `--allow-cross-namespace-secrets`, as ingress-nginx's
 * `allow-cross-namespace-resources`); `auth-secret-type` is `auth-file`
 * (default: an htpasswd file under the key `auth`) or `auth-map` (each key a
 * user, each value its hash); `auth-realm` (ingress-nginx's grammar: letters,
 * digits, spaces and `/-._~:`) defaults to empty, `realm=""`. `auth-type:
 * digest` is refused: Sluice does not implement digest authentication.
 * Without `auth-type` the other three mean nothing, as in ingress-nginx.
 *
 * Every problem (a missing Secret or key, a hash Sluice cannot verify, no
 * users) fails closed: the Ingress's routes answer 503.
 *
 * Pure: the Secret is looked up through the reader handed in.
 *
 * @module
 */

import type { Secret } from "../../k8s/objects.ts";
import type { Parsed } from "./annotation_values.ts";
import { parseAuthMap, parseHtpasswd } from "./htpasswd.ts";

/** Basic authentication for one Ingress's routes. */
export interface BasicAuth {
  /** The `realm` of `WWW-Authenticate: Basic realm="…"`. */
  readonly realm: string;
  /** The stored hash of each user (verifiable schemes only, see `htpasswd.ts`). */
  readonly users: Readonly<Record<string, string>>;
}

/** Where basic authentication's Secret is found. */
export interface SecretContext {
  /** The Ingress's namespace: where a bare `auth-secret` name is looked for. */
  readonly namespace: string;
  /** The Secret `namespace/name`, or undefined when there is none (or none can be read). */
  readonly secret?: ((key: string) => Secret | undefined) | undefined;
  /** `--allow-cross-namespace-secrets`: `auth-secret` may name another namespace's Secret. */
  readonly allowCrossNamespaceSecrets?: boolean | undefined;
}

/** A problem with one annotation (name without prefix). */
export interface AuthProblem {
  readonly annotation: string;
  readonly problem: string;
}

/** ingress-nginx's `CharsWithSpace`: the characters a realm may hold. */
const REALM = /^[-._~a-zA-Z0-9/: ]*$/;
/** A Secret's name (DNS subdomain) and a namespace (DNS label). */
const NAME = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
const NAMESPACE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/**
 * Reads basic authentication from an Ingress's annotations (`read` gives a
 * value by name without prefix, undefined when unset). Returns nothing when
 * `auth-type` is unset.
 */
export function readBasicAuth(
  read: (name: string) => string | undefined,
  context: SecretContext,
): { basicAuth?: BasicAuth; problems: AuthProblem[] } {
  const type = read("auth-type");
  if (type === undefined) return { problems: [] };
  const problems: AuthProblem[] = [];
  const problem = (annotation: string, text: string) =>
    problems.push({ annotation, problem: text });

  if (type === "digest") {
    problem(
      "auth-type",
      `"digest" authentication is not implemented by Sluice; use "basic" with the same Secret ` +
        "made by htpasswd -B",
    );
  } else if (type !== "basic") {
    problem("auth-type", `${JSON.stringify(type)} is not an authentication type (basic)`);
  }
  const secretType = read("auth-secret-type") ?? "auth-file";
  if (secretType !== "auth-file" && secretType !== "auth-map") {
    problem(
      "auth-secret-type",
      `${JSON.stringify(secretType)} is not a secret type (auth-file or auth-map)`,
    );
  }
  const realm = read("auth-realm") ?? "";
  if (!REALM.test(realm)) {
    problem(
      "auth-realm",
      `${JSON.stringify(realm)} holds characters other than letters, digits, spaces and /-._~:`,
    );
  }
  const secretName = read("auth-secret");
  let key: string | undefined;
  if (secretName === undefined) {
    problem("auth-secret", "it is missing; auth-type basic needs the Secret of its users");
  } else {
    const ref = parseSecretRef(secretName, context);
    if (ref.problem !== undefined) problem("auth-secret", ref.problem);
    else key = ref.value;
  }
  if (problems.length > 0 || key === undefined) return { problems };

  const secret = context.secret?.(key);
  if (secret === undefined) {
    return {
      problems: [{
        annotation: "auth-secret",
        problem: `Secret ${JSON.stringify(key)} is not found`,
      }],
    };
  }
  const users = secretType === "auth-map" ? readAuthMap(secret) : readAuthFile(secret);
  if (users.problem !== undefined) {
    return {
      problems: [{
        annotation: "auth-secret",
        problem: `Secret ${JSON.stringify(key)}: ${users.problem}`,
      }],
    };
  }
  return { basicAuth: { realm, users: users.value }, problems };
}

/** `name` (in the Ingress's namespace) or `namespace/name`, as `namespace/name`. */
function parseSecretRef(text: string, context: SecretContext): Parsed<string> {
  const parts = text.split("/");
  if (parts.length > 2) {
    return { problem: `${JSON.stringify(text)} is not a Secret name or namespace/name` };
  }
  const [namespace, name] = parts.length === 2
    ? [parts[0]!, parts[1]!]
    : [context.namespace, parts[0]!];
  if (!NAMESPACE.test(namespace) || !NAME.test(name)) {
    return { problem: `${JSON.stringify(text)} is not a Secret name or namespace/name` };
  }
  if (namespace !== context.namespace && context.allowCrossNamespaceSecrets !== true) {
    return {
      problem: `Secret "${namespace}/${name}" is in another namespace; ` +
        "set --allow-cross-namespace-secrets to allow it",
    };
  }
  return { value: `${namespace}/${name}` };
}

function readAuthFile(secret: Secret): Parsed<Record<string, string>> {
  const text = secretValue(secret, "auth");
  if (text === undefined) return { problem: 'it has no key "auth"' };
  if (typeof text !== "string") return { problem: `the key "auth" ${text.problem}` };
  const users = parseHtpasswd(text);
  return users.problem === undefined ? users : { problem: `the key "auth": ${users.problem}` };
}

function readAuthMap(secret: Secret): Parsed<Record<string, string>> {
  const keys = new Set([
    ...Object.keys(record(secret.data)),
    ...Object.keys(record(secret.stringData)),
  ]);
  const entries = new Map<string, string>();
  for (const key of keys) {
    const value = secretValue(secret, key);
    if (value === undefined) continue;
    if (typeof value !== "string") {
      return { problem: `the key ${JSON.stringify(key)} ${value.problem}` };
    }
    entries.set(key, value);
  }
  return parseAuthMap(Object.fromEntries(entries));
}

function record(value: unknown): Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value)
    ? value as Record<string, unknown>
    : {};
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });

/** A key of a Secret as text: `data` (base64 of UTF-8, as on the wire), else `stringData`. */
function secretValue(
  secret: Secret,
  key: string,
): string | { readonly problem: string } | undefined {
  const encoded = record(secret.data)[key];
  if (typeof encoded === "string") {
    let bytes: Uint8Array;
    try {
      bytes = Uint8Array.from(atob(encoded), (c) => c.charCodeAt(0));
    } catch {
      return { problem: "is not valid base64" };
    }
    try {
      return UTF8.decode(bytes);
    } catch {
      return { problem: "is not UTF-8 text" };
    }
  }
  const plain = record(secret.stringData)[key];
  return typeof plain === "string" ? plain : undefined;
}
