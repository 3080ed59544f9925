/**
 * The safety net of `http_route_memo.ts`: over every Gateway API fixture,
 * processing HTTPRoutes (and the whole `translate()`) with a memo kept across
 * changes equals processing them from scratch, after each object is replaced
 * by an edited copy, deleted and put back; and the memo reuses, or
 * recompiles, exactly what it should.
 */
import { parseAllDocuments } from "yaml";
import { assert, assertEquals } from "../../../tests/support/assert.ts";
import type { KubeObject, Service } from "../../k8s/objects.ts";
import type { Kind } from "../../store/matters.ts";
import { ObjectStore } from "../../store/object_store.ts";
import { createCertificateInspector } from "../../tls/certificate_inspector.ts";
import { DEFAULT_CONTROLLER_NAME } from "../class_selection.ts";
import { translate } from "../translate.ts";
import { createTranslationMemo } from "../translation_memo.ts";
import { type Issue, sortIssues } from "../issues.ts";
import { processGatewayClasses } from "./gateway_classes.ts";
import { processGateways } from "./gateways.ts";
import { compiledRouteOf, type HttpRouteMemo } from "./http_route_memo.ts";
import { processHttpRoutes } from "./http_routes.ts";
import type { HTTPRoute, ReferenceGrant } from "./types.ts";

const FIXTURES = new URL("../../../tests/fixtures/gateway/", import.meta.url);
const NOW = "2030-01-01T00:00:00Z";

type Entry = { kind: string; object: KubeObject & Record<string, unknown> };

async function readFixtures(): Promise<{ name: string; objects: Entry[] }[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(FIXTURES)) {
    if (entry.name.endsWith(".in.yaml")) files.push(entry.name);
  }
  const out = [];
  for (const file of files.sort()) {
    const objects: Entry[] = [];
    for (const document of parseAllDocuments(await Deno.readTextFile(new URL(file, FIXTURES)))) {
      const object = document.toJS() as Entry["object"] | null;
      if (object === null || object.kind === "Fixture") continue;
      objects.push({ kind: object.kind ?? "", object });
    }
    out.push({ name: file, objects });
  }
  return out;
}

function byKey<T extends KubeObject>(objects: readonly T[]): Map<string, T> {
  return new Map(objects.map((o) => [`${o.metadata?.namespace}/${o.metadata?.name}`, o]));
}

/** The Gateway translation's steps up to the HTTPRoutes, as `translate_gateway.ts` runs them. */
function processRoutes(entries: readonly Entry[], memo: HttpRouteMemo | undefined) {
  const of = <T>(kind: string) => entries.filter((e) => e.kind === kind).map((e) => e.object as T);
  const issues: Issue[] = [];
  const grants = of<ReferenceGrant>("ReferenceGrant");
  const classes = processGatewayClasses(of("GatewayClass"), {
    controllerName: DEFAULT_CONTROLLER_NAME,
    supportedFeatures: [],
    now: NOW,
  });
  const gateways = processGateways(of("Gateway"), {
    ourClasses: new Set(classes.models.filter((c) => c.accepted).map((c) => c.name)),
    secrets: byKey(of("Secret")),
    grants,
    now: NOW,
    issues,
  });
  const namespaceLabels = new Map<string, Record<string, string>>();
  for (const ns of of<KubeObject>("Namespace")) {
    const name = ns.metadata?.name ?? "";
    namespaceLabels.set(name, { ...ns.metadata?.labels, "kubernetes.io/metadata.name": name });
  }
  const routes = processHttpRoutes(of<HTTPRoute>("HTTPRoute"), {
    controllerName: DEFAULT_CONTROLLER_NAME,
    gateways: new Map(gateways.map((g) => [g.key, g])),
    namespaceLabels,
    services: byKey(of<Service>("Service")),
    grants,
    now: NOW,
    issues,
    memo,
  });
  return {
    placed: routes.placed.map((p) => ({
      entry: p.entry,
      created: p.created,
      listener: `${p.listener.gateway} ${p.listener.model.name}`,
    })),
    statuses: routes.statuses,
    attached: gateways.flatMap((g) => g.listeners.map((l) => l.attachedRoutes)),
    issues: sortIssues(issues),
  };
}

/** A copy of `object` with something the HTTPRoute processing reads changed. */
function edited({ kind, object }: Entry): Entry {
  const copy = structuredClone(object) as Entry["object"] & { spec?: Record<string, unknown> };
  switch (kind) {
    case "HTTPRoute":
      copy.spec = {
        ...copy.spec,
        hostnames: ["edited.example.com"],
        rules: [{ backendRefs: [{ name: "web", port: 8080 }] }],
      };
      break;
    case "Service":
      copy.spec = { ports: [{ name: "other", port: 9999 }] };
      break;
    case "ReferenceGrant":
      copy.spec = { ...copy.spec, from: [] };
      break;
    case "Gateway":
      copy.spec = {
        ...copy.spec,
        listeners: [{ name: "edited", port: 80, protocol: "HTTP" }],
      };
      break;
    case "Namespace":
      copy.metadata = { ...copy.metadata, labels: { edited: "yes" } };
      break;
    default:
      copy.metadata = { ...copy.metadata, generation: 99 };
  }
  return { kind, object: copy };
}

