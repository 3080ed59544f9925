/**
 * `deno task demo`: Sluice in front of demo backends, with no cluster.
 *
 * Starts three echo backends on 127.0.0.1 (Services `web`, `api`, `apps` of
 * `examples/manifests`), copies those manifests into a temporary directory
 * (rewriting backend ports when others were asked for), generates a
 * certificate for `secure.localhost` and writes its TLS Secret there, runs
 * Sluice on that directory as a subprocess (with the permissions of
 * `deno task start`), waits until it is ready, and prints commands that show
 * each behaviour with the answer to expect: routing, TLS, redirects, a
 * WebSocket upgrade, a live reload (an edit of a copied manifest), `/healthz`,
 * `/readyz` and `/metrics`. Ctrl-C stops everything and
 * removes the directory. Nothing is written into the repository.
 *
 *   deno task demo [--http-port 8080] [--https-port 8443] [--health-port 10254]
 *                  [--backend-ports 9101,9102,9103]
 *
 * `tests/e2e/demo_test.ts` runs it on free ports and runs the printed
 * commands in order, checking that each answers as printed.
 *
 * @module
 */
// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { type EchoBackend, startEchoBackend } from "../support/echo_backend.ts";
import { startFlags } from "../support/sluice_process.ts";
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const EXAMPLES = join(ROOT, "examples", "manifests");
/** The backend ports `examples/manifests` names, by Service. */
const EXAMPLE_PORTS = { web: 9101, api: 9102, apps: 9103 } as const;
type ServiceName = keyof typeof EXAMPLE_PORTS;

/** One behaviour to try: a command and what it answers. */
export interface DemoExample {
  readonly title: string;
  readonly command: string;
  /**
   * What the command shows: `<status>[ from Service <name>][ Location: <url>]`
   * when the answer is about a status, else the start of what it prints (`ok`,
   * `sluice_requests_total{…`, up to the `…`) or `no output`; then words for
   * people.
   */
  readonly expect: string;
}

/** A WebSocket key for curl (any 16 bytes, base64): RFC 6455's example. */
const WEBSOCKET_KEY = "dGhlIHNhbXBsZSBub25jZQ==";

/**
 * The commands to print, for Sluice on these ports, a CA file for
 * `secure.localhost` and the manifest directory `dir` it serves.
 */
export function demoExamples(
  ports: { http: number; https: number; health: number },
  caFile: string,
  dir: string,
): DemoExample[] {
  const resolve = (host: string, port: number) => `--resolve ${host}:${port}:127.0.0.1`;
  const http = (host: string, path = "/", flags = "-s") =>
    `curl ${flags} ${resolve(host, ports.http)} http://${host}:${ports.http}${path}`;
  const health = (path: string) => `curl -s http://127.0.0.1:${ports.health}${path}`;
  return [
    {
      title: "Host shop.localhost, Prefix / (examples/manifests/shop.yaml)",
      command: http("shop.localhost", "/cart"),
      expect: "200 from Service web",
    },
    {
      title: "Same host, Exact /api/health goes to another Service",
      command: http("shop.localhost", "/api/health"),
      expect: "200 from Service api",
    },
    {
      title: "Exact is exact: a longer path falls back to Prefix /",
      command: http("shop.localhost", "/api/health/deep"),
      expect: "200 from Service web",
    },
    {
      title: "Wildcard host *.apps.localhost: any one label (wildcard.yaml)",
      command: http("blue.apps.localhost"),
      expect: "200 from Service apps",
    },
    {
      title: "… but only one label",
      command: http("a.b.apps.localhost", "/", "-si"),
      expect: "404",
    },
    {
      title: "TLS for secure.localhost with the certificate the demo generated (secure.yaml)",
      command: `curl -s --cacert ${caFile} ${
        resolve("secure.localhost", ports.https)
      } https://secure.localhost:${ports.https}/`,
      expect: "200 from Service web",
    },
    {
      title: "Plain HTTP to a TLS host redirects to HTTPS",
      command: http("secure.localhost", "/login?next=%2F", "-si"),
      expect: `308 Location: https://secure.localhost:${ports.https}/login?next=%2F`,
    },
    {
      title: "No rule for the host",
      command: http("nothing.localhost", "/", "-si"),
      expect: "404",
    },
    {
      title: "A rule whose Service has no ready endpoints (down.yaml)",
      command: http("down.localhost", "/", "-si"),
      expect: "503",
    },
    {
      title: "A WebSocket: the upgrade goes through to the backend and the connection stays open",
      command: http(
        "shop.localhost",
        "/ws",
        `-si --max-time 2 -H 'Connection: Upgrade' -H 'Upgrade: websocket' ` +
          `-H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: ${WEBSOCKET_KEY}'`,
      ),
      expect: "101 Switching Protocols, then a WebSocket to Service web (curl stops after 2 s)",
    },
    {
      title: "Live reload, 1/3: /api/status falls under Prefix / for now",
      command: http("shop.localhost", "/api/status"),
      expect: "200 from Service web",
    },
    {
      title: "Live reload, 2/3: edit shop.yaml, renaming the Exact path",
      command: `sed -i.bak 's|/api/health|/api/status|' ${dir}/shop.yaml`,
      expect: "no output: Sluice watches the directory and reloads it",
    },
    {
      title: "Live reload, 3/3: within about 100 ms the same request goes to api",
      command: http("shop.localhost", "/api/status"),
      expect: "200 from Service api",
    },
    {
      title: "Liveness on the health port: the process serves",
      command: health("/healthz"),
      expect: "ok",
    },
    {
      title: 'Readiness: routes are loaded (503 "not ready" before that and while stopping)',
      command: health("/readyz"),
      expect: "ok",
    },
    {
      title: "Prometheus metrics on the health port",
      command: `${health("/metrics")} | grep '^sluice_requests_total'`,
      expect: 'sluice_requests_total{ingress="demo/shop",…} N: the requests so far, a line per ' +
        "Ingress, host, status class and method",
    },
  ];
}

