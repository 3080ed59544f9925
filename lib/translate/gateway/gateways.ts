/**
 * Gateway processing: the Gateways of our classes, their listeners
 * (protocol, port, hostname, allowed routes, certificates, conflicts) and
 * their status. Route attachment counts are filled in by the route processor.
 *
 * @module
 */

import type { Secret } from "../../k8s/objects.ts";
import { compareStrings } from "../_order.ts";
import type { Issue } from "../issues.ts";
import { conditionMaker } from "./_conditions.ts";
import { validateHostname } from "./hostnames.ts";
import { selectorProblem } from "./label_selector.ts";
import { isReferenceAllowed } from "./reference_grants.ts";
import type {
  Condition,
  Gateway,
  LabelSelector,
  Listener,
  ListenerModel,
  ReferenceGrant,
} from "./types.ts";

export const GATEWAY_GROUP = "gateway.networking.k8s.io";

/** A listener as routes see it while attaching. */
export interface ListenerState {
  /** The Gateway, `namespace/name`. */
  readonly gateway: string;
  readonly namespace: string;
  readonly model: ListenerModel;
  /** `allowedRoutes.namespaces`: `from`, and the selector when `from` is `Selector`. */
  readonly from: "Same" | "All" | "Selector";
  readonly selector?: LabelSelector;
  /** Route kinds allowed (valid ones only). */
  readonly kinds: readonly { readonly group: string; readonly kind: string }[];
  /** Whether routes may attach (Accepted; a conflicted listener still counts routes). */
  readonly attachable: boolean;
  attachedRoutes: number;
  readonly conditions: Condition[];
}

/** A Gateway of ours while translating. */
export interface GatewayState {
  readonly key: string;
  readonly namespace: string;
  readonly name: string;
  readonly className: string;
  readonly listeners: ListenerState[];
  readonly conditions: Condition[];
}

const PROTOCOLS = new Set(["HTTP", "HTTPS"]);

function isPort(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= 1 && value <= 65535;
}

/** Whether a Secret looks like a usable TLS Secret (type and both keys present). */
function isTlsSecret(secret: Secret): boolean {
  const has = (key: string) =>
    typeof secret.data?.[key] === "string" || typeof secret.stringData?.[key] === "string";
  return secret.type === "kubernetes.io/tls" && has("tls.crt") && has("tls.key");
}

/** Inputs of {@linkcode processGateways}. */
export interface GatewayContext {
  readonly ourClasses: ReadonlySet<string>;
  readonly secrets: ReadonlyMap<string, Secret>;
  readonly grants: readonly ReferenceGrant[];
  readonly now: string;
  readonly issues: Issue[];
  /** The listener ports Sluice serves; a listener on another port is `PortUnavailable`. Absent: any. */
  readonly servedPorts?: ReadonlySet<number> | undefined;
  /** Why a TLS Secret's certificate cannot be served (see `GatewayTranslateOptions`). */
  readonly certificateProblem?: ((secretKey: string) => string | undefined) | undefined;
}

/** Processes the Gateways of our classes, sorted by `namespace/name`. */
export function processGateways(gateways: Iterable<Gateway>, ctx: GatewayContext): GatewayState[] {
  const out: GatewayState[] = [];
  for (const gateway of gateways) {
    const namespace = gateway?.metadata?.namespace;
    const name = gateway?.metadata?.name;
    if (typeof namespace !== "string" || namespace === "") continue;
    if (typeof name !== "string" || name === "") continue;
    const className = gateway.spec?.gatewayClassName;
    // Gateway API (GatewaySpec.gatewayClassName): the Gateway is ours only when
    // its class is one of ours.
    if (typeof className !== "string" || !ctx.ourClasses.has(className)) continue;
    out.push(processGateway(gateway, namespace, name, className, ctx));
  }
  return out.sort((a, b) => compareStrings(a.key, b.key));
}