Deno.test("processHttpRoutes() with a memo kept across changes equals processing from scratch, for every gateway fixture", async () => {
  const fixtures = await readFixtures();
  assert(fixtures.length >= 25, `only ${fixtures.length} fixtures found`);
  let compared = 0;
  for (const fixture of fixtures) {
    let objects = [...fixture.objects];
    const memo: HttpRouteMemo = new WeakMap();
    const check = (label: string) => {
      const fresh = processRoutes(objects, undefined);
      assertEquals(processRoutes(objects, memo), fresh, label);
      assertEquals(processRoutes(objects, memo), fresh, `${label}, again`);
      compared++;
    };
    check(`${fixture.name}: as loaded`);
    for (const [i, entry] of fixture.objects.entries()) {
      const label = `${fixture.name}: ${entry.kind} ${entry.object.metadata?.namespace ?? ""}/${
        entry.object.metadata?.name ?? ""
      }`;
      objects = objects.with(i, { kind: entry.kind, object: structuredClone(entry.object) });
      check(`${label} copied`);
      objects = objects.with(i, edited(entry));
      check(`${label} edited`);
      objects = objects.filter((_, j) => j !== i);
      check(`${label} deleted`);
      objects = [...objects.slice(0, i), entry, ...objects.slice(i)];
      check(`${label} restored`);
    }
  }
  assert(compared > 200, `only ${compared} comparisons made`);
});

Deno.test("translate() with a memo kept across changes equals translate() from scratch, for every gateway fixture", async () => {
  const inspectCertificate = createCertificateInspector();
  let compared = 0;
  let routed = 0;
  for (const fixture of await readFixtures()) {
    const store = new ObjectStore();
    const put = ({ kind, object }: Entry) => store.upsert(kind as Kind, object);
    fixture.objects.forEach(put);
    const memo = createTranslationMemo();
    const check = (label: string) => {
      const options = { gatewayApi: true, now: Date.parse(NOW), inspectCertificate };
      const fresh = translate(store.objects(), options);
      assertEquals(translate(store.objects(), { ...options, memo }), fresh, label);
      assertEquals(translate(store.objects(), { ...options, memo }), fresh, `${label}, again`);
      compared++;
      if ((fresh.gateway?.routes.length ?? 0) > 0) routed++;
    };
    check(`${fixture.name}: as loaded`);
    for (const entry of fixture.objects) {
      const label = `${fixture.name}: ${entry.kind} ${entry.object.metadata?.name ?? ""}`;
      put(edited(entry));
      check(`${label} edited`);
      store.delete(entry.kind as Kind, entry.object);
      check(`${label} deleted`);
      put(entry);
      check(`${label} restored`);
    }
  }
  assert(compared > 200, `only ${compared} comparisons made`);
  assert(routed > 100, `only ${routed} translations with Gateway API routes`);
});

const web = (port: number): Service => ({
  metadata: { namespace: "data", name: "web" },
  spec: { ports: [{ port }] },
});
const grant = (from: string): ReferenceGrant => ({
  metadata: { namespace: "data", name: "routes" },
  spec: {
    from: [{ group: "gateway.networking.k8s.io", kind: "HTTPRoute", namespace: from }],
    to: [{ group: "", kind: "Service" }],
  },
});
const route = (namespace: string): HTTPRoute => ({
  metadata: { namespace, name: "web" },
  spec: { rules: [{ backendRefs: [{ name: "web", namespace: "data", port: 8080 }] }] },
});
const at = (r: HTTPRoute) => ({ namespace: r.metadata!.namespace!, name: r.metadata!.name! });

Deno.test("compiledRouteOf() reuses an unchanged route's compilation and recompiles a replaced route", () => {
  const memo: HttpRouteMemo = new WeakMap();
  const refs = { services: byKey([web(8080)]), grants: [grant("shop")], memo };
  const first = route("shop");
  const compiled = compiledRouteOf(first, at(first), refs);
  assert(compiledRouteOf(first, at(first), refs) === compiled, "reused");
  // A new Service map and grant list holding the same objects: still reused.
  assert(
    compiledRouteOf(first, at(first), { ...refs, services: new Map(refs.services) }) === compiled,
    "reused with the same objects",
  );
  const second = route("shop");
  assert(compiledRouteOf(second, at(second), refs) !== compiled, "a new route object recompiles");
});

Deno.test("compiledRouteOf() recompiles when a Service the route names is added, changed or deleted", () => {
  const memo: HttpRouteMemo = new WeakMap();
  const r = route("data");
  const unresolved = (services: Service[]) =>
    compiledRouteOf(r, at(r), { services: byKey(services), grants: [], memo }).unresolved?.reason;
  assertEquals(unresolved([]), "BackendNotFound");
  assertEquals(unresolved([web(8080)]), undefined);
  assertEquals(unresolved([web(9090)]), "BackendNotFound");
  assertEquals(unresolved([web(8080)]), undefined);
  assertEquals(unresolved([]), "BackendNotFound");
});

Deno.test("compiledRouteOf() recompiles a cross-namespace route when the ReferenceGrants change, and only such a route", () => {
  const memo: HttpRouteMemo = new WeakMap();
  const services = byKey([web(8080)]);
  const cross = route("shop");
  const local = route("data");
  const reason = (r: HTTPRoute, grants: ReferenceGrant[]) =>
    compiledRouteOf(r, at(r), { services, grants, memo }).unresolved?.reason;
  assertEquals(reason(cross, []), "RefNotPermitted");
  assertEquals(reason(cross, [grant("shop")]), undefined);
  assertEquals(reason(cross, [grant("other")]), "RefNotPermitted");
  assertEquals(reason(cross, []), "RefNotPermitted");

  const compiled = compiledRouteOf(local, at(local), { services, grants: [], memo });
  assert(
    compiledRouteOf(local, at(local), { services, grants: [grant("shop")], memo }) === compiled,
    "a route in the Service's namespace reads no ReferenceGrant",
  );
});
