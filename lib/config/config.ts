/**
 * The command line: every flag Sluice accepts, its default, its
 * `SLUICE_<NAME>` environment variable, and its validation. This is a
 * contract other tooling depends on; keep the names.
 *
 * Precedence: a flag on the command line, then its environment variable,
 * then the default. Parsing is pure: arguments and environment in, a frozen
 * {@linkcode Config} (or one error line) out.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { createCidrMatcher, parseIp } from "../net/cidr.ts";
import { isDnsLabel, isDnsSubdomain, isPortName } from "../translate/names.ts";

/** Everything Sluice is told at start. */
export interface Config {
  readonly kubeconfig: string | undefined;
  readonly manifests: string | undefined;
  readonly ingressClass: string;
  readonly controllerName: string;
  readonly watchIngressWithoutClass: boolean;
  /** Serve Ingresses whose ingress-nginx access-control annotations Sluice does not enforce. */
  readonly ignoreAccessAnnotations: boolean;
  /** An Ingress's `auth-secret` may name a Secret in another namespace (`namespace/name`). */
  readonly allowCrossNamespaceSecrets: boolean;
  /** Serve Gateway API objects too (GatewayClasses of `controllerName`), when their CRDs exist. */
  readonly gatewayApi: boolean;
  /** Local addresses given one per Gateway, each served on the HTTP and HTTPS ports (empty: Gateways share the main listeners). */
  readonly gatewayAddresses: readonly string[];
  /** Empty: all namespaces. */
  readonly watchNamespaces: readonly string[];
  /** Address of the HTTP, HTTPS and health ports; undefined: `::` (IPv6 and IPv4) where the host has IPv6, else `0.0.0.0`. */
  readonly bindAddress: string | undefined;
  readonly httpPort: number;
  readonly httpsPort: number;
  readonly healthPort: number;
  readonly defaultSslCertificate: string | undefined;
  readonly defaultBackendService: string | undefined;
  readonly publishService: string | undefined;
  readonly publishStatusAddresses: readonly string[];
  readonly electionId: string;
  /** Namespace of the leader-election Lease. */
  readonly electionNamespace: string | undefined;
  readonly workers: number;
  readonly logLevel: "trace" | "debug" | "info" | "warning" | "error" | "fatal";
  readonly logFormat: "json" | "pretty";
  readonly accessLog: boolean;
  readonly sslRedirect: boolean;
  /** How long a client connection may take (TLS handshake included) to send its first bytes. */
  readonly clientFirstBytesTimeoutMs: number;
  /** A client connection idle, trickling a request head or reading nothing for this long is closed. */
  readonly clientIdleTimeoutMs: number;
  readonly hsts: boolean;
  readonly hstsMaxAgeSeconds: number;
  /** Port named in HTTP→HTTPS redirects (the Service's HTTPS port, not the listener's). */
  readonly httpsRedirectPort: number;
  readonly trustedProxyCidrs: readonly string[];
  readonly proxyConnectTimeoutMs: number;
  readonly proxyReadTimeoutMs: number;
  /** ingress-nginx `limit-req-status-code`: the answer to a request over an Ingress's limits. */
  readonly limitStatusCode: number;
  /** Request body limit in bytes; 0 means unlimited. */
  readonly maxBodyBytes: number;
  readonly shutdownTimeoutMs: number;
  readonly shutdownDelayMs: number;
}

type Kind = "string" | "boolean" | "int" | "duration" | "list" | "ref" | "bytes" | "enum";

interface FlagSpec {
  readonly name: string;
  readonly key: keyof Config;
  readonly kind: Kind;
  readonly help: string;
  /** Default as shown in `--help` and parsed like user input; undefined means unset. */
  readonly default?: string;
  readonly values?: readonly string[];
  readonly min?: number;
  readonly max?: number;
  /** What the value is, as `--help` shows it (`--http-port=PORT`); enums list their values. */
  readonly value?: string;
  /** Said after the default in `--help`, for a default that depends on the machine. */
  readonly defaultNote?: string;
}

