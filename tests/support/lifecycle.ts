/**
 * What the e2e start-up and shutdown tests share: Sluice as a process on
 * a `--manifests` directory in front of one loopback echo backend (a plain
 * host `shop.test` and a TLS host `web.example.com`), raw HTTP/1.1
 * connections to it over TCP or TLS (for keep-alive and framing at
 * shutdown), its log lines, temporary directories, and a copy of a
 * kubeconfig pointed at another server (a relay in front of the apiserver).
 *
 * Test support only; talks to Sluice over its ports and reads its logs.
 *
 * @module
 */
import { parse, stringify } from "yaml";
import { type EchoBackend, startEchoBackend } from "./echo_backend.ts";
import { writeManifestDir } from "./manifest_dir.ts";
import { headerValue, RawConnection } from "./raw_http.ts";
import { type SluiceProcess, spawnSluice } from "./sluice_process.ts";
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";

/** The TLS host of {@linkcode spawnOnManifests}. */
export const TLS_HOST = "web.example.com";
const TLS_CERTIFICATE = await generateSelfSignedCertificate({
  hostnames: [TLS_HOST],
  commonName: TLS_HOST,
});

/** What one request through Sluice answered. */
export interface Answer {
  readonly status: number;
  /** `X-Echo-Service` of the backend, if it answered. */
  readonly service: string | undefined;
}

/** Sluice on a manifest directory, its backend, and ways to reach it; dispose to stop all. */
export interface ManifestSite extends AsyncDisposable {
  readonly sluice: SluiceProcess;
  readonly backend: EchoBackend;
  /** The `--manifests` directory (write more files into it). */
  readonly directory: string;
  /** GET `path` of `shop.test` (or the site's host, or `options.host`) over plain HTTP on a new connection. */
  get(path: string, options?: { host?: string }): Promise<Answer>;
  /** A new raw connection to the HTTP port, or a TLS one (SNI `web.example.com`) to the HTTPS port. */
  open(scheme: "http" | "https"): Promise<RawConnection>;
}

/**
 * Starts an echo backend and Sluice (`main.ts`, the start task's permissions)
 * on a manifest directory routing `shop.test` (or `options.host`) and the TLS
 * host `web.example.com` to it, with `args` added.
 */
export async function spawnOnManifests(
  args: readonly string[],
  options: { host?: string } = {},
): Promise<ManifestSite> {
  const backend = await startEchoBackend({ name: "web" });
  const host = options.host ?? "shop.test";
  const dir = await writeManifestDir([
    { namespace: "shop", name: "web", host, port: backend.port },
    {
      namespace: "secure",
      name: "web",
      host: TLS_HOST,
      port: backend.port,
      tls: { certPem: TLS_CERTIFICATE.certPem, keyPem: TLS_CERTIFICATE.keyPem },
    },
  ]);
  const sluice = await spawnSluice([`--manifests=${dir.path}`, "--access-log=false", ...args]);
  const site: ManifestSite = {
    sluice,
    backend,
    directory: dir.path,
    async get(path, options = {}) {
      const wire = await site.open("http");
      try {
        const name = options.host ?? host;
        await wire.send(`GET ${path} HTTP/1.1\r\nHost: ${name}\r\nConnection: close\r\n\r\n`);
        const response = await wire.readResponse();
        return {
          status: response.status,
          service: headerValue(response.headers, "x-echo-service"),
        };
      } finally {
        wire.close();
      }
    },
    async open(scheme) {
      if (scheme === "http") {
        return await RawConnection.open(sluice.httpPort);
      }
      const tcp = await Deno.connect({ hostname: "127.0.0.1", port: sluice.httpsPort });
      const tls = await Deno.startTls(tcp, {
        hostname: TLS_HOST,
        caCerts: [TLS_CERTIFICATE.certPem],
      });
      await tls.handshake();
      return RawConnection.wrap(tls);
    },
    async [Symbol.asyncDispose]() {
      await sluice.stop("SIGKILL");
      await backend.close();
      await dir.remove();
    },
  };
  return site;
}

/** The status of a GET of `path` on Sluice's health port. */
export async function status(sluice: SluiceProcess, path: string): Promise<number> {
  const r = await fetch(`http://127.0.0.1:${sluice.healthPort}${path}`);
  await r.body?.cancel();
  return r.status;
}

/** Sluice's log records, access lines left out. */
export function lifecycleRecords(sluice: SluiceProcess): Record<string, unknown>[] {
  return sluice.records().filter((r) => r.component !== "access" && r.level !== undefined);
}

/** The messages of {@linkcode lifecycleRecords}. */
export function messages(sluice: SluiceProcess): string[] {
  return lifecycleRecords(sluice).map((r) => String(r.message ?? ""));
}

/** A new temporary directory whose name starts with `prefix`; disposing it removes it. */
export async function tempDir(prefix: string): Promise<{ path: string } & AsyncDisposable> {
  const path = await Deno.makeTempDir({ prefix });
  return { path, [Symbol.asyncDispose]: () => Deno.remove(path, { recursive: true }) };
}

/** A copy of `kubeconfig` whose clusters all point at `server`; disposing it deletes it. */
export async function relayedKubeconfig(
  kubeconfig: string,
  server: string,
): Promise<{ path: string } & AsyncDisposable> {
  const config = parse(await Deno.readTextFile(kubeconfig)) as {
    clusters?: { cluster?: { server?: string } }[];
  };
  for (const entry of config.clusters ?? []) {
    if (entry.cluster !== undefined) entry.cluster.server = server;
  }
  const dir = await tempDir("sluice-lifecycle-kubeconfig-");
  const path = `${dir.path}/kubeconfig`;
  await Deno.writeTextFile(path, stringify(config), { mode: 0o600 });
  return { path, [Symbol.asyncDispose]: () => dir[Symbol.asyncDispose]() };
}
