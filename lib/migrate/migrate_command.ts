/**
 * `sluice migrate-check`: reads the Ingresses of a cluster (through a
 * kubeconfig, as `sluice` itself finds one) or of a manifests directory,
 * checks them (`migrate_check.ts`), and writes the report.
 *
 * Exit status: 0 when no Ingress would be refused, 1 when one would, 2 on a
 * usage error or when the Ingresses cannot be read. Owns the command's flags
 * and its I/O; knows nothing of what annotations mean.
 *
 * @module
 */
import { join } from "node:path";
import { parseArgs } from "node:util";
import { parseAllDocuments } from "yaml";
import type { Ingress, Secret } from "../k8s/objects.ts";
import { loadKubeAccess } from "../k8s/kube_access.ts";
import { KubeClient } from "../k8s/kube_client.ts";
import { INGRESSES, SECRETS } from "../k8s/resources.ts";
import { parseManifest } from "../sources/manifests.ts";
import { errorText } from "../log/error_text.ts";
import {
  type CheckedObject,
  checkIngresses,
  exitCodeOf,
  reportJson,
  reportText,
  secretsAskedFor,
} from "./migrate_check.ts";

/** The command's help text. */
export const MIGRATE_CHECK_HELP =
  `Usage: sluice migrate-check [--kubeconfig FILE | --manifests PATH] [options]

Lists every Ingress with each nginx.ingress.kubernetes.io/* annotation it carries
and what Sluice does with it: served (as ingress-nginx did), accepted (harmless:
Sluice already behaves so), ignored (behaviour differs: the note says how), or
refused (the Ingress's routes would answer 503: the note says why). A served
annotation whose value does not parse refuses the Ingress too, and so does an
auth-secret whose Secret is missing or holds no users: the Secrets that
annotations name are read (from the cluster, or from the manifests), and their
contents are never printed.

Every Ingress is checked, whatever its class (the class each names is shown),
unless --ingress-class is given.

Options:
  --kubeconfig FILE           Read the Ingresses of this cluster (default: $KUBECONFIG,
                              ~/.kube/config, then in-cluster, as sluice does)
  --manifests PATH            Read the Ingresses of the YAML manifests in this directory
                              (files directly in it, .yaml/.yml), or of one file
  --namespace NS              Only this namespace (repeatable, or comma-separated)
  --ingress-class NAME        Only Ingresses naming this class, in spec.ingressClassName
                              or the kubernetes.io/ingress.class annotation (repeatable,
                              or comma-separated)
  --ignore-access-annotations Check as sluice --ignore-access-annotations serves:
                              refused annotations not enforced, so not refusals
  --allow-cross-namespace-secrets
                              Check as sluice --allow-cross-namespace-secrets serves:
                              auth-secret may name another namespace's Secret
  --format text|json          Output for people (default) or for tools
  -h, --help                  This text

Exit status: 0 when no Ingress would be refused, 1 when one would, 2 on a usage
error or when the Ingresses cannot be read.
`;

/** Where output goes; `main.ts` hands in the process's streams, tests collect it. */
export interface CommandOutput {
  out(text: string): void;
  err(text: string): void;
}

/**
 * The process's stdout and stderr, written synchronously (the report is
 * complete when the process exits). A reader that went away (`| head`)
 * ends the writing quietly.
 */
export function stdioOutput(): CommandOutput {
  const encoder = new TextEncoder();
  const writer = (stream: { writeSync(p: Uint8Array): number }) => {
    let closed = false;
    return (text: string) => {
      const bytes = encoder.encode(text);
      try {
        for (let at = 0; at < bytes.length && !closed;) at += stream.writeSync(bytes.subarray(at));
      } catch (error) {
        if (!(error instanceof Deno.errors.BrokenPipe)) throw error;
        closed = true;
      }
    };
  };
  return { out: writer(Deno.stdout), err: writer(Deno.stderr) };
}

/** How long listing the cluster's Ingresses may take in all. */
const LIST_TIMEOUT_MS = 60_000;
const UTF8 = new TextDecoder("utf-8", { fatal: true });

class UsageError extends Error {}

