/**
 * What an Ingress's ingress-nginx annotations (`nginx.ingress.kubernetes.io/*`)
 * mean for serving it, by the catalogue (`catalogue.ts`):
 *
 * - served annotations become its {@linkcode IngressBehaviour}; one whose
 *   value does not parse makes its routes answer 503, with an issue naming
 *   the annotation and the reason;
 * - refused annotations that are on make its routes answer 503 (unless
 *   `--ignore-access-annotations` waives them), with an issue naming them;
 * - ignored and unknown ones are listed in one warning issue.
 *
 * Only the nginx prefix is examined: that is the controller users migrate
 * from by switching `ingressClassName`. Other vendors' annotations are not:
 * Traefik's `router.middlewares` may name an auth middleware or a harmless
 * path rewrite, and which one is only known from its Middleware objects,
 * which Sluice does not read.
 *
 * @module
 */

import type { Secret } from "../../k8s/objects.ts";
import type { Issue } from "../issues.ts";
import { annotationEntry } from "./catalogue.ts";
import { type IngressBehaviour, readIngressBehaviour } from "./ingress_behaviour.ts";

/** The annotation prefix of ingress-nginx (its `--annotations-prefix` default). */
export const NGINX_PREFIX = "nginx.ingress.kubernetes.io/";

/**
 * What the served annotations' parsers read of an Ingress's ingress-nginx
 * annotations (by full name, values as text): the value by short name,
 * undefined when unset. An empty value is unset, except where access control
 * would then silently be off: ingress-nginx reads an empty value as invalid,
 * and so refuses the location.
 */
export function annotationReader(
  text: ReadonlyMap<string, string>,
): (annotation: string) => string | undefined {
  return (annotation) => {
    const value = text.get(NGINX_PREFIX + annotation);
    if (value === "") return EMPTY_IS_INVALID.has(annotation) ? "" : undefined;
    return value;
  };
}

/** Served access-control annotations whose empty value is invalid (not unset). */
const EMPTY_IS_INVALID: ReadonlySet<string> = new Set([
  "whitelist-source-range",
  "allowlist-source-range",
  "denylist-source-range",
  "auth-type",
  "auth-secret",
  "auth-secret-type",
]);

/** How many annotation names one issue lists before it says how many more there are. */
const MAX_LISTED = 20;

/** The ingress-nginx annotations of one Ingress by what Sluice does with them, full names, sorted. */
export interface AnnotationReview {
  /** Refused annotations with a value that turns them on. */
  readonly refused: readonly string[];
  /** Served ones that are set. */
  readonly served: readonly string[];
  /** Accepted ones (Sluice already behaves so). */
  readonly accepted: readonly string[];
  /** Ignored, unknown, and refused ones that are off. */
  readonly ignored: readonly string[];
}

const NO_ANNOTATIONS: AnnotationReview = Object.freeze({
  refused: Object.freeze([]),
  served: Object.freeze([]),
  accepted: Object.freeze([]),
  ignored: Object.freeze([]),
});

/**
 * Sorts an Ingress's `metadata.annotations` by the catalogue. Other
 * annotations (kubectl, Argo CD, Helm, other controllers) are left out.
 *
 * Only an empty value leaves an annotation unset; `off` values must match
 * exactly (`" false"` is not false to ingress-nginx either). A number or
 * boolean (hand-written manifests) counts as its text; any other non-string
 * value counts as set, so an odd value never opens access.
 */
export function reviewAnnotations(annotations: unknown): AnnotationReview {
  const values = nginxAnnotations(annotations);
  if (values === undefined) return NO_ANNOTATIONS;
  const review = { refused: [] as string[], served: [] as string[], accepted: [] as string[] };
  const ignored: string[] = [];
  for (const [key, value] of values) {
    const entry = annotationEntry(key.slice(NGINX_PREFIX.length));
    if (entry === undefined || entry.support === "ignored") ignored.push(key);
    else if (entry.support === "refused") {
      if (value === "" || entry.off?.includes(value) === true) ignored.push(key);
      else review.refused.push(key);
    } else if (value !== "") review[entry.support].push(key);
  }
  return { ...review, ignored };
}

