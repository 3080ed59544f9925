/**
 * Writes a temporary `--manifests` directory for cluster-free end-to-end
 * tests and benchmarks: the IngressClass `sluice`, and per site an Ingress,
 * a Service and an EndpointSlice pointing at a loopback backend (allowed
 * here: no apiserver validates these files), optionally with a TLS Secret.
 *
 * @module
 */
import { join } from "node:path";
import { type EchoBackend, startEchoBackend } from "./echo_backend.ts";

/** One host served by one backend. */
export interface ManifestSite {
  readonly namespace: string;
  /** Ingress and Service name. */
  readonly name: string;
  readonly host: string;
  /** The backend's loopback port. */
  readonly port: number;
  /** Serve the host over TLS with this certificate (a Secret `<name>-tls`). */
  readonly tls?: { readonly certPem: string; readonly keyPem: string };
}

/** A written directory; `remove()` deletes it. */
export interface ManifestDir {
  readonly path: string;
  remove(): Promise<void>;
}

/** The YAML of one site (Ingress, Service, EndpointSlice, and the Secret if TLS). */
export function siteYaml(site: ManifestSite): string {
  const { namespace, name, host, port, tls } = site;
  const docs = [
    `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: ${name}
  namespace: ${namespace}
spec:
  ingressClassName: sluice
${tls ? `  tls:\n    - hosts: ["${host}"]\n      secretName: ${name}-tls\n` : ""}  rules:
    - host: "${host}"
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service:
                name: ${name}
                port:
                  name: http`,
    `apiVersion: v1
kind: Service
metadata:
  name: ${name}
  namespace: ${namespace}
spec:
  ports:
    - name: http
      port: 80
      targetPort: ${port}`,
    `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ${name}-local
  namespace: ${namespace}
  labels:
    kubernetes.io/service-name: ${name}
addressType: IPv4
ports:
  - name: http
    port: ${port}
endpoints:
  - addresses: ["127.0.0.1"]
    conditions:
      ready: true`,
  ];
  if (tls) {
    docs.push(`apiVersion: v1
kind: Secret
metadata:
  name: ${name}-tls
  namespace: ${namespace}
type: kubernetes.io/tls
data:
  tls.crt: ${btoa(tls.certPem)}
  tls.key: ${btoa(tls.keyPem)}`);
  }
  return docs.join("\n---\n") + "\n";
}

/** Writes the IngressClass and every site into a new temporary directory. */
export async function writeManifestDir(sites: readonly ManifestSite[]): Promise<ManifestDir> {
  const path = await Deno.makeTempDir({ prefix: "sluice-manifests-" });
  await Deno.writeTextFile(
    join(path, "ingress_class.yaml"),
    `apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: sluice
spec:
  controller: sluice.dev/ingress-controller
`,
  );
  for (const site of sites) {
    await Deno.writeTextFile(join(path, `${site.namespace}_${site.name}.yaml`), siteYaml(site));
  }
  return { path, remove: () => Deno.remove(path, { recursive: true }) };
}

/** An echo backend behind one site in a fresh directory; `close()` stops the one and removes the other. */
export interface EchoSite {
  readonly backend: EchoBackend;
  readonly dir: ManifestDir;
  close(): Promise<void>;
}

/** {@linkcode EchoSite}: the Ingress `shop/web` at `shop.test`, its echo backend named `name` (default `web`). */
export async function echoSite(options: { readonly name?: string } = {}): Promise<EchoSite> {
  const backend = await startEchoBackend({ name: options.name ?? "web" });
  const dir = await writeManifestDir([
    { namespace: "shop", name: "web", host: "shop.test", port: backend.port },
  ]);
  return {
    backend,
    dir,
    async close() {
      await backend.close();
      await dir.remove();
    },
  };
}
