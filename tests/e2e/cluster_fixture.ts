/**
 * What the end-to-end tests share: the controller's identity in a cluster
 * (the shipped RBAC, a ServiceAccount token, a kubeconfig file that carries
 * only that token), object builders, a Sluice process started against a
 * cluster, and clients that ask Sluice for a host over HTTP and HTTPS (with
 * SNI and a trusted certificate).
 *
 * Works against any cluster given by a kubeconfig path, so the tests that
 * stop and restart their own apiserver, and the change-latency benchmark
 * (`tests/bench/change_latency_bench.ts`), use it too. Knows nothing about Sluice's internals: it talks to the process over
 * its ports and to the apiserver over its API.
 *
 * @module
 */
import type { KubeAccess } from "../../lib/k8s/kube_access.ts";
import type { KubeClient, KubeObject } from "../../lib/k8s/kube_client.ts";
import type { Ingress } from "../../lib/k8s/objects.ts";
import { EVENTS, INGRESS_CLASSES, INGRESSES } from "../../lib/k8s/resources.ts";
import { controllerToken } from "../support/controller_identity.ts";
import { adminClient, freshNamespace, testKubeconfig, writeKubeconfig } from "../support/kube.ts";
import { apply } from "../support/manifests.ts";
import type { TestHost } from "../support/netns.ts";
import { type SluiceProcess, spawnSluice } from "../support/sluice_process.ts";

// ---------------------------------------------------------------------------
// Cluster access and identity
// ---------------------------------------------------------------------------

/** One test's world: a fresh namespace, an IngressClass of its own, the controller's credentials. */
export interface E2EWorld {
  readonly admin: { readonly client: KubeClient; readonly access: KubeAccess };
  readonly ns: string;
  readonly at: { readonly namespace: string };
  /** The IngressClass's name (the namespace's name). */
  readonly className: string;
  /** `spec.controller` of that class: give it to Sluice as `--controller-name`. */
  readonly controllerName: string;
  readonly credentials: ControllerCredentials;
  /** Deletes the class and the controller's binding, and closes the admin client. */
  close(): Promise<void>;
}

/**
 * Sets up {@linkcode E2EWorld} for a test; namespaces start with `prefix`.
 * The cluster is the shared test cluster unless `options.kubeconfig` (an
 * admin's) names another.
 */
export async function e2eWorld(
  prefix: string,
  options: { kubeconfig?: string } = {},
): Promise<E2EWorld> {
  const kubeconfig = options.kubeconfig ?? testKubeconfig();
  const admin = await adminClient(kubeconfig);
  const ns = await freshNamespace(admin.client, prefix);
  const controllerName = `sluice.dev/${ns}`;
  const dropClass = await applyIngressClass(admin.client, ns, controllerName);
  const credentials = await controllerCredentials(admin.client, {
    adminKubeconfig: kubeconfig,
    namespace: ns,
  });
  return {
    admin,
    ns,
    at: { namespace: ns },
    className: ns,
    controllerName,
    credentials,
    async close() {
      await dropClass();
      await credentials.cleanup();
      admin.access.close();
    },
  };
}

/** The controller as deployed: a kubeconfig file holding only its ServiceAccount's token. */
export interface ControllerCredentials {
  /** A kubeconfig file for `--kubeconfig`. */
  readonly kubeconfig: string;
  readonly token: string;
  /** Removes the cluster-wide binding and the kubeconfig file. */
  cleanup(): Promise<void>;
}

/**
 * Creates ServiceAccount `sluice` in `ns`, binds it to the ClusterRole and the
 * leader-election Role exactly as shipped in `manifests/` (the Role and its
 * binding in `ns`, so the Lease lives there), requests a token, and writes a
 * kubeconfig for it next to nothing else (a new temporary directory).
 */
export async function controllerCredentials(
  admin: KubeClient,
  options: { adminKubeconfig: string; namespace: string },
): Promise<ControllerCredentials> {
  const ns = options.namespace;
  const granted = await controllerToken(admin, ns, { expirationSeconds: 3600 });
  const token = granted.token;
  const { dir, path: kubeconfig } = await writeKubeconfig(() => ({ token }), {
    kubeconfig: options.adminKubeconfig,
    namespace: ns,
  });
  return {
    kubeconfig,
    token,
    async cleanup() {
      await granted.cleanup();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    },
  };
}

// ---------------------------------------------------------------------------
// Objects
// ---------------------------------------------------------------------------

/** An IngressClass for `controller`. */
export function ingressClass(name: string, controller: string): KubeObject {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "IngressClass",
    metadata: { name },
    spec: { controller },
  } as KubeObject;
}