function processGateway(
  gateway: Gateway,
  namespace: string,
  name: string,
  className: string,
  ctx: GatewayContext,
): GatewayState {
  const key = `${namespace}/${name}`;
  const condition = conditionMaker(gateway.metadata?.generation, ctx.now);
  const issue = (field: string, message: string) =>
    ctx.issues.push({ kind: "Gateway", namespace, name, field, message });
  const raw = Array.isArray(gateway.spec?.listeners) ? gateway.spec.listeners : [];
  const listeners: ListenerState[] = [];
  const seenNames = new Set<string>();

  // First pass: each listener on its own.
  const drafts = raw.map((listener, i) => {
    const field = `spec.listeners[${i}]`;
    const l = (listener ?? {}) as Listener;
    const problems: string[] = [];
    const listenerName = typeof l.name === "string" && l.name !== "" ? l.name : `listener-${i}`;
    if (typeof l.name !== "string" || l.name === "") {
      problems.push("name is missing");
    } else if (seenNames.has(l.name)) {
      problems.push(`name "${l.name}" is used twice`);
    }
    seenNames.add(listenerName);
    const host = validateHostname(l.hostname);
    if (!host.ok) problems.push(host.message);
    const protocol = typeof l.protocol === "string" ? l.protocol : "";
    const port = isPort(l.port) ? l.port : 0;
    if (port === 0) problems.push(`port ${JSON.stringify(l.port)} is not a number from 1 to 65535`);
    return {
      field,
      l,
      name: listenerName,
      hostname: host.ok ? host.host : "",
      protocol,
      port,
      problems,
    };
  });

  for (const [i, d] of drafts.entries()) {
    const conditions: Condition[] = [];
    for (const problem of d.problems) issue(d.field, `Cannot serve listener: ${problem}`);
    const supportedProtocol = PROTOCOLS.has(d.protocol);

    // Gateway API (Listener distinctness): listeners sharing a port must share
    // a protocol (ProtocolConflict); HTTP and HTTPS listeners sharing a port
    // and protocol must differ in hostname (HostnameConflict). "If a set of
    // Listeners contains Listeners that are not distinct, then those Listeners
    // are Conflicted".
    let conflict: "ProtocolConflict" | "HostnameConflict" | undefined;
    for (const [j, other] of drafts.entries()) {
      if (j === i || other.port !== d.port || d.port === 0) continue;
      if (other.protocol !== d.protocol) conflict = "ProtocolConflict";
      else if (other.hostname === d.hostname && conflict === undefined) {
        conflict = "HostnameConflict";
      }
    }

    // allowedRoutes.kinds: default from the protocol (HTTPRoute for HTTP and
    // HTTPS); a kind we do not implement is InvalidRouteKinds and is left out
    // of supportedKinds.
    const wanted = d.l.allowedRoutes?.kinds;
    const kinds: { group: string; kind: string }[] = [];
    let invalidKinds = false;
    if (Array.isArray(wanted) && wanted.length > 0) {
      for (const k of wanted) {
        const group = k?.group ?? GATEWAY_GROUP;
        if (group === GATEWAY_GROUP && k?.kind === "HTTPRoute") {
          if (!kinds.some((x) => x.kind === "HTTPRoute")) kinds.push({ group, kind: "HTTPRoute" });
        } else invalidKinds = true;
      }
    } else if (supportedProtocol) {
      kinds.push({ group: GATEWAY_GROUP, kind: "HTTPRoute" });
    }
    if (invalidKinds) {
      issue(
        `${d.field}.allowedRoutes.kinds`,
        "Cannot allow route kinds: only HTTPRoute is supported",
      );
    }

    // allowedRoutes.namespaces.from: default Same.
    const nsSpec = d.l.allowedRoutes?.namespaces;
    const fromRaw = nsSpec?.from ?? "Same";
    let from: "Same" | "All" | "Selector" = "Same";
    let selector: LabelSelector | undefined;
    let badFrom = false;
    if (fromRaw === "All" || fromRaw === "Same") from = fromRaw;
    else if (fromRaw === "Selector") {
      const problem = nsSpec?.selector === undefined
        ? "selector is missing"
        : selectorProblem(nsSpec.selector);
      if (problem === undefined) {
        from = "Selector";
        selector = nsSpec!.selector!;
      } else {
        badFrom = true;
        issue(`${d.field}.allowedRoutes.namespaces`, `Cannot select namespaces: ${problem}`);
      }
    } else {
      badFrom = true;
      issue(
        `${d.field}.allowedRoutes.namespaces.from`,
        `Cannot select namespaces: unknown value ${JSON.stringify(fromRaw)}`,
      );
    }

    // TLS (HTTPS): Terminate with certificateRefs to Secrets.
    const certificates: string[] = [];
    let certProblem: { reason: string; message: string } | undefined;
    if (d.protocol === "HTTPS") {
      const refs = d.l.tls?.certificateRefs;
      const mode = d.l.tls?.mode ?? "Terminate";
      if (mode !== "Terminate") {
        certProblem = {
          reason: "InvalidCertificateRef",
          message: `TLS mode "${mode}" is not supported on HTTPS listeners`,
        };
      } else if (!Array.isArray(refs) || refs.length === 0) {
        // Gateway API (GatewayTLSConfig.certificateRefs): required for an HTTPS
        // listener in Terminate mode.
        certProblem = {
          reason: "InvalidCertificateRef",
          message: "An HTTPS listener needs tls.certificateRefs",
        };
        issue(`${d.field}.tls.certificateRefs`, "Cannot serve HTTPS: tls.certificateRefs is empty");
      } else {
        for (const [r, ref] of refs.entries()) {
          const secretNamespace = ref?.namespace ?? namespace;
          const secretKey = `${secretNamespace}/${ref?.name ?? ""}`;
          const problem = certificateProblem(ref, secretNamespace, namespace, ctx);
          if (problem === undefined) {
            certificates.push(secretKey);
            continue;
          }
          issue(`${d.field}.tls.certificateRefs[${r}]`, problem.message);
          certProblem ??= problem;
        }
      }
    }

    const portServed = ctx.servedPorts === undefined || ctx.servedPorts.has(d.port);
    const accepted = supportedProtocol && portServed && d.problems.length === 0 && !badFrom;
    // Gateway API (ListenerConditionAccepted): UnsupportedProtocol when the
    // protocol is not supported; PortUnavailable when the port cannot be
    // served (Sluice serves the ports its listeners stand for).
    conditions.push(
      !supportedProtocol
        ? cond(
          "Accepted",
          false,
          "UnsupportedProtocol",
          `Protocol "${d.protocol}" is not supported`,
        )
        : !portServed
        ? cond(
          "Accepted",
          false,
          "PortUnavailable",
          `Port ${d.port} is not served: Sluice serves ports ${
            [...ctx.servedPorts!].sort((a, b) => a - b).join(" and ")
          }`,
        )
        : accepted
        ? cond("Accepted", true, "Accepted", "The listener is accepted")
        : cond("Accepted", false, "Invalid", "The listener is invalid: see the Gateway's Events"),
    );
    conditions.push(
      conflict === undefined ? cond("Conflicted", false, "NoConflicts", "No conflicts") : cond(
        "Conflicted",
        true,
        conflict,
        conflict === "ProtocolConflict"
          ? `Another listener uses port ${d.port} with a different protocol`
          : `Another listener uses port ${d.port} with hostname "${d.hostname}"`,
      ),
    );
    // Gateway API (ListenerConditionResolvedRefs): InvalidCertificateRef,
    // RefNotPermitted (cross-namespace without a ReferenceGrant), InvalidRouteKinds.
    conditions.push(
      certProblem !== undefined
        ? cond("ResolvedRefs", false, certProblem.reason, certProblem.message)
        : invalidKinds
        ? cond("ResolvedRefs", false, "InvalidRouteKinds", "Only HTTPRoute is supported")
        : cond("ResolvedRefs", true, "ResolvedRefs", "All references are resolved"),
    );
    const ready = accepted && conflict === undefined && certProblem === undefined &&
      (d.protocol !== "HTTPS" || certificates.length > 0);
    conditions.push(
      ready
        ? cond("Programmed", true, "Programmed", "The listener is programmed")
        : cond("Programmed", false, "Invalid", "The listener is not programmed"),
    );
    listeners.push({
      gateway: key,
      namespace,
      model: {
        name: d.name,
        port: d.port,
        protocol: d.protocol === "HTTPS" ? "HTTPS" : "HTTP",
        hostname: d.hostname,
        certificates,
        ready,
      },
      from,
      ...(selector === undefined ? {} : { selector }),
      kinds,
      attachable: accepted,
      attachedRoutes: 0,
      conditions,
    });
  }

  function cond(type: string, ok: boolean, reason: string, message: string) {
    return condition(type, ok, reason, message);
  }

  // Gateway API (GatewayConditionAccepted): ListenersNotValid when one or more
  // listeners are invalid; the Gateway stays Accepted while some listener is
  // valid. Programmed when some listener is ready.
  const validCount = listeners.filter((l) => l.attachable).length;
  const conditions: Condition[] = [
    validCount === listeners.length && listeners.length > 0
      ? condition("Accepted", true, "Accepted", "The Gateway is accepted")
      : condition(
        "Accepted",
        validCount > 0,
        "ListenersNotValid",
        listeners.length === 0
          ? "The Gateway has no listeners"
          : `${listeners.length - validCount} of ${listeners.length} listeners are not valid`,
      ),
    listeners.some((l) => l.model.ready)
      ? condition("Programmed", true, "Programmed", "The Gateway is programmed")
      : condition("Programmed", false, "Invalid", "No listener is ready"),
  ];
  return { key, namespace, name, className, listeners, conditions };
}