/** Every flag, in the order `--help` lists them. */
export const FLAGS: readonly FlagSpec[] = [
  {
    name: "kubeconfig",
    key: "kubeconfig",
    kind: "string",
    value: "FILE",
    help: "Kubeconfig file (else $KUBECONFIG, ~/.kube/config, then in-cluster)",
  },
  {
    name: "manifests",
    key: "manifests",
    kind: "string",
    value: "DIR",
    help: "Serve the YAML manifests in this directory instead of a cluster",
  },
  {
    name: "ingress-class",
    key: "ingressClass",
    kind: "string",
    default: "sluice",
    value: "NAME",
    help: "Value of the legacy kubernetes.io/ingress.class annotation that is ours",
  },
  {
    name: "controller-name",
    key: "controllerName",
    kind: "string",
    default: "sluice.dev/ingress-controller",
    value: "NAME",
    help: "spec.controller of the IngressClasses that are ours",
  },
  {
    name: "watch-ingress-without-class",
    key: "watchIngressWithoutClass",
    kind: "boolean",
    default: "false",
    help: "Also serve Ingresses that name no class",
  },
  {
    name: "ignore-access-annotations",
    key: "ignoreAccessAnnotations",
    kind: "boolean",
    default: "false",
    help:
      "Serve Ingresses with ingress-nginx access-control annotations, unenforced (else they answer 503)",
  },
  {
    name: "allow-cross-namespace-secrets",
    key: "allowCrossNamespaceSecrets",
    kind: "boolean",
    default: "false",
    help: "Let an Ingress's auth-secret name a Secret in another namespace (namespace/name)",
  },
  {
    name: "gateway-api",
    key: "gatewayApi",
    kind: "boolean",
    default: "true",
    help:
      "Also serve Gateway API routes of GatewayClasses naming --controller-name, once the CRDs exist",
  },
  {
    name: "gateway-addresses",
    key: "gatewayAddresses",
    kind: "list",
    default: "",
    value: "IPS",
    help:
      "Comma-separated local IPs, one given to each Gateway and listened on (HTTP and HTTPS ports) for its routes only",
  },
  {
    name: "watch-namespace",
    key: "watchNamespaces",
    kind: "list",
    default: "",
    value: "NAMESPACES",
    help: "Comma-separated namespaces to watch (default: all)",
  },
  {
    name: "bind-address",
    key: "bindAddress",
    kind: "string",
    value: "IP",
    help: "Address the HTTP, HTTPS and health ports listen on (default: :: for IPv6 and IPv4)",
  },
  {
    name: "http-port",
    key: "httpPort",
    kind: "int",
    default: "8080",
    min: 1,
    max: 65535,
    value: "PORT",
    help: "Port of the HTTP listener",
  },
  {
    name: "https-port",
    key: "httpsPort",
    kind: "int",
    default: "8443",
    min: 1,
    max: 65535,
    value: "PORT",
    help: "Port of the HTTPS listener",
  },
  {
    name: "health-port",
    key: "healthPort",
    kind: "int",
    default: "10254",
    min: 1,
    max: 65535,
    value: "PORT",
    help: "Port of /healthz, /readyz and /metrics",
  },
  {
    name: "default-ssl-certificate",
    key: "defaultSslCertificate",
    kind: "ref",
    value: "NAMESPACE/NAME",
    help: "TLS Secret served when no Ingress certificate matches",
  },
  {
    name: "default-backend-service",
    key: "defaultBackendService",
    kind: "ref",
    value: "NAMESPACE/NAME[:PORT]",
    help: "Service (and port, by number or name) for requests no rule matches",
  },
  {
    name: "publish-service",
    key: "publishService",
    kind: "ref",
    value: "NAMESPACE/NAME",
    help: "Service whose address is written to Ingress status",
  },
  {
    name: "publish-status-address",
    key: "publishStatusAddresses",
    kind: "list",
    default: "",
    value: "ADDRESSES",
    help: "Comma-separated addresses (IPs or DNS names) written to Ingress status",
  },
  {
    name: "election-id",
    key: "electionId",
    kind: "string",
    default: "sluice-leader",
    value: "NAME",
    help: "Name of the leader-election Lease",
  },
  {
    name: "election-namespace",
    key: "electionNamespace",
    kind: "string",
    value: "NAMESPACE",
    help: "Namespace of the Lease (default: $POD_NAMESPACE, the in-cluster namespace, or default)",
  },
  {
    name: "workers",
    key: "workers",
    kind: "int",
    min: 1,
    max: 256,
    value: "N",
    defaultNote: "the CPUs this process may use, after any cgroup CPU limit",
    help: "Data-plane workers",
  },
  {
    name: "log-level",
    key: "logLevel",
    kind: "enum",
    default: "info",
    values: ["trace", "debug", "info", "warning", "error", "fatal"],
    help: "Lowest level logged",
  },
  {
    name: "log-format",
    key: "logFormat",
    kind: "enum",
    default: "json",
    values: ["json", "pretty"],
    help: "json: one JSON object per line; pretty: for people",
  },
  {
    name: "access-log",
    key: "accessLog",
    kind: "boolean",
    default: "true",
    help: "Log every request, one line each in the --log-format",
  },
  {
    name: "ssl-redirect",
    key: "sslRedirect",
    kind: "boolean",
    default: "true",
    help: "Redirect HTTP to HTTPS (308) for hosts with TLS",
  },
  {
    name: "client-first-bytes-timeout",
    key: "clientFirstBytesTimeoutMs",
    kind: "duration",
    default: "30s",
    min: 1,
    help: "Close a client connection whose TLS handshake and first bytes take longer",
  },
  {
    name: "client-idle-timeout",
    key: "clientIdleTimeoutMs",
    kind: "duration",
    default: "75s",
    min: 1,
    help: "Close a client connection idle, trickling a request head, or reading nothing this long",
  },
  {
    name: "hsts",
    key: "hsts",
    kind: "boolean",
    default: "true",
    help: "Send Strict-Transport-Security on HTTPS for hosts with TLS",
  },
  {
    name: "hsts-max-age",
    key: "hstsMaxAgeSeconds",
    kind: "int",
    default: "31536000",
    min: 0,
    max: 2 ** 31,
    value: "SECONDS",
    help: "max-age of Strict-Transport-Security",
  },
  {
    name: "https-redirect-port",
    key: "httpsRedirectPort",
    kind: "int",
    default: "443",
    min: 1,
    max: 65535,
    value: "PORT",
    help: "Port named in HTTP to HTTPS redirects (the Service's HTTPS port)",
  },
  {
    name: "trusted-proxy-cidrs",
    key: "trustedProxyCidrs",
    kind: "list",
    default: "",
    value: "CIDRS",
    help: "Comma-separated CIDRs whose X-Forwarded-* headers are trusted",
  },
  {
    name: "proxy-connect-timeout",
    key: "proxyConnectTimeoutMs",
    kind: "duration",
    default: "5s",
    min: 1,
    help: "Upstream connect timeout",
  },
  {
    name: "proxy-read-timeout",
    key: "proxyReadTimeoutMs",
    kind: "duration",
    default: "60s",
    min: 1,
    help: "Upstream idle read timeout (never a cap on a whole stream)",
  },
  {
    name: "limit-status-code",
    key: "limitStatusCode",
    kind: "int",
    default: "503",
    min: 400,
    max: 599,
    value: "CODE",
    help: "Status of requests over an Ingress's limit-rps, limit-rpm or limit-connections",
  },
  {
    name: "max-body-size",
    key: "maxBodyBytes",
    kind: "bytes",
    default: "0",
    help: "Request body limit (0: unlimited)",
  },
  {
    name: "shutdown-timeout",
    key: "shutdownTimeoutMs",
    kind: "duration",
    default: "30s",
    help: "How long in-flight requests may finish after SIGTERM",
  },
  {
    name: "shutdown-delay",
    key: "shutdownDelayMs",
    kind: "duration",
    default: "5s",
    help: "How long to keep accepting after SIGTERM while endpoints are removed",
  },
];

