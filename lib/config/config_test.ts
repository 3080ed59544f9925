import {
  assert,
  assertEquals,
  assertMatch,
  assertStringIncludes,
} from "../../tests/support/assert.ts";
import { type Config, envName, FLAGS, parseBytes, parseConfig, parseDuration } from "./config.ts";

const opts = { env: {}, cpus: 4 };

function config(args: string[], env: Record<string, string> = {}): Config {
  const r = parseConfig(args, { env, cpus: 4 });
  if (r.kind !== "config") throw new Error(`Expected a config, got ${JSON.stringify(r)}`);
  return r.config;
}

Deno.test("parseConfig() gives the documented defaults", () => {
  const c = config([]);
  assertEquals(
    [
      c.ingressClass,
      c.controllerName,
      c.httpPort,
      c.httpsPort,
      c.healthPort,
      c.electionId,
      c.workers,
    ],
    ["sluice", "sluice.dev/ingress-controller", 8080, 8443, 10254, "sluice-leader", 4],
  );
  assertEquals([c.logLevel, c.logFormat, c.accessLog, c.sslRedirect, c.hsts], [
    "info",
    "json",
    true,
    true,
    true,
  ]);
  assertEquals([c.proxyConnectTimeoutMs, c.proxyReadTimeoutMs, c.shutdownTimeoutMs], [
    5000,
    60_000,
    30_000,
  ]);
  assertEquals([c.watchNamespaces, c.publishStatusAddresses, c.maxBodyBytes], [[], [], 0]);
  assertEquals([c.kubeconfig, c.manifests, c.defaultBackendService], [
    undefined,
    undefined,
    undefined,
  ]);
});

Deno.test("parseConfig() reads flags, SLUICE_* variables, and prefers the flag", () => {
  const cases: [string[], Record<string, string>, keyof Config, unknown][] = [
    [["--http-port", "9000"], {}, "httpPort", 9000],
    [["--http-port=9001"], {}, "httpPort", 9001],
    [[], { SLUICE_HTTP_PORT: "9002" }, "httpPort", 9002],
    [["--http-port=9003"], { SLUICE_HTTP_PORT: "9002" }, "httpPort", 9003],
    [["--watch-namespace", "a, b,,c"], {}, "watchNamespaces", ["a", "b", "c"]],
    [["--watch-ingress-without-class"], {}, "watchIngressWithoutClass", true],
    [[], { SLUICE_WATCH_INGRESS_WITHOUT_CLASS: "true" }, "watchIngressWithoutClass", true],
    [[], {}, "ignoreAccessAnnotations", false],
    [["--ignore-access-annotations"], {}, "ignoreAccessAnnotations", true],
    [[], { SLUICE_IGNORE_ACCESS_ANNOTATIONS: "true" }, "ignoreAccessAnnotations", true],
    [
      ["--ignore-access-annotations=false"],
      { SLUICE_IGNORE_ACCESS_ANNOTATIONS: "true" },
      "ignoreAccessAnnotations",
      false,
    ],
    [["--no-hsts"], {}, "hsts", false],
    [["--access-log=false"], {}, "accessLog", false],
    [[], { SLUICE_ACCESS_LOG: "false" }, "accessLog", false],
    [
      ["--default-backend-service", "infra/fallback:http"],
      {},
      "defaultBackendService",
      "infra/fallback:http",
    ],
    [
      ["--default-ssl-certificate", "infra/wildcard"],
      {},
      "defaultSslCertificate",
      "infra/wildcard",
    ],
    [["--proxy-read-timeout", "2m"], {}, "proxyReadTimeoutMs", 120_000],
    [["--proxy-connect-timeout", "750ms"], {}, "proxyConnectTimeoutMs", 750],
    [["--max-body-size", "10m"], {}, "maxBodyBytes", 10 * 2 ** 20],
    [["--log-format", "pretty"], {}, "logFormat", "pretty"],
    [["--workers", "1"], {}, "workers", 1],
    [["--manifests", "examples"], {}, "manifests", "examples"],
    [[], {}, "bindAddress", undefined],
    [["--bind-address", "::"], {}, "bindAddress", "::"],
    [[], { SLUICE_BIND_ADDRESS: "127.0.0.1" }, "bindAddress", "127.0.0.1"],
  ];
  for (const [args, env, key, expected] of cases) {
    assertEquals(config(args, env)[key], expected, `${args.join(" ")} ${JSON.stringify(env)}`);
  }
});

Deno.test("parseConfig() rejects unknown flags and bad values with one line naming them", () => {
  const cases: [string[], Record<string, string>, RegExp][] = [
    [["--bogus"], {}, /Unknown flag '--bogus'/],
    [["--http-port", "http"], {}, /Invalid value "http" for --http-port: expected a whole number/],
    [["--http-port", "70000"], {}, /expected a number from 1 to 65535/],
    [[], { SLUICE_HTTPS_PORT: "-1" }, /for SLUICE_HTTPS_PORT/],
    [["--log-format", "xml"], {}, /expected one of json, pretty/],
    [["--default-ssl-certificate", "just-a-name"], {}, /expected namespace\/name/],
    [["--publish-service", "ns/svc:80"], {}, /without a port/],
    [["--proxy-read-timeout", "soon"], {}, /expected a duration/],
    [["--max-body-size", "lots"], {}, /expected a size/],
    [["--workers", "0"], {}, /from 1 to 256/],
    [[], { SLUICE_HSTS: "maybe" }, /expected true or false/],
    [["stray"], {}, /Unexpected argument|positional/i],
    [["--manifests", "d", "--kubeconfig", "k"], {}, /with --kubeconfig: they need a cluster/],
    [["--bind-address", "localhost"], {}, /for --bind-address: not an IP address/],
    [["--bind-address", "[::]"], {}, /for --bind-address: not an IP address/],
  ];
  for (const [args, env, pattern] of cases) {
    const r = parseConfig(args, { env, cpus: 2 });
    assertEquals(r.kind, "error", `${args.join(" ")} ${JSON.stringify(env)}`);
    if (r.kind === "error") {
      assertMatch(r.message, pattern);
      assert(!r.message.includes("\n"), `one line: ${r.message}`);
    }
  }
});