/** Copies the example manifests, pointing their EndpointSlices at `ports`. */
async function copyExamples(dir: string, ports: Record<ServiceName, number>): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(EXAMPLES)) {
    if (!entry.isFile || !/\.ya?ml$/.test(entry.name)) continue;
    let text = await Deno.readTextFile(join(EXAMPLES, entry.name));
    for (const service of Object.keys(EXAMPLE_PORTS) as ServiceName[]) {
      const from = EXAMPLE_PORTS[service];
      if (ports[service] !== from) {
        text = text.replace(
          new RegExp(`\\b(port|targetPort): ${from}\\b`, "g"),
          (_, key) => `${key}: ${ports[service]}`,
        );
      }
    }
    await Deno.writeTextFile(join(dir, entry.name), text);
    files.push(entry.name);
  }
  return files.sort();
}

function portOption(value: string | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 65535) {
    console.error(`demo: Invalid value "${value}" for --${name}: expected a port from 1 to 65535`);
    Deno.exit(2);
  }
  return n;
}

/** Fails clearly when something already listens on `port` (another Sluice would share it). */
function assertPortFree(port: number, flag: string): void {
  try {
    Deno.listen({ hostname: "0.0.0.0", port }).close();
  } catch (error) {
    throw new Error(
      `Cannot use port ${port}: ${
        error instanceof Deno.errors.AddrInUse ? "something already listens there" : error
      }; stop it or pass another port with --${flag}`,
    );
  }
}

async function waitReady(
  healthPort: number,
  exited: () => number | undefined,
  timeoutMs: number,
): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (performance.now() < end) {
    const code = exited();
    if (code !== undefined) {
      throw new Error(`Sluice exited with status ${code} before it was ready`);
    }
    try {
      const r = await fetch(`http://127.0.0.1:${healthPort}/readyz`);
      await r.body?.cancel();
      if (r.status === 200) return;
    } catch {
      // Not listening yet.
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`Sluice was not ready within ${timeoutMs / 1000} s`);
}

