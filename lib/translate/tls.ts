/**
 * TLS: which hosts an Ingress serves over TLS, with which Secret's certificate,
 * and whether that certificate is usable.
 *
 * Owns `spec.tls[]` semantics, reading `tls.crt`/`tls.key` from Secrets,
 * per-host certificate conflicts and the `--default-ssl-certificate` Secret.
 * Certificate parsing itself is injected (`inspectCertificate`), so this module
 * knows no crypto. Knows nothing about paths or backends.
 *
 * @module
 */

import type { Secret } from "../k8s/objects.ts";
import type { ClusterIndex } from "./cluster_index.ts";
import { hostCoveredBy, normaliseRuleHost } from "./hosts.ts";
import type { OwnedIngress } from "./ingress_selection.ts";
import type { Issue } from "./issues.ts";
import { parseObjectRefOption } from "./option_refs.ts";
import { compareStrings } from "./_order.ts";
import type {
  CertificateBinding,
  CertificateInspection,
  CertificatePems,
  InspectCertificate,
} from "./translation.ts";

/** The Secret type the sources read (other types never reach translation from a cluster). */
const TLS_SECRET_TYPE = "kubernetes.io/tls";

/** A usable certificate read from a Secret, or why it is not usable. */
export type SecretCertificate =
  | {
    readonly ok: true;
    readonly pems: Required<CertificatePems>;
    readonly inspection: CertificateInspection & { ok: true };
  }
  | { readonly ok: false; readonly reason: string };

/** Options of {@linkcode createSecretCertificateReader}. */
export interface SecretCertificateReaderOptions {
  readonly now: number;
  readonly inspectCertificate: InspectCertificate;
}

/** Reads a key of a Secret: `data` (base64, as on the wire), else `stringData` (manifests). */
function readSecretValue(
  secret: Secret,
  key: string,
): string | { readonly error: string } | undefined {
  const encoded = secret.data?.[key];
  if (typeof encoded === "string") {
    try {
      // PEM is ASCII, so the decoded byte string is the text.
      return atob(encoded);
    } catch {
      return { error: `${key} is not valid base64` };
    }
  }
  const plain = secret.stringData?.[key];
  return typeof plain === "string" ? plain : undefined;
}

/**
 * Returns a reader of TLS Secrets by `namespace/name`, memoised for one
 * translation. `tls.crt` and `tls.key` are the keys of a `kubernetes.io/tls`
 * Secret (Kubernetes "TLS Secrets"). The sources deliver only Secrets of that
 * type; another type given here directly (a test) is read the same way.
 */
export function createSecretCertificateReader(
  index: ClusterIndex,
  options: SecretCertificateReaderOptions,
): (secretKey: string) => SecretCertificate {
  const memo = new Map<string, SecretCertificate>();
  return (secretKey) => {
    let result = memo.get(secretKey);
    if (result === undefined) {
      result = readCertificate(index.secrets.get(secretKey), options);
      memo.set(secretKey, result);
    }
    return result;
  };
}

function readCertificate(
  secret: Secret | undefined,
  options: SecretCertificateReaderOptions,
): SecretCertificate {
  // Only a Secret of type kubernetes.io/tls holds a certificate for Sluice (the sources also
  // read Opaque ones, for ingress-nginx's auth-secret): another type is reported as missing.
  // (A Secret without a type only comes from hand-built objects: the API and the manifests
  // source always give one.)
  if (secret === undefined || (secret.type !== undefined && secret.type !== TLS_SECRET_TYPE)) {
    return { ok: false, reason: `no such Secret of type "${TLS_SECRET_TYPE}"` };
  }
  const certPem = readSecretValue(secret, "tls.crt");
  const keyPem = readSecretValue(secret, "tls.key");
  if (typeof certPem === "object") return { ok: false, reason: certPem.error };
  if (typeof keyPem === "object") return { ok: false, reason: keyPem.error };
  let inspection: CertificateInspection;
  try {
    const pems: { certPem?: string; keyPem?: string } = {};
    if (certPem !== undefined) pems.certPem = certPem;
    if (keyPem !== undefined) pems.keyPem = keyPem;
    inspection = options.inspectCertificate(pems, { now: options.now });
  } catch (error) {
    const detail = error instanceof Error ? error.message : String(error);
    return { ok: false, reason: `the certificate could not be inspected (${detail})` };
  }
  if (!inspection.ok) return { ok: false, reason: inspection.reason };
  if (certPem === undefined || keyPem === undefined) {
    return { ok: false, reason: "tls.crt or tls.key is missing" };
  }
  return { ok: true, pems: { certPem, keyPem }, inspection };
}

