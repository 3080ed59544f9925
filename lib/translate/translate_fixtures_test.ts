/**
 * Golden fixtures: `tests/fixtures/<case>.in.yaml` (objects, plus an optional
 * leading `kind: Fixture` document with options, requests and server names)
 * → `tests/fixtures/<case>.out.json` (translation without PEM bodies, lookups
 * of the requests through the compiled table, certificates chosen per server
 * name).
 *
 * Rewrite the expected files only on purpose:
 *   UPDATE_FIXTURES=1 tools/deno test -A lib/translate/translate_fixtures_test.ts
 *
 * Every lookup is also checked against the reference matcher.
 *
 * @module
 */

import { parseAllDocuments } from "yaml";
import { assert, assertEquals } from "../../tests/support/assert.ts";
import type {
  EndpointSlice,
  Ingress,
  IngressClass,
  KubeObject,
  Secret,
  Service,
} from "../k8s/objects.ts";
import { createCertificateInspector } from "../tls/certificate_inspector.ts";
import { compileCertificateTable } from "../routing/certificate_table.ts";
import { createReferenceMatcher } from "../../tests/support/reference_matcher.ts";
import { compileRouteTable } from "../routing/route_table.ts";
import type { Match } from "../routing/snapshot.ts";
import { translate } from "./translate.ts";
import type { CertificateBinding, TranslateOptions, Translation } from "./translation.ts";

const FIXTURES = new URL("../../tests/fixtures/", import.meta.url);
const UPDATE = Deno.env.get("UPDATE_FIXTURES") === "1";
const DEFAULT_NOW = "2030-01-01T00:00:00Z";
const SELF_SIGNED = { source: "sluice/self-signed", certPem: "self-signed", keyPem: "self-signed" };

/** The leading `kind: Fixture` document. */
interface FixtureHeader {
  kind: "Fixture";
  /** RFC 3339; default 2030-01-01T00:00:00Z. */
  now?: string;
  options?: Omit<TranslateOptions, "now" | "inspectCertificate">;
  /** `[host, path]` pairs looked up in the compiled table. */
  requests?: [string, string][];
  /** Server names resolved through the certificate table. */
  serverNames?: string[];
}

interface Fixture {
  header: FixtureHeader;
  ingresses: Ingress[];
  ingressClasses: IngressClass[];
  services: Service[];
  endpointSlices: EndpointSlice[];
  secrets: Secret[];
}

function readFixture(text: string, name: string): Fixture {
  const fixture: Fixture = {
    header: { kind: "Fixture" },
    ingresses: [],
    ingressClasses: [],
    services: [],
    endpointSlices: [],
    secrets: [],
  };
  for (const document of parseAllDocuments(text)) {
    if (document.errors.length > 0) throw new Error(`${name}: ${document.errors[0]!.message}`);
    const object = document.toJS() as KubeObject | null;
    if (object === null) continue;
    switch (object.kind) {
      case "Fixture":
        fixture.header = object as unknown as FixtureHeader;
        break;
      case "Ingress":
        fixture.ingresses.push(object as Ingress);
        break;
      case "IngressClass":
        fixture.ingressClasses.push(object as IngressClass);
        break;
      case "Service":
        fixture.services.push(object as Service);
        break;
      case "EndpointSlice":
        fixture.endpointSlices.push(object as EndpointSlice);
        break;
      case "Secret":
        fixture.secrets.push(object as Secret);
        break;
      default:
        throw new Error(`${name}: unknown kind ${JSON.stringify(object.kind)}`);
    }
  }
  return fixture;
}

/** Without PEM bodies, nor the chain fingerprint (a digest of `certPem`, as opaque). */
function withoutPems(binding: CertificateBinding) {
  const { certPem: _cert, keyPem: _key, chainFingerprint: _chain, ...rest } = binding;
  return rest;
}

