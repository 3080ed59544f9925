/**
 * What Sluice would do with each Ingress moved over from ingress-nginx, for
 * `sluice migrate-check`: per Ingress, each `nginx.ingress.kubernetes.io/*`
 * annotation it carries and whether Sluice serves it as ingress-nginx did,
 * accepts it (nothing to do), ignores it (and how behaviour differs), or
 * refuses the Ingress because of it (its routes would answer 503).
 *
 * Pure: Ingress objects in, report data out, and the report as text or
 * JSON. The verdicts are the ones the translation reaches
 * (`judgeAnnotations`, the catalogue), so what this says is what serving
 * does. Secrets an annotation names (`auth-secret`) are looked up through a
 * function handed in; {@linkcode secretsAskedFor} says which to fetch first.
 *
 * @module
 */
import type { Ingress, Secret } from "../k8s/objects.ts";
import { LEGACY_CLASS_ANNOTATION } from "../translate/class_selection.ts";
import { annotationEntry } from "../translate/nginx/catalogue.ts";
import {
  annotationReader,
  judgeAnnotations,
  NGINX_PREFIX,
} from "../translate/nginx/ingress_annotations.ts";
import { readIngressBehaviour } from "../translate/nginx/ingress_behaviour.ts";

/** What Sluice does with one annotation of one Ingress. */
export type AnnotationVerdict = "served" | "accepted" | "ignored" | "refused";

/** One annotation of one Ingress. */
export interface AnnotationCheck {
  /** The full name, with the `nginx.ingress.kubernetes.io/` prefix. */
  readonly name: string;
  /** Its value as text. */
  readonly value: string;
  readonly verdict: AnnotationVerdict;
  /** Served: how; accepted: why harmless; ignored: how behaviour differs; refused: why. */
  readonly note: string;
  /** Set when a served annotation's value does not parse (the Ingress is refused for it). */
  readonly problem?: string;
}

/**
 * What Sluice does with one Ingress: `same` (every annotation served or
 * accepted), `differs` (served, but some annotation is ignored), `refused`
 * (its routes answer 503).
 */
export type IngressVerdict = "same" | "differs" | "refused";

/** One Ingress. */
export interface IngressCheck {
  readonly namespace: string;
  readonly name: string;
  /** The class it names (`spec.ingressClassName`, else the legacy annotation); null: none. */
  readonly ingressClass: string | null;
  /** Where the class was read; null when it names none. */
  readonly classField: "spec.ingressClassName" | typeof LEGACY_CLASS_ANNOTATION | null;
  /** The file it was read from (manifests only). */
  readonly source?: string;
  readonly verdict: IngressVerdict;
  /** Its ingress-nginx annotations, sorted by name. */
  readonly annotations: readonly AnnotationCheck[];
}

/** The whole report. */
export interface MigrateReport {
  /** Sorted by `namespace/name` (then source). */
  readonly ingresses: readonly IngressCheck[];
  readonly summary: {
    readonly ingresses: number;
    readonly same: number;
    readonly differs: number;
    readonly refused: number;
  };
}

/** An Ingress to check, with the file it came from when read from manifests. */
export interface CheckedObject {
  readonly object: Ingress;
  readonly source?: string;
}

/** Options of {@linkcode checkIngresses}. */
export interface CheckOptions {
  /** As `--ignore-access-annotations`: refused annotations are not enforced, so not refusals. */
  readonly ignoreAccessAnnotations?: boolean;
  /** Only Ingresses naming one of these classes (by either field); absent: all. */
  readonly ingressClasses?: readonly string[];
  /** Finds a Secret an annotation names (`auth-secret`), by `namespace/name`. Default: none. */
  readonly secret?: (key: string) => Secret | undefined;
  /** As `--allow-cross-namespace-secrets`: an annotation may name another namespace's Secret. */
  readonly allowCrossNamespaceSecrets?: boolean;
}

/**
 * The Secrets (`namespace/name`) checking these Ingresses looks up, sorted:
 * fetch them, then check with a {@linkcode CheckOptions.secret} that finds them.
 */
