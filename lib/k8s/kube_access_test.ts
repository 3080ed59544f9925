import { KubeConfig, type User } from "@kubernetes/client-node";
import {
  assert,
  assertEquals,
  assertRejects,
  assertStringIncludes,
} from "../../tests/support/assert.ts";
import { TEST_CERT_PEM } from "../../tests/support/test_certs.ts";
import { waitFor } from "../../tests/support/wait.ts";
import { accessFromKubeConfig, loadKubeAccess } from "./kube_access.ts";
import { credentialKind } from "./kube_config.ts";

const ROOT = new URL("../../", import.meta.url);
const CA_DATA = btoa(TEST_CERT_PEM);

/** A kubeconfig with one cluster, one user and one context, as JSON (which is YAML). */
function kubeconfig(
  user: Record<string, unknown>,
  options: { cluster?: Record<string, unknown>; namespace?: string } = {},
): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{
      name: "c",
      cluster: {
        server: "https://127.0.0.1:6443/",
        "certificate-authority-data": CA_DATA,
        ...options.cluster,
      },
    }],
    users: [{ name: "u", user }],
    contexts: [{
      name: "ctx",
      context: {
        cluster: "c",
        user: "u",
        ...(options.namespace ? { namespace: options.namespace } : {}),
      },
    }],
    "current-context": "ctx",
  });
}

/**
 * A kubeconfig whose user gets credentials from the plugin `sh -c script`;
 * {@linkcode expiredCredential} is what such a script prints.
 */
function execKubeconfig(script: string): string {
  return kubeconfig({
    exec: { apiVersion: "client.authentication.k8s.io/v1", command: "sh", args: ["-c", script] },
  });
}

/** An ExecCredential with `token`, already expired: client-node runs the plugin each time. */
function expiredCredential(token: string): string {
  return `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"${token}","expirationTimestamp":"2000-01-01T00:00:00Z"}}`;
}

/** Runs `fn` with a fresh temporary directory, removed afterwards. */
async function inTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "kube-access-test-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** Names of this process's Web Worker threads (Deno names them `worker-<id>`, ids never reused). */
async function workerThreads(): Promise<Set<string>> {
  const names = new Set<string>();
  for await (const task of Deno.readDir("/proc/self/task")) {
    const comm = await Deno.readTextFile(`/proc/self/task/${task.name}/comm`).catch(() => "");
    if (comm.startsWith("worker-")) names.add(comm.trim());
  }
  return names;
}

/** Worker threads running now that did not in `before`. */
async function workersSince(before: Set<string>): Promise<string[]> {
  return [...await workerThreads()].filter((name) => !before.has(name));
}

/** Waits until every worker thread started since `before` has ended. */
async function workersGoneSince(before: Set<string>): Promise<void> {
  await waitFor(
    "the workers started since to end",
    async () => (await workersSince(before)).length === 0,
    { timeoutMs: 5_000 },
  );
}

/** Module specifiers reachable from `root` through code (not type-only) imports. */
async function codeGraph(root: string): Promise<Set<string>> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", root],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert(output.success, `deno info ${root} failed: ${new TextDecoder().decode(output.stderr)}`);
  const info = JSON.parse(new TextDecoder().decode(output.stdout)) as {
    roots: string[];
    redirects: Record<string, string>;
    modules: { specifier: string; dependencies?: { code?: { specifier: string } }[] }[];
  };
  const bySpecifier = new Map(info.modules.map((m) => [m.specifier, m]));
  const seen = new Set<string>();
  const queue = [...info.roots];
  while (queue.length > 0) {
    const specifier = queue.pop()!;
    const resolved = info.redirects[specifier] ?? specifier;
    if (seen.has(resolved)) continue;
    seen.add(resolved);
    for (const dependency of bySpecifier.get(resolved)?.dependencies ?? []) {
      if (dependency.code !== undefined) queue.push(dependency.code.specifier);
    }
  }
  return seen;
}

Deno.test("main.ts does not load @kubernetes/client-node; kube_config_worker.ts does", async () => {
  const client = (graph: Set<string>) =>
    [...graph].filter((s) => s.includes("@kubernetes/client-node"));
  const main = await codeGraph("main.ts");
  assert(main.has(new URL("lib/k8s/kube_access.ts", ROOT).href), "main.ts reaches kube_access.ts");
  assertEquals(client(main), []);
  const worker = await codeGraph("lib/k8s/kube_config_worker.ts");
  assertEquals(client(worker), ["npm:/@kubernetes/client-node@2.0.1"]);
});