/** One path of an Ingress rule. */
export interface PathSpec {
  readonly path: string;
  readonly pathType?: "Exact" | "Prefix" | "ImplementationSpecific";
  readonly service: string;
  /** A port number, or a port name. Default 80. */
  readonly port?: number | string;
}

/** One rule of an Ingress. */
export interface RuleSpec {
  readonly host?: string;
  readonly paths: readonly PathSpec[];
}

/** An Ingress of class `className`. */
export function ingress(
  name: string,
  options: {
    className: string;
    rules: readonly RuleSpec[];
    tls?: readonly { hosts: readonly string[]; secretName: string }[];
  },
): KubeObject {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "Ingress",
    metadata: { name },
    spec: {
      ingressClassName: options.className,
      ...(options.tls !== undefined
        ? { tls: options.tls.map((t) => ({ hosts: [...t.hosts], secretName: t.secretName })) }
        : {}),
      rules: options.rules.map((rule) => ({
        ...(rule.host !== undefined ? { host: rule.host } : {}),
        http: {
          paths: rule.paths.map((p) => ({
            path: p.path,
            pathType: p.pathType ?? "Prefix",
            backend: {
              service: {
                name: p.service,
                port: typeof p.port === "string" ? { name: p.port } : { number: p.port ?? 80 },
              },
            },
          })),
        },
      })),
    },
  } as KubeObject;
}

/**
 * An Ingress of class `className` sending every path of `host` (Prefix `/`)
 * to port 80 of `service`; over TLS with Secret `secretName` if given.
 */
export function hostIngress(
  name: string,
  options: { className: string; host: string; service: string; secretName?: string },
): KubeObject {
  return ingress(name, {
    className: options.className,
    ...(options.secretName !== undefined
      ? { tls: [{ hosts: [options.host], secretName: options.secretName }] }
      : {}),
    rules: [{ host: options.host, paths: [{ path: "/", service: options.service }] }],
  });
}

/** A ClusterIP Service with one port `http` (80 → `targetPort`). */
export function service(name: string, targetPort: number): KubeObject {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name },
    spec: { ports: [{ name: "http", port: 80, targetPort, protocol: "TCP" }] },
  } as KubeObject;
}

/**
 * An EndpointSlice of Service `serviceName` with ready endpoints at
 * `addresses`:`port`, of `addressType` (default IPv4).
 */
export function endpointSlice(
  name: string,
  options: {
    service: string;
    addresses: readonly string[];
    port: number;
    addressType?: "IPv4" | "IPv6" | "FQDN";
  },
): KubeObject {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: {
      name,
      labels: {
        "kubernetes.io/service-name": options.service,
        "endpointslice.kubernetes.io/managed-by": "sluice-e2e-tests",
      },
    },
    addressType: options.addressType ?? "IPv4",
    ports: [{ name: "http", port: options.port, protocol: "TCP" }],
    endpoints: options.addresses.map((address) => ({
      addresses: [address],
      conditions: { ready: true },
    })),
  } as KubeObject;
}

/**
 * An echo backend `web-1` on port 8080 of `host` (a test network namespace),
 * behind Service `web` (port 80) and its EndpointSlice `web-1` in `at`.
 */
export async function webBackend(
  client: KubeClient,
  at: { readonly namespace: string },
  host: TestHost,
): Promise<void> {
  await host.startEchoBackend({ port: 8080, service: "web", pod: "web-1" });
  await apply(client, service("web", 8080), at);
  await apply(
    client,
    endpointSlice("web-1", { service: "web", addresses: [host.address], port: 8080 }),
    at,
  );
}

/** A `kubernetes.io/tls` Secret (data base64-encoded, as the API stores it). */
export function tlsSecret(name: string, certPem: string, keyPem: string): KubeObject {
  return {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name },
    type: "kubernetes.io/tls",
    data: { "tls.crt": btoa(certPem), "tls.key": btoa(keyPem) },
  } as KubeObject;
}

/** Applies (server-side) a cluster-scoped IngressClass; returns a function deleting it. */
export async function applyIngressClass(
  admin: KubeClient,
  name: string,
  controller: string,
): Promise<() => Promise<void>> {
  await apply(admin, ingressClass(name, controller));
  return async () => {
    await admin.delete(INGRESS_CLASSES, { name }).catch(() => {});
  };
}

/** A core v1 Event as listed. */
export interface CoreEvent extends KubeObject {
  readonly type: string;
  readonly reason: string;
  readonly message: string;
  readonly count?: number;
  readonly involvedObject: { kind: string; name: string; namespace?: string };
}

