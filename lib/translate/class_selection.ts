/**
 * Which Ingresses are ours: IngressClass selection.
 *
 * Owns the rules that decide whether an Ingress belongs to this controller
 * (`spec.ingressClassName`, the legacy annotation, the default class). Knows
 * nothing about routes, backends or TLS. Foreign Ingresses are ignored
 * completely: no routes, no issues.
 *
 * @module
 */

import type { Ingress, IngressClass } from "../k8s/objects.ts";

/** Default `spec.controller` value of IngressClasses that are ours. */
export const DEFAULT_CONTROLLER_NAME = "sluice.dev/ingress-controller";
/** Default value of the legacy class annotation that is ours. */
export const DEFAULT_INGRESS_CLASS = "sluice";
/** The deprecated annotation that named a class before `spec.ingressClassName` existed. */
export const LEGACY_CLASS_ANNOTATION = "kubernetes.io/ingress.class";
/** The IngressClass annotation that makes it the cluster's default class. */
export const DEFAULT_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class";

/** Options of {@linkcode createClassSelector}. */
export interface ClassSelectionOptions {
  readonly controllerName?: string;
  readonly ingressClass?: string;
  readonly watchIngressWithoutClass?: boolean;
}

/** Whether an Ingress is ours; a `problem` explains why a nearly-ours Ingress is not. */
export type ClassDecision =
  | { readonly ours: true }
  | {
    readonly ours: false;
    readonly problem?: { readonly field: string; readonly message: string };
  };

/** Decides, for one Ingress, whether it is ours. */
export type ClassSelector = (ingress: Ingress) => ClassDecision;

const OURS: ClassDecision = Object.freeze({ ours: true });
const FOREIGN: ClassDecision = Object.freeze({ ours: false });

/**
 * Builds a selector from the current IngressClasses.
 *
 * Kubernetes rules implemented (networking.k8s.io/v1, "IngressClass" and
 * "Default IngressClass" in the Ingress concept docs):
 * - `spec.ingressClassName` names an IngressClass; the Ingress is ours when that
 *   IngressClass's `spec.controller` is our controller name.
 * - Otherwise, the deprecated `kubernetes.io/ingress.class` annotation, compared
 *   with our class name.
 * - An Ingress with neither is handled by the default IngressClass: the one
 *   annotated `ingressclass.kubernetes.io/is-default-class: "true"`. It is ours
 *   when one of our IngressClasses carries that annotation, or when told to
 *   watch Ingresses without class.
 */
export function createClassSelector(
  ingressClasses: Iterable<IngressClass>,
  options: ClassSelectionOptions = {},
): ClassSelector {
  const controllerName = options.controllerName ?? DEFAULT_CONTROLLER_NAME;
  const ourClassName = options.ingressClass ?? DEFAULT_INGRESS_CLASS;
  const classes = new Map<string, IngressClass>();
  let oursIsDefault = false;
  for (const ingressClass of ingressClasses) {
    const name = ingressClass?.metadata?.name;
    if (typeof name !== "string" || name === "") continue;
    classes.set(name, ingressClass);
    const ours = ingressClass.spec?.controller === controllerName;
    if (ours && ingressClass.metadata?.annotations?.[DEFAULT_CLASS_ANNOTATION] === "true") {
      oursIsDefault = true;
    }
  }
  const withoutClass = oursIsDefault || options.watchIngressWithoutClass === true ? OURS : FOREIGN;

  return (ingress) => {
    const className = ingress?.spec?.ingressClassName;
    if (typeof className === "string" && className !== "") {
      const ingressClass = classes.get(className);
      if (ingressClass !== undefined) {
        return ingressClass.spec?.controller === controllerName ? OURS : FOREIGN;
      }
      // The class does not exist (yet). Only our own class name is worth a word.
      if (className === ourClassName) {
        return {
          ours: false,
          problem: {
            field: "spec.ingressClassName",
            message: `Cannot select IngressClass "${className}": no such IngressClass; ` +
              `create it with spec.controller "${controllerName}"`,
          },
        };
      }
      return FOREIGN;
    }
    const annotation = ingress?.metadata?.annotations?.[LEGACY_CLASS_ANNOTATION];
    if (typeof annotation === "string" && annotation !== "") {
      return annotation === ourClassName ? OURS : FOREIGN;
    }
    return withoutClass;
  };
}