function certificateProblem(
  ref: { group?: string; kind?: string; name?: string } | null | undefined,
  secretNamespace: string,
  gatewayNamespace: string,
  ctx: GatewayContext,
): { reason: string; message: string } | undefined {
  const group = ref?.group ?? "";
  const kind = ref?.kind ?? "Secret";
  const name = ref?.name;
  if (group !== "" || kind !== "Secret") {
    return {
      reason: "InvalidCertificateRef",
      message: `Cannot use certificate ${kind}${group === "" ? "" : `.${group}`}: only Secrets`,
    };
  }
  if (typeof name !== "string" || name === "") {
    return { reason: "InvalidCertificateRef", message: "Cannot use certificate: name is missing" };
  }
  const key = `${secretNamespace}/${name}`;
  // Gateway API (SecretObjectReference.namespace): "a reference to a different
  // namespace … is only valid if a ReferenceGrant object is configured in the
  // target namespace"; otherwise ResolvedRefs False, RefNotPermitted.
  if (
    !isReferenceAllowed(
      ctx.grants,
      { group: GATEWAY_GROUP, kind: "Gateway", namespace: gatewayNamespace },
      { group: "", kind: "Secret", namespace: secretNamespace, name },
    )
  ) {
    return {
      reason: "RefNotPermitted",
      message: `Cannot use Secret "${key}": no ReferenceGrant allows it`,
    };
  }
  const secret = ctx.secrets.get(key);
  if (secret === undefined) {
    return {
      reason: "InvalidCertificateRef",
      message: `Cannot use Secret "${key}": no such Secret`,
    };
  }
  if (!isTlsSecret(secret)) {
    return {
      reason: "InvalidCertificateRef",
      message:
        `Cannot use Secret "${key}": not a kubernetes.io/tls Secret with tls.crt and tls.key`,
    };
  }
  // Gateway API (ListenerConditionResolvedRefs, InvalidCertificateRef): also
  // "the referenced certificate … is malformed".
  const problem = ctx.certificateProblem?.(key);
  if (problem !== undefined) {
    return { reason: "InvalidCertificateRef", message: `Cannot use Secret "${key}": ${problem}` };
  }
  return undefined;
}