export function secretsAskedFor(
  ingresses: Iterable<CheckedObject>,
  options: CheckOptions = {},
): string[] {
  const keys = new Set<string>();
  const secret = (key: string) => {
    keys.add(key);
    return undefined;
  };
  for (const { object } of ingresses) checkIngress(object, { ...options, secret });
  return [...keys].sort();
}

const UNKNOWN_NOTE = "not an annotation Sluice knows: ignored";
const OFF_NOTE = "off: nothing to enforce";
const WAIVED_NOTE = "not enforced (--ignore-access-annotations)";

/** Checks Ingresses; pure and deterministic. */
export function checkIngresses(
  ingresses: Iterable<CheckedObject>,
  options: CheckOptions = {},
): MigrateReport {
  const checks: IngressCheck[] = [];
  for (const { object, source } of ingresses) {
    const check = checkIngress(object, {
      ...options,
      ...(source === undefined ? {} : { source }),
    });
    if (options.ingressClasses !== undefined) {
      if (check.ingressClass === null || !options.ingressClasses.includes(check.ingressClass)) {
        continue;
      }
    }
    checks.push(check);
  }
  checks.sort((a, b) =>
    compare(a.namespace, b.namespace) || compare(a.name, b.name) ||
    compare(a.source ?? "", b.source ?? "")
  );
  const count = (v: IngressVerdict) => checks.filter((c) => c.verdict === v).length;
  return {
    ingresses: checks,
    summary: {
      ingresses: checks.length,
      same: count("same"),
      differs: count("differs"),
      refused: count("refused"),
    },
  };
}

/** Checks one Ingress. */
export function checkIngress(
  ingress: Ingress,
  options: CheckOptions & { readonly source?: string } = {},
): IngressCheck {
  const namespace = textOr(ingress.metadata?.namespace, "default");
  const name = textOr(ingress.metadata?.name, "");
  const annotations: unknown = ingress.metadata?.annotations;
  const waived = options.ignoreAccessAnnotations === true;
  const secrets = {
    secret: options.secret,
    allowCrossNamespaceSecrets: options.allowCrossNamespaceSecrets,
  };
  const verdict = judgeAnnotations({ namespace, name, annotations }, {
    ignoreAccessAnnotations: waived,
    ...secrets,
  });

  const values = nginxAnnotations(annotations);
  const { problems } = readIngressBehaviour(annotationReader(values), { namespace, ...secrets });
  const problemOf = new Map(problems.map((p) => [NGINX_PREFIX + p.annotation, p.problem]));

  const checks: AnnotationCheck[] = [];
  for (const [key, value] of values) {
    checks.push(checkAnnotation(key, value, { waived, problem: problemOf.get(key) }));
  }
  // A problem can name an annotation that is not set (auth-type basic without auth-secret).
  for (const [key, problem] of problemOf) {
    if (values.has(key)) continue;
    checks.push({ name: key, value: "", verdict: "refused", note: `invalid: ${problem}`, problem });
  }
  checks.sort((a, b) => compare(a.name, b.name));
  // judgeAnnotations is the verdict serving reaches; a refusal this file could not place
  // on one annotation still refuses the Ingress.
  const ingressVerdict: IngressVerdict =
    verdict.refused || checks.some((c) => c.verdict === "refused")
      ? "refused"
      : checks.some((c) => c.verdict === "ignored")
      ? "differs"
      : "same";

  const { ingressClass, classField } = classOf(ingress);
  return {
    namespace,
    name,
    ingressClass,
    classField,
    ...(options.source === undefined ? {} : { source: options.source }),
    verdict: ingressVerdict,
    annotations: checks,
  };
}

function checkAnnotation(
  key: string,
  value: string,
  context: { readonly waived: boolean; readonly problem: string | undefined },
): AnnotationCheck {
  const entry = annotationEntry(key.slice(NGINX_PREFIX.length));
  if (entry === undefined) return { name: key, value, verdict: "ignored", note: UNKNOWN_NOTE };
  if (context.problem !== undefined) {
    return {
      name: key,
      value,
      verdict: "refused",
      note: `invalid value: ${context.problem}`,
      problem: context.problem,
    };
  }
  if (entry.support === "refused") {
    // reviewAnnotations' rule: an empty value, or one of the entry's `off` values, leaves it off.
    if (value === "" || entry.off?.includes(value) === true) {
      return { name: key, value, verdict: "ignored", note: OFF_NOTE };
    }
    if (context.waived) {
      return { name: key, value, verdict: "ignored", note: `${entry.note}; ${WAIVED_NOTE}` };
    }
  }
  return { name: key, value, verdict: entry.support, note: entry.note };
}