/** The ingress-nginx annotations, sorted by name, values as text; undefined when there are none. */
function nginxAnnotations(annotations: unknown): [string, string][] | undefined {
  if (annotations === null || typeof annotations !== "object" || Array.isArray(annotations)) {
    return undefined;
  }
  // Runs for every Ingress on every rebuild: most carry no ingress-nginx annotation, so
  // select before sorting.
  const keys = Object.keys(annotations).filter((key) => key.startsWith(NGINX_PREFIX));
  if (keys.length === 0) return undefined;
  return keys.sort().map((
    key,
  ) => [key, annotationText((annotations as Record<string, unknown>)[key])]);
}

function annotationText(value: unknown): string {
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  if (value === undefined || value === null) return "";
  return "(not a string)";
}

/** What an Ingress's annotations mean for serving it. */
export interface AnnotationVerdict {
  /** Its routes must not reach its backends (refused or invalid annotations): they answer 503. */
  readonly refused: boolean;
  /** What its served annotations ask for (absent when none is set, or when refused). */
  readonly behaviour?: IngressBehaviour;
  readonly issues: readonly Issue[];
}

const SERVED: AnnotationVerdict = Object.freeze({ refused: false, issues: Object.freeze([]) });

/**
 * Judges one Ingress's annotations. An invalid served annotation, or a
 * refused one not waived (`ignoreAccessAnnotations`, the
 * `--ignore-access-annotations` flag): refused, with issues naming them.
 * Otherwise served, with its behaviour, and one issue listing the
 * annotations ignored (and, when waived, the refusals not enforced).
 * `secret` finds the Secret of basic authentication (`auth-secret`) by
 * `namespace/name`; `allowCrossNamespaceSecrets` lets it be in another
 * namespace (`--allow-cross-namespace-secrets`).
 */
export function judgeAnnotations(
  ingress: { readonly namespace: string; readonly name: string; readonly annotations: unknown },
  options: {
    readonly ignoreAccessAnnotations?: boolean | undefined;
    readonly secret?: ((key: string) => Secret | undefined) | undefined;
    readonly allowCrossNamespaceSecrets?: boolean | undefined;
  } = {},
): AnnotationVerdict {
  const values = nginxAnnotations(ingress.annotations);
  if (values === undefined) return SERVED;
  const review = reviewAnnotations(ingress.annotations);
  const { namespace, name } = ingress;
  const at = { kind: "Ingress", namespace, name, field: "metadata.annotations" };
  const ingressName = JSON.stringify(`${namespace}/${name}`);
  const issues: Issue[] = [];

  const text = new Map(values);
  const { behaviour, problems } = readIngressBehaviour(annotationReader(text), {
    namespace,
    secret: options.secret,
    allowCrossNamespaceSecrets: options.allowCrossNamespaceSecrets,
  });
  for (const p of problems) {
    issues.push({
      ...at,
      field: `metadata.annotations.${NGINX_PREFIX}${p.annotation}`,
      message: `Cannot serve Ingress ${ingressName}: annotation ${
        JSON.stringify(NGINX_PREFIX + p.annotation)
      }: ${p.problem}, so its routes answer 503`,
    });
  }
  const waived = options.ignoreAccessAnnotations === true;
  if (review.refused.length > 0 && !waived) {
    const one = review.refused.length === 1;
    issues.push({
      ...at,
      message:
        `Cannot serve Ingress ${ingressName}: annotation${one ? "" : "s"} ${
          list(review.refused, { quoted: true })
        } ask${
          one ? "s" : ""
        } for access control Sluice does not enforce, so its routes answer 503; ` +
        `remove ${one ? "it" : "them"} or put the control in front of Sluice`,
    });
  }
  const refusedOnly = review.refused.length > 0 && !waived;
  if (!refusedOnly && (review.ignored.length > 0 || (waived && review.refused.length > 0))) {
    let message = `Ingress ${ingressName}: annotations ignored`;
    if (review.ignored.length > 0) message += `: ${list(review.ignored, { quoted: false })}`;
    if (waived && review.refused.length > 0) {
      message += `; access control not enforced (--ignore-access-annotations): ${
        list(review.refused, { quoted: false })
      }`;
    }
    issues.push({ ...at, message });
  }
  const refused = problems.length > 0 || (review.refused.length > 0 && !waived);
  if (refused || behaviour === undefined) return { refused, issues };
  return { refused, behaviour, issues };
}

function list(names: readonly string[], options: { readonly quoted: boolean }): string {
  const shown = names.slice(0, MAX_LISTED).map((n) => options.quoted ? JSON.stringify(n) : n);
  const more = names.length - shown.length;
  return shown.join(", ") + (more > 0 ? ` and ${more} more` : "");
}
