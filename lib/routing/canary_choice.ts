/**
 * Which backend a request of a route with a canary gets (ingress-nginx's
 * `route_to_alternative_balancer`): the canary header first (its value equal
 * to `canary-by-header-value`, or matching `canary-by-header-pattern`, or
 * else `always` / `never`), then the canary cookie (`always` / `never`),
 * then the weight. A `never` header decides at once; a header or cookie with
 * another value leaves the choice to the next rule.
 *
 * Pure: the request's fields and the random number are passed in.
 *
 * @module
 */

import { MAX_CANARY_HEADER, type RouteCanary } from "../translate/nginx/canary.ts";
import type { Backend } from "../translate/backend.ts";

/** A route's canary, compiled. */
export interface CompiledCanary {
  readonly rule: RouteCanary;
  readonly backend: Backend;
  readonly pattern?: RegExp;
}

/** What the choice reads of a request. */
export interface CanaryRequest {
  /** The first value of a request header, by lowercase name. */
  header(name: string): string | undefined;
  /** The value of a request cookie. */
  cookie(name: string): string | undefined;
  /** A number in [0, 1). */
  readonly random: number;
}

/** Compiles a route's canary with its resolved backend. */
export function compileCanary(rule: RouteCanary, backend: Backend): CompiledCanary {
  return Object.freeze({
    rule,
    backend,
    ...(rule.headerPattern === undefined ? {} : { pattern: new RegExp(rule.headerPattern) }),
  });
}

/** True when the request goes to the canary backend. */
export function choosesCanary(canary: CompiledCanary, request: CanaryRequest): boolean {
  const rule = canary.rule;
  if (rule.header !== undefined) {
    const value = request.header(rule.header);
    if (value !== undefined) {
      if (rule.headerValue !== undefined) {
        if (value === rule.headerValue) return true;
      } else if (canary.pattern !== undefined) {
        if (value.length <= MAX_CANARY_HEADER && canary.pattern.test(value)) return true;
      } else if (value === "always") return true;
      else if (value === "never") return false;
    }
  }
  if (rule.cookie !== undefined) {
    const value = request.cookie(rule.cookie);
    if (value === "always") return true;
    if (value === "never") return false;
  }
  // ingress-nginx: `math.random(total) <= weight`, i.e. weight out of total.
  return rule.weight > 0 && Math.floor(request.random * rule.weightTotal) < rule.weight;
}
