/**
 * Tests of the compiled Gateway route table's own rules: Gateway API
 * durations, hostname groups (one wildcard covering several labels), and
 * weighted backend picks. Matching through the handler is pinned in
 * `lib/proxy/gateway_routing_test.ts`.
 *
 * @module
 */
import { assertEquals } from "../../tests/support/assert.ts";
import type { HostRoutes, RouteEntry } from "../translate/gateway/types.ts";
import {
  compileGatewayTable,
  type GatewayMatch,
  parseGatewayDuration,
  pickGatewayBackend,
} from "./gateway_table.ts";

Deno.test("parseGatewayDuration() reads GEP-2257 durations and refuses anything else", () => {
  const cases: [string, number | undefined][] = [
    ["1s", 1_000],
    ["500ms", 500],
    ["1m30s", 90_000],
    ["1h", 3_600_000],
    ["1h2m3s4ms", 3_723_004],
    ["0s", 0],
    ["", undefined],
    ["1", undefined],
    ["1.5s", undefined],
    ["-1s", undefined],
    ["1d", undefined],
    ["123456s", undefined],
    ["1h1h1h1h1h", undefined],
  ];
  for (const [text, ms] of cases) assertEquals(parseGatewayDuration(text), ms, text);
});

function entry(route: string, hostname: string, timeouts?: RouteEntry["timeouts"]): RouteEntry {
  return {
    route,
    rule: 0,
    match: 0,
    hostname,
    matches: { path: { type: "PathPrefix", value: "/" }, headers: [], queryParams: [] },
    filters: [],
    backends: [{ key: "ns/web:80", service: "ns/web", port: 80, weight: 1 }],
    ...(timeouts !== undefined ? { timeouts } : {}),
  };
}

function group(hostname: string, route: string, port = 80): HostRoutes {
  return { port, protocol: "HTTP", hostname, certificates: [], entries: [entry(route, hostname)] };
}

Deno.test("compileGatewayTable() picks the exact host, then the longest covering wildcard, then any host, per port", () => {
  const table = compileGatewayTable([
    group("a.example.com", "ns/exact"),
    group("*.example.com", "ns/wide"),
    group("*.b.example.com", "ns/narrow"),
    group("", "ns/any"),
    group("a.example.com", "ns/other-port", 443),
  ], [{ key: "ns/web:80", service: "ns/web", endpoints: [] }]);
  const routeFor = (host: string, port = 80) =>
    table.lookup({ port, host, path: "/", method: "GET", header: () => [], query: "" })?.entry
      .route;
  const cases: [string, number, string | undefined][] = [
    ["a.example.com", 80, "ns/exact"],
    ["A.Example.COM.:8080", 80, "ns/exact"],
    ["x.example.com", 80, "ns/wide"],
    ["x.y.example.com", 80, "ns/wide"],
    ["x.b.example.com", 80, "ns/narrow"],
    ["example.com", 80, "ns/any"],
    ["a.example.com", 443, "ns/other-port"],
    ["x.example.com", 443, undefined],
    ["a.example.com", 8443, undefined],
  ];
  for (const [host, port, route] of cases) {
    assertEquals(routeFor(host, port), route, `${host} ${port}`);
  }
  assertEquals(table.size, 5);
});

Deno.test("compileGatewayTable() answers on a Gateway address only with that Gateway's routes", () => {
  const on = (address: string | undefined, route: string): HostRoutes => ({
    ...group("", route),
    ...(address === undefined ? {} : { address }),
  });
  const table = compileGatewayTable([
    on("127.0.1.1", "ns/first"),
    on("127.0.1.2", "ns/second"),
    on(undefined, "ns/main"),
  ], [{ key: "ns/web:80", service: "ns/web", endpoints: [] }]);
  const routeOn = (address: string | undefined) =>
    table.lookup({
      address,
      port: 80,
      host: "a.example.com",
      path: "/",
      method: "GET",
      header: () => [],
      query: "",
    })?.entry.route;
  const cases: [string | undefined, string | undefined][] = [
    ["127.0.1.1", "ns/first"],
    ["127.0.1.2", "ns/second"],
    [undefined, "ns/main"],
    // A listener address without a Gateway serves nothing, not the main listeners' routes.
    ["127.0.1.3", undefined],
  ];
  for (const [address, route] of cases) assertEquals(routeOn(address), route, `${address}`);
});

Deno.test("pickGatewayBackend() follows the weights, and picks nothing when they sum to zero", () => {
  const match = {
    backends: [{ weight: 1, invalid: "x" }, { weight: 3, invalid: "y" }],
    totalWeight: 4,
  } as unknown as GatewayMatch;
  const cases: [number, string | undefined][] = [[0, "x"], [0.24, "x"], [0.25, "y"], [0.99, "y"]];
  for (const [random, invalid] of cases) {
    assertEquals(pickGatewayBackend(match, random)?.invalid, invalid, `${random}`);
  }
  assertEquals(pickGatewayBackend({ ...match, totalWeight: 0 }, 0.5), undefined);
});

Deno.test("compileGatewayTable() takes the shorter of a rule's timeouts; zero disables one", () => {
  const table = (timeouts: RouteEntry["timeouts"]) =>
    compileGatewayTable([{
      port: 80,
      protocol: "HTTP",
      hostname: "",
      certificates: [],
      entries: [entry("ns/r", "", timeouts)],
    }], []).lookup({ port: 80, host: "h", path: "/", method: "GET", header: () => [], query: "" });
  const cases: [RouteEntry["timeouts"], number | undefined][] = [
    [{ request: "10s" }, 10_000],
    [{ request: "10s", backendRequest: "2s" }, 2_000],
    [{ request: "0s", backendRequest: "2s" }, 2_000],
    [{ request: "0s" }, undefined],
    [{ request: "bogus" }, undefined],
    [undefined, undefined],
  ];
  for (const [timeouts, ms] of cases) {
    assertEquals(table(timeouts)?.timeoutMs, ms, JSON.stringify(timeouts));
  }
});
