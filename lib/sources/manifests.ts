/**
 * Reading Kubernetes objects from the text of one YAML manifest file: every
 * document (`---`), `kind: List` flattened, only the kinds Sluice reads.
 * Pure: text in, objects and problems out; no file system.
 *
 * Parse errors carry their line and column (1-based) and a message without
 * the quoted source text (a broken Secret must not end up in a log).
 *
 * @module
 */
import { parseAllDocuments } from "yaml";
import type { KubeObject } from "../k8s/objects.ts";
import { isNamespaced, type Kind, KINDS } from "../store/matters.ts";
import { errorText } from "../log/error_text.ts";

/** An object read from a manifest. */
export interface ManifestObject {
  readonly kind: Kind;
  readonly object: KubeObject;
}

/** The result of reading one file. */
export type ManifestParse =
  | {
    readonly ok: true;
    readonly objects: readonly ManifestObject[];
    /** Documents skipped, each with why (`Cannot use document 2 (line 14): …`). */
    readonly problems: readonly string[];
  }
  | {
    readonly ok: false;
    readonly line: number;
    readonly column: number;
    readonly message: string;
  };

/** The Secret types Sluice reads: TLS for certificates, Opaque (the default) for `auth-secret`. */
const SECRET_TYPES: readonly unknown[] = ["kubernetes.io/tls", "Opaque", undefined];

function firstLine(message: string): string {
  const line = message.split("\n", 1)[0] ?? "";
  return line.replace(/ at line \d+, column \d+:?$/, "");
}

/** Line numbers of offsets in `text`, each found by binary search (one scan of the text in all). */
function lineFinder(text: string): (offset: number | undefined) => number {
  let newlines: number[] | undefined;
  return (offset) => {
    if (offset === undefined) return 1;
    if (newlines === undefined) {
      newlines = [];
      for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) newlines.push(i);
    }
    // Lines before the offset: newlines at positions below it.
    let low = 0;
    let high = newlines.length;
    while (low < high) {
      const mid = (low + high) >> 1;
      if (newlines[mid]! < offset) low = mid + 1;
      else high = mid;
    }
    return low + 1;
  };
}

/** Why a document's value cannot be an object of a cluster: it refers to itself (YAML aliases can). */
function cycleProblem(value: unknown): string | undefined {
  try {
    JSON.stringify(value);
    return undefined;
  } catch (error) {
    return error instanceof RangeError
      ? "it is nested too deeply"
      : "it refers to itself through an alias";
  }
}

/**
 * Reads every document of a manifest. Namespaced objects without a namespace
 * go to `default`, as `kubectl apply` would put them.
 */
export function parseManifest(text: string): ManifestParse {
  // An empty stream comes back as an empty array.
  const list = [...parseAllDocuments(text, { prettyErrors: true })];
  const lineOf = lineFinder(text);
  for (const document of list) {
    const error = document.errors[0];
    if (error !== undefined) {
      const pos = error.linePos?.[0];
      return {
        ok: false,
        line: pos?.line ?? lineOf(error.pos[0]),
        column: pos?.col ?? 1,
        message: firstLine(error.message),
      };
    }
  }
  const objects: ManifestObject[] = [];
  const problems: string[] = [];
  list.forEach((document, index) => {
    const line = lineOf(document.contents?.range?.[0] ?? document.range[0]);
    const where = `document ${index + 1} (line ${line})`;
    let value: unknown;
    try {
      value = document.toJS({ maxAliasCount: 100 });
    } catch (error) {
      problems.push(
        `Cannot read ${where}: ${firstLine(errorText(error))}`,
      );
      return;
    }
    if (value === null || value === undefined) return;
    const cycle = cycleProblem(value);
    if (cycle !== undefined) {
      problems.push(`Cannot use ${where}: ${cycle}; skipped`);
      return;
    }
    collect(value, where, objects, problems);
  });
  return { ok: true, objects, problems };
}

function collect(
  value: unknown,
  where: string,
  objects: ManifestObject[],
  problems: string[],
): void {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    problems.push(`Cannot use ${where}: it is not an object`);
    return;
  }
  const object = value as KubeObject & { items?: unknown };
  if (object.kind === "List") {
    const items = Array.isArray(object.items) ? object.items : [];
    items.forEach((item, i) => collect(item, `item ${i + 1} of ${where}`, objects, problems));
    return;
  }
  const kind = object.kind;
  if (typeof kind !== "string" || !KINDS.includes(kind as Kind)) {
    problems.push(
      `Cannot use ${where}: kind ${JSON.stringify(kind ?? null)} is not one Sluice reads (${
        KINDS.join(", ")
      }); skipped`,
    );
    return;
  }
  const name = object.metadata?.name;
  if (typeof name !== "string" || name === "") {
    problems.push(`Cannot use ${kind} in ${where}: metadata.name is missing; skipped`);
    return;
  }
  if (kind === "Secret" && !SECRET_TYPES.includes((object as { type?: unknown }).type)) {
    problems.push(
      `Cannot use Secret "${name}" in ${where}: type must be "kubernetes.io/tls" or "Opaque"; skipped`,
    );
    return;
  }
  let result = object;
  if (isNamespaced(kind as Kind)) {
    const namespace = object.metadata?.namespace;
    if (typeof namespace !== "string" || namespace === "") {
      result = { ...object, metadata: { ...object.metadata, namespace: "default" } };
    }
  }
  // As the API server does: a Secret without a type is Opaque.
  if (kind === "Secret" && (result as { type?: unknown }).type === undefined) {
    result = { ...result, type: "Opaque" } as typeof result;
  }
  objects.push({ kind: kind as Kind, object: result });
}
