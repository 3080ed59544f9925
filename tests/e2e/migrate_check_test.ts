/**
 * `sluice migrate-check` as a real process, run as `deno task start` runs
 * Sluice (the permissions the compiled binary has): on a manifests
 * directory, and against the test cluster through a kubeconfig. Checks the
 * exit status (0 nothing refused, 1 something refused, 2 usage or read
 * errors) and the text and JSON reports.
 *
 * Run: SLUICE_TEST_SKIP_STATIC=1 SLUICE_TEST_SKIP_GO=1 tools/deno task test tests/e2e/migrate_check_test.ts
 * (the manifest tests alone need no cluster: `tools/deno test -A tests/e2e/migrate_check_test.ts
 * --filter manifests`).
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertStringIncludes } from "../support/assert.ts";
import { startFlags } from "../support/sluice_process.ts";
import { INGRESSES } from "../../lib/k8s/resources.ts";
import { adminClient, freshNamespace, testKubeconfig } from "../support/kube.ts";
import { apply } from "../support/manifests.ts";
import type { KubeObject } from "../../lib/k8s/kube_client.ts";
import { parse as parseYaml } from "yaml";

const MAIN = new URL("../../main.ts", import.meta.url).pathname;
const P = "nginx.ingress.kubernetes.io/";

interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `main.ts migrate-check …` with the start task's permissions and flags. */
async function migrateCheck(args: string[]): Promise<Run> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", ...await startFlags(), MAIN, "migrate-check", ...args],
    env: { NO_COLOR: "1" },
    stdin: "null",
  }).output();
  const text = new TextDecoder();
  return {
    code: output.code,
    stdout: text.decode(output.stdout),
    stderr: text.decode(output.stderr),
  };
}

function ingressYaml(
  name: string,
  options: { namespace?: string; className?: string; annotations?: Record<string, string> },
): string {
  const annotations = Object.entries(options.annotations ?? {})
    .map(([k, v]) => `\n    ${k}: ${JSON.stringify(v)}`).join("");
  return `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: ${name}
  namespace: ${options.namespace ?? "shop"}
  annotations:${annotations || " {}"}
spec:
${options.className ? `  ingressClassName: ${options.className}\n` : ""}  rules:
    - host: ${name}.example
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service:
                name: ${name}
                port:
                  number: 80
`;
}

const SERVED = ingressYaml("served", {
  className: "nginx",
  annotations: { [`${P}ssl-redirect`]: "false", [`${P}proxy-body-size`]: "8m" },
});
const DIFFERS = ingressYaml("differs", {
  className: "nginx",
  annotations: { [`${P}http2-push-preload`]: "true" },
});
const REFUSED = ingressYaml("refused", {
  namespace: "admin",
  className: "other",
  annotations: { [`${P}configuration-snippet`]: "allow 10.0.0.0/8; deny all;" },
});
const INVALID = ingressYaml("invalid", {
  namespace: "admin",
  annotations: { [`${P}proxy-body-size`]: "lots" },
});

const BASIC_AUTH = ingressYaml("members", {
  className: "nginx",
  annotations: { [`${P}auth-type`]: "basic", [`${P}auth-secret`]: "users" },
});
/** The users of BASIC_AUTH: alice, password "secret" (SHA-1). */
const USERS = `apiVersion: v1
kind: Secret
metadata:
  name: users
  namespace: shop
type: Opaque
stringData:
  auth: "alice:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ="
`;

