/**
 * Builds the immutable {@linkcode Snapshot} the data plane reads: a compiled
 * route table and certificate table from one translation, with a version.
 *
 * Owns nothing but the assembly; the translation may have crossed a worker
 * boundary (it is plain data), and each worker builds its own snapshot. Knows
 * nothing about how snapshots are published.
 *
 * @module
 */

import type { Translation } from "../translate/translation.ts";
import { compileCertificateTable } from "./certificate_table.ts";
import { compileGatewayTable } from "./gateway_table.ts";
import { compileRouteTable } from "./route_table.ts";
import type { ServingCertificate, Snapshot } from "./snapshot.ts";

/** Options of {@linkcode buildSnapshot}. */
export interface BuildSnapshotOptions {
  /** Monotonic version, for logs, metrics and change detection. */
  readonly version: number;
  /**
   * The certificate served when no Ingress certificate matches and no valid
   * `--default-ssl-certificate` Secret exists: the self-signed one made at start.
   */
  readonly defaultCertificate: ServingCertificate;
}

const NO_GATEWAY_STATUSES = Object.freeze({ gatewayClasses: [], gateways: [], httpRoutes: [] });

/**
 * The part of a translation {@linkcode buildSnapshot} reads: without the
 * issues and the Gateway API statuses, which stay on the control plane, so
 * posting a translation to every worker copies only what serving needs.
 */
export function snapshotInput(translation: Translation): Translation {
  const gateway = translation.gateway;
  return {
    ...translation,
    issues: [],
    ...(gateway === undefined ? {} : {
      gateway: {
        routes: gateway.routes,
        classes: [],
        gateways: [],
        issues: [],
        statuses: NO_GATEWAY_STATUSES,
      },
    }),
  };
}

/** Compiles a translation into a frozen snapshot. */
export function buildSnapshot(translation: Translation, options: BuildSnapshotOptions): Snapshot {
  return Object.freeze({
    version: options.version,
    routes: compileRouteTable(translation),
    certificates: compileCertificateTable(translation, {
      defaultCertificate: options.defaultCertificate,
    }),
    ...(translation.gateway !== undefined && translation.gateway.routes.length > 0
      ? { gateway: compileGatewayTable(translation.gateway.routes, translation.backends) }
      : {}),
  });
}
