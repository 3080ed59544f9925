/**
 * The shipped `manifests/`, `deno.json` permissions and the Dockerfile
 * checked by reading, against what the code does: RBAC against the API
 * requests in `lib/`, the Deployment's ports, probes and arguments against
 * the command line contract, its security and resources, and the permission
 * set against the Deno APIs the program calls. No cluster needed (the
 * apiserver-backed check is tests/e2e/manifests_apply_test.ts).
 *
 * A comment starting "Was a bug" marks a test pinning a fix.
 *
 * @module
 */
import { parseAllDocuments } from "yaml";
import { parseConfig } from "../../lib/config/config.ts";
import * as resources from "../../lib/k8s/resources.ts";
import type { Resource } from "../../lib/k8s/resources.ts";
import { planReflectors } from "../../lib/sources/kube_source.ts";
import { assert, assertEquals, assertMatch } from "../support/assert.ts";

const root = new URL("../../", import.meta.url);

// deno-lint-ignore no-explicit-any
type Obj = any;

async function readObjects(file: string): Promise<Obj[]> {
  const text = await Deno.readTextFile(new URL(`manifests/${file}`, root));
  return parseAllDocuments(text).map((d) => d.toJS()).filter((o) => o !== null);
}

const kustomization = (await readObjects("kustomization.yaml"))[0] as { resources: string[] };
const objects: Obj[] = [];
for (const file of kustomization.resources) objects.push(...await readObjects(file));

function one(kind: string, name?: string): Obj {
  const found = objects.filter((o) =>
    o.kind === kind && (name === undefined || o.metadata.name === name)
  );
  assertEquals(found.length, 1, `one ${kind} ${name ?? ""}`);
  return found[0];
}

const deployment = one("Deployment");
const pod = deployment.spec.template.spec;
const container = pod.containers[0];
const service = one("Service");
const clusterRole = one("ClusterRole");
const role = one("Role");
const dockerfile = await Deno.readTextFile(new URL("Dockerfile", root));
const denoJson = JSON.parse(await Deno.readTextFile(new URL("deno.json", root)));

/** The Deployment's arguments as Sluice parses them, with the downward-API variables filled in. */
function deployedConfig() {
  const ns = deployment.metadata.namespace as string;
  const args = (container.args as string[]).map((a) => a.replace("$(POD_NAMESPACE)", ns));
  const r = parseConfig(args, { env: { POD_NAME: "sluice-0", POD_NAMESPACE: ns }, cpus: 8 });
  if (r.kind !== "config") throw new Error(`The Deployment's arguments: ${JSON.stringify(r)}`);
  return r.config;
}

// ---------------------------------------------------------------------------
// RBAC against the requests the code makes.

const byConst = new Map(
  Object.entries(resources).filter(([, v]) => typeof v === "object" && v !== null && "plural" in v)
    .map(([k, v]) => [k, v as Resource]),
);

/** `group/plural[/sub]:verb`, the unit RBAC grants. */
function permission(r: Resource, verb: string, sub?: string): string {
  return `${r.group}/${r.plural}${sub === undefined ? "" : `/${sub}`}:${verb}`;
}

async function sourceFiles(dir: URL, out: URL[] = []): Promise<URL[]> {
  for await (const e of Deno.readDir(dir)) {
    const url = new URL(e.name + (e.isDirectory ? "/" : ""), dir);
    if (e.isDirectory) await sourceFiles(url, out);
    else if (/(?<!_test|_bench)\.ts$/.test(e.name) && !e.name.startsWith("_")) out.push(url);
  }
  return out;
}

const programFiles = [...await sourceFiles(new URL("lib/", root)), new URL("main.ts", root)];

