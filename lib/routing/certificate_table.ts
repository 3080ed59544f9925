/**
 * Compiles a translation's certificates into an immutable
 * {@linkcode CertificateTable} for the SNI resolver.
 *
 * Owns certificate selection: exact host, then a one-label wildcard
 * (`*.example.com`), then the default certificate (the
 * `--default-ssl-certificate` Secret when valid, else the one passed in —
 * Sluice's self-signed certificate). Also owns the table's fingerprint, which
 * changes whenever a certificate or its host assignment changes. Knows nothing
 * about Kubernetes objects or TLS libraries.
 *
 * @module
 */

import type { CertificateBinding, Translation } from "../translate/translation.ts";
import { normaliseRequestHost, wildcardSuffix } from "./host.ts";
import type { CertificateTable, ServingCertificate } from "./snapshot.ts";

/** What {@linkcode compileCertificateTable} reads from a translation. */
export type CertificateTableInput = Pick<Translation, "certificates" | "defaultCertificate">;

/** Options of {@linkcode compileCertificateTable}. */
export interface CertificateTableOptions {
  /** Served when nothing else matches and no valid `--default-ssl-certificate` exists. */
  readonly defaultCertificate: ServingCertificate;
}

/** A 64-bit FNV-1a hash (two 32-bit lanes) of a string, as 16 hex digits. */
function hash(text: string): string {
  let a = 0x811c9dc5;
  let b = 0x050c5d1f;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x01000193) ^ (a >>> 15);
  }
  return (a >>> 0).toString(16).padStart(8, "0") + (b >>> 0).toString(16).padStart(8, "0");
}

function serving(binding: CertificateBinding): ServingCertificate {
  return Object.freeze({
    source: binding.secret,
    certPem: binding.certPem,
    keyPem: binding.keyPem,
  });
}

/**
 * Compiles the certificate table.
 *
 * Kubernetes rule (IngressTLS.hosts): hosts use the rule host format, so a
 * `*.example.com` entry serves exactly one extra label (`a.example.com`, not
 * `example.com`, not `a.b.example.com`). Server names are matched
 * case-insensitively, with a trailing dot ignored.
 */
export function compileCertificateTable(
  translation: CertificateTableInput,
  options: CertificateTableOptions,
): CertificateTable {
  const exact = new Map<string, ServingCertificate>();
  const wildcard = new Map<string, ServingCertificate>();
  const lines: string[] = [];
  for (const binding of translation.certificates) {
    const certificate = serving(binding);
    // The leaf fingerprint alone misses a chain-only change (an intermediate added
    // to fix a broken chain): listeners would keep serving the old chain.
    const content = `${binding.fingerprint} ${binding.chainFingerprint ?? hash(binding.certPem)}`;
    for (const host of binding.hosts) {
      const isWildcard = host.startsWith("*.");
      const map = isWildcard ? wildcard : exact;
      const key = isWildcard ? host.slice(2) : host;
      if (map.has(key)) continue;
      map.set(key, certificate);
      lines.push(`${host} ${binding.secret} ${content}`);
    }
  }
  const fallback = translation.defaultCertificate === undefined
    ? Object.freeze({ ...options.defaultCertificate })
    : serving(translation.defaultCertificate);
  lines.sort();
  lines.push(`default ${fallback.source} ${hash(fallback.certPem)} ${hash(fallback.keyPem)}`);
  const fingerprint = hash(lines.join("\n"));

  const resolve = (serverName: string | undefined): ServingCertificate => {
    if (serverName === undefined || serverName === "") return fallback;
    const name = normaliseRequestHost(serverName);
    const found = exact.get(name);
    if (found !== undefined) return found;
    const suffix = wildcard.size > 0 ? wildcardSuffix(name) : undefined;
    return (suffix !== undefined ? wildcard.get(suffix) : undefined) ?? fallback;
  };

  return Object.freeze({ resolve, fingerprint });
}