Deno.test("loadKubeAccess() resolves a token kubeconfig in a worker that is gone when it returns", async () => {
  await inTempDir(async (dir) => {
    const path = `${dir}/config`;
    await Deno.writeTextFile(
      path,
      kubeconfig({ token: "t0ken", as: "jane" }, { namespace: "shop" }),
    );
    const workers = await workerThreads();
    const access = await loadKubeAccess({ kubeconfig: path });
    try {
      assertEquals(access.server, "https://127.0.0.1:6443");
      assertEquals(access.namespace, "shop");
      assertEquals(access.origin, path);
      const headers = await access.headers();
      assertEquals(headers.get("authorization"), "Bearer t0ken");
      assertEquals(headers.get("impersonate-user"), "jane");
      // Each call gets its own Headers: callers add theirs.
      headers.set("accept", "application/json");
      assertEquals((await access.headers()).get("accept"), null);
      await workersGoneSince(workers);
    } finally {
      access.close();
    }
  });
});

Deno.test("loadKubeAccess() turns a username and password into basic auth", async () => {
  await inTempDir(async (dir) => {
    const path = `${dir}/config`;
    await Deno.writeTextFile(path, kubeconfig({ username: "jane", password: "s3cret" }));
    const access = await loadKubeAccess({ kubeconfig: path });
    try {
      assertEquals((await access.headers()).get("authorization"), `Basic ${btoa("jane:s3cret")}`);
      assertEquals(access.namespace, undefined);
    } finally {
      access.close();
    }
  });
});

Deno.test("loadKubeAccess() reads $KUBECONFIG when given no file", async () => {
  await inTempDir(async (dir) => {
    const path = `${dir}/config`;
    await Deno.writeTextFile(path, kubeconfig({ token: "from-env" }));
    const previous = Deno.env.get("KUBECONFIG");
    Deno.env.set("KUBECONFIG", path);
    try {
      const access = await loadKubeAccess();
      try {
        assertEquals(access.origin, path);
        assertEquals((await access.headers()).get("authorization"), "Bearer from-env");
      } finally {
        access.close();
      }
    } finally {
      if (previous === undefined) Deno.env.delete("KUBECONFIG");
      else Deno.env.set("KUBECONFIG", previous);
    }
  });
});

Deno.test("loadKubeAccess() re-reads a token file once its token is older than the refresh interval", async () => {
  await inTempDir(async (dir) => {
    const tokenFile = `${dir}/token`;
    const path = `${dir}/config`;
    await Deno.writeTextFile(tokenFile, "first\n");
    await Deno.writeTextFile(
      path,
      kubeconfig({ "auth-provider": { name: "tokenFile", config: { tokenFile } }, as: "jane" }),
    );
    let now = 1_000;
    const workers = await workerThreads();
    const access = await loadKubeAccess({
      kubeconfig: path,
      tokenFileRefreshMs: 60_000,
      now: () => now,
    });
    try {
      await workersGoneSince(workers);
      const authorization = async () => (await access.headers()).get("authorization");
      assertEquals(await authorization(), "Bearer first");
      assertEquals((await access.headers()).get("impersonate-user"), "jane");
      await Deno.writeTextFile(tokenFile, "second");
      now += 60_000;
      assertEquals(await authorization(), "Bearer first", "not re-read within the interval");
      now += 1;
      assertEquals(await authorization(), "Bearer second");
      // Like client-go: a token file that cannot be read again keeps the last token.
      await Deno.remove(tokenFile);
      now += 60_001;
      assertEquals(await authorization(), "Bearer second");
      await Deno.writeTextFile(tokenFile, "third");
      assertEquals(await authorization(), "Bearer third", "retried on the next call");
    } finally {
      access.close();
    }
  });
});

Deno.test("loadKubeAccess() names a token file that cannot be read", async () => {
  await inTempDir(async (dir) => {
    const path = `${dir}/config`;
    const tokenFile = `${dir}/missing-token`;
    await Deno.writeTextFile(
      path,
      kubeconfig({ "auth-provider": { name: "tokenFile", config: { tokenFile } } }),
    );
    const workers = await workerThreads();
    const error = await assertRejects(
      () => loadKubeAccess({ kubeconfig: path }),
      Error,
      `Cannot use kubeconfig "${path}": `,
    );
    assertStringIncludes(error.message, tokenFile);
    await workersGoneSince(workers);
  });
});