Deno.test("--help lists every flag with its default and environment variable", () => {
  const r = parseConfig(["--help"], opts);
  assertEquals(r.kind, "help");
  if (r.kind !== "help") return;
  for (const f of FLAGS) {
    assertStringIncludes(r.text, `--${f.name}`);
    assertStringIncludes(r.text, envName(f.name));
  }
  assertStringIncludes(r.text, "(default 8080)");
  assertStringIncludes(r.text, "(default 4:");
});

Deno.test("--help shows what each value is, the values a choice allows, and how to turn a boolean off", () => {
  const r = parseConfig(["--help"], opts);
  if (r.kind !== "help") throw new Error(r.kind);
  const lines = r.text.split("\n");
  const entry = (flag: string) => {
    const at = lines.findIndex((l) => l.startsWith(`  --${flag}`));
    return `${lines[at]}\n${lines[at + 1]}`;
  };
  assertStringIncludes(entry("log-level"), "--log-level=trace|debug|info|warning|error|fatal");
  assertStringIncludes(entry("log-format"), "--log-format=json|pretty");
  assertStringIncludes(entry("http-port"), "--http-port=PORT\n");
  assertStringIncludes(entry("http-port"), "1 to 65535 (default 8080)");
  assertStringIncludes(entry("proxy-read-timeout"), "--proxy-read-timeout=DURATION\n");
  assertStringIncludes(entry("max-body-size"), "--max-body-size=SIZE\n");
  assertStringIncludes(entry("hsts-max-age"), "--hsts-max-age=SECONDS\n");
  assertStringIncludes(entry("hsts"), "  --hsts, --no-hsts\n");
  assertStringIncludes(entry("hsts"), "(default on)");
  assertStringIncludes(entry("watch-ingress-without-class"), "(default off)");
  assertMatch(r.text, /DURATION +a number and a unit: ms, s, m or h/);
  assertMatch(r.text, /SIZE +bytes, or with a binary unit: k, m or g/);
  assertMatch(r.text, /--no-flag or --flag=false/);
  assertStringIncludes(r.text, "  --version\n");
  // Was a bug: --workers said "(default: the number of CPUs, …) (default 2)".
  for (const f of FLAGS) {
    const said = entry(f.name).match(/\(default/g)?.length ?? 0;
    assert(said <= 1, `--${f.name} states ${said} defaults: ${entry(f.name)}`);
  }
  assertStringIncludes(entry("workers"), "1 to 256 (default 4: the CPUs this process may use");
  // Its one default is the one parsing uses, capped at 256 workers.
  const many = parseConfig(["--help"], { env: {}, cpus: 512 });
  assertStringIncludes(many.kind === "help" ? many.text : "", "1 to 256 (default 256:");
  const parsed = parseConfig([], { env: {}, cpus: 512 });
  assertEquals(parsed.kind === "config" ? parsed.config.workers : parsed.kind, 256);
});

Deno.test("every boolean turns off with --no-<flag> and with --<flag>=false", () => {
  for (const f of FLAGS.filter((f) => f.kind === "boolean")) {
    for (
      const args of [[`--no-${f.name}`], [`--${f.name}=false`], [`--${f.name}`, `--no-${f.name}`]]
    ) {
      assertEquals(config(args)[f.key], false, args.join(" "));
    }
    assertEquals(config([`--${f.name}`])[f.key], true, `--${f.name}`);
  }
});

Deno.test("--version prints the version it is given, before any other check", () => {
  assertEquals(parseConfig(["--version"], { ...opts, version: "1.2.3" }), {
    kind: "version",
    text: "sluice 1.2.3",
  });
  assertEquals(
    parseConfig(["--version", "--http-port=0"], { ...opts, version: "1.2.3" }).kind,
    "version",
  );
  assertEquals(parseConfig(["--version=1"], opts).kind, "error");
});

Deno.test("parseDuration() and parseBytes() accept the documented forms only", () => {
  assertEquals(["500ms", "5s", "5", "1.5m", "2h", "x", "5d", ""].map(parseDuration), [
    500,
    5000,
    5000,
    90_000,
    7_200_000,
    undefined,
    undefined,
    undefined,
  ]);
  assertEquals(["0", "512k", "10m", "1g", "1G", "10mb", "-1", "1t"].map(parseBytes), [
    0,
    512 * 1024,
    10 * 2 ** 20,
    2 ** 30,
    2 ** 30,
    10 * 2 ** 20,
    undefined,
    undefined,
  ]);
});
