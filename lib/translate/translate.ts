/**
 * The translation: cluster objects in, `{ routes, backends, certificates,
 * issues }` out. Pure, deterministic, sorted.
 *
 * Wires the rule modules together (class selection, annotations, route
 * candidates, conflicts, backends, TLS, default backend) and guarantees that a
 * malformed object never throws out of here and never removes anyone else's
 * routes.
 * Knows nothing about I/O, clocks, logging or lookup structures.
 *
 * @module
 */

import type { Backend } from "./backend.ts";
import { attachCanaries, type CanaryRule, readCanaryAnnotations } from "./nginx/canary.ts";
import { judgeAnnotations, NGINX_PREFIX } from "./nginx/ingress_annotations.ts";
import type { IngressBehaviour } from "./nginx/ingress_behaviour.ts";
import { createBackendResolver, type ResolvedBackend } from "./backends.ts";
import { createClassSelector } from "./class_selection.ts";
import { indexCluster } from "./cluster_index.ts";
import { translateDefaultBackend } from "./default_backend.ts";
import { type OwnedIngress, selectIngresses } from "./ingress_selection.ts";
import { type Issue, sortIssues } from "./issues.ts";
import {
  collectRouteCandidates,
  type IngressCandidates,
  type RouteCandidate,
} from "./route_candidates.ts";
import { mergeRouteCandidates } from "./route_conflicts.ts";
import {
  createSecretCertificateReader,
  translateDefaultCertificate,
  translateGatewayCertificates,
  translateTls,
} from "./tls.ts";
import type { ClusterObjects, Route, TranslateOptions, Translation } from "./translation.ts";
import { compareStrings } from "./_order.ts";
import { translateGateway } from "./gateway/translate_gateway.ts";

/**
 * The Gateway listener ports Sluice serves: 80 by its HTTP listener
 * (`--http-port`), 443 by its HTTPS listener (`--https-port`). Condition
 * times are left to the status writer (`now` is not passed): it keeps or
 * sets them against the written status.
 */
const GATEWAY_SERVED_PORTS: readonly number[] = Object.freeze([80, 443]);

const PATH_TYPE_ORDER = { Exact: 0, Prefix: 1, Default: 2 } as const;

/**
 * Where the routes of an Ingress refused for its annotations lead (access
 * control Sluice does not enforce, or a served annotation whose value it
 * cannot use): nowhere, so they answer 503. The key has no `/`, so no
 * Service or resource backend (`namespace/name…`) can share it.
 */
const REFUSED_BACKEND: Backend = Object.freeze({
  key: "sluice:refused-annotations",
  service: "",
  endpoints: Object.freeze([]),
  unavailable:
    "The Ingress's annotations ask for what Sluice does not enforce, or hold a value it cannot use",
});

function compareRoutes(a: Route, b: Route): number {
  return compareStrings(a.host, b.host) || compareStrings(a.path, b.path) ||
    PATH_TYPE_ORDER[a.pathType] - PATH_TYPE_ORDER[b.pathType];
}

function internalError(owned: OwnedIngress, error: unknown): Issue {
  const detail = error instanceof Error ? error.message : String(error);
  return {
    kind: "Ingress",
    namespace: owned.namespace,
    name: owned.name,
    field: "",
    message: `Cannot translate Ingress: unexpected error "${detail}"; its routes are skipped`,
  };
}

/**
 * Translates cluster objects into routes, backends, certificates and issues.
 *
 * Never throws for malformed objects: each problem becomes an issue and only
 * the faulty part (a path, a rule, a TLS entry) is skipped.
 */
