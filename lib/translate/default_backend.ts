/**
 * The controller-wide default backend (`--default-backend-service`): what
 * answers requests that no Ingress of ours matches, instead of Sluice's own
 * 404.
 *
 * Owns the option's meaning: `namespace/name` routes to the Service's first
 * port, `namespace/name:port` to the named or numbered Service port. A missing
 * Service, port or endpoints answers 503, with an issue. Knows nothing about
 * Ingresses.
 *
 * @module
 */

import type { BackendRef, ResolvedBackend } from "./backends.ts";
import type { Issue } from "./issues.ts";
import { parseObjectRefOption } from "./option_refs.ts";

/**
 * Resolves the controller-wide default backend; returns its key, or
 * `undefined` when none is configured or the option is malformed.
 */
export function translateDefaultBackend(
  option: string | undefined,
  context: {
    readonly resolveBackend: (ref: BackendRef) => ResolvedBackend;
    readonly issues: Issue[];
  },
): ResolvedBackend | undefined {
  if (option === undefined || option === "") return undefined;
  const parsed = parseObjectRefOption(option, { allowPort: true });
  if (parsed === undefined) {
    context.issues.push({
      kind: "Option",
      namespace: "",
      name: "default-backend-service",
      field: "",
      message: `Cannot use default backend "${option}": expected "namespace/name" or ` +
        `"namespace/name:port"`,
    });
    return undefined;
  }
  const resolved = context.resolveBackend({
    type: "service",
    namespace: parsed.namespace,
    name: parsed.name,
    port: parsed.port,
  });
  if (resolved.problem !== undefined) {
    context.issues.push({
      kind: "Service",
      namespace: parsed.namespace,
      name: parsed.name,
      field: "",
      message: `${resolved.problem} (the --default-backend-service answers 503)`,
    });
  }
  return resolved;
}