Deno.test("loadKubeAccess() refuses a cluster with insecure-skip-tls-verify", async () => {
  await inTempDir(async (dir) => {
    const path = `${dir}/config`;
    await Deno.writeTextFile(
      path,
      kubeconfig({ token: "t" }, { cluster: { "insecure-skip-tls-verify": true } }),
    );
    const workers = await workerThreads();
    const error = await assertRejects(() => loadKubeAccess({ kubeconfig: path }));
    assertEquals(
      error.message,
      `Cannot use cluster "c" of "${path}": insecure-skip-tls-verify is not supported; give it a certificate-authority`,
    );
    await workersGoneSince(workers);
  });
});

Deno.test("loadKubeAccess() names a kubeconfig file that does not exist", async () => {
  await inTempDir(async (dir) => {
    const path = `${dir}/no-such-config`;
    const workers = await workerThreads();
    const error = await assertRejects(() => loadKubeAccess({ kubeconfig: path }));
    assertStringIncludes(error.message, `Cannot load kubeconfig "${path}": `);
    assertStringIncludes(error.message, "no such file");
    await workersGoneSince(workers);
  });
});

Deno.test("loadKubeAccess() names a kubeconfig without a current cluster", async () => {
  await inTempDir(async (dir) => {
    const path = `${dir}/config`;
    await Deno.writeTextFile(path, JSON.stringify({ apiVersion: "v1", kind: "Config" }));
    const workers = await workerThreads();
    const error = await assertRejects(() => loadKubeAccess({ kubeconfig: path }));
    assertEquals(error.message, `Cannot use kubeconfig "${path}": it has no current cluster`);
    await workersGoneSince(workers);
  });
});

Deno.test("loadKubeAccess() names a context the kubeconfig does not have", async () => {
  await inTempDir(async (dir) => {
    const path = `${dir}/config`;
    await Deno.writeTextFile(path, kubeconfig({ token: "t" }));
    const workers = await workerThreads();
    const error = await assertRejects(() => loadKubeAccess({ kubeconfig: path, context: "nope" }));
    assertEquals(error.message, `Cannot use context "nope" of "${path}": no such context`);
    await workersGoneSince(workers);
  });
});

Deno.test("loadKubeAccess() rejects, and ends the worker, when the worker module fails to start", async () => {
  const workers = await workerThreads();
  const error = await assertRejects(() =>
    loadKubeAccess({
      kubeconfig: "/unused",
      workerModule: new URL("data:application/javascript,throw new Error('broken on purpose')"),
    })
  );
  assertStringIncludes(error.message, "Cannot load the kubeconfig: its worker failed: ");
  assertStringIncludes(error.message, "broken on purpose");
  await workersGoneSince(workers);
});

Deno.test("loadKubeAccess() keeps the worker for an exec plugin, asks it for headers each time, and close() ends it", async () => {
  await inTempDir(async (dir) => {
    const tokenFile = `${dir}/token`;
    const path = `${dir}/config`;
    await Deno.writeTextFile(tokenFile, "exec-1");
    await Deno.writeTextFile(
      path,
      execKubeconfig(`printf '${expiredCredential("%s")}' "$(cat '${tokenFile}')"`),
    );
    const workers = await workerThreads();
    const access = await loadKubeAccess({ kubeconfig: path });
    let closed = false;
    try {
      assertEquals((await workersSince(workers)).length, 1, "the worker stays for the plugin");
      assertEquals((await access.headers()).get("authorization"), "Bearer exec-1");
      await Deno.writeTextFile(tokenFile, "exec-2");
      const [a, b] = await Promise.all([access.headers(), access.headers()]);
      assertEquals(a.get("authorization"), "Bearer exec-2");
      assertEquals(b.get("authorization"), "Bearer exec-2");
      access.close();
      closed = true;
      await workersGoneSince(workers);
      await assertRejects(() => access.headers(), Error, "the Kubernetes access is closed");
    } finally {
      if (!closed) access.close();
    }
  });
});