/** `--http-port` → `SLUICE_HTTP_PORT`. */
export function envName(flag: string): string {
  return `SLUICE_${flag.toUpperCase().replaceAll("-", "_")}`;
}

/** The outcome of parsing. */
export type ParseResult =
  | { readonly kind: "config"; readonly config: Config }
  | { readonly kind: "help"; readonly text: string }
  | { readonly kind: "version"; readonly text: string }
  | { readonly kind: "error"; readonly message: string };

/** Options of {@linkcode parseConfig}. */
export interface ParseOptions {
  /** The environment (`SLUICE_*` variables are read from it). */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Default of `--workers`. */
  readonly cpus: number;
  /** What `--version` prints after `sluice `. Default `"(unknown version)"`. */
  readonly version?: string;
}

/** Parses the command line and environment. Never throws for bad input. */
export function parseConfig(args: readonly string[], options: ParseOptions): ParseResult {
  const booleans = new Set(FLAGS.filter((f) => f.kind === "boolean").map((f) => f.name));
  const normalised: string[] = [];
  for (const arg of args) {
    // node:util takes booleans as --flag / --no-flag; accept --flag=true|false too.
    const m = arg.match(/^--([a-z-]+)=(.*)$/s);
    if (m !== null && booleans.has(m[1]!)) {
      const value = convert(FLAGS.find((f) => f.name === m[1])!, m[2]!);
      if (!value.ok) {
        return {
          kind: "error",
          message: `Invalid value ${JSON.stringify(m[2])} for --${m[1]}: ${value.error}`,
        };
      }
      normalised.push(value.value === true ? `--${m[1]}` : `--no-${m[1]}`);
    } else {
      normalised.push(arg);
    }
  }
  let parsed;
  try {
    parsed = parseArgs({
      args: normalised,
      options: {
        help: { type: "boolean", short: "h" },
        version: { type: "boolean" },
        ...Object.fromEntries(
          FLAGS.map((f) => [
            f.name,
            // A list flag may be repeated; its values add up (as Go's StringSlice flags do).
            f.kind === "list"
              ? { type: "string", multiple: true } as const
              : { type: f.kind === "boolean" ? "boolean" : "string" } as const,
          ]),
        ),
      },
      strict: true,
      allowPositionals: false,
      allowNegative: true,
    });
  } catch (e) {
    return { kind: "error", message: argumentError(e) };
  }
  if (parsed.values.help === true) return { kind: "help", text: helpText(options.cpus) };
  if (parsed.values.version === true) {
    return { kind: "version", text: `sluice ${options.version ?? "(unknown version)"}` };
  }

  const config: Record<string, unknown> = {};
  const explicit = new Set<string>();
  for (const flag of FLAGS) {
    const given = (parsed.values as Record<string, string | boolean | string[] | undefined>)[
      flag.name
    ];
    const fromArgs = Array.isArray(given) ? given.join(",") : given;
    const env = options.env[envName(flag.name)];
    let raw: string | undefined;
    let origin: string;
    if (fromArgs !== undefined) {
      raw = String(fromArgs);
      origin = `--${flag.name}`;
      explicit.add(flag.name);
    } else if (env !== undefined && env !== "") {
      raw = env;
      origin = envName(flag.name);
      explicit.add(flag.name);
    } else {
      raw = flag.name === "workers" ? String(defaultWorkers(options.cpus)) : flag.default;
      origin = `default of --${flag.name}`;
    }
    const value = raw === undefined ? { ok: true as const, value: undefined } : convert(flag, raw);
    if (!value.ok) {
      return {
        kind: "error",
        message: `Invalid value ${JSON.stringify(raw)} for ${origin}: ${value.error}`,
      };
    }
    config[flag.key] = value.value;
  }
  const problem = crossCheck(config as unknown as Config);
  if (problem !== undefined) return { kind: "error", message: problem };
  if (config.manifests !== undefined) {
    const clusterOnly = CLUSTER_ONLY_FLAGS.filter((name) => explicit.has(name));
    if (clusterOnly.length > 0) {
      return {
        kind: "error",
        message: `Cannot use --manifests with ${
          clusterOnly.map((name) => `--${name}`).join(", ")
        }: they need a cluster, and --manifests serves files instead of one`,
      };
    }
  }
  return { kind: "config", config: Object.freeze(config) as unknown as Config };
}