/** The ingress-nginx annotations of an Ingress, by full name, sorted, values as text. */
function nginxAnnotations(annotations: unknown): Map<string, string> {
  const out = new Map<string, string>();
  if (annotations === null || typeof annotations !== "object" || Array.isArray(annotations)) {
    return out;
  }
  const record = annotations as Record<string, unknown>;
  for (const key of Object.keys(record).filter((k) => k.startsWith(NGINX_PREFIX)).sort()) {
    out.set(key, annotationText(record[key]));
  }
  return out;
}

/** As `ingress_annotations.ts` reads a value: numbers and booleans (hand-written YAML) as text. */
function annotationText(value: unknown): string {
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  if (value === undefined || value === null) return "";
  return "(not a string)";
}

function classOf(
  ingress: Ingress,
): Pick<IngressCheck, "ingressClass" | "classField"> {
  const className = ingress.spec?.ingressClassName;
  if (typeof className === "string" && className !== "") {
    return { ingressClass: className, classField: "spec.ingressClassName" };
  }
  const legacy: unknown = ingress.metadata?.annotations?.[LEGACY_CLASS_ANNOTATION];
  if (typeof legacy === "string" && legacy !== "") {
    return { ingressClass: legacy, classField: LEGACY_CLASS_ANNOTATION };
  }
  return { ingressClass: null, classField: null };
}

function textOr(value: unknown, fallback: string): string {
  return typeof value === "string" && value !== "" ? value : fallback;
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The exit status of `migrate-check` for a report: 1 when an Ingress would be refused, else 0. */
export function exitCodeOf(report: MigrateReport): 0 | 1 {
  return report.summary.refused > 0 ? 1 : 0;
}

/** Longest value shown in text; JSON has the whole value. */
const MAX_SHOWN_VALUE = 60;

const VERDICT_TEXT: Record<IngressVerdict, string> = {
  same: "served as ingress-nginx did",
  differs: "served, with differences from ingress-nginx",
  refused: "REFUSED: its routes would answer 503",
};

/** The report for people: one block per Ingress `namespace/name`, then a summary. */
export function reportText(report: MigrateReport): string {
  const lines: string[] = [];
  for (const ingress of report.ingresses) {
    const cls = ingress.ingressClass === null
      ? "no class"
      : `class ${JSON.stringify(ingress.ingressClass)} (${ingress.classField})`;
    const where = ingress.source === undefined ? "" : `, file ${ingress.source}`;
    lines.push(`Ingress ${ingress.namespace}/${ingress.name}: ${cls}${where}`);
    lines.push(`  ${VERDICT_TEXT[ingress.verdict]}`);
    if (ingress.annotations.length === 0) {
      lines.push("  no ingress-nginx annotations");
    }
    for (const a of ingress.annotations) {
      const short = a.name.slice(NGINX_PREFIX.length);
      lines.push(
        `  ${a.verdict.padEnd(8)} ${short}: ${shownValue(a.value)}  (${a.note})`,
      );
    }
    lines.push("");
  }
  const { summary } = report;
  const ingresses = (n: number) => `${n} Ingress${n === 1 ? "" : "es"}`;
  lines.push(
    summary.ingresses === 0 ? "No Ingresses found." : `${ingresses(summary.ingresses)}: ` +
      `${summary.same} served as ingress-nginx did, ${summary.differs} served with differences, ` +
      `${summary.refused} refused.`,
  );
  return lines.join("\n") + "\n";
}

function shownValue(value: string): string {
  const quoted = JSON.stringify(value);
  return quoted.length <= MAX_SHOWN_VALUE ? quoted : `${quoted.slice(0, MAX_SHOWN_VALUE - 4)}…"`;
}

/** The report for tools: the report data as JSON, one document. */
export function reportJson(report: MigrateReport): string {
  return JSON.stringify(report, null, 2) + "\n";
}