/** What the TLS sections of our Ingresses produce. */
export interface TlsTranslation {
  readonly tlsHosts: string[];
  readonly certificates: CertificateBinding[];
}

/** One `spec.tls[]` entry, read and checked. */
interface TlsEntry {
  readonly field: string;
  readonly hosts: readonly string[];
  /** `namespace/name` and usable certificate of its Secret, when it has one. */
  readonly secret?: {
    readonly key: string;
    readonly certificate: SecretCertificate & { ok: true };
  };
}

/** Reads the `spec.tls[]` entries of one Ingress, reporting what is wrong with them. */
function readTlsEntries(
  owned: OwnedIngress,
  readCertificate: (secretKey: string) => SecretCertificate,
  issues: Issue[],
): TlsEntry[] {
  const { namespace, name, ingress } = owned;
  const report = (field: string, message: string) =>
    issues.push({ kind: "Ingress", namespace, name, field, message });
  const tls = ingress.spec?.tls;
  if (tls === undefined || tls === null) return [];
  if (!Array.isArray(tls)) {
    report("spec.tls", "Cannot read spec.tls: not a list");
    return [];
  }
  const entries: TlsEntry[] = [];
  tls.forEach((entry, i) => {
    const field = `spec.tls[${i}]`;
    const rawHosts = entry?.hosts;
    // A Set (insertion-ordered), not an array: an entry may list tens of thousands of hosts.
    const unique = new Set<string>();
    const listed = Array.isArray(rawHosts) && rawHosts.length > 0;
    const withoutHosts = () =>
      report(
        `${field}.hosts`,
        "Cannot serve TLS without hosts: list the hosts the certificate serves in hosts",
      );
    if (listed) {
      rawHosts.forEach((raw, j) => {
        const result = normaliseRuleHost(raw);
        if (!result.ok) report(`${field}.hosts[${j}]`, result.message);
        else if (result.host === "") {
          report(`${field}.hosts[${j}]`, "Cannot serve TLS for an empty host");
        } else unique.add(result.host);
      });
    }
    const hosts = [...unique];
    const secretName = entry?.secretName;
    if (typeof secretName !== "string" || secretName === "") {
      if (!listed) withoutHosts();
      if (hosts.length > 0) {
        report(
          `${field}.secretName`,
          `Cannot serve a certificate for ${quoteList(hosts)}: secretName is missing; ` +
            "the default certificate is served",
        );
      }
      entries.push({ field, hosts });
      return;
    }
    if (secretName.includes("/")) {
      if (!listed) withoutHosts();
      report(
        `${field}.secretName`,
        `Cannot use Secret "${secretName}": a TLS Secret must be in the Ingress's namespace ` +
          `"${namespace}"; give its name only`,
      );
      entries.push({ field, hosts });
      return;
    }
    const key = `${namespace}/${secretName}`;
    const certificate = readCertificate(key);
    if (!certificate.ok) {
      if (!listed) withoutHosts();
      report(
        `${field}.secretName`,
        `Cannot use TLS Secret "${key}": ${certificate.reason}; ` +
          "the default certificate is served instead",
      );
      entries.push({ field, hosts });
      return;
    }
    if (!listed) {
      // IngressTLS.hosts "defaults to the wildcard host setting for the loadbalancer
      // controller": as ingress-nginx, the Ingress's rule hosts its certificate covers.
      const covered = ruleHosts(ingress).filter((host) =>
        certificate.inspection.dnsNames.some((dnsName) => hostCoveredBy(host, dnsName))
      );
      if (covered.length === 0) {
        report(
          `${field}.hosts`,
          `Cannot serve TLS Secret "${key}" without hosts: its certificate covers none of this ` +
            "Ingress's rule hosts; list the hosts it serves in hosts",
        );
      }
      hosts.push(...covered);
    }
    entries.push({ field, hosts, secret: { key, certificate } });
  });
  return entries;
}