/** Flags that mean something only with a Kubernetes API: refused with `--manifests`. */
const CLUSTER_ONLY_FLAGS = [
  "kubeconfig",
  "watch-namespace",
  "publish-service",
  "publish-status-address",
  "election-id",
  "election-namespace",
];

function argumentError(e: unknown): string {
  const message = e instanceof Error ? e.message : String(e);
  // node:util's messages are long and mention "strict"; keep the first sentence.
  const first = message.split(/\.\s|\n/)[0] ?? message;
  return `${
    first.replace(/^Unknown option/, "Unknown flag").replace(/^Option/, "Flag")
  }; see --help`;
}

type Converted = { ok: true; value: unknown } | { ok: false; error: string };

function convert(flag: FlagSpec, raw: string): Converted {
  switch (flag.kind) {
    case "string":
      return raw.trim() === ""
        ? { ok: false, error: "must not be empty" }
        : { ok: true, value: raw.trim() };
    case "boolean": {
      const v = raw.trim().toLowerCase();
      if (["true", "1", "yes"].includes(v)) return { ok: true, value: true };
      if (["false", "0", "no"].includes(v)) return { ok: true, value: false };
      return { ok: false, error: "expected true or false" };
    }
    case "int": {
      if (!/^\d+$/.test(raw.trim())) return { ok: false, error: "expected a whole number" };
      const n = Number(raw.trim());
      if (flag.min !== undefined && n < flag.min || flag.max !== undefined && n > flag.max) {
        return { ok: false, error: `expected a number from ${flag.min} to ${flag.max}` };
      }
      return { ok: true, value: n };
    }
    case "duration": {
      const ms = parseDuration(raw);
      if (ms === undefined) {
        return { ok: false, error: "expected a duration such as 500ms, 5s, 2m or 1h" };
      }
      // A timer longer than 2^31 - 1 ms fires at once in Deno (and browsers).
      if (ms > MAX_TIMER_MS) return { ok: false, error: "expected at most 596h" };
      if (flag.min !== undefined && ms < flag.min) {
        return { ok: false, error: `expected at least ${flag.min}ms` };
      }
      return { ok: true, value: ms };
    }
    case "bytes": {
      const bytes = parseBytes(raw);
      return bytes === undefined
        ? { ok: false, error: "expected a size such as 0, 512k, 10m or 1g" }
        : { ok: true, value: bytes };
    }
    case "list":
      return {
        ok: true,
        value: Object.freeze(raw.split(",").map((s) => s.trim()).filter((s) => s !== "")),
      };
    case "ref": {
      // namespace/name, optionally :port for the default backend.
      const m = raw.trim().match(
        /^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\/([a-z0-9]([-a-z0-9.]*[a-z0-9])?)(:[A-Za-z0-9-]+)?$/,
      );
      if (m === null) return { ok: false, error: "expected namespace/name" };
      if (m[5] !== undefined && flag.name !== "default-backend-service") {
        return { ok: false, error: "expected namespace/name without a port" };
      }
      if (m[1]!.length > 63 || m[3]!.length > 253) {
        return { ok: false, error: "namespace or name too long" };
      }
      if (m[5] !== undefined && !isPort(m[5].slice(1))) {
        return { ok: false, error: "expected a port from 1 to 65535 or a port name" };
      }
      return { ok: true, value: raw.trim() };
    }
    case "enum":
      return flag.values?.includes(raw.trim())
        ? { ok: true, value: raw.trim() }
        : { ok: false, error: `expected one of ${flag.values?.join(", ")}` };
  }
}

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const MAX_TIMER_MS = 2 ** 31 - 1;
/** A port number from 1 to 65535, or a port name (IANA_SVC_NAME). */
function isPort(text: string): boolean {
  if (/^\d+$/.test(text)) return Number(text) >= 1 && Number(text) <= 65535;
  return isPortName(text);
}