interface Options {
  readonly kubeconfig: string | undefined;
  readonly manifests: string | undefined;
  readonly namespaces: readonly string[];
  readonly ingressClasses: readonly string[] | undefined;
  readonly ignoreAccessAnnotations: boolean;
  readonly allowCrossNamespaceSecrets: boolean;
  readonly format: "text" | "json";
  readonly help: boolean;
}

function parseOptions(args: readonly string[]): Options {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...args],
      strict: true,
      allowPositionals: false,
      options: {
        kubeconfig: { type: "string" },
        manifests: { type: "string" },
        namespace: { type: "string", multiple: true },
        "ingress-class": { type: "string", multiple: true },
        "ignore-access-annotations": { type: "boolean" },
        "allow-cross-namespace-secrets": { type: "boolean" },
        format: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (error) {
    throw new UsageError(errorText(error));
  }
  const v = parsed.values;
  if (v.kubeconfig !== undefined && v.manifests !== undefined) {
    throw new UsageError("Cannot use --kubeconfig and --manifests together: give one");
  }
  if (v.kubeconfig === "") throw new UsageError('Cannot use --kubeconfig "": give a file');
  if (v.manifests === "") throw new UsageError('Cannot use --manifests "": give a directory');
  const format = v.format ?? "text";
  if (format !== "text" && format !== "json") {
    throw new UsageError(`Cannot use --format ${JSON.stringify(format)}: give text or json`);
  }
  const list = (values: string[] | undefined) =>
    values?.flatMap((value) => value.split(",")).map((s) => s.trim()).filter((s) => s !== "");
  const classes = list(v["ingress-class"]);
  if (v["ingress-class"] !== undefined && classes?.length === 0) {
    throw new UsageError('Cannot use --ingress-class "": give a class name');
  }
  return {
    kubeconfig: v.kubeconfig,
    manifests: v.manifests,
    namespaces: list(v.namespace) ?? [],
    ingressClasses: classes,
    ignoreAccessAnnotations: v["ignore-access-annotations"] === true,
    allowCrossNamespaceSecrets: v["allow-cross-namespace-secrets"] === true,
    format,
    help: v.help === true,
  };
}

/**
 * Runs `migrate-check` with its arguments (after the command name); resolves
 * to the exit status.
 */
export async function runMigrateCheck(
  args: readonly string[],
  output: CommandOutput,
): Promise<number> {
  let options: Options;
  try {
    options = parseOptions(args);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    output.err(`sluice migrate-check: ${error.message} (see sluice migrate-check --help)\n`);
    return 2;
  }
  if (options.help) {
    output.out(MIGRATE_CHECK_HELP);
    return 0;
  }
  const checkOptions = {
    ignoreAccessAnnotations: options.ignoreAccessAnnotations,
    allowCrossNamespaceSecrets: options.allowCrossNamespaceSecrets,
    ...(options.ingressClasses === undefined ? {} : { ingressClasses: options.ingressClasses }),
  };
  let objects: CheckedObject[];
  let secrets: ReadonlyMap<string, Secret>;
  try {
    if (options.manifests !== undefined) {
      const read = await readManifests(options.manifests);
      objects = inNamespaces(read.ingresses, options.namespaces);
      secrets = read.secrets;
    } else {
      const cluster = await readCluster(
        options,
        (ingresses) => secretsAskedFor(ingresses, checkOptions),
      );
      objects = inNamespaces(cluster.ingresses, options.namespaces);
      secrets = cluster.secrets;
    }
  } catch (error) {
    output.err(`sluice migrate-check: ${errorText(error)}\n`);
    return 2;
  }
  const report = checkIngresses(objects, { ...checkOptions, secret: (key) => secrets.get(key) });
  output.out(options.format === "json" ? reportJson(report) : reportText(report));
  return exitCodeOf(report);
}

function inNamespaces(objects: CheckedObject[], namespaces: readonly string[]): CheckedObject[] {
  if (namespaces.length === 0) return objects;
  return objects.filter(({ object }) =>
    namespaces.includes(object.metadata?.namespace ?? "default")
  );
}

/**
 * The Ingresses of a manifest file, or of the files directly in a directory
 * (as `--manifests`), and the Secrets of any type there, by `namespace/name`.
 */
