/**
 * `enable-cors` over real sockets, through the translation, the handler and
 * the listener: the preflight answered 204 with ingress-nginx's fields and
 * never forwarded, the matching Origin echoed (never another), the backend's
 * own CORS fields replaced, a request whose Origin does not match passed
 * through untouched.
 *
 * @module
 */

import { assertEquals } from "../../tests/support/assert.ts";
import {
  type AnnotatedIngress,
  BACKEND_CORS_FIELDS,
  withAnnotatedWorld,
} from "../../tests/support/annotated_world.ts";
import { headerValues, type RawResponse } from "../../tests/support/raw_http.ts";
import { CORS_DEFAULTS } from "../translate/nginx/ingress_behaviour.ts";

const INGRESSES: readonly AnnotatedIngress[] = [
  {
    name: "listed",
    host: "api.example.com",
    backend: "cors",
    annotations: {
      "enable-cors": "true",
      "cors-allow-origin": "https://app.example.com, https://*.example.org:8443",
      "cors-allow-methods": "GET, POST",
      "cors-allow-headers": "X-Custom, Content-Type",
      "cors-expose-headers": "X-Total",
      "cors-max-age": "600",
    },
  },
  {
    name: "star",
    host: "star.example.com",
    backend: "cors",
    annotations: { "enable-cors": "true" },
  },
  { name: "plain", host: "plain.example.com", backend: "cors" },
];

function request(method: string, host: string, target: string, fields: string[] = []): string {
  return `${method} ${target} HTTP/1.1\r\nHost: ${host}\r\n` +
    fields.map((f) => `${f}\r\n`).join("") + "Connection: close\r\n\r\n";
}

const CORS_NAMES = [
  "access-control-allow-origin",
  "access-control-allow-credentials",
  "access-control-allow-methods",
  "access-control-allow-headers",
  "access-control-expose-headers",
  "access-control-max-age",
];

/** The CORS fields of a response, by name, each with all its values. */
function corsOf(response: RawResponse): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const name of CORS_NAMES) {
    const values = headerValues(response.headers, name);
    if (values.length > 0) out[name] = values;
  }
  return out;
}

const LISTED_FIELDS = (origin: string) => ({
  "access-control-allow-origin": [origin],
  "access-control-allow-credentials": ["true"],
  "access-control-allow-methods": ["GET, POST"],
  "access-control-allow-headers": ["X-Custom, Content-Type"],
  "access-control-expose-headers": ["X-Total"],
  "access-control-max-age": ["600"],
});

Deno.test("a CORS preflight from a listed origin is answered 204 with the fields, and not forwarded", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    for (const origin of ["https://app.example.com", "https://a.example.org:8443"]) {
      const response = await world.ask(
        request("OPTIONS", "api.example.com", "/v1/items", [
          `Origin: ${origin}`,
          "Access-Control-Request-Method: POST",
        ]),
      );
      assertEquals(response.status, 204, origin);
      assertEquals(corsOf(response), LISTED_FIELDS(origin), origin);
      assertEquals(headerValues(response.headers, "content-type"), ["text/plain charset=UTF-8"]);
      assertEquals(response.body.length, 0);
    }
    assertEquals(world.received, []);
  });
});

Deno.test("a preflight from an origin not listed goes to the backend, whose CORS fields are not vouched for", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    for (
      const origin of [
        "https://evil.example",
        "https://a.b.example.org:8443",
        "https://a.example.org",
        "http://app.example.com",
        "https://app.example.com.evil.example",
      ]
    ) {
      const response = await world.ask(
        request("OPTIONS", "api.example.com", "/v1/items", [`Origin: ${origin}`]),
      );
      assertEquals(response.status, 200, origin);
      // ingress-nginx sets no field for it: the backend's own answer stands as it sent it.
      assertEquals(
        headerValues(response.headers, "access-control-allow-origin"),
        ["https://backend.example"],
        origin,
      );
    }
    assertEquals(world.received.length, 5);
  });
});

Deno.test("an actual request from a listed origin gets the fields, replacing the backend's own", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    const response = await world.ask(
      request("GET", "api.example.com", "/v1/items", ["Origin: https://App.Example.com"]),
    );
    assertEquals(response.status, 200);
    assertEquals(corsOf(response), LISTED_FIELDS("https://App.Example.com"));
    // Other fields of the backend are kept.
    assertEquals(headerValues(response.headers, "x-backend-own"), ["kept"]);
    // The request reached the backend with its Origin.
    const seen = world.received.at(-1)!;
    assertEquals(
      seen.headers.filter(([n]) => n.toLowerCase() === "origin").map(([, v]) => v),
      ["https://App.Example.com"],
    );
  });
});

Deno.test("CORS with the default origin * answers every request with *, and preflights without Origin", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    const expected = {
      "access-control-allow-origin": ["*"],
      "access-control-allow-credentials": ["true"],
      "access-control-allow-methods": [CORS_DEFAULTS.methods],
      "access-control-allow-headers": [CORS_DEFAULTS.headers],
      "access-control-max-age": ["1728000"],
    };
    const preflight = await world.ask(request("OPTIONS", "star.example.com", "/"));
    assertEquals(preflight.status, 204);
    assertEquals(corsOf(preflight), expected);
    const get = await world.ask(
      request("GET", "star.example.com", "/", ["Origin: https://anyone.example"]),
    );
    assertEquals(get.status, 200);
    assertEquals(corsOf(get), expected);
    const noOrigin = await world.ask(request("GET", "star.example.com", "/"));
    assertEquals(corsOf(noOrigin), expected);
    assertEquals(world.received.length, 2);
  });
});

Deno.test("a request with an Origin not listed passes through with the backend's fields untouched", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    const response = await world.ask(
      request("GET", "api.example.com", "/", ["Origin: https://evil.example"]),
    );
    assertEquals(response.status, 200);
    const backend = Object.fromEntries(
      BACKEND_CORS_FIELDS.filter(([n]) => n.startsWith("Access")).map((
        [n, v],
      ) => [n.toLowerCase(), [v]]),
    );
    assertEquals(corsOf(response), backend);
  });
});

Deno.test("without enable-cors OPTIONS goes to the backend and its fields are kept", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    const response = await world.ask(
      request("OPTIONS", "plain.example.com", "/", ["Origin: https://app.example.com"]),
    );
    assertEquals(response.status, 200);
    assertEquals(headerValues(response.headers, "access-control-allow-origin"), [
      "https://backend.example",
    ]);
    assertEquals(world.received.map((r) => r.method), ["OPTIONS"]);
  });
});

Deno.test("two Origin fields never make a match echo a list", async () => {
  await withAnnotatedWorld(INGRESSES, async (world) => {
    const response = await world.ask(
      request("GET", "api.example.com", "/", [
        "Origin: https://app.example.com",
        "Origin: https://evil.example",
      ]),
    );
    const echoed = headerValues(response.headers, "access-control-allow-origin");
    // At most one value, and never the origin that is not listed.
    assertEquals(echoed.length, 1);
    assertEquals(echoed.includes("https://evil.example"), false);
  });
});
