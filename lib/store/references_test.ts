import { assertEquals } from "../../tests/support/assert.ts";
import type { Ingress } from "../k8s/objects.ts";
import { ingressReferences } from "./references.ts";

function ingress(annotations: Record<string, unknown> | undefined, tls = false): Ingress {
  return {
    metadata: { namespace: "shop", name: "admin", ...(annotations ? { annotations } : {}) },
    spec: {
      rules: [{
        host: "shop.example.com",
        http: {
          paths: [{
            path: "/",
            pathType: "Prefix",
            backend: { service: { name: "web", port: { number: 80 } } },
          }],
        },
      }],
      ...(tls ? { tls: [{ secretName: "shop-tls" }] } : {}),
    },
  } as Ingress;
}

const AUTH_SECRET = "nginx.ingress.kubernetes.io/auth-secret";

Deno.test("ingressReferences() counts the Secret of basic authentication, in any namespace it names", () => {
  const cases: [string, Ingress, string[]][] = [
    ["no annotation", ingress(undefined), []],
    ["TLS only", ingress(undefined, true), ["shop/shop-tls"]],
    ["a name", ingress({ [AUTH_SECRET]: "users" }), ["shop/users"]],
    ["namespace/name", ingress({ [AUTH_SECRET]: "auth/users" }), ["auth/users"]],
    ["with TLS", ingress({ [AUTH_SECRET]: "users" }, true), ["shop/shop-tls", "shop/users"]],
    // A superset: counted whether or not auth-type is set or the name is valid.
    ["without auth-type", ingress({ [AUTH_SECRET]: "users", other: "x" }), ["shop/users"]],
    ["empty", ingress({ [AUTH_SECRET]: "" }), []],
    ["not a string", ingress({ [AUTH_SECRET]: 7 }), []],
  ];
  for (const [name, object, secrets] of cases) {
    const refs = ingressReferences(object);
    assertEquals([...refs.secrets].sort(), secrets, name);
    assertEquals(refs.services, ["shop/web"], name);
  }
});
