/**
 * GatewayClass processing: which classes are ours, and their status.
 *
 * @module
 */

import { compareStrings } from "../_order.ts";
import { conditionMaker } from "./_conditions.ts";
import type { ClassModel, GatewayClass, GatewayStatuses } from "./types.ts";

/** Our classes and their statuses, sorted by name. */
export function processGatewayClasses(
  classes: Iterable<GatewayClass>,
  options: {
    readonly controllerName: string;
    readonly supportedFeatures: readonly string[];
    readonly now: string;
  },
): { models: ClassModel[]; statuses: GatewayStatuses["gatewayClasses"][number][] } {
  const models: ClassModel[] = [];
  const statuses: GatewayStatuses["gatewayClasses"][number][] = [];
  const features = [...new Set(options.supportedFeatures)].sort(compareStrings);
  for (const gatewayClass of classes) {
    const name = gatewayClass?.metadata?.name;
    // Gateway API (GatewayClassSpec.controllerName): "the name of the controller
    // that is managing Gateways of this class"; other controllers' classes are
    // left alone (no status written).
    if (typeof name !== "string" || name === "") continue;
    if (gatewayClass.spec?.controllerName !== options.controllerName) continue;
    // Gateway API (GatewayClassSpec.parametersRef): "If the referent cannot be
    // found, refers to an unsupported kind, or when the data within that
    // resource is malformed, the GatewayClass SHOULD be rejected with the
    // Accepted status condition set to False and an InvalidParameters reason."
    // Sluice takes no parameters, so any reference is of an unsupported kind.
    const parameters = gatewayClass.spec.parametersRef;
    const accepted = parameters === undefined || parameters === null;
    models.push({ name, accepted });
    const condition = conditionMaker(gatewayClass.metadata?.generation, options.now);
    statuses.push({
      name,
      conditions: [
        accepted
          ? condition("Accepted", true, "Accepted", "The GatewayClass is accepted")
          : condition(
            "Accepted",
            false,
            "InvalidParameters",
            `Cannot use parameters ${parameters.kind ?? "(no kind)"} "${
              parameters.name ?? ""
            }": Sluice takes no GatewayClass parameters`,
          ),
      ],
      // Gateway API (GatewayClassStatus.supportedFeatures, GEP-2162): the
      // features this implementation supports, sorted.
      supportedFeatures: features.map((feature) => ({ name: feature })),
    });
  }
  models.sort((a, b) => compareStrings(a.name, b.name));
  statuses.sort((a, b) => compareStrings(a.name, b.name));
  return { models, statuses };
}
