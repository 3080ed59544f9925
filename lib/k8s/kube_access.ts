/**
 * Access to one Kubernetes API server: where it is, how to trust it, and how
 * to authenticate to it. Turns a kubeconfig (a file, `$KUBECONFIG`,
 * `~/.kube/config`) or the in-cluster service account into what Deno's
 * `fetch` needs: a `Deno.HttpClient` carrying the CA and client certificate,
 * and request headers carrying the current credentials.
 *
 * `@kubernetes/client-node` does the kubeconfig parsing and the credential
 * plugins (token files re-read as they rotate, exec plugins); nothing else
 * of it is used. Knows nothing about resources or watches.
 *
 * @module
 */
import { KubeConfig } from "@kubernetes/client-node";

/** An authenticated, verified way to reach one API server. */
export interface KubeAccess {
  /** Base URL of the API server, without a trailing slash. */
  readonly server: string;
  /** Namespace of the current context (in-cluster: the pod's namespace), if any. */
  readonly namespace: string | undefined;
  /** Describes where the configuration came from (a file path or `in-cluster`), for logs. */
  readonly origin: string;
  /** Headers to send with each request: credentials as of now (tokens rotate). */
  headers(): Promise<Headers>;
  /** The HTTP client to pass as `fetch(url, { client })`. */
  readonly client: Deno.HttpClient;
  close(): void;
}

/** Options of {@linkcode loadKubeAccess}. */
export interface LoadKubeAccessOptions {
  /** A kubeconfig file; else `$KUBECONFIG`, `~/.kube/config`, then the in-cluster service account. */
  readonly kubeconfig?: string | undefined;
  /** Use this context instead of the kubeconfig's current one. */
  readonly context?: string | undefined;
}

/** Loads credentials the way kubectl and client-go do, in the same order. */
export async function loadKubeAccess(options: LoadKubeAccessOptions = {}): Promise<KubeAccess> {
  const kc = new KubeConfig();
  let origin: string;
  if (options.kubeconfig !== undefined && options.kubeconfig !== "") {
    kc.loadFromFile(options.kubeconfig);
    origin = options.kubeconfig;
  } else {
    kc.loadFromDefault();
    const fromEnv = Deno.env.get("KUBECONFIG");
    origin = kc.getCurrentCluster()?.name === "inCluster"
      ? "in-cluster"
      : fromEnv !== undefined && fromEnv !== ""
      ? fromEnv
      : "~/.kube/config";
  }
  if (options.context !== undefined) kc.setCurrentContext(options.context);
  return await accessFromKubeConfig(kc, origin);
}

/** Builds a {@linkcode KubeAccess} from an already loaded `KubeConfig`. */
export async function accessFromKubeConfig(kc: KubeConfig, origin: string): Promise<KubeAccess> {
  const cluster = kc.getCurrentCluster();
  if (cluster === null) {
    throw new Error(`Cannot use kubeconfig "${origin}": it has no current cluster`);
  }
  if (cluster.skipTLSVerify) {
    throw new Error(
      `Cannot use cluster "${cluster.name}" of "${origin}": insecure-skip-tls-verify is not supported; give it a certificate-authority`,
    );
  }
  // client-node gathers CA, client certificate and credentials (token files,
  // exec and auth-provider plugins) into Node-style request options.
  const tls = await currentOptions(kc);
  const clientOptions: Deno.CreateHttpClientOptions = {};
  if (tls.ca !== undefined) clientOptions.caCerts = [tls.ca];
  if (cluster.proxyUrl !== undefined && cluster.proxyUrl !== "") {
    clientOptions.proxy = { url: cluster.proxyUrl };
  }
  const client = tls.cert !== undefined && tls.key !== undefined
    ? Deno.createHttpClient({ ...clientOptions, cert: tls.cert, key: tls.key })
    : Deno.createHttpClient(clientOptions);
  return {
    server: cluster.server.replace(/\/+$/, ""),
    namespace: kc.getContextObject(kc.getCurrentContext())?.namespace,
    origin,
    client,
    async headers() {
      const { headers } = await currentOptions(kc);
      return headers;
    },
    close() {
      client.close();
    },
  };
}

interface CurrentOptions {
  readonly ca: string | undefined;
  readonly cert: string | undefined;
  readonly key: string | undefined;
  readonly headers: Headers;
}

async function currentOptions(kc: KubeConfig): Promise<CurrentOptions> {
  const opts: {
    headers: Record<string, string>;
    ca?: Uint8Array;
    cert?: Uint8Array;
    key?: Uint8Array;
    auth?: string;
  } = { headers: {} };
  await kc.applyToHTTPSOptions(opts);
  const headers = new Headers();
  for (const [k, v] of Object.entries(opts.headers)) headers.set(k, String(v).trim());
  if (opts.auth !== undefined) headers.set("authorization", `Basic ${btoa(opts.auth)}`);
  const text = (b: Uint8Array | undefined) =>
    b === undefined ? undefined : new TextDecoder().decode(b);
  return { ca: text(opts.ca), cert: text(opts.cert), key: text(opts.key), headers };
}