/** What the program asks of the apiserver: reflectors list and watch, the rest by direct calls. */
async function neededPermissions(): Promise<Set<string>> {
  const needed = new Set<string>();
  const plans = [
    ...planReflectors({}),
    ...planReflectors({
      watchNamespaces: ["a"],
      defaultSslCertificate: "b/tls",
      defaultBackendService: "c/svc",
      publishService: "d/svc",
    }),
    ...planReflectors({ gatewayApi: true }),
    ...planReflectors({ gatewayApi: true, watchNamespaces: ["a"] }),
  ];
  for (const plan of plans) {
    needed.add(permission(plan.resource, "list"));
    needed.add(permission(plan.resource, "watch"));
  }
  const verbs: Record<string, string> = { listAll: "list" };
  for (const url of programFiles) {
    if (url.pathname.endsWith("/lib/k8s/kube_client.ts")) continue;
    const text = await Deno.readTextFile(url);
    const calls = text.matchAll(
      /client\.(get|list|listAll|watch|create|update|patch|delete)(?:<[^(]*>)?\(\s*([A-Z_]+)\s*,([^)]*)/g,
    );
    for (const [, verb, name] of calls) {
      const r = byConst.get(name!);
      assert(r !== undefined, `${url.pathname}: ${name} is a resource of resources.ts`);
      // A status write names the subresource in its location (status_writer.ts,
      // gateway_status_writer.ts).
      const sub = (r.plural === "ingresses" || r.group === "gateway.networking.k8s.io") &&
          verb === "patch" && /subresource: "status"/.test(text)
        ? "status"
        : undefined;
      needed.add(permission(r, verbs[verb!] ?? verb!, sub));
    }
  }
  return needed;
}

function granted(rules: Obj[]): Set<string> {
  const out = new Set<string>();
  for (const rule of rules) {
    for (const group of rule.apiGroups) {
      for (const res of rule.resources) {
        for (const verb of rule.verbs) out.add(`${group}/${res}:${verb}`);
      }
    }
  }
  return out;
}

const grantedAll = granted([...clusterRole.rules, ...role.rules]);

Deno.test("the shipped RBAC grants every API request the code makes", async () => {
  const needed = await neededPermissions();
  // The scan must find the known writers, or it proves nothing.
  for (
    const p of [
      "networking.k8s.io/ingresses/status:patch",
      "coordination.k8s.io/leases:update",
      "/events:create",
      "/secrets:watch",
      "gateway.networking.k8s.io/httproutes/status:patch",
      "gateway.networking.k8s.io/referencegrants:watch",
    ]
  ) assert(needed.has(p), `the scan finds ${p}: ${[...needed].join(", ")}`);
  const missing = [...needed].filter((p) => !grantedAll.has(p));
  assertEquals(missing, [], "requests the RBAC would forbid");
  // Leases only in the Role (one namespace), everything else in the ClusterRole.
  for (const p of needed) {
    const inRole = granted(role.rules).has(p);
    assertEquals(inRole, p.startsWith("coordination.k8s.io/leases:"), p);
  }
});

Deno.test("the shipped RBAC has no wildcard, no write to what it reads, and nothing that escalates", () => {
  for (const rule of [...clusterRole.rules, ...role.rules]) {
    for (const field of ["apiGroups", "resources", "verbs"]) {
      assert(!rule[field].includes("*"), `no * in ${field}: ${JSON.stringify(rule)}`);
    }
    assertEquals(rule.nonResourceURLs, undefined, "no non-resource URLs");
  }
  for (const p of grantedAll) {
    const [, verb] = p.split(":");
    assert(!["escalate", "bind", "impersonate", "deletecollection", "delete"].includes(verb!), p);
    if (
      /\/(secrets|services|endpointslices|ingressclasses|ingresses|leases|namespaces|gatewayclasses|gateways|httproutes|referencegrants):/
        .test(p)
    ) {
      // Read-only, except Leases (leader election).
      assert(
        ["get", "list", "watch"].includes(verb!) || p.startsWith("coordination.k8s.io/leases:"),
        `${p} writes a watched kind`,
      );
    }
  }
  assert(!grantedAll.has("/pods:list") && !grantedAll.has("/configmaps:get"), "nothing unrelated");
});

// Was a bug: the RBAC granted verbs and groups no code path used (get on watched kinds, update of
// ingresses/status, patch and events.k8s.io events, list/watch/patch of leases).
Deno.test({
  name: "the shipped RBAC grants nothing the code does not request",
  async fn() {
    const needed = await neededPermissions();
    assertEquals([...grantedAll].filter((p) => !needed.has(p)).sort(), []);
  },
});

Deno.test("every binding names the Deployment's ServiceAccount, and the Lease Role lives in the election namespace", () => {
  const sa = one("ServiceAccount");
  const ns = deployment.metadata.namespace;
  assertEquals([pod.serviceAccountName, sa.metadata.name, sa.metadata.namespace], [
    sa.metadata.name,
    "sluice",
    ns,
  ]);
  for (const binding of [one("ClusterRoleBinding"), one("RoleBinding")]) {
    assertEquals(binding.subjects, [{ kind: "ServiceAccount", name: "sluice", namespace: ns }]);
  }
  assertEquals(one("ClusterRoleBinding").roleRef.name, clusterRole.metadata.name);
  assertEquals(one("RoleBinding").roleRef.name, role.metadata.name);
  assertEquals(one("RoleBinding").metadata.namespace, role.metadata.namespace);
  assertEquals(deployedConfig().electionNamespace, role.metadata.namespace);
  assert(pod.automountServiceAccountToken !== false, "the token is mounted");
});

// ---------------------------------------------------------------------------
// The Deployment against the command line, the image and its own Service.

Deno.test("the Deployment's arguments parse, and its container ports are the ports Sluice listens on", () => {
  const config = deployedConfig();
  const ports = Object.fromEntries(
    (container.ports as Obj[]).map((p) => [p.name, p.containerPort]),
  );
  assertEquals(ports, {
    http: config.httpPort,
    https: config.httpsPort,
    health: config.healthPort,
  });
  assertMatch(
    dockerfile,
    new RegExp(`^EXPOSE ${config.httpPort} ${config.httpsPort} ${config.healthPort}$`, "m"),
  );
  // The IngressClass is the one Sluice claims, and the published Service is the shipped one.
  const ingressClass = one("IngressClass");
  assertEquals(ingressClass.spec.controller, config.controllerName);
  assertEquals(ingressClass.metadata.name, config.ingressClass);
  assertEquals(config.publishService, `${service.metadata.namespace}/${service.metadata.name}`);
  // Namespaces come from the pod (downward API), so an overlay that moves everything to another
  // namespace (kustomize's `namespace:` rewrites objects, not argument text) still publishes.
  for (const flag of ["--publish-service", "--election-namespace"]) {
    const arg = (container.args as string[]).find((a) => a.startsWith(`${flag}=`));
    assertMatch(arg ?? "", /=\$\(POD_NAMESPACE\)(\/|$)/, `${flag} takes the pod's namespace`);
  }
  assertEquals(container.env.map((e: Obj) => e.valueFrom.fieldRef.fieldPath).sort(), [
    "metadata.name",
    "metadata.namespace",
  ]);
});

Deno.test("the probes ask the health port: liveness and startup /healthz, readiness /readyz", () => {
  const health = (container.ports as Obj[]).find((p) => p.name === "health");
  assertEquals(health.containerPort, deployedConfig().healthPort);
  for (
    const [probe, path] of [
      ["startupProbe", "/healthz"],
      ["livenessProbe", "/healthz"],
      ["readinessProbe", "/readyz"],
    ]
  ) {
    const p = container[probe!];
    assert(p !== undefined, probe);
    assertEquals(p.httpGet.path, path, probe);
    assert(p.httpGet.port === "health" || p.httpGet.port === health.containerPort, probe);
    assert((p.httpGet.scheme ?? "HTTP") === "HTTP", `${probe} over plain HTTP`);
  }
  // Liveness never fires while a slow start is still within the startup probe's budget.
  const s = container.startupProbe;
  assert(s.periodSeconds * s.failureThreshold >= 30, "startup budget of at least 30 s");
});

Deno.test("the Service exposes the proxy ports only, by the container's port names", () => {
  const names = new Set((container.ports as Obj[]).map((p) => p.name));
  for (const p of service.spec.ports) {
    assert(names.has(p.targetPort), `targetPort ${p.targetPort} is a container port`);
    assert(p.targetPort !== "health" && p.targetPort !== deployedConfig().healthPort, "no health");
  }
  assertEquals(service.spec.selector, deployment.spec.selector.matchLabels);
  assertEquals(deployment.spec.template.metadata.labels, deployment.spec.selector.matchLabels);
});

Deno.test("the pod runs non-root, read-only, without capabilities or privilege escalation, as the image's user", () => {
  assertEquals(pod.securityContext.runAsNonRoot, true);
  assertEquals(pod.securityContext.seccompProfile, { type: "RuntimeDefault" });
  const user = dockerfile.match(/^USER\s+(\d+):(\d+)$/m);
  assert(user !== null, "USER uid:gid in the Dockerfile");
  assertEquals([pod.securityContext.runAsUser, pod.securityContext.runAsGroup], [
    Number(user[1]),
    Number(user[2]),
  ]);
  const c = container.securityContext;
  assertEquals(
    [c.allowPrivilegeEscalation, c.readOnlyRootFilesystem, c.capabilities?.drop, c.privileged],
    [false, true, ["ALL"], undefined],
  );
  assertEquals(c.capabilities?.add, undefined);
  for (const field of ["hostNetwork", "hostPID", "hostIPC"]) {
    assert(pod[field] !== true, field);
  }
  // Ports above 1023: no NET_BIND_SERVICE needed.
  for (const p of container.ports) assert(p.containerPort > 1023, `${p.name} is unprivileged`);
  // The one writable place is the emptyDir that DENO_DIR points into.
  const denoDir = dockerfile.match(/DENO_DIR=(\S+)/)?.[1];
  const mounts = (container.volumeMounts as Obj[]).map((m) => m.mountPath);
  assert(denoDir !== undefined && mounts.some((m) => denoDir.startsWith(m)), `${denoDir} writable`);
  const volume = pod.volumes.find((v: Obj) => v.name === container.volumeMounts[0].name);
  assert(
    volume.emptyDir !== undefined && volume.emptyDir.sizeLimit !== undefined,
    "bounded emptyDir",
  );
});

Deno.test("the container requests CPU and memory and caps memory", () => {
  const { requests, limits } = container.resources;
  assert(requests?.cpu !== undefined && requests?.memory !== undefined, "requests");
  assert(limits?.memory !== undefined, "a memory limit");
  const mib = (q: string) => {
    const m = /^(\d+)(Mi|Gi)$/.exec(q);
    assert(m !== null, q);
    return Number(m[1]) * (m[2] === "Gi" ? 1024 : 1);
  };
  assert(mib(limits.memory) >= mib(requests.memory), "limit ≥ request");
  assertEquals(container.imagePullPolicy, "IfNotPresent");
  assert(!/:latest$/.test(container.image), "a pinned image tag");
});

// ---------------------------------------------------------------------------
// The permission set against the Deno APIs the program calls.

/** Deno APIs and the permission each needs; anything outside the set must not appear. */
const API_PERMISSIONS: [RegExp, string][] = [
  [/\bDeno\.(readTextFile|readFile|readDir|stat|lstat|realPath|watchFs|open)(Sync)?\b/, "read"],
  [
    /\bDeno\.(connect|connectTls|listen|listenTls|startTls|serve|createHttpClient|resolveDns)\b/,
    "net",
  ],
  [/\bDeno\.env\b/, "env"],
  [/\bDeno\.hostname\b/, "sys:hostname"],
  [/\bDeno\.(uid|gid)\b/, "sys:uid"],
  [/\bDeno\.(osRelease|osUptime|loadavg|networkInterfaces|systemMemoryInfo)\b/, "sys:other"],
  [
    /\bDeno\.(writeFile|writeTextFile|mkdir|remove|rename|makeTempDir|makeTempFile|truncate|create|chmod|chown|symlink|link|utime|copyFile)(Sync)?\b/,
    "write",
  ],
  [/\bDeno\.(Command|run|kill)\b|node:child_process/, "run"],
  [/\bDeno\.(dlopen|UnsafePointer)\b/, "ffi"],
  [/from "node:(fs|os|child_process|worker_threads|net|http|https)"/, "node module"],
];

Deno.test("the program calls only Deno APIs the sluice permission set allows", async () => {
  const set = denoJson.permissions.sluice as Record<string, unknown>;
  const allowed = new Set<string>();
  for (const name of ["read", "net", "env"]) if (set[name] === true) allowed.add(name);
  for (const s of set.sys as string[]) allowed.add(`sys:${s}`);
  const used = new Map<string, string[]>();
  for (const url of programFiles) {
    const text = await Deno.readTextFile(url);
    for (const [pattern, needs] of API_PERMISSIONS) {
      if (new RegExp(pattern.source, "g").test(text)) {
        used.set(needs, [...used.get(needs) ?? [], url.pathname.slice(root.pathname.length)]);
      }
    }
  }
  // FFI is granted for glibc's path only, and only the socket module uses it (TCP_NODELAY,
  // TCP_INFO, shutdown(2)).
  if (Array.isArray(set.ffi)) allowed.add("ffi");
  assertEquals(used.get("ffi") ?? [], ["lib/server/native_socket.ts"], "FFI users");
  const outside = [...used].filter(([needs]) => !allowed.has(needs));
  assertEquals(outside, [], "APIs outside the permission set");
  // And each broad grant is used: read (manifests, kubeconfig), net, env (SLUICE_*), hostname.
  for (const needs of ["read", "net", "env", "sys:hostname"]) {
    assert(used.has(needs), `${needs} is granted and used`);
  }
});