/** The valid, non-empty hosts of an Ingress's rules, each once. */
function ruleHosts(ingress: OwnedIngress["ingress"]): string[] {
  const rules = ingress.spec?.rules;
  if (!Array.isArray(rules)) return [];
  const hosts = new Set<string>();
  for (const rule of rules) {
    const result = normaliseRuleHost(rule?.host ?? "");
    if (result.ok && result.host !== "") hosts.add(result.host);
  }
  return [...hosts];
}

/**
 * Translates `spec.tls[]` of our Ingresses, given in precedence order (oldest
 * first): the hosts served over TLS and a certificate per host.
 *
 * Kubernetes rules (IngressTLS, networking.k8s.io/v1): `hosts` are the hosts
 * the certificate serves (same format as rule hosts, wildcards included;
 * without any, the Ingress's rule hosts that the certificate covers, as
 * ingress-nginx does);
 * `secretName` names a Secret in the Ingress's own namespace. A host claimed
 * with different Secrets by several Ingresses goes to the oldest Ingress with a
 * usable Secret; the others are reported. A broken Secret is reported and its
 * hosts fall back to the default certificate; nothing else is affected.
 */
export function translateTls(
  ingresses: readonly OwnedIngress[],
  context: {
    readonly readCertificate: (secretKey: string) => SecretCertificate;
    readonly issues: Issue[];
    readonly onError?: (owned: OwnedIngress, error: unknown) => void;
  },
): TlsTranslation {
  const { readCertificate, issues } = context;
  const tlsHosts = new Set<string>();
  const owners = new Map<string, { secret: string; ingress: string }>();
  const bindings = new Map<
    string,
    { certificate: SecretCertificate & { ok: true }; hosts: Set<string> }
  >();

  for (const owned of ingresses) {
    const ownIssues: Issue[] = [];
    let entries: TlsEntry[];
    try {
      entries = readTlsEntries(owned, readCertificate, ownIssues);
    } catch (error) {
      context.onError?.(owned, error);
      continue;
    }
    // Not `push(...ownIssues)`: that throws past about 120,000 issues.
    for (const issue of ownIssues) issues.push(issue);
    for (const { field, hosts, secret } of entries) {
      for (const host of hosts) tlsHosts.add(host);
      if (secret === undefined) continue;
      for (const host of hosts) {
        const owner = owners.get(host);
        if (owner !== undefined && owner.secret !== secret.key) {
          issues.push({
            kind: "Ingress",
            namespace: owned.namespace,
            name: owned.name,
            field: `${field}.secretName`,
            message: `Cannot serve host "${host}" with Secret "${secret.key}": Ingress ` +
              `"${owner.ingress}" takes precedence and serves it with Secret "${owner.secret}"`,
          });
          continue;
        }
        if (owner === undefined) owners.set(host, { secret: secret.key, ingress: owned.key });
        const dnsNames = secret.certificate.inspection.dnsNames;
        if (!dnsNames.some((dnsName) => hostCoveredBy(host, dnsName))) {
          // Clients match names against subjectAltName only (RFC 6125): a CN is ignored.
          const problem = dnsNames.length === 0
            ? `has no subjectAltName DNS names, so it covers no host ("${host}")`
            : `does not cover host "${host}"`;
          issues.push({
            kind: "Ingress",
            namespace: owned.namespace,
            name: owned.name,
            field: `${field}.hosts`,
            message: `Certificate of Secret "${secret.key}" ${problem}: clients will reject it`,
          });
        }
        let binding = bindings.get(secret.key);
        if (binding === undefined) {
          binding = { certificate: secret.certificate, hosts: new Set() };
          bindings.set(secret.key, binding);
        }
        binding.hosts.add(host);
      }
    }
  }

  const certificates = [...bindings.entries()]
    .map(([secret, { certificate, hosts }]) =>
      toBinding(secret, certificate, [...hosts].sort(compareStrings))
    )
    .sort((a, b) => compareStrings(a.secret, b.secret));
  return { tlsHosts: [...tlsHosts].sort(compareStrings), certificates };
}