/** The Events in `ns` about `kind` `name`. */
export async function eventsFor(
  client: KubeClient,
  ns: string,
  kind: string,
  name: string,
): Promise<CoreEvent[]> {
  const list = await client.listAll<CoreEvent>(EVENTS, { namespace: ns });
  return list.items.filter((e) => e.involvedObject.kind === kind && e.involvedObject.name === name);
}

/** The addresses (IP, else hostname) in the `loadBalancer` status of Ingress `ns`/`name`. */
export async function statusOf(client: KubeClient, ns: string, name: string): Promise<string[]> {
  const i = await client.get<Ingress>(INGRESSES, { namespace: ns, name });
  return (i.status?.loadBalancer?.ingress ?? []).map((a) => a.ip ?? a.hostname ?? "");
}

// ---------------------------------------------------------------------------
// Sluice against a cluster
// ---------------------------------------------------------------------------

/** Options of {@linkcode startController}. */
export interface ControllerOptions {
  readonly credentials: ControllerCredentials;
  /** IngressClass `spec.controller` this Sluice owns (a unique one per test). */
  readonly controllerName: string;
  /** Namespace of the leader-election Lease (where the shipped Role is bound). */
  readonly electionNamespace: string;
  readonly extraArgs?: readonly string[];
  readonly podName?: string;
  /** `--workers`; default 1 (the tests' machines are small); `"default"` leaves Sluice's own. */
  readonly workers?: number | "default";
}

/** Starts Sluice as a process against the cluster, as the controller's ServiceAccount. */
export async function startController(options: ControllerOptions): Promise<SluiceProcess> {
  return await spawnSluice([
    `--kubeconfig=${options.credentials.kubeconfig}`,
    `--controller-name=${options.controllerName}`,
    `--election-namespace=${options.electionNamespace}`,
    ...(options.workers === "default" ? [] : [`--workers=${options.workers ?? 1}`]),
    "--shutdown-delay=0s",
    "--shutdown-timeout=2s",
    "--access-log=false",
    ...(options.extraArgs ?? []),
  ], { env: { POD_NAME: options.podName ?? "sluice-e2e-0" } });
}

/** A process that ended is a crash: fails with its last log lines. */
export function assertRunning(sluice: SluiceProcess, exited: { code?: number }): void {
  if (exited.code !== undefined) {
    throw new Error(
      `Sluice exited with ${exited.code}:\n${sluice.logs.slice(-30).join("\n")}`,
    );
  }
}

/** Tracks whether a process exited (for {@linkcode assertRunning}). */
export function watchExit(sluice: SluiceProcess): { code?: number } {
  const state: { code?: number } = {};
  void sluice.exited.then((code) => state.code = code);
  return state;
}

/**
 * Starts a controller, runs `body` once it is ready (a failure carries its
 * last log lines), and stops it whatever happened. `exit` tracks whether it
 * exited (for {@linkcode assertRunning}).
 */
export async function withController<T>(
  options: ControllerOptions,
  body: (sluice: SluiceProcess, exit: { code?: number }) => Promise<T>,
): Promise<T> {
  const sluice = await startController(options);
  const exit = watchExit(sluice);
  try {
    return await withLogsOnFailure(() => [["sluice", sluice]], async () => {
      await sluice.ready();
      return await body(sluice, exit);
    });
  } finally {
    await sluice.stop();
  }
}

/** The log records whose message includes `text`. */
export function logsWith(sluice: SluiceProcess, text: string): Record<string, unknown>[] {
  return sluice.records().filter((r) => String(r.message ?? "").includes(text));
}

// ---------------------------------------------------------------------------
// Asking Sluice
// ---------------------------------------------------------------------------

/** What an echo backend answered through Sluice (or Sluice itself). */
export interface Answer {
  readonly status: number;
  /** The backend's `pod`, when a backend answered. */
  readonly pod: string | undefined;
  readonly service: string | undefined;
  readonly location: string | null;
  readonly body: string;
}

/** An HTTP client that may set `Host` (Deno replaces it otherwise); close it after the test. */
export class HostClient {
  readonly #client = Deno.createHttpClient({ allowHost: true });

  /** `GET http://127.0.0.1:<port><path>` with `Host: host`, never following redirects. */
  get(port: number, host: string, path = "/", timeoutMs = 5_000): Promise<Answer> {
    return this.getOn("127.0.0.1", port, host, path, timeoutMs);
  }

