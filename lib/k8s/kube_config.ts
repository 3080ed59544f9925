/**
 * Resolution of a kubeconfig into plain data: the API server, its CA, the
 * client certificate, the proxy, and which kind of credentials the current
 * user has (headers fixed once, a token file to re-read, or a plugin to ask).
 * Also the messages spoken with `kube_config_worker.ts`.
 *
 * Works on a `KubeConfig` handed in and imports only types from
 * `@kubernetes/client-node`, so that the main isolate never loads that
 * package (a large one): `kube_config_worker.ts` creates the `KubeConfig` and
 * calls this in a short-lived Web Worker. Knows nothing of `fetch`,
 * `Deno.HttpClient`, resources or watches.
 *
 * @module
 */
import type { KubeConfig, User } from "@kubernetes/client-node";
import { parse as parseYaml } from "yaml";
import { errorText } from "../log/error_text.ts";

/** Header names and values, in order; plain data that crosses `postMessage`. */
export type HeaderList = readonly (readonly [string, string])[];

/**
 * How the current user authenticates.
 *
 * - `static`: a token, basic auth, a client certificate or nothing; `headers`
 *   hold the credentials, computed once.
 * - `tokenFile`: a bearer token read from `path` and re-read as it rotates
 *   (the in-cluster service account); `headers` hold the other headers.
 * - `plugin`: exec or an auth-provider (oidc, gcp, azure, …); only
 *   `@kubernetes/client-node` can compute the headers, each time.
 */
export type ResolvedCredentials =
  | { readonly kind: "static"; readonly headers: HeaderList }
  | { readonly kind: "tokenFile"; readonly path: string; readonly headers: HeaderList }
  | { readonly kind: "plugin" };

/** A kubeconfig reduced to what `fetch` needs. Plain data. */
export interface ResolvedKubeConfig {
  /** Base URL of the API server, without a trailing slash. */
  readonly server: string;
  /** Namespace of the current context (in-cluster: the pod's namespace), if any. */
  readonly namespace: string | undefined;
  /** Where the configuration came from (a file path or `in-cluster`), for logs. */
  readonly origin: string;
  /** PEM text of the certificate authority to trust, if the kubeconfig names one. */
  readonly ca: string | undefined;
  /** PEM text of the client certificate, if any. */
  readonly cert: string | undefined;
  /** PEM text of the client certificate's key, if any. */
  readonly key: string | undefined;
  /** The cluster's `proxy-url`, if any. */
  readonly proxyUrl: string | undefined;
  readonly credentials: ResolvedCredentials;
}

/** Options of {@linkcode loadKubeConfig}. */
export interface LoadKubeConfigOptions {
  /** A kubeconfig file; else `$KUBECONFIG`, `~/.kube/config`, then the in-cluster service account. */
  readonly kubeconfig?: string | undefined;
  /** Use this context instead of the kubeconfig's current one. */
  readonly context?: string | undefined;
}

/** Messages from the main isolate to `kube_config_worker.ts`. */
export type ToConfigWorker =
  | {
    readonly type: "load";
    readonly kubeconfig: string | undefined;
    readonly context: string | undefined;
  }
  | { readonly type: "headers"; readonly id: number };

/** Messages from `kube_config_worker.ts` to the main isolate. */
export type FromConfigWorker =
  | { readonly type: "loaded"; readonly config: ResolvedKubeConfig }
  | { readonly type: "loadFailed"; readonly message: string }
  | { readonly type: "headers"; readonly id: number; readonly headers: HeaderList }
  | { readonly type: "headersFailed"; readonly id: number; readonly message: string };

/**
 * Loads `kc` the way kubectl and client-go do, in the same order: the given
 * file, else `$KUBECONFIG`, `~/.kube/config`, then the in-cluster service
 * account; then switches to `options.context`. Returns the origin, for logs.
 */