/**
 * Certificates of Gateway HTTPS listeners (a listener's first certificateRef,
 * already checked by the Gateway translation), each bound to its listener's
 * hostname; a listener without hostname offers its certificate as the
 * fallback. Appended after the Ingress bindings, so for a host both name, the
 * Ingress certificate is served (the table keeps a host's first binding).
 */
export function translateGatewayCertificates(
  listeners: readonly {
    readonly gateway: string;
    readonly listener: string;
    readonly hostname: string;
    readonly certificates: readonly string[];
  }[],
  context: {
    readonly readCertificate: (secretKey: string) => SecretCertificate;
    readonly issues: Issue[];
  },
): { readonly certificates: CertificateBinding[]; readonly fallback?: CertificateBinding } {
  const certificates: CertificateBinding[] = [];
  let fallback: CertificateBinding | undefined;
  for (const listener of listeners) {
    const secretKey = listener.certificates[0];
    if (secretKey === undefined) continue;
    const certificate = context.readCertificate(secretKey);
    if (!certificate.ok) {
      const [namespace = "", name = ""] = listener.gateway.split("/");
      context.issues.push({
        kind: "Gateway",
        namespace,
        name,
        field: `spec.listeners[${listener.listener}].tls.certificateRefs`,
        message: `Cannot use TLS Secret "${secretKey}": ${certificate.reason}`,
      });
      continue;
    }
    if (listener.hostname === "") fallback ??= toBinding(secretKey, certificate, []);
    else certificates.push(toBinding(secretKey, certificate, [listener.hostname]));
  }
  return fallback === undefined ? { certificates } : { certificates, fallback };
}

/** Builds a binding from a usable certificate. */
function toBinding(
  secret: string,
  certificate: SecretCertificate & { ok: true },
  hosts: readonly string[],
): CertificateBinding {
  const { inspection, pems } = certificate;
  return {
    secret,
    hosts,
    notBefore: inspection.notBefore,
    notAfter: inspection.notAfter,
    dnsNames: [...inspection.dnsNames],
    fingerprint: inspection.fingerprint,
    ...(inspection.chainFingerprint === undefined
      ? {}
      : { chainFingerprint: inspection.chainFingerprint }),
    certPem: pems.certPem,
    keyPem: pems.keyPem,
  };
}

/** Quotes the first few values: one message must stay readable (an Event) for any list size. */
function quoteList(values: readonly string[], shown = 5): string {
  const quoted = values.slice(0, shown).map((v) => `"${v}"`).join(", ");
  return values.length > shown ? `${quoted} and ${values.length - shown} more` : quoted;
}

/**
 * Reads the `--default-ssl-certificate` Secret (`namespace/name`). Returns its
 * binding when usable; otherwise reports why, and the self-signed certificate
 * generated at start stays the default.
 */
export function translateDefaultCertificate(
  option: string | undefined,
  context: {
    readonly readCertificate: (secretKey: string) => SecretCertificate;
    readonly issues: Issue[];
  },
): CertificateBinding | undefined {
  if (option === undefined || option === "") return undefined;
  const parsed = parseObjectRefOption(option);
  if (parsed === undefined) {
    context.issues.push({
      kind: "Option",
      namespace: "",
      name: "default-ssl-certificate",
      field: "",
      message: `Cannot use default certificate "${option}": expected "namespace/name"`,
    });
    return undefined;
  }
  const secretKey = `${parsed.namespace}/${parsed.name}`;
  const certificate = context.readCertificate(secretKey);
  if (!certificate.ok) {
    context.issues.push({
      kind: "Secret",
      namespace: parsed.namespace,
      name: parsed.name,
      field: "",
      message: `Cannot use default TLS Secret "${secretKey}": ${certificate.reason}; ` +
        "the self-signed certificate is served instead",
    });
    return undefined;
  }
  return toBinding(secretKey, certificate, []);
}
