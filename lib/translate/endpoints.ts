/**
 * From a Service port to the endpoints that serve it: Service port lookup and
 * EndpointSlice reading.
 *
 * Owns the EndpointSlice semantics (port matching by name, ready / serving /
 * terminating conditions, address types). Knows nothing about Ingresses.
 *
 * @module
 */

import type { EndpointSlice, Service, ServicePort } from "../k8s/objects.ts";
import type { Endpoint } from "./backend.ts";
import { compareStrings } from "./_order.ts";

/**
 * Whether a Service or EndpointSlice port carries TCP. Kubernetes rule
 * (ServicePort.protocol, EndpointPort.protocol): "Default is TCP".
 */
export function isTcpPort(port: { readonly protocol?: unknown }): boolean {
  return port.protocol === undefined || port.protocol === null || port.protocol === "TCP";
}

/**
 * Finds a TCP Service port by number (`ServicePort.port`) or by name
 * (`ServicePort.name`); `undefined` for the first TCP port.
 *
 * Kubernetes rule (IngressServiceBackend.port, networking.k8s.io/v1): the
 * backend names the Service's port by its `name` or its `number` (the Service
 * port, not the target port). HTTP runs over TCP, so UDP and SCTP ports never
 * match: a Service may expose the same number over both (53/TCP and 53/UDP,
 * 443/TCP and 443/UDP for HTTP/3), with different target ports.
 */
export function findServicePort(
  service: Service,
  port: number | string | undefined,
): ServicePort | undefined {
  const ports = Array.isArray(service.spec?.ports) ? service.spec.ports : [];
  return ports.find((p) =>
    p !== null && typeof p === "object" && isTcpPort(p) &&
    (port === undefined || (typeof port === "number" ? p.port === port : p.name === port))
  );
}

/**
 * Collects the endpoints of one Service port from the Service's EndpointSlices,
 * deduplicated and sorted.
 *
 * Kubernetes rules (EndpointSlice, discovery.k8s.io/v1):
 * - Slice ports carry the resolved target port (a named `targetPort` is
 *   resolved per pod) and are named after the Service port: match by name,
 *   `""` for an unnamed port, and by protocol (TCP, the default).
 * - `conditions.ready`: "a nil value should be interpreted as true".
 * - When no endpoint is ready, use endpoints that are `serving` and
 *   `terminating` (as kube-proxy does), so connections drain during a rollout
 *   instead of failing.
 * - `addressType` IPv4 and IPv6 are used; FQDN (deprecated) is ignored.
 * - An endpoint's `addresses` are fungible ("clients may choose to only use
 *   the first element"): its first is used.
 */
export function collectEndpoints(
  slices: readonly EndpointSlice[],
  servicePort: ServicePort,
): Endpoint[] {
  const portName = typeof servicePort.name === "string" ? servicePort.name : "";
  const ready = new Map<string, Endpoint>();
  const terminating = new Map<string, Endpoint>();
  for (const slice of slices) {
    if (slice?.addressType !== "IPv4" && slice?.addressType !== "IPv6") continue;
    const slicePort = (Array.isArray(slice.ports) ? slice.ports : []).find((p) =>
      p !== null && typeof p === "object" && isTcpPort(p) &&
      (typeof p.name === "string" ? p.name : "") === portName
    );
    const port = slicePort?.port;
    if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) continue;
    for (const endpoint of Array.isArray(slice.endpoints) ? slice.endpoints : []) {
      if (endpoint === null || typeof endpoint !== "object") continue;
      const conditions = endpoint.conditions ?? {};
      const isReady = conditions.ready !== false;
      const isServingTerminating = conditions.serving !== false && conditions.terminating === true;
      if (!isReady && !isServingTerminating) continue;
      const target = isReady ? ready : terminating;
      // One backend per endpoint (a pod), by its first address: the API calls an endpoint's
      // addresses fungible and lets consumers use only the first, as kube-proxy does; each
      // counted apart would give a pod with several addresses more than its share.
      const address = (Array.isArray(endpoint.addresses) ? endpoint.addresses : []).find((a) =>
        typeof a === "string" && a !== ""
      );
      if (address !== undefined) target.set(`${address} ${port}`, { address, port });
    }
  }
  const chosen = ready.size > 0 ? ready : terminating;
  return [...chosen.values()].sort((a, b) =>
    compareStrings(a.address, b.address) || a.port - b.port
  );
}
