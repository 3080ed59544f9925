/**
 * Ingress backends: parsing a `backend` field and resolving it, through the
 * Service and its EndpointSlices, to a {@linkcode Backend} with endpoints, or to
 * an unavailable backend that answers 503.
 *
 * Owns backend keys and the "route exists, answers 503" rule for missing
 * Services, ports, endpoints and resource backends. Knows nothing about hosts,
 * paths or precedence.
 *
 * @module
 */

import type { IngressBackend, Service } from "../k8s/objects.ts";
import type { Backend } from "./backend.ts";
import type { ClusterIndex } from "./cluster_index.ts";
import { collectEndpoints, findServicePort, isTcpPort } from "./endpoints.ts";
import { isDnsSubdomain, isPortName } from "./names.ts";

/** A parsed backend reference, in the namespace of the Ingress that names it. */
export type BackendRef =
  | {
    readonly type: "service";
    readonly namespace: string;
    readonly name: string;
    /** As written: a port number, a port name, or `undefined` for "the Service's first port". */
    readonly port: number | string | undefined;
  }
  | {
    readonly type: "resource";
    readonly namespace: string;
    readonly apiGroup: string;
    readonly kind: string;
    readonly name: string;
  };

/** A parsed reference, or what is wrong with it (`field` relative to the backend). */
export type BackendRefResult =
  | { readonly ok: true; readonly ref: BackendRef }
  | { readonly ok: false; readonly field: string; readonly message: string };

/** A resolved backend; `problem` is set exactly when the backend has no endpoints. */
export interface ResolvedBackend {
  readonly backend: Backend;
  readonly problem?: string;
}

function isPortNumber(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= 1 && value <= 65535;
}

/**
 * Parses an Ingress backend.
 *
 * Kubernetes rules (IngressBackend, networking.k8s.io/v1): exactly one of
 * `service` or `resource`; a service backend names a Service in the Ingress's
 * namespace and its port by `number` or `name`, exactly one of them.
 */
export function parseBackend(raw: unknown, namespace: string): BackendRefResult {
  if (raw === null || typeof raw !== "object") {
    return { ok: false, field: "", message: "Cannot route: backend is missing" };
  }
  const backend = raw as IngressBackend;
  const hasService = backend.service !== undefined && backend.service !== null;
  const hasResource = backend.resource !== undefined && backend.resource !== null;
  if (hasService === hasResource) {
    return {
      ok: false,
      field: "",
      message: "Cannot route: a backend needs exactly one of service or resource",
    };
  }
  if (hasResource) {
    const resource = backend.resource!;
    if (
      typeof resource.kind !== "string" || resource.kind === "" ||
      typeof resource.name !== "string" || resource.name === ""
    ) {
      return {
        ok: false,
        field: "resource",
        message: "Cannot route to resource: kind and name are required",
      };
    }
    return {
      ok: true,
      ref: {
        type: "resource",
        namespace,
        apiGroup: typeof resource.apiGroup === "string" ? resource.apiGroup : "",
        kind: resource.kind,
        name: resource.name,
      },
    };
  }
  const service = backend.service!;
  const name = service.name;
  if (typeof name !== "string" || name === "") {
    return {
      ok: false,
      field: "service.name",
      message: "Cannot route to Service: name is missing",
    };
  }
  const port = service.port;
  const hasNumber = port?.number !== undefined && port?.number !== null;
  const hasName = port?.name !== undefined && port?.name !== null && port?.name !== "";
  if (hasNumber === hasName) {
    return {
      ok: false,
      field: "service.port",
      message: `Cannot route to Service "${namespace}/${name}": ` +
        "the port needs exactly one of number or name",
    };
  }
  if (hasNumber && !isPortNumber(port!.number)) {
    return {
      ok: false,
      field: "service.port.number",
      message: `Cannot route to Service "${namespace}/${name}": ` +
        `port ${JSON.stringify(port!.number)} is not a number from 1 to 65535`,
    };
  }
  if (hasName && !isPortName(port!.name)) {
    return {
      ok: false,
      field: "service.port.name",
      message: `Cannot route to Service "${namespace}/${name}": ` +
        `port name ${JSON.stringify(port!.name)} is not a valid port name`,
    };
  }
  return {
    ok: true,
    ref: { type: "service", namespace, name, port: hasNumber ? port!.number! : port!.name! },
  };
}

/** The unique, stable key of a backend: `namespace/service:port` (port as written). */
export function backendKey(ref: BackendRef): string {
  if (ref.type === "resource") {
    const group = ref.apiGroup === "" ? "" : `.${ref.apiGroup}`;
    return `${ref.namespace}/${ref.name} (${ref.kind}${group})`;
  }
  const base = `${ref.namespace}/${ref.name}`;
  return ref.port === undefined ? base : `${base}:${ref.port}`;
}

const LOOPBACK_OR_UNSPECIFIED_IPV4 = /^(?:127|0)\.[0-9]+\.[0-9]+\.[0-9]+$/;
const IPV4 = /^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$/;

/**
 * The dotted-quad IPv4 address a name stands for when resolvers read it as a
 * number (`127.1`, `2130706433`, `0x7f.1`, `0177.0.0.1`: getaddrinfo, like
 * the WHATWG URL parser, accepts these inet_aton forms), else undefined.
 */