async function main(): Promise<void> {
  let values;
  try {
    ({ values } = parseArgs({
      args: Deno.args,
      options: {
        "http-port": { type: "string" },
        "https-port": { type: "string" },
        "health-port": { type: "string" },
        "backend-ports": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    }));
  } catch (error) {
    console.error(`demo: ${error instanceof Error ? error.message.split("\n")[0] : error}`);
    Deno.exit(2);
  }
  if (values.help) {
    console.log(
      "Usage: deno task demo [--http-port 8080] [--https-port 8443] [--health-port 10254]\n" +
        "                      [--backend-ports 9101,9102,9103]",
    );
    return;
  }
  const ports = {
    http: portOption(values["http-port"], 8080, "http-port"),
    https: portOption(values["https-port"], 8443, "https-port"),
    health: portOption(values["health-port"], 10254, "health-port"),
  };
  const backendPorts = (values["backend-ports"] ?? "9101,9102,9103").split(",");
  if (backendPorts.length !== 3) {
    console.error(
      `demo: Invalid value "${values["backend-ports"]}" for --backend-ports: expected three ports`,
    );
    Deno.exit(2);
  }
  const backendPort: Record<ServiceName, number> = {
    web: portOption(backendPorts[0], 9101, "backend-ports"),
    api: portOption(backendPorts[1], 9102, "backend-ports"),
    apps: portOption(backendPorts[2], 9103, "backend-ports"),
  };

  const backends: EchoBackend[] = [];
  const dir = await Deno.makeTempDir({ prefix: "sluice-demo-" });
  let child: Deno.ChildProcess | undefined;
  let exitCode: number | undefined;
  let stopping: Promise<never> | undefined;
  const stop = (code: number): Promise<never> => {
    stopping ??= (async () => {
      if (child !== undefined && exitCode === undefined) {
        // From a terminal, Ctrl-C reached Sluice too: give it a moment to stop by itself,
        // so that it is not signalled twice (a second signal makes it exit at once).
        const end = performance.now() + 1_500;
        while (exitCode === undefined && performance.now() < end) {
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        if (exitCode === undefined) {
          try {
            child.kill("SIGTERM");
          } catch {
            // Already exited.
          }
        }
        const timer = setTimeout(() => {
          try {
            child?.kill("SIGKILL");
          } catch {
            // Already exited.
          }
        }, 10_000);
        await child.status;
        clearTimeout(timer);
      }
      await Promise.all(backends.map((b) => b.close()));
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      console.log("demo: stopped.");
      Deno.exit(code);
    })();
    return stopping;
  };
  Deno.addSignalListener("SIGINT", () => void stop(0));
  Deno.addSignalListener("SIGTERM", () => void stop(0));

  try {
    assertPortFree(ports.http, "http-port");
    assertPortFree(ports.https, "https-port");
    assertPortFree(ports.health, "health-port");
    for (const service of Object.keys(backendPort) as ServiceName[]) {
      try {
        backends.push(
          await startEchoBackend({
            hostname: "127.0.0.1",
            port: backendPort[service],
            name: service,
            pod: `${service}-1`,
          }),
        );
      } catch (error) {
        throw new Error(
          `Cannot start the ${service} backend on 127.0.0.1:${backendPort[service]}: ${
            error instanceof Error ? error.message : error
          }; pass other ports with --backend-ports`,
        );
      }
    }

    const files = await copyExamples(dir, backendPort);
    const certificate = await generateSelfSignedCertificate({
      hostnames: ["secure.localhost"],
      commonName: "secure.localhost",
    });
    const caFile = join(dir, "secure.localhost.crt");
    await Deno.writeTextFile(caFile, certificate.certPem);
    await Deno.writeTextFile(
      join(dir, "secure_tls_secret.yaml"),
      [
        "# Generated by the demo for secure.localhost (self-signed, for this run only).",
        "apiVersion: v1",
        "kind: Secret",
        "metadata:",
        "  name: secure-tls",
        "  namespace: demo",
        "type: kubernetes.io/tls",
        "data:",
        `  tls.crt: ${btoa(certificate.certPem)}`,
        `  tls.key: ${btoa(certificate.keyPem)}`,
        "",
      ].join("\n"),
    );

    const args = [
      "run",
      ...await startFlags(),
      join(ROOT, "main.ts"),
      "--manifests",
      dir,
      "--http-port",
      String(ports.http),
      "--https-port",
      String(ports.https),
      "--health-port",
      String(ports.health),
      "--https-redirect-port",
      String(ports.https),
      "--workers",
      "1",
      "--log-format",
      "pretty",
      "--shutdown-delay",
      "0s",
      "--shutdown-timeout",
      "5s",
    ];
    console.log(`demo: starting Sluice on ${files.length + 1} manifests copied to ${dir}`);
    child = new Deno.Command(Deno.execPath(), {
      args,
      cwd: ROOT,
      stdin: "null",
      stdout: "inherit",
      stderr: "inherit",
    }).spawn();
    void child.status.then((s) => {
      exitCode = s.code;
      if (stopping === undefined) {
        console.error(`demo: Sluice exited unexpectedly (status ${s.code})`);
        void stop(1);
      }
    });
    await waitReady(ports.health, () => exitCode, 60_000);

    const lines = [
      "",
      "Sluice is serving the example site from examples/manifests (no cluster):",
      `  HTTP on 127.0.0.1:${ports.http}, HTTPS on 127.0.0.1:${ports.https}, ` +
      `health and metrics on 127.0.0.1:${ports.health}`,
      `  echo backends: ${backends.map((b) => `${b.name} on ${b.port}`).join(", ")}`,
      `  manifests: ${dir} (edit them: routes change within about 100 ms)`,
      "",
      "Try these:",
    ];
    for (const example of demoExamples(ports, caFile, dir)) {
      lines.push("", `# ${example.title}`, example.command, `  → ${example.expect}`);
    }
    lines.push("", "Press Ctrl-C to stop.", "");
    console.log(lines.join("\n"));
  } catch (error) {
    console.error(`demo: ${error instanceof Error ? error.message : error}`);
    await stop(1);
  }
}

if (import.meta.main) await main();