export function translate(objects: ClusterObjects, options: TranslateOptions): Translation {
  const issues: Issue[] = [];
  const index = indexCluster(objects);
  const select = createClassSelector(objects.ingressClasses ?? [], options);
  const owned = selectIngresses(objects.ingresses ?? [], { select, issues });
  const resolveBackend = createBackendResolver(index);
  const memo = options.memo?.routeCandidates;

  // Route candidates, Ingress by Ingress, in precedence order.
  const candidates: RouteCandidate[] = [];
  // Ingresses asking for access control Sluice does not enforce keep their routes, with their
  // precedence, but those answer 503. Dropping the routes would not fail closed: a request for
  // a protected `/admin` would fall through to another Ingress's `/` on the same host, often
  // the same Service (annotations are per Ingress, so ingress-nginx users split them so).
  const refused = new Set<string>();
  const behaviours = new Map<string, IngressBehaviour>();
  // Canary Ingresses (ingress-nginx `canary`): their paths add a backend to another Ingress's.
  const canaries = new Map<string, CanaryRule>();
  for (const ingress of owned) {
    try {
      const verdict = judgeAnnotations({
        namespace: ingress.namespace,
        name: ingress.name,
        annotations: ingress.ingress.metadata?.annotations,
      }, {
        ignoreAccessAnnotations: options.ignoreAccessAnnotations,
        secret: (key) => index.secrets.get(key),
        allowCrossNamespaceSecrets: options.allowCrossNamespaceSecrets,
      });
      appendAll(issues, verdict.issues);
      if (verdict.refused) refused.add(ingress.key);
      else if (verdict.behaviour !== undefined) behaviours.set(ingress.key, verdict.behaviour);
    } catch (error) {
      // Annotations that cannot be read might ask for access control: fail closed.
      const detail = error instanceof Error ? error.message : String(error);
      issues.push({
        kind: "Ingress",
        namespace: ingress.namespace,
        name: ingress.name,
        field: "metadata.annotations",
        message: `Cannot read annotations: unexpected error "${detail}"; its routes answer 503`,
      });
      refused.add(ingress.key);
    }
    const canary = readCanaryAnnotations(ingress.ingress.metadata?.annotations);
    if (canary.problem !== undefined) {
      issues.push({
        kind: "Ingress",
        namespace: ingress.namespace,
        name: ingress.name,
        field: `metadata.annotations.${NGINX_PREFIX}${canary.problem.annotation}`,
        message:
          `Cannot serve Ingress "${ingress.key}": annotation "${NGINX_PREFIX}${canary.problem.annotation}": ${canary.problem.problem}, so its routes answer 503`,
      });
      // Fail closed, as for any invalid annotation: dropping its routes could let a request
      // for a protected path fall through to another Ingress's.
      refused.add(ingress.key);
    } else if (canary.rule !== undefined) {
      // A refused canary is not served: its main Ingress's routes serve alone.
      if (refused.has(ingress.key)) continue;
      canaries.set(ingress.key, canary.rule);
    }
    let own: IngressCandidates | undefined = memo?.get(ingress.ingress);
    if (own === undefined) {
      try {
        own = collectRouteCandidates(ingress);
      } catch (error) {
        issues.push(internalError(ingress, error));
        continue;
      }
      memo?.set(ingress.ingress, own);
    }
    // One Ingress may hold hundreds of thousands of rules: append in a loop, as
    // `push(...list)` throws a RangeError past about 120,000 arguments.
    appendAll(candidates, own.candidates);
    appendAll(issues, own.issues);
  }

  // Backend problems: one issue per Ingress and backend, at its first use.
  const reported = new Set<string>();
  for (const candidate of candidates) {
    if (refused.has(candidate.ingress)) continue;
    const resolved = resolveBackend(candidate.backend);
    if (resolved.problem === undefined) continue;
    const once = `${candidate.ingress} ${resolved.backend.key}`;
    if (reported.has(once)) continue;
    reported.add(once);
    issues.push({
      kind: "Ingress",
      namespace: candidate.namespace,
      name: candidate.name,
      field: `${candidate.field}${candidate.pathType === "Default" ? "" : ".backend"}`,
      message: `${resolved.problem}; the route answers 503`,
    });
  }

  const winners = mergeRouteCandidates(
    canaries.size === 0 ? candidates : candidates.filter((c) => !canaries.has(c.ingress)),
    issues,
  );
  const backends = new Map<string, Backend>();
  const attached = canaries.size === 0
    ? undefined
    : attachCanaries(winners, candidates.filter((c) => canaries.has(c.ingress)), {
      canaryOf: (ingress) => canaries.get(ingress)!,
      backendKey: (candidate) => {
        const backend = resolveBackend(candidate.backend).backend;
        backends.set(backend.key, backend);
        return backend.key;
      },
      issues,
    });
  const routes: Route[] = winners.map((candidate) => {
    const backend = refused.has(candidate.ingress)
      ? REFUSED_BACKEND
      : resolveBackend(candidate.backend).backend;
    backends.set(backend.key, backend);
    const canary = refused.has(candidate.ingress) ? undefined : attached?.get(candidate);
    return {
      host: candidate.host,
      path: candidate.path,
      pathType: candidate.pathType,
      ingress: candidate.ingress,
      backend: backend.key,
      ...(canary === undefined ? {} : { canary }),
    };
  });
  routes.sort(compareRoutes);

  let defaultBackend: ResolvedBackend | undefined;
  try {
    defaultBackend = translateDefaultBackend(options.defaultBackendService, {
      resolveBackend,
      issues,
    });
  } catch (error) {
    issues.push(optionError("default-backend-service", error));
  }
  if (defaultBackend !== undefined) {
    backends.set(defaultBackend.backend.key, defaultBackend.backend);
  }

  const readCertificate = createSecretCertificateReader(index, options);
  const tls = translateTls(owned, {
    readCertificate,
    issues,
    onError: (ingress, error) => issues.push(internalError(ingress, error)),
  });

  let defaultCertificate;
  try {
    defaultCertificate = translateDefaultCertificate(options.defaultSslCertificate, {
      readCertificate,
      issues,
    });
  } catch (error) {
    issues.push(optionError("default-ssl-certificate", error));
  }

  let gateway: Translation["gateway"];
  if (options.gatewayApi === true) {
    try {
      gateway = translateGateway(objects, {
        ...(options.controllerName !== undefined ? { controllerName: options.controllerName } : {}),
        supportedFeatures: options.gatewaySupportedFeatures ?? [],
        servedPorts: GATEWAY_SERVED_PORTS,
        ...(options.memo === undefined ? {} : { memo: options.memo.httpRoutes }),
        ...(options.gatewayAddresses === undefined
          ? {}
          : { gatewayAddresses: options.gatewayAddresses }),
        certificateProblem: (secretKey) => {
          const certificate = readCertificate(secretKey);
          return certificate.ok ? undefined : certificate.reason;
        },
      });
      appendAll(issues, gateway.issues);
      const gatewayReported = new Set<string>();
      for (const group of gateway.routes) {
        for (const entry of group.entries) {
          for (const weighted of entry.backends) {
            if (weighted.invalid !== undefined) continue;
            const [namespace, name] = weighted.service.split("/") as [string, string];
            const resolved = resolveBackend({
              type: "service",
              namespace,
              name,
              port: weighted.port,
            });
            backends.set(resolved.backend.key, resolved.backend);
            // A valid reference to a Service without ready endpoints: its share answers
            // 503, reported once per route and backend, as for Ingresses.
            const once = `${entry.route} ${resolved.backend.key}`;
            if (resolved.problem === undefined || gatewayReported.has(once)) continue;
            gatewayReported.add(once);
            const [routeNamespace = "", routeName = ""] = entry.route.split("/");
            issues.push({
              kind: "HTTPRoute",
              namespace: routeNamespace,
              name: routeName,
              field: `spec.rules[${entry.rule}].backendRefs`,
              message: `${resolved.problem}; its share of requests answers 503`,
            });
          }
          for (const filter of entry.filters) {
            if (filter.type !== "RequestMirror" || filter.backend.invalid !== undefined) continue;
            const [namespace, name] = filter.backend.service.split("/") as [string, string];
            const resolved = resolveBackend({
              type: "service",
              namespace,
              name,
              port: filter.backend.port,
            });
            backends.set(resolved.backend.key, resolved.backend);
          }
        }
      }
    } catch (error) {
      issues.push(optionError("gateway-api", error));
    }
  }

  let certificates = tls.certificates;
  if (gateway !== undefined) {
    const gatewayTls = translateGatewayCertificates(
      gateway.gateways.flatMap((g) =>
        g.listeners.filter((l) => l.protocol === "HTTPS" && l.ready).map((l) => ({
          gateway: g.gateway,
          listener: l.name,
          hostname: l.hostname,
          certificates: l.certificates,
        }))
      ),
      { readCertificate, issues },
    );
    certificates = [...certificates, ...gatewayTls.certificates];
    defaultCertificate ??= gatewayTls.fallback;
  }

  const translation: {
    -readonly [K in keyof Translation]: Translation[K];
  } = {
    routes,
    backends: [...backends.values()].sort((a, b) => compareStrings(a.key, b.key)),
    tlsHosts: tls.tlsHosts,
    certificates,
    issues: sortIssues(issues),
  };
  if (defaultBackend !== undefined) translation.defaultBackend = defaultBackend.backend.key;
  // app-root is the host's (an nginx server's), from the first Ingress in precedence order.
  const appRoots = new Map<string, string>();
  for (const candidate of candidates) {
    const appRoot = behaviours.get(candidate.ingress)?.appRoot;
    if (appRoot === undefined || candidate.host === "" || appRoots.has(candidate.host)) continue;
    appRoots.set(candidate.host, appRoot);
  }
  if (appRoots.size > 0) {
    translation.appRoots = Object.fromEntries(
      [...appRoots].sort(([a], [b]) => compareStrings(a, b)),
    );
  }
  // from-to-www-redirect: the twin of each rule host of such an Ingress, unless some Ingress
  // routes the twin itself (ingress-nginx then leaves it to that server).
  const ruleHosts = new Set(candidates.map((c) => c.host));
  const wwwRedirects = new Map<string, string>();
  for (const candidate of candidates) {
    const host = candidate.host;
    if (
      host === "" || host.startsWith("*.") || behaviours.get(candidate.ingress)?.fromToWww !== true
    ) {
      continue;
    }
    const twin = host.startsWith("www.") ? host.slice(4) : `www.${host}`;
    if (!twin.includes(".") || ruleHosts.has(twin) || wwwRedirects.has(twin)) continue;
    wwwRedirects.set(twin, host);
  }
  if (wwwRedirects.size > 0) {
    translation.wwwRedirects = Object.fromEntries(
      [...wwwRedirects].sort(([a], [b]) => compareStrings(a, b)),
    );
  }
  // Only the Ingresses some route still comes from.
  const served = [...new Set(routes.map((r) => r.ingress))].filter((key) => behaviours.has(key));
  if (served.length > 0) {
    translation.behaviours = Object.fromEntries(
      served.sort(compareStrings).map((key) => [key, behaviours.get(key)!]),
    );
  }
  if (defaultCertificate !== undefined) translation.defaultCertificate = defaultCertificate;
  // Its problems are in `issues` with everyone else's.
  if (gateway !== undefined) translation.gateway = { ...gateway, issues: [] };
  return translation;
}

/** Appends `items` to `target` without spreading them into arguments. */
function appendAll<T>(target: T[], items: readonly T[]): void {
  for (const item of items) target.push(item);
}

function optionError(option: string, error: unknown): Issue {
  const detail = error instanceof Error ? error.message : String(error);
  return {
    kind: "Option",
    namespace: "",
    name: option,
    field: "",
    message: `Cannot use --${option}: unexpected error "${detail}"`,
  };
}