function numericIpv4(name: string): string | undefined {
  let hostname: string;
  try {
    hostname = new URL(`http://${name}/`).hostname;
  } catch {
    return undefined;
  }
  return IPV4.test(hostname) ? hostname : undefined;
}

/**
 * Why an ExternalName (lowercase, no trailing dot) must not be routed to, or
 * `undefined` when it may.
 *
 * Kubernetes rule (ServiceSpec.externalName): "a valid RFC-1123 hostname".
 * Names of this very machine are refused, as ingress-nginx does: otherwise
 * anyone allowed to create a Service and an Ingress could reach ports the
 * controller listens on only on loopback. `localhost` and `*.localhost` always
 * resolve to loopback (RFC 6761 §6.3); `127.0.0.0/8` is loopback and `0.0.0.0/8`
 * reaches this host too, however the address is spelled (`127.1`, `0x7f.1`,
 * `2130706433` and `0` all connect to this host).
 */
function refuseExternalName(address: string): string | undefined {
  if (!isDnsSubdomain(address)) return "is not a valid DNS name";
  if (
    address === "localhost" || address.endsWith(".localhost") ||
    LOOPBACK_OR_UNSPECIFIED_IPV4.test(numericIpv4(address) ?? "")
  ) {
    return "names this host (loopback), which is refused";
  }
  return undefined;
}

/** Whether the Service has the port, but over UDP or SCTP. */
function hasPortOfOtherProtocol(service: Service, port: number | string): boolean {
  const ports = Array.isArray(service.spec?.ports) ? service.spec.ports : [];
  return ports.some((p) =>
    p !== null && typeof p === "object" && !isTcpPort(p) &&
    (typeof port === "number" ? p.port === port : p.name === port)
  );
}

function unavailable(key: string, service: string, problem: string): ResolvedBackend {
  return { backend: { key, service, endpoints: [], unavailable: problem }, problem };
}

/**
 * Returns a resolver that turns backend references into backends, memoised by
 * key for one translation (many routes share a backend).
 */
export function createBackendResolver(index: ClusterIndex): (ref: BackendRef) => ResolvedBackend {
  const memo = new Map<string, ResolvedBackend>();
  return (ref) => {
    const key = backendKey(ref);
    let resolved = memo.get(key);
    if (resolved === undefined) {
      resolved = resolveBackend(ref, key, index);
      memo.set(key, resolved);
    }
    return resolved;
  };
}

function resolveBackend(ref: BackendRef, key: string, index: ClusterIndex): ResolvedBackend {
  if (ref.type === "resource") {
    // Kubernetes: resource backends are "an ObjectRef to another Kubernetes
    // resource"; their meaning is controller-specific. Sluice serves none.
    return unavailable(
      key,
      "",
      `Cannot route to ${ref.kind} "${ref.namespace}/${ref.name}": resource backends are not supported`,
    );
  }
  const serviceKey = `${ref.namespace}/${ref.name}`;
  const service = index.services.get(serviceKey);
  if (service === undefined) {
    return unavailable(key, serviceKey, `Cannot route to Service "${serviceKey}": no such Service`);
  }
  // Without a port (the --default-backend-service form `namespace/name`): the first TCP port.
  const servicePort = findServicePort(service, ref.port);
  const wanted = ref.port ?? servicePort?.port;
  const portShown = wanted === undefined
    ? ""
    : typeof wanted === "number"
    ? ` port ${wanted}`
    : ` port "${wanted}"`;

  if (service.spec?.type === "ExternalName") {
    // Kubernetes: an ExternalName Service is a DNS alias (`spec.externalName`)
    // with no endpoints of its own: route to that name.
    const externalName = service.spec.externalName;
    if (typeof externalName !== "string" || externalName === "") {
      return unavailable(
        key,
        serviceKey,
        `Cannot route to ExternalName Service "${serviceKey}": spec.externalName is empty`,
      );
    }
    const address = (externalName.endsWith(".") ? externalName.slice(0, -1) : externalName)
      .toLowerCase();
    const refused = refuseExternalName(address);
    if (refused !== undefined) {
      return unavailable(
        key,
        serviceKey,
        `Cannot route to ExternalName Service "${serviceKey}": spec.externalName ` +
          `"${externalName}" ${refused}`,
      );
    }
    const port = typeof ref.port === "number" ? ref.port : servicePort?.port;
    if (!isPortNumber(port)) {
      return unavailable(
        key,
        serviceKey,
        `Cannot resolve${portShown || " a port"} of Service "${serviceKey}": no such port`,
      );
    }
    return { backend: { key, service: serviceKey, endpoints: [{ address, port }] } };
  }

  if (servicePort === undefined) {
    const portText = typeof wanted === "string" ? `"${wanted}"` : `${wanted ?? "(none)"}`;
    const detail = ref.port !== undefined && hasPortOfOtherProtocol(service, ref.port)
      ? "no such TCP port (Ingress backends are HTTP over TCP)"
      : "no such port";
    return unavailable(
      key,
      serviceKey,
      `Cannot resolve port ${portText} of Service "${serviceKey}": ${detail}`,
    );
  }
  const endpoints = collectEndpoints(index.endpointSlices.get(serviceKey) ?? [], servicePort);
  if (endpoints.length === 0) {
    return unavailable(
      key,
      serviceKey,
      `Cannot route to Service "${serviceKey}"${portShown}: no ready endpoints`,
    );
  }
  return { backend: { key, service: serviceKey, endpoints } };
}