/**
 * What no single flag can judge: two listeners on one port (with `reusePort`
 * the kernel would share connections between them), ranges and Kubernetes
 * names that would fail only long after start.
 */
function crossCheck(config: Config): string | undefined {
  const ports: [string, number][] = [
    ["--http-port", config.httpPort],
    ["--https-port", config.httpsPort],
    ["--health-port", config.healthPort],
  ];
  for (let i = 0; i < ports.length; i++) {
    for (let j = i + 1; j < ports.length; j++) {
      if (ports[i]![1] === ports[j]![1]) {
        return `Cannot use port ${ports[i]![1]} for both ${ports[i]![0]} and ${ports[j]![0]}`;
      }
    }
  }
  try {
    createCidrMatcher(config.trustedProxyCidrs);
  } catch (error) {
    return `Invalid value for --trusted-proxy-cidrs: ${
      error instanceof Error ? error.message : String(error)
    }`;
  }
  for (const namespace of config.watchNamespaces) {
    if (!isDnsLabel(namespace)) {
      return `Invalid value ${
        JSON.stringify(namespace)
      } in --watch-namespace: not a namespace name (DNS-1123 label)`;
    }
  }
  if (config.electionNamespace !== undefined && !isDnsLabel(config.electionNamespace)) {
    return `Invalid value ${
      JSON.stringify(config.electionNamespace)
    } for --election-namespace: not a namespace name (DNS-1123 label)`;
  }
  if (config.bindAddress !== undefined && parseIp(config.bindAddress) === undefined) {
    return `Invalid value ${
      JSON.stringify(config.bindAddress)
    } for --bind-address: not an IP address`;
  }
  const gatewayAddresses = new Set<string>();
  for (const address of config.gatewayAddresses) {
    const ip = parseIp(address);
    if (ip === undefined || /^(?:0\.0\.0\.0|::)$/.test(address)) {
      return `Invalid value ${
        JSON.stringify(address)
      } in --gateway-addresses: not an IP address of this host (a wildcard address is not one)`;
    }
    if (gatewayAddresses.has(address) || address === config.bindAddress) {
      return `Invalid value ${
        JSON.stringify(address)
      } in --gateway-addresses: named twice (or also --bind-address)`;
    }
    gatewayAddresses.add(address);
  }
  for (const address of config.publishStatusAddresses) {
    // The apiserver takes an Ingress status address only as an IP or a DNS-1123 subdomain.
    if (parseIp(address) === undefined && !isDnsSubdomain(address)) {
      return `Invalid value ${
        JSON.stringify(address)
      } in --publish-status-address: not an IP address or a DNS name`;
    }
  }
  if (!isDnsSubdomain(config.electionId)) {
    return `Invalid value ${
      JSON.stringify(config.electionId)
    } for --election-id: not a Lease name (DNS-1123 subdomain)`;
  }
  return undefined;
}

