/**
 * Compiled HTTPRoutes kept between translations (see
 * `../translation_memo.ts`): by route object, each with what its compilation
 * read besides the route — every Service it looked up (found or not) and,
 * when it referred to another namespace, the ReferenceGrants. A remembered
 * compilation is reused only while the route is the same object and each of
 * those is the same too (the store replaces an object on every change and
 * keeps it otherwise), so an edited route, and a Service or ReferenceGrant it
 * depends on that is changed, added or deleted, compile it again.
 *
 * Parents, listeners and status are not remembered: they are decided on each
 * translation.
 *
 * @module
 */

import type { Service } from "../../k8s/objects.ts";
import { type CompiledRoute, compileRoute } from "./compiled_route.ts";
import { isReferenceAllowed } from "./reference_grants.ts";
import type { HTTPRoute, ReferenceGrant } from "./types.ts";

/** A compiled route and what it read. */
export interface RememberedRoute {
  readonly compiled: CompiledRoute;
  /** Each Service key looked up, with what was found. */
  readonly services: ReadonlyMap<string, Service | undefined>;
  /** The ReferenceGrants, when one was consulted. */
  readonly grants: readonly ReferenceGrant[] | undefined;
}

/** Remembered compilations, by HTTPRoute object. */
export type HttpRouteMemo = WeakMap<object, RememberedRoute>;

/** The cluster a route's references resolve against, in one translation. */
export interface RouteReferences {
  readonly services: ReadonlyMap<string, Service>;
  readonly grants: readonly ReferenceGrant[];
}

/**
 * `route` (`namespace`/`name`) compiled: taken from `memo` when nothing it
 * read has changed, else compiled and remembered. Without a memo, compiled.
 */
export function compiledRouteOf(
  route: HTTPRoute,
  at: { readonly namespace: string; readonly name: string },
  options: RouteReferences & { readonly memo?: HttpRouteMemo | undefined },
): CompiledRoute {
  const { memo } = options;
  const remembered = memo?.get(route);
  if (remembered !== undefined && stillValid(remembered, options)) return remembered.compiled;
  const services = new Map<string, Service | undefined>();
  let grants: readonly ReferenceGrant[] | undefined;
  const compiled = compileRoute(route, {
    namespace: at.namespace,
    name: at.name,
    service: (key) => {
      const service = options.services.get(key);
      services.set(key, service);
      return service;
    },
    granted: (to) => {
      grants = options.grants;
      return isReferenceAllowed(
        options.grants,
        { group: "gateway.networking.k8s.io", kind: "HTTPRoute", namespace: at.namespace },
        to,
      );
    },
  });
  memo?.set(route, { compiled, services, grants });
  return compiled;
}

/** Whether every Service and ReferenceGrant a remembered compilation read is the same object now. */
function stillValid(remembered: RememberedRoute, now: RouteReferences): boolean {
  for (const [key, service] of remembered.services) {
    if (now.services.get(key) !== service) return false;
  }
  const grants = remembered.grants;
  if (grants === undefined) return true;
  if (grants.length !== now.grants.length) return false;
  return grants.every((grant, i) => now.grants[i] === grant);
}