export function loadKubeConfig(kc: KubeConfig, options: LoadKubeConfigOptions = {}): string {
  let origin: string;
  if (options.kubeconfig !== undefined && options.kubeconfig !== "") {
    origin = options.kubeconfig;
    try {
      kc.loadFromFile(options.kubeconfig);
    } catch (error) {
      throw new Error(`Cannot load kubeconfig "${origin}": ${errorText(error)}`, {
        cause: error,
      });
    }
  } else {
    if (!hasDefaultCredentials()) {
      // client-node would fall back to http://localhost:8080 and fail with a line about TLS.
      throw new Error(
        'Cannot find Kubernetes credentials: no --kubeconfig, $KUBECONFIG or "~/.kube/config", ' +
          "and not in a cluster; give --kubeconfig, or --manifests to run without one",
      );
    }
    try {
      kc.loadFromDefault();
    } catch (error) {
      throw new Error(`Cannot load the default kubeconfig: ${errorText(error)}`, {
        cause: error,
      });
    }
    const fromEnv = Deno.env.get("KUBECONFIG");
    origin = kc.getCurrentCluster()?.name === "inCluster"
      ? "in-cluster"
      : fromEnv !== undefined && fromEnv !== ""
      ? fromEnv
      : "~/.kube/config";
  }
  if (options.context !== undefined) {
    if (kc.getContextObject(options.context) === null) {
      throw new Error(`Cannot use context "${options.context}" of "${origin}": no such context`);
    }
    kc.setCurrentContext(options.context);
  }
  return origin;
}

/**
 * The `tokenFile` of user `name` in the kubeconfig file(s) `origin` names
 * (the first file that defines the user wins, as in client-go), resolved
 * against that file's directory; undefined when there is none.
 */
function userTokenFile(origin: string, name: string): string | undefined {
  if (origin === "in-cluster") return undefined;
  const paths = origin === "~/.kube/config"
    ? [`${homeDir() ?? ""}/.kube/config`]
    : origin.split(":");
  for (const path of paths) {
    let users: unknown;
    try {
      users = (parseYaml(Deno.readTextFileSync(path)) as { users?: unknown } | null)?.users;
    } catch {
      continue; // client-node read it already; nothing more to learn here.
    }
    if (!Array.isArray(users)) continue;
    const entry = users.find((u) => (u as { name?: unknown } | null)?.name === name) as
      | { user?: { tokenFile?: unknown } | null }
      | undefined;
    if (entry === undefined) continue;
    const file = entry.user?.tokenFile;
    if (typeof file !== "string" || file === "") return undefined;
    if (file.startsWith("/")) return file;
    const slash = path.lastIndexOf("/");
    return slash === -1 ? file : `${path.slice(0, slash + 1)}${file}`;
  }
  return undefined;
}

/** The home directory `~/.kube/config` is read from, as client-node finds it. */
function homeDir(): string | undefined {
  return Deno.env.get("HOME") ?? Deno.env.get("USERPROFILE");
}

/** In-cluster service-account token (client-go's rest.InClusterConfig reads it too). */
const IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/** Whether any source `loadFromDefault()` tries exists: `$KUBECONFIG`, `~/.kube/config`, in-cluster. */
function hasDefaultCredentials(): boolean {
  const fromEnv = Deno.env.get("KUBECONFIG");
  if (fromEnv !== undefined && fromEnv !== "") return true;
  const home = homeDir();
  const exists = (path: string) => {
    try {
      Deno.statSync(path);
      return true;
    } catch {
      return false;
    }
  };
  if (home !== undefined && exists(`${home}/.kube/config`)) return true;
  return Deno.env.get("KUBERNETES_SERVICE_HOST") !== undefined && exists(IN_CLUSTER_TOKEN);
}

/**
 * Reduces a loaded `kc` to plain data. Reads the files it names (CA, client
 * certificate, token file) once, and runs a plugin once. Refuses a cluster
 * without a current cluster or with `insecure-skip-tls-verify`.
 */