function describeMatch(match: Match | undefined) {
  if (match === undefined) return { status: 404 };
  return {
    status: match.backend.endpoints.length > 0 ? 200 : 503,
    ingress: match.ingress,
    host: match.host,
    path: match.path,
    pathType: match.pathType,
    backend: match.backend.key,
    ...(match.canary === undefined ? {} : { canaryBackend: match.canary.backend.key }),
    tls: match.tls,
  };
}

/** The golden form: the translation without PEM bodies, plus lookups. */
function golden(translation: Translation, header: FixtureHeader) {
  const table = compileRouteTable(translation);
  const certificates = compileCertificateTable(translation, { defaultCertificate: SELF_SIGNED });
  const out: Record<string, unknown> = {
    routes: translation.routes,
    backends: translation.backends,
  };
  if (translation.defaultBackend !== undefined) out.defaultBackend = translation.defaultBackend;
  out.tlsHosts = translation.tlsHosts;
  out.certificates = translation.certificates.map(withoutPems);
  if (translation.defaultCertificate !== undefined) {
    out.defaultCertificate = withoutPems(translation.defaultCertificate);
  }
  out.issues = translation.issues;
  if (translation.behaviours !== undefined) out.behaviours = translation.behaviours;
  if (translation.appRoots !== undefined) out.appRoots = translation.appRoots;
  if (translation.wwwRedirects !== undefined) out.wwwRedirects = translation.wwwRedirects;
  if (header.requests !== undefined) {
    out.lookups = header.requests.map(([host, path]) => {
      const match = table.lookup(host, path);
      // The reference matcher knows routes, not annotations: the behaviour is the Ingress's own,
      // the canary the route's.
      const { behaviour, canary, ...routed } = match ?? {};
      assertEquals(behaviour?.source, translation.behaviours?.[match?.ingress ?? ""]);
      assertEquals(
        canary?.rule,
        translation.routes.find((r) =>
          r.ingress === match?.ingress && r.host === match.host && r.path === match.path &&
          r.pathType === match.pathType
        )?.canary,
      );
      assertEquals(
        match === undefined ? undefined : routed,
        createReferenceMatcher(translation).lookup(host, path),
        `reference for ${host} ${path}`,
      );
      return { request: `${host} ${path}`, ...describeMatch(match) };
    });
  }
  if (header.serverNames !== undefined) {
    out.certificateFor = Object.fromEntries(
      header.serverNames.map((name) => [name, certificates.resolve(name).source]),
    );
  }
  return out;
}

const names = [...Deno.readDirSync(FIXTURES)]
  .filter((entry) => entry.isFile && entry.name.endsWith(".in.yaml"))
  .map((entry) => entry.name.slice(0, -".in.yaml".length))
  .sort();

Deno.test("the fixture folder holds at least 40 golden cases", () => {
  assert(names.length >= 40, `only ${names.length} fixtures`);
});

const inspectCertificate = createCertificateInspector();

for (const name of names) {
  Deno.test(`fixture ${name}`, async () => {
    const input = await Deno.readTextFile(new URL(`${name}.in.yaml`, FIXTURES));
    const fixture = readFixture(input, name);
    const translation = translate(fixture, {
      ...fixture.header.options,
      now: Date.parse(fixture.header.now ?? DEFAULT_NOW),
      inspectCertificate,
    });
    // The translation is plain data: it survives a structured clone unchanged.
    assertEquals(structuredClone(translation), translation);
    const actual = `${JSON.stringify(golden(translation, fixture.header), null, 2)}\n`;
    const outUrl = new URL(`${name}.out.json`, FIXTURES);
    if (UPDATE) {
      await Deno.writeTextFile(outUrl, actual);
      return;
    }
    let expected: string;
    try {
      expected = await Deno.readTextFile(outUrl);
    } catch {
      throw new Error(`Missing ${name}.out.json: run with UPDATE_FIXTURES=1 and review it`);
    }
    assertEquals(JSON.parse(actual), JSON.parse(expected));
  });
}