async function readManifests(
  path: string,
): Promise<{ ingresses: CheckedObject[]; secrets: Map<string, Secret> }> {
  let files: string[];
  try {
    const info = await Deno.stat(path);
    if (info.isFile) files = [path];
    else {
      files = [];
      for await (const entry of Deno.readDir(path)) {
        const { name } = entry;
        if (!entry.isFile || name.startsWith(".")) continue;
        if (name.endsWith(".yaml") || name.endsWith(".yml")) files.push(join(path, name));
      }
      files.sort();
    }
  } catch (error) {
    throw new Error(`Cannot read manifests "${path}": ${errorText(error)}`);
  }
  const ingresses: CheckedObject[] = [];
  const secrets = new Map<string, Secret>();
  for (const file of files) {
    let text: string;
    try {
      text = UTF8.decode(await Deno.readFile(file));
    } catch (error) {
      throw new Error(`Cannot read manifest "${file}": ${errorText(error)}`);
    }
    const parsed = parseManifest(text);
    if (!parsed.ok) {
      throw new Error(
        `Cannot read manifest "${file}": line ${parsed.line}, column ${parsed.column}: ${parsed.message}`,
      );
    }
    for (const { kind, object } of parsed.objects) {
      if (kind === "Ingress") ingresses.push({ object: object as Ingress, source: file });
    }
    for (const secret of manifestSecrets(text)) {
      const name = secret.metadata?.name;
      if (typeof name !== "string" || name === "") continue;
      secrets.set(`${secret.metadata?.namespace || "default"}/${name}`, secret);
    }
  }
  return { ingresses, secrets };
}

/**
 * The Secrets of a manifest, of any type (the manifest source keeps TLS ones
 * only): basic authentication's users are in Opaque ones. The text parsed
 * already; a document that cannot be read is left out.
 */
function manifestSecrets(text: string): Secret[] {
  const out: Secret[] = [];
  const collect = (value: unknown) => {
    if (typeof value !== "object" || value === null || Array.isArray(value)) return;
    const object = value as { kind?: unknown; items?: unknown };
    if (object.kind === "List" && Array.isArray(object.items)) object.items.forEach(collect);
    else if (object.kind === "Secret") out.push(object as Secret);
  };
  for (const document of parseAllDocuments(text)) {
    try {
      collect(document.toJS({ maxAliasCount: 100 }));
    } catch {
      // parseManifest reported it, or skipped it.
    }
  }
  return out;
}

/**
 * The Ingresses of the cluster of a kubeconfig, listed page by page, and the
 * Secrets `secretsFor` names for them, by `namespace/name` (each listed by
 * name: Sluice's ClusterRole may list Secrets, not get them).
 */
async function readCluster(
  options: Options,
  secretsFor: (ingresses: CheckedObject[]) => string[],
): Promise<{ ingresses: CheckedObject[]; secrets: Map<string, Secret> }> {
  const access = await loadKubeAccess({ kubeconfig: options.kubeconfig });
  try {
    const client = new KubeClient(access, { userAgent: "sluice-migrate-check" });
    const signal = AbortSignal.timeout(LIST_TIMEOUT_MS);
    const namespaces = options.namespaces.length > 0 ? options.namespaces : [undefined];
    const ingresses: CheckedObject[] = [];
    for (const namespace of namespaces) {
      try {
        const { items } = await client.listAll<Ingress>(INGRESSES, {
          namespace,
          limit: 500,
          signal,
        });
        ingresses.push(...items.map((object) => ({ object })));
      } catch (error) {
        throw new Error(`Cannot list Ingresses at ${access.server}: ${errorText(error)}`);
      }
    }
    const secrets = new Map<string, Secret>();
    for (const key of secretsFor(ingresses)) {
      const [namespace, name] = key.split("/", 2) as [string, string];
      try {
        const { items } = await client.list<Secret>(SECRETS, {
          namespace,
          fieldSelector: `metadata.name=${name}`,
          signal,
        });
        if (items[0] !== undefined) secrets.set(key, items[0]);
      } catch (error) {
        throw new Error(`Cannot read Secret "${key}" at ${access.server}: ${errorText(error)}`);
      }
    }
    return { ingresses, secrets };
  } finally {
    access.close();
  }
}
