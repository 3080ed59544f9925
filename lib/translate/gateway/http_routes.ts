/**
 * HTTPRoute processing: attaching each route to the listeners its parentRefs
 * name (sectionName, port, allowedRoutes, hostnames), placing the entries of
 * its compiled rules (`compiled_route.ts`, remembered between translations
 * by `http_route_memo.ts`) per (port, hostname), and its status per parent.
 *
 * @module
 */

import type { Service } from "../../k8s/objects.ts";
import { compareStrings } from "../_order.ts";
import type { Issue } from "../issues.ts";
import { conditionMaker } from "./_conditions.ts";
import { GATEWAY_GROUP, type GatewayState, type ListenerState } from "./gateways.ts";
import { routeEntriesOn } from "./compiled_route.ts";
import { routeHostnamesOn } from "./hostnames.ts";
import { compiledRouteOf, type HttpRouteMemo } from "./http_route_memo.ts";
import { selectorMatches } from "./label_selector.ts";
import type { RankedEntry } from "./precedence.ts";
import type { Condition, GatewayStatuses, HTTPRoute, ReferenceGrant } from "./types.ts";

type RouteStatus = GatewayStatuses["httpRoutes"][number];

/** Inputs of {@linkcode processHttpRoutes}. */
export interface RouteContext {
  readonly controllerName: string;
  readonly gateways: ReadonlyMap<string, GatewayState>;
  readonly namespaceLabels: ReadonlyMap<string, Readonly<Record<string, string>>>;
  readonly services: ReadonlyMap<string, Service>;
  readonly grants: readonly ReferenceGrant[];
  readonly now: string;
  readonly issues: Issue[];
  /** Compiled routes kept from earlier translations (see `http_route_memo.ts`); absent: none. */
  readonly memo?: HttpRouteMemo | undefined;
}

/** An entry bound to the listener it serves on. */
export interface PlacedEntry extends RankedEntry {
  readonly listener: ListenerState;
}

/** Processes routes: entries placed on listeners, and statuses sorted by route. */
export function processHttpRoutes(
  routes: Iterable<HTTPRoute>,
  ctx: RouteContext,
): { placed: PlacedEntry[]; statuses: RouteStatus[] } {
  const placed: PlacedEntry[] = [];
  const statuses: RouteStatus[] = [];
  for (const route of routes) {
    const namespace = route?.metadata?.namespace;
    const name = route?.metadata?.name;
    if (typeof namespace !== "string" || namespace === "") continue;
    if (typeof name !== "string" || name === "") continue;
    const status = processRoute(route, namespace, name, ctx, placed);
    if (status.parents.length > 0) statuses.push(status);
  }
  statuses.sort((a, b) => compareStrings(a.route, b.route));
  return { placed, statuses };
}

/** Whether the listener admits routes from this namespace and of kind HTTPRoute. */
function allows(listener: ListenerState, namespace: string, ctx: RouteContext): boolean {
  if (!listener.kinds.some((k) => k.kind === "HTTPRoute")) return false;
  // Gateway API (RouteNamespaces.from): Same — "only Routes in the same
  // namespace as the Gateway"; All — "Routes in all namespaces"; Selector —
  // "Routes in namespaces selected by the selector".
  switch (listener.from) {
    case "All":
      return true;
    case "Same":
      return namespace === listener.namespace;
    case "Selector":
      return selectorMatches(listener.selector!, ctx.namespaceLabels.get(namespace) ?? {});
  }
}

function processRoute(
  route: HTTPRoute,
  namespace: string,
  name: string,
  ctx: RouteContext,
  placed: PlacedEntry[],
): RouteStatus {
  const compiled = compiledRouteOf(route, { namespace, name }, ctx);
  const { key, created, hostnames, rules, invalidRules, unresolved } = compiled;
  for (const issue of compiled.issues) ctx.issues.push(issue);
  const condition = conditionMaker(route.metadata?.generation, ctx.now);

  const parents: RouteStatus["parents"][number][] = [];
  for (
    const ref of (Array.isArray(route.spec?.parentRefs) ? route.spec.parentRefs : [])
  ) {
    const group = ref?.group ?? GATEWAY_GROUP;
    const kind = ref?.kind ?? "Gateway";
    if (group !== GATEWAY_GROUP || kind !== "Gateway") continue;
    const gatewayNamespace = ref?.namespace ?? namespace;
    const gateway = ctx.gateways.get(`${gatewayNamespace}/${ref?.name ?? ""}`);
    // Only parents that are Gateways of ours get a status from us.
    if (gateway === undefined) continue;
    const parentRef = {
      group,
      kind,
      namespace: gatewayNamespace,
      name: gateway.name,
      ...(typeof ref.sectionName === "string" ? { sectionName: ref.sectionName } : {}),
      ...(typeof ref.port === "number" ? { port: ref.port } : {}),
    };
    const conditions: Condition[] = [];
    // Gateway API (ParentReference.sectionName / port): "When unspecified
    // (empty string), this will reference the entire resource"; both set: the
    // listener must match both. None → Accepted False, NoMatchingParent.
    const named = gateway.listeners.filter((l) =>
      (ref.sectionName === undefined || l.model.name === ref.sectionName) &&
      (ref.port === undefined || l.model.port === ref.port) && l.attachable
    );
    const allowed = named.filter((l) => allows(l, namespace, ctx));
    const hosted = allowed
      .map((l) => ({ listener: l, hosts: routeHostnamesOn(l.model.hostname, hostnames) }))
      .filter((x) => x.hosts.length > 0);
    if (named.length === 0) {
      conditions.push(
        condition("Accepted", false, "NoMatchingParent", "No listener matches the parentRef"),
      );
    } else if (allowed.length === 0) {
      conditions.push(
        condition("Accepted", false, "NotAllowedByListeners", "No listener allows this route"),
      );
    } else if (hosted.length === 0) {
      conditions.push(
        condition(
          "Accepted",
          false,
          "NoMatchingListenerHostname",
          "No hostname of the route matches a listener hostname",
        ),
      );
    } else if (invalidRules === rules.length) {
      // Gateway API (RouteReasonUnsupportedValue): a route whose rules are all
      // invalid is not accepted.
      conditions.push(condition("Accepted", false, "UnsupportedValue", "Every rule is invalid"));
    } else {
      conditions.push(condition("Accepted", true, "Accepted", "The route is accepted"));
      for (const { listener, hosts } of hosted) {
        // Gateway API (ListenerStatus.attachedRoutes): routes successfully
        // attached to this listener.
        listener.attachedRoutes++;
        if (!listener.model.ready) continue;
        for (const hostname of hosts) {
          for (const entry of routeEntriesOn(compiled, hostname)) {
            placed.push({ entry, created, listener });
          }
        }
      }
    }
    // Gateway API (GEP-1364, RouteConditionPartiallyInvalid): invalid rules are
    // dropped and the condition says so, reason UnsupportedValue.
    if (invalidRules > 0 && invalidRules < rules.length) {
      conditions.push(
        condition("PartiallyInvalid", true, "UnsupportedValue", `${invalidRules} rule(s) dropped`),
      );
    }
    conditions.push(
      unresolved === undefined
        ? condition("ResolvedRefs", true, "ResolvedRefs", "All references are resolved")
        : condition("ResolvedRefs", false, unresolved.reason, unresolved.message),
    );
    parents.push({ parentRef, controllerName: ctx.controllerName, conditions });
  }
  return { route: key, parents };
}