async function withManifests<T>(
  files: Record<string, string>,
  fn: (dir: string) => Promise<T>,
): Promise<T> {
  const dir = await Deno.makeTempDir({ prefix: "sluice-migrate-check-" });
  try {
    for (const [name, text] of Object.entries(files)) {
      await Deno.writeTextFile(join(dir, name), text);
    }
    return await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("migrate-check on manifests exits 0 and says so when nothing would be refused", async () => {
  await withManifests({
    "a.yaml": `${SERVED}---\n${DIFFERS}`,
    "service.yml": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {}\n",
    "notes.txt": "not a manifest",
  }, async (dir) => {
    const run = await migrateCheck(["--manifests", dir]);
    assertEquals(run.stderr, "");
    assertEquals(run.code, 0, run.stdout);
    assertStringIncludes(
      run.stdout,
      `Ingress shop/differs: class "nginx" (spec.ingressClassName), file ${join(dir, "a.yaml")}\n` +
        '  served, with differences from ingress-nginx\n  ignored  http2-push-preload: "true"',
    );
    assertStringIncludes(run.stdout, 'Ingress shop/served: class "nginx"');
    assertStringIncludes(run.stdout, '  served   proxy-body-size: "8m"');
    assertStringIncludes(
      run.stdout,
      "2 Ingresses: 1 served as ingress-nginx did, 1 served with differences, 0 refused.\n",
    );
  });
});

Deno.test("migrate-check on manifests exits 1 and names the reasons when an Ingress would be refused", async () => {
  await withManifests({ "a.yaml": SERVED, "b.yaml": `${REFUSED}---\n${INVALID}` }, async (dir) => {
    const run = await migrateCheck(["--manifests", dir]);
    assertEquals(run.code, 1, run.stdout + run.stderr);
    assertStringIncludes(
      run.stdout,
      `Ingress admin/invalid: no class, file ${join(dir, "b.yaml")}\n` +
        "  REFUSED: its routes would answer 503\n" +
        '  refused  proxy-body-size: "lots"  (invalid value: "lots" is not a size',
    );
    assertStringIncludes(run.stdout, "  refused  configuration-snippet: ");
    assertStringIncludes(run.stdout, "3 Ingresses: 1 served as ingress-nginx did");
    assertStringIncludes(run.stdout, ", 2 refused.\n");

    const json = await migrateCheck(["--manifests", dir, "--format", "json"]);
    assertEquals(json.code, 1);
    const report = JSON.parse(json.stdout);
    assertEquals(
      report.ingresses.map((i: { namespace: string; name: string; verdict: string }) =>
        `${i.namespace}/${i.name} ${i.verdict}`
      ),
      ["admin/invalid refused", "admin/refused refused", "shop/served same"],
    );
    assertEquals(report.summary, { ingresses: 3, same: 1, differs: 0, refused: 2 });
    assertEquals(
      report.ingresses[0].annotations[0].problem,
      '"lots" is not a size (a number, optionally with k, m or g)',
    );

    // Selecting by class or namespace leaves the refused ones out.
    const nginx = await migrateCheck(["--manifests", dir, "--ingress-class", "nginx"]);
    assertEquals(nginx.code, 0, nginx.stdout);
    assertStringIncludes(nginx.stdout, "1 Ingress: 1 served as ingress-nginx did");
    const shop = await migrateCheck(["--manifests", dir, "--namespace=shop", "--format=json"]);
    assertEquals([shop.code, JSON.parse(shop.stdout).summary.ingresses], [0, 1]);
    // --ignore-access-annotations waives the snippet, not the invalid value.
    const waived = await migrateCheck([
      "--manifests",
      join(dir, "b.yaml"),
      "--ignore-access-annotations",
      "--format=json",
    ]);
    assertEquals(waived.code, 1);
    assertEquals(JSON.parse(waived.stdout).summary, {
      ingresses: 2,
      same: 0,
      differs: 1,
      refused: 1,
    });
  });
});

Deno.test("migrate-check on manifests reads the Secret of basic authentication, never printing it", async () => {
  await withManifests({ "a.yaml": BASIC_AUTH, "users.yaml": USERS }, async (dir) => {
    const run = await migrateCheck(["--manifests", dir, "--format", "json"]);
    assertEquals(run.code, 0, run.stdout + run.stderr);
    const report = JSON.parse(run.stdout);
    assertEquals(report.summary, { ingresses: 1, same: 1, differs: 0, refused: 0 });
    assert(!run.stdout.includes("5en6G6"), "the Secret's content is not shown");
  });
  await withManifests({ "a.yaml": BASIC_AUTH }, async (dir) => {
    const run = await migrateCheck(["--manifests", dir]);
    assertEquals(run.code, 1, run.stdout + run.stderr);
    assertStringIncludes(
      run.stdout,
      '  refused  auth-secret: "users"  (invalid value: Secret "shop/users"',
    );
  });
});

Deno.test("migrate-check exits 2 on usage errors and manifests it cannot read, and prints its help", async () => {
  const help = await migrateCheck(["--help"]);
  assertEquals(help.code, 0);
  assertStringIncludes(help.stdout, "Usage: sluice migrate-check");
  for (
    const args of [
      ["--bogus"],
      ["--format", "yaml", "--manifests", "."],
      ["--kubeconfig", "a", "--manifests", "b"],
      ["positional"],
    ]
  ) {
    const run = await migrateCheck(args);
    assertEquals(run.code, 2, `${args.join(" ")}: ${run.stdout}`);
    assertEquals(run.stdout, "");
    assert(run.stderr.startsWith("sluice migrate-check: "), run.stderr);
  }
  const missing = await migrateCheck(["--manifests", "/nonexistent/sluice-manifests"]);
  assertEquals(missing.code, 2);
  assertStringIncludes(missing.stderr, 'Cannot read manifests "/nonexistent/sluice-manifests"');
  await withManifests({ "bad.yaml": "kind: Ingress\nmetadata: [\n" }, async (dir) => {
    const run = await migrateCheck(["--manifests", dir]);
    assertEquals(run.code, 2, run.stdout);
    assertStringIncludes(run.stderr, `Cannot read manifest "${join(dir, "bad.yaml")}": line `);
  });
  const noCluster = await migrateCheck(["--kubeconfig", "/nonexistent/kubeconfig"]);
  assertEquals(noCluster.code, 2, noCluster.stdout);
  assertEquals(noCluster.stdout, "");
});

Deno.test("migrate-check lists a cluster's Ingresses through a kubeconfig", async () => {
  const kubeconfig = testKubeconfig();
  const admin = await adminClient(kubeconfig);
  try {
    const ns = await freshNamespace(admin.client, "e2e-migrate");
    for (const text of [SERVED, REFUSED, BASIC_AUTH, USERS]) {
      await apply(admin.client, parseYaml(text) as KubeObject, { namespace: ns });
    }
    const run = await migrateCheck(["--kubeconfig", kubeconfig, "--namespace", ns]);
    assertEquals(run.code, 1, run.stdout + run.stderr);
    assertStringIncludes(
      run.stdout,
      `Ingress ${ns}/refused: class "other" (spec.ingressClassName)\n`,
    );
    assertStringIncludes(
      run.stdout,
      `Ingress ${ns}/served: class "nginx" (spec.ingressClassName)\n`,
    );
    // The Secret of basic authentication is read from the cluster.
    assertStringIncludes(
      run.stdout,
      `Ingress ${ns}/members: class "nginx" (spec.ingressClassName)\n  served as ingress-nginx did\n`,
    );
    assertStringIncludes(
      run.stdout,
      "3 Ingresses: 2 served as ingress-nginx did, 0 served with differences, 1 refused.\n",
    );

    await admin.client.delete(INGRESSES, { namespace: ns, name: "refused" });
    const json = await migrateCheck([
      "--kubeconfig",
      kubeconfig,
      "--namespace",
      ns,
      "--format",
      "json",
    ]);
    assertEquals(json.code, 0, json.stdout + json.stderr);
    assertEquals(JSON.parse(json.stdout).summary, {
      ingresses: 2,
      same: 2,
      differs: 0,
      refused: 0,
    });
  } finally {
    admin.access.close();
  }
});
