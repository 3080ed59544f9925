/**
 * Gateway API translation (GatewayClass, Gateway, HTTPRoute, ReferenceGrant
 * v1): objects in, `{ classes, gateways, routes, issues, statuses }` out.
 * A straight sequence of processors, one per kind, as Envoy Gateway's
 * `Translate()`; pure, deterministic and sorted.
 *
 * Knows nothing about I/O, clocks (`now` is passed in), logging, or how the
 * data plane consumes the routes.
 *
 * @module
 */

import type { Secret, Service } from "../../k8s/objects.ts";
import { compareStrings } from "../_order.ts";
import { DEFAULT_CONTROLLER_NAME } from "../class_selection.ts";
import { objectKey } from "../cluster_index.ts";
import { type Issue, sortIssues } from "../issues.ts";
import { DEFAULT_NOW } from "./_conditions.ts";
import { processGatewayClasses } from "./gateway_classes.ts";
import { assignGatewayAddresses, heldAddresses } from "./gateway_addresses.ts";
import { type GatewayState, processGateways } from "./gateways.ts";
import { hostnameCovers } from "./hostnames.ts";
import { type PlacedEntry, processHttpRoutes } from "./http_routes.ts";
import { comparePrecedence } from "./precedence.ts";
import type {
  Condition,
  Gateway,
  GatewayObjects,
  GatewayTranslateOptions,
  GatewayTranslation,
  HostRoutes,
} from "./types.ts";

/** Translates Gateway API objects into routes and statuses. Never throws on bad objects. */
export function translateGateway(
  objects: GatewayObjects,
  options: GatewayTranslateOptions = {},
): GatewayTranslation {
  const controllerName = options.controllerName ?? DEFAULT_CONTROLLER_NAME;
  const now = options.now ?? DEFAULT_NOW;
  const issues: Issue[] = [];
  const services = byKey<Service>(objects.services);
  const secrets = byKey<Secret>(objects.secrets);
  const grants = [...(objects.referenceGrants ?? [])].filter((g) =>
    g !== null && typeof g === "object"
  );
  const namespaceLabels = new Map<string, Record<string, string>>();
  for (const ns of objects.namespaces ?? []) {
    const name = ns?.metadata?.name;
    if (typeof name !== "string" || name === "") continue;
    // Kubernetes: every namespace carries `kubernetes.io/metadata.name`.
    namespaceLabels.set(name, { ...ns.metadata?.labels, "kubernetes.io/metadata.name": name });
  }

  const classes = processGatewayClasses(objects.gatewayClasses ?? [], {
    controllerName,
    supportedFeatures: options.supportedFeatures ?? [],
    now,
  });
  const gateways = processGateways(objects.gateways ?? [], {
    ourClasses: new Set(classes.models.filter((c) => c.accepted).map((c) => c.name)),
    secrets,
    grants,
    now,
    issues,
    servedPorts: options.servedPorts === undefined ? undefined : new Set(options.servedPorts),
    certificateProblem: options.certificateProblem,
  });
  const addresses = gatewayAddresses(objects.gateways, gateways, options.gatewayAddresses);
  for (const g of gateways) {
    if (addresses === undefined || addresses.has(g.key)) continue;
    const message = `Cannot serve the Gateway's routes: each of the ${
      options.gatewayAddresses!.length
    } addresses of --gateway-addresses serves another Gateway`;
    issues.push({ kind: "Gateway", namespace: g.namespace, name: g.name, field: "", message });
  }
  const routes = processHttpRoutes(objects.httpRoutes ?? [], {
    memo: options.memo,
    controllerName,
    gateways: new Map(gateways.map((g) => [g.key, g])),
    namespaceLabels,
    services,
    grants,
    now,
    issues,
  });

  return deepFreeze({
    classes: classes.models,
    gateways: gateways.map((g) => ({
      gateway: g.key,
      className: g.className,
      ...addressOf(addresses, g.key),
      listeners: g.listeners.map((l) => l.model),
    })),
    routes: groupRoutes(routes.placed, addresses),
    issues: sortIssues(issues),
    statuses: {
      gatewayClasses: classes.statuses,
      gateways: gateways.map((g) => ({
        gateway: g.key,
        ...addressOf(addresses, g.key),
        conditions: addresses === undefined || addresses.has(g.key)
          ? g.conditions
          : withoutAddress(g.conditions, options.gatewayAddresses!.length),
        listeners: g.listeners.map((l) => ({
          name: l.model.name,
          supportedKinds: l.kinds,
          attachedRoutes: l.attachedRoutes,
          conditions: l.conditions,
        })),
      })),
      httpRoutes: routes.statuses,
    },
  });
}

/**
 * Each Gateway's own address when `pool` is not empty (see
 * `gateway_addresses.ts`); undefined without a pool: all share the main
 * listeners.
 */
function gatewayAddresses(
  objects: Iterable<Gateway> | undefined,
  gateways: readonly GatewayState[],
  pool: readonly string[] | undefined,
): ReadonlyMap<string, string> | undefined {
  if (pool === undefined || pool.length === 0) return undefined;
  const raw = byKey<Gateway>(objects);
  return assignGatewayAddresses(
    gateways.map((g) => {
      const object = raw.get(g.key);
      return {
        key: g.key,
        created: object?.metadata?.creationTimestamp ?? "",
        held: heldAddresses(object?.status),
      };
    }),
    pool,
  );
}