export async function resolveKubeConfig(
  kc: KubeConfig,
  origin: string,
): Promise<ResolvedKubeConfig> {
  const cluster = kc.getCurrentCluster();
  if (cluster === null) {
    throw new Error(`Cannot use kubeconfig "${origin}": it has no current cluster`);
  }
  if (cluster.skipTLSVerify) {
    throw new Error(
      `Cannot use cluster "${cluster.name}" of "${origin}": insecure-skip-tls-verify is not supported; give it a certificate-authority`,
    );
  }
  const user = kc.getCurrentUser();
  const program = runsProgram(user);
  const command = user?.exec?.command;
  const runQuery: Deno.PermissionDescriptor = command === undefined
    ? { name: "run" }
    : { name: "run", command };
  if (program !== undefined && Deno.permissions.querySync(runQuery).state !== "granted") {
    // Else client-node fails inside the plugin with Deno's "--allow-run" advice, which the
    // shipped permissions (and the compiled binary) cannot follow.
    throw new Error(
      `Cannot use user "${user?.name}" of "${origin}": its credentials come ` +
        `from ${program}, and Sluice is not permitted to run programs; give it a token, a ` +
        "client certificate or a service account instead",
    );
  }
  // client-node gathers CA, client certificate and credentials (token files,
  // exec and auth-provider plugins) into Node-style request options.
  let options: RequestOptions;
  try {
    options = await requestOptions(kc);
  } catch (error) {
    throw new Error(`Cannot use kubeconfig "${origin}": ${errorText(error)}`, { cause: error });
  }
  let kind = credentialKind(user);
  // client-node 2.0.1 reads a user's `token-file` but not client-go's `tokenFile` (what
  // `kubectl config set-credentials --token-file` writes): read it from the files ourselves.
  const tokenFile = kind === "static" && !user?.token && !user?.username && user !== null
    ? userTokenFile(origin, user.name)
    : undefined;
  if (tokenFile !== undefined) kind = "tokenFile";
  let credentials: ResolvedCredentials;
  if (kind === "tokenFile") {
    credentials = {
      kind,
      path: tokenFile ?? String(user?.authProvider?.config?.tokenFile),
      headers: options.headers.filter(([name]) => name.toLowerCase() !== "authorization"),
    };
  } else if (kind === "static") {
    credentials = { kind, headers: options.headers };
  } else {
    credentials = { kind };
  }
  return {
    server: cluster.server.replace(/\/+$/, ""),
    namespace: kc.getContextObject(kc.getCurrentContext())?.namespace,
    origin,
    ca: options.ca,
    cert: options.cert,
    key: options.key,
    proxyUrl: cluster.proxyUrl !== undefined && cluster.proxyUrl !== ""
      ? cluster.proxyUrl
      : undefined,
    credentials,
  };
}

/** The request headers of the current user as of now (plugins may refresh them). */
export async function currentHeaders(kc: KubeConfig): Promise<HeaderList> {
  return (await requestOptions(kc)).headers;
}

/**
 * Which kind of credentials `user` has, by the rules of client-node 2.0.1:
 * its authenticators are tried in the order Azure (auth-provider `azure`),
 * GCP (`gcp`), exec (`user.exec`, auth-provider `exec` or `config.exec`),
 * token file (`config.tokenFile`, any name, e.g. the in-cluster user), OIDC
 * (`oidc`), and the first that claims the user applies. A `token` or
 * `username` of the user replaces what a token file gives, so such a user is
 * static. Any other auth-provider is left to client-node as a plugin.
 */
export function credentialKind(user: User | null): ResolvedCredentials["kind"] {
  if (user === null) return "static";
  if (user.exec) return "plugin";
  const provider = user.authProvider as
    | { name?: unknown; config?: Record<string, unknown> | null }
    | null
    | undefined;
  if (!provider) return "static";
  const name = provider.name;
  if (name === "azure" || name === "gcp" || name === "exec" || provider.config?.exec) {
    return "plugin";
  }
  if (provider.config?.tokenFile) return user.token || user.username ? "static" : "tokenFile";
  return "plugin";
}

/**
 * The program a user's credentials would run (an exec plugin, or the `gcp`
 * and `azure` auth-providers' commands), or undefined. OIDC needs no program.
 */
function runsProgram(user: User | null): string | undefined {
  if (user === null) return undefined;
  if (user.exec) return `the exec plugin "${user.exec.command}"`;
  const provider = user.authProvider as
    | { name?: unknown; config?: Record<string, unknown> | null }
    | null
    | undefined;
  if (!provider) return undefined;
  if (provider.name === "exec" || provider.config?.exec) return "an exec auth-provider";
  if (provider.name === "gcp" || provider.name === "azure") {
    return `the "${provider.name}" auth-provider`;
  }
  return undefined;
}

interface RequestOptions {
  readonly ca: string | undefined;
  readonly cert: string | undefined;
  readonly key: string | undefined;
  readonly headers: HeaderList;
}

async function requestOptions(kc: KubeConfig): Promise<RequestOptions> {
  const opts: {
    headers: Record<string, unknown>;
    ca?: Uint8Array | string;
    cert?: Uint8Array | string;
    key?: Uint8Array | string;
    auth?: string;
  } = { headers: {} };
  await kc.applyToHTTPSOptions(opts);
  const headers = new Headers();
  for (const [k, v] of Object.entries(opts.headers)) headers.set(k, String(v).trim());
  if (opts.auth !== undefined) headers.set("authorization", `Basic ${btoa(opts.auth)}`);
  // An exec plugin may give its client certificate as a string.
  const text = (b: Uint8Array | string | undefined) =>
    b === undefined || typeof b === "string" ? b : new TextDecoder().decode(b);
  return { ca: text(opts.ca), cert: text(opts.cert), key: text(opts.key), headers: [...headers] };
}