/** `500ms`, `5s`, `1.5m`, `2h`, or a bare number of seconds → milliseconds. */
export function parseDuration(raw: string): number | undefined {
  const m = raw.trim().match(/^(\d+(?:\.\d+)?)(ms|s|m|h)?$/);
  if (m === null) return undefined;
  return Math.round(Number(m[1]) * DURATION_UNITS[m[2] ?? "s"]!);
}

const BYTE_UNITS: Record<string, number> = { "": 1, k: 2 ** 10, m: 2 ** 20, g: 2 ** 30 };

/** `0`, `512k`, `10m`, `1g` (binary units, as ingress-nginx's proxy-body-size) → bytes. */
export function parseBytes(raw: string): number | undefined {
  const m = raw.trim().toLowerCase().match(/^(\d+)([kmg]?)b?$/);
  if (m === null) return undefined;
  return Number(m[1]) * BYTE_UNITS[m[2] ?? ""]!;
}

/** The default of `--workers` on a machine with `cpus` CPUs. */
function defaultWorkers(cpus: number): number {
  const workers = FLAGS.find((f) => f.name === "workers");
  return Math.max(1, Math.min(cpus, workers?.max ?? cpus));
}

/** What a flag's value is, as `--help` shows it. */
function valueName(flag: FlagSpec): string {
  if (flag.kind === "enum") return (flag.values ?? []).join("|");
  if (flag.value !== undefined) return flag.value;
  return { duration: "DURATION", bytes: "SIZE", int: "N" }[flag.kind as string] ?? "VALUE";
}

/** The text of `--help`. */
export function helpText(cpus: number): string {
  const lines = [
    "Usage: sluice [flags]",
    "       sluice migrate-check [--kubeconfig FILE | --manifests PATH] (see its --help)",
    "",
    "Sluice, a Kubernetes Ingress controller. Every flag can also be set through the",
    "environment variable shown; a flag on the command line wins.",
    "",
    "Values:",
    "  DURATION  a number and a unit: ms, s, m or h (500ms, 5s, 1.5m, 2h); no unit: seconds",
    "  SIZE      bytes, or with a binary unit: k, m or g (512k, 10m, 1g)",
    "  on/off    --flag or --flag=true turns it on, --no-flag or --flag=false off;",
    "            its variable takes true or false",
    "",
    "Flags:",
  ];
  for (const f of FLAGS) {
    const def = f.name === "workers" ? String(defaultWorkers(cpus)) : f.default;
    const shown = def === undefined || def === ""
      ? ""
      : f.kind === "boolean"
      ? ` (default ${def === "true" ? "on" : "off"})`
      : ` (default ${def}${f.defaultNote === undefined ? "" : `: ${f.defaultNote}`})`;
    const range = f.kind === "int" && f.min !== undefined && f.max !== undefined
      ? `, ${f.min} to ${f.max}`
      : "";
    lines.push(
      f.kind === "boolean" ? `  --${f.name}, --no-${f.name}` : `  --${f.name}=${valueName(f)}`,
    );
    lines.push(`      ${f.help}${range}${shown}. Env ${envName(f.name)}.`);
  }
  lines.push("  --version", "      Print the version and exit.");
  lines.push("  -h, --help", "      Print this text and exit.");
  return lines.join("\n");
}
