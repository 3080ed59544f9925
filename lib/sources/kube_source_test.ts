import { assertEquals } from "../../tests/support/assert.ts";
import { planReflectors } from "./kube_source.ts";

const describe = (options: Parameters<typeof planReflectors>[0]) =>
  planReflectors(options).map((p) =>
    [p.kind, p.namespace ?? "*", p.fieldSelector ?? "", p.labelSelector ?? ""].join(" ").trim()
  );

Deno.test("planReflectors() watches every kind in all namespaces by default, TLS Secrets only", () => {
  assertEquals(describe({}), [
    "IngressClass *",
    "Ingress *",
    "Service *",
    "EndpointSlice *",
    "Secret * type=kubernetes.io/tls",
  ]);
});

Deno.test("planReflectors() runs one reflector per watched namespace for each namespaced kind", () => {
  assertEquals(describe({ watchNamespaces: ["b", "a", "a", ""] }), [
    "IngressClass *",
    "Ingress a",
    "Ingress b",
    "Service a",
    "Service b",
    "EndpointSlice a",
    "EndpointSlice b",
    "Secret a type=kubernetes.io/tls",
    "Secret b type=kubernetes.io/tls",
  ]);
});

Deno.test("planReflectors() pins the default certificate and backend when their namespace is not watched", () => {
  assertEquals(
    describe({
      watchNamespaces: ["shop"],
      defaultSslCertificate: "sluice/default-cert",
      defaultBackendService: "sluice/fallback:http",
    }).slice(5),
    [
      "Secret sluice type=kubernetes.io/tls,metadata.name=default-cert",
      "Service sluice metadata.name=fallback",
      "EndpointSlice sluice  kubernetes.io/service-name=fallback",
    ],
  );
  // Watched anyway: nothing extra.
  assertEquals(
    describe({ watchNamespaces: ["sluice"], defaultSslCertificate: "sluice/default-cert" }).length,
    5,
  );
  // All namespaces: nothing extra either.
  assertEquals(describe({ defaultBackendService: "sluice/fallback" }).length, 5);
});