// Was a bug: a credential plugin that never answered (an exec command waiting for a login
// prompt) left every headers() call, and so every API call, waiting for good, without a word.
Deno.test("loadKubeAccess() fails a credential plugin's answer that does not come within the timeout, naming the wait", async () => {
  await inTempDir(async (dir) => {
    const path = `${dir}/config`;
    const hang = `${dir}/hang`;
    // The plugin hangs once `hang` exists.
    await Deno.writeTextFile(
      path,
      execKubeconfig(
        `if [ -e '${hang}' ]; then sleep 3; fi; printf '%s' '${expiredCredential("t")}'`,
      ),
    );
    const access = await loadKubeAccess({ kubeconfig: path, pluginTimeoutMs: 500 });
    try {
      assertEquals((await access.headers()).get("authorization"), "Bearer t");
      await Deno.writeTextFile(hang, "");
      const started = performance.now();
      await assertRejects(
        () => access.headers(),
        Error,
        "Cannot get credentials: the credential plugin did not answer within 0.5 s",
      );
      assert(
        performance.now() - started < 2_500,
        "failed at the timeout, not when the plugin ended",
      );
    } finally {
      access.close();
    }
  });
});

Deno.test("accessFromKubeConfig() resolves an already loaded KubeConfig in this isolate", async () => {
  const kc = new KubeConfig();
  kc.loadFromString(kubeconfig({ token: "in-process" }, { namespace: "shop" }));
  const workers = await workerThreads();
  const access = await accessFromKubeConfig(kc, "test");
  try {
    assertEquals(await workersSince(workers), []);
    assertEquals(access.origin, "test");
    assertEquals(access.namespace, "shop");
    assertEquals((await access.headers()).get("authorization"), "Bearer in-process");
  } finally {
    access.close();
  }
});

Deno.test("credentialKind() follows the authenticator client-node picks", () => {
  const provider = (name: string, config: Record<string, unknown> = {}) => ({
    "auth-provider": { name, config },
  });
  const cases: { user: Record<string, unknown>; kind: string; claimedBy: string | undefined }[] = [
    { user: {}, kind: "static", claimedBy: undefined },
    { user: { token: "t" }, kind: "static", claimedBy: undefined },
    { user: { username: "u", password: "p" }, kind: "static", claimedBy: undefined },
    { user: provider("tokenFile", { tokenFile: "/t" }), kind: "tokenFile", claimedBy: "FileAuth" },
    // The token file comes before OIDC in client-node's order.
    { user: provider("oidc", { tokenFile: "/t" }), kind: "tokenFile", claimedBy: "FileAuth" },
    {
      user: { ...provider("x", { tokenFile: "/t" }), token: "t" },
      kind: "static",
      claimedBy: "FileAuth",
    },
    {
      user: provider("gcp", { tokenFile: "/t" }),
      kind: "plugin",
      claimedBy: "GoogleCloudPlatformAuth",
    },
    { user: provider("azure", { tokenFile: "/t" }), kind: "plugin", claimedBy: "AzureAuth" },
    { user: provider("exec", { tokenFile: "/t" }), kind: "plugin", claimedBy: "ExecAuth" },
    {
      user: provider("x", { tokenFile: "/t", exec: { command: "c" } }),
      kind: "plugin",
      claimedBy: "ExecAuth",
    },
    {
      user: { ...provider("tokenFile", { tokenFile: "/t" }), exec: { command: "c" } },
      kind: "plugin",
      claimedBy: "ExecAuth",
    },
    { user: provider("oidc", { "id-token": "x" }), kind: "plugin", claimedBy: "OpenIDConnectAuth" },
    // No authenticator claims it: left to client-node, which adds no header.
    { user: provider("unknown"), kind: "plugin", claimedBy: undefined },
  ];
  for (const { user, kind, claimedBy } of cases) {
    const kc = new KubeConfig();
    kc.loadFromString(kubeconfig(user));
    const loaded = kc.getCurrentUser();
    const authenticators =
      (kc as unknown as { authenticators: { isAuthProvider(u: User): boolean }[] })
        .authenticators;
    const claimer = loaded === null
      ? undefined
      : authenticators.find((a) => a.isAuthProvider(loaded));
    const label = JSON.stringify(user);
    assertEquals(claimer?.constructor.name, claimedBy, `client-node's authenticator for ${label}`);
    assertEquals(credentialKind(loaded), kind, `kind of ${label}`);
  }
});