function addressOf(
  addresses: ReadonlyMap<string, string> | undefined,
  gateway: string,
): { address?: string } {
  const address = addresses?.get(gateway);
  return address === undefined ? {} : { address };
}

function noAddress(poolSize: number): string {
  return `No address is free: each of the ${poolSize} of --gateway-addresses serves another Gateway`;
}

/**
 * Gateway API (GatewayConditionProgrammed, reason AddressNotAssigned): a
 * Gateway left without an address of the pool is not programmed.
 */
function withoutAddress(conditions: readonly Condition[], poolSize: number): Condition[] {
  return conditions.map((c) =>
    c.type !== "Programmed" ? c : {
      ...c,
      status: "False",
      reason: "AddressNotAssigned",
      message: noAddress(poolSize),
    }
  );
}

/**
 * Groups placed entries per (port, hostname), folding into each group the
 * entries of less specific hostnames on the same port that also cover it, and
 * orders each group by precedence (hostname specificity first, see
 * `precedence.ts`), so one group alone answers every request for its host.
 */
function groupRoutes(
  all: readonly PlacedEntry[],
  addresses: ReadonlyMap<string, string> | undefined,
): HostRoutes[] {
  // With a pool, a Gateway left without an address serves nothing.
  const placed = addresses === undefined
    ? all
    : all.filter((p) => addresses.has(p.listener.gateway));
  const where = (p: PlacedEntry) =>
    `${addresses?.get(p.listener.gateway) ?? ""} ${p.listener.model.port}`;
  const groups = new Map<
    string,
    { where: string; port: number; hostname: string; placed: PlacedEntry[] }
  >();
  for (const p of placed) {
    const id = `${where(p)} ${p.entry.hostname}`;
    let group = groups.get(id);
    if (group === undefined) {
      group = {
        where: where(p),
        port: p.listener.model.port,
        hostname: p.entry.hostname,
        placed: [],
      };
      groups.set(id, group);
    }
    group.placed.push(p);
  }
  // Per address, port and hostname, the entries placed under it: a group's
  // members are found by the few hostnames that can cover it, not by a scan of all.
  const byHostname = new Map<string, PlacedEntry[]>();
  for (const p of placed) {
    const id = `${where(p)} ${p.entry.hostname}`;
    let list = byHostname.get(id);
    if (list === undefined) byHostname.set(id, list = []);
    list.push(p);
  }
  const out: HostRoutes[] = [];
  for (const group of groups.values()) {
    const members: PlacedEntry[] = [];
    for (const hostname of coveringHostnames(group.hostname)) {
      for (const p of byHostname.get(`${group.where} ${hostname}`) ?? []) {
        if (hostnameCovers(p.entry.hostname, group.hostname)) members.push(p);
      }
    }
    // The same entry may arrive through two listeners (two Gateways on one
    // port): keep it once.
    const seen = new Set<string>();
    const entries = members.sort(comparePrecedence).filter((p) => {
      const id = `${p.entry.route} ${p.entry.rule} ${p.entry.match} ${p.entry.hostname}`;
      if (seen.has(id)) return false;
      seen.add(id);
      return true;
    }).map((p) => p.entry);
    const own = group.placed.map((p) => p.listener.model);
    const address = addresses?.get(group.placed[0]!.listener.gateway);
    out.push({
      ...(address === undefined ? {} : { address }),
      port: group.port,
      protocol: own.some((l) => l.protocol === "HTTPS") ? "HTTPS" : "HTTP",
      hostname: group.hostname,
      certificates: [...new Set(own.flatMap((l) => l.certificates))].sort(compareStrings),
      entries,
    });
  }
  return out.sort((a, b) =>
    compareStrings(a.address ?? "", b.address ?? "") || a.port - b.port ||
    compareStrings(a.hostname, b.hostname)
  );
}

/**
 * Every hostname that may cover `hostname` (see `hostnameCovers`): itself,
 * `""`, and the wildcard of each of its dot-led suffixes (`*.b.c` and `*.c`
 * for `a.b.c`, `*.example.com` and `*.com` for `*.example.com`).
 */
function coveringHostnames(hostname: string): string[] {
  const out = hostname === "" ? [""] : [hostname, ""];
  for (let dot = hostname.indexOf(".", 1); dot > 0; dot = hostname.indexOf(".", dot + 1)) {
    const wildcard = `*${hostname.slice(dot)}`;
    if (wildcard !== hostname) out.push(wildcard);
  }
  return out;
}

function byKey<T extends { metadata?: unknown }>(items: Iterable<T> | undefined): Map<string, T> {
  const map = new Map<string, T>();
  for (const item of items ?? []) {
    const key = objectKey(item as never);
    if (key !== undefined) map.set(key, item);
  }
  return map;
}

/** Freezes `value` and everything under it; a frozen object (shared, done) is not walked again. */
function deepFreeze<T>(value: T): T {
  if (value === null || typeof value !== "object" || Object.isFrozen(value)) return value;
  Object.freeze(value);
  if (Array.isArray(value)) {
    for (const child of value) deepFreeze(child);
  } else {
    for (const key in value) deepFreeze(value[key]);
  }
  return value;
}