  /** `GET http://<address>:<port><path>` with `Host: host`, never following redirects. */
  async getOn(
    address: string,
    port: number,
    host: string,
    path = "/",
    timeoutMs = 5_000,
  ): Promise<Answer> {
    const response = await fetch(`http://${address}:${port}${path}`, {
      headers: { host },
      client: this.#client,
      redirect: "manual",
      signal: AbortSignal.timeout(timeoutMs),
    });
    return await answer(response);
  }

  close(): void {
    this.#client.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

async function answer(response: Response): Promise<Answer> {
  const body = await response.text();
  let pod: string | undefined;
  let service: string | undefined;
  if ((response.headers.get("content-type") ?? "").includes("json")) {
    try {
      const json = JSON.parse(body) as { pod?: string; service?: string };
      pod = json.pod;
      service = json.service;
    } catch {
      // Not an echo answer.
    }
  }
  return {
    status: response.status,
    pod,
    service,
    location: response.headers.get("location"),
    body,
  };
}

/**
 * `GET path` over TLS to `127.0.0.1:<port>` with SNI `serverName`, trusting
 * only `caCerts`: it fails (rejects) unless Sluice serves a certificate that
 * chains to one of them and covers `serverName`.
 */
export async function tlsGet(
  port: number,
  serverName: string,
  options: { caCerts: readonly string[]; path?: string },
): Promise<Answer> {
  const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
  let conn: Deno.TlsConn;
  try {
    conn = await Deno.startTls(tcp, {
      hostname: serverName,
      caCerts: [...options.caCerts],
      alpnProtocols: ["http/1.1"],
    });
  } catch (error) {
    try {
      tcp.close();
    } catch {
      // Taken over by startTls.
    }
    throw error;
  }
  let text: string;
  try {
    await conn.handshake();
    await conn.write(
      new TextEncoder().encode(
        `GET ${options.path ?? "/"} HTTP/1.1\r\nHost: ${serverName}\r\nConnection: close\r\n\r\n`,
      ),
    );
    text = await new Response(conn.readable).text();
  } catch (error) {
    try {
      conn.close();
    } catch {
      // Already closed.
    }
    throw error;
  }
  const end = text.indexOf("\r\n\r\n");
  const head = end < 0 ? text : text.slice(0, end);
  const statusText = /^HTTP\/1\.1 (\d{3})/.exec(head)?.[1];
  if (statusText === undefined) {
    throw new Error(
      `Cannot read an HTTP response over TLS from port ${port} for "${serverName}": got ${
        JSON.stringify(text.slice(0, 80))
      }`,
    );
  }
  const status = Number(statusText);
  let body = end < 0 ? "" : text.slice(end + 4);
  if (/\r\ntransfer-encoding: *chunked/i.test(head)) body = dechunk(body);
  const headers = new Headers();
  for (const line of head.split("\r\n").slice(1)) {
    const colon = line.indexOf(":");
    if (colon > 0) headers.append(line.slice(0, colon), line.slice(colon + 1).trim());
  }
  return await answer(new Response(status === 204 ? null : body, { status, headers }));
}

function dechunk(body: string): string {
  let out = "";
  let at = 0;
  for (;;) {
    const eol = body.indexOf("\r\n", at);
    if (eol < 0) return out;
    const size = parseInt(body.slice(at, eol), 16);
    if (!(size > 0)) return out;
    out += body.slice(eol + 2, eol + 2 + size);
    at = eol + 2 + size + 2;
  }
}

/** Pods seen in `n` requests for `host` `path`. */
export async function podsSeen(
  client: HostClient,
  port: number,
  host: string,
  options: { path?: string; n: number },
): Promise<Set<string | undefined>> {
  const pods = new Set<string | undefined>();
  for (let i = 0; i < options.n; i++) {
    pods.add((await client.get(port, host, options.path ?? "/")).pod);
  }
  return pods;
}

/**
 * Runs `body`; when it fails, the error carries the last log lines of each
 * process, so a failure in CI says what Sluice was doing.
 */
export async function withLogsOnFailure<T>(
  processes: () => Iterable<readonly [string, SluiceProcess]>,
  body: () => Promise<T>,
): Promise<T> {
  try {
    return await body();
  } catch (error) {
    const parts = [...processes()].map(([name, p]) =>
      `--- ${name} (pid ${p.pid}), last log lines:\n${p.logs.slice(-25).join("\n")}`
    );
    const message = error instanceof Error ? error.message : String(error);
    throw new Error(`${message}\n${parts.join("\n")}`, { cause: error });
  }
}
