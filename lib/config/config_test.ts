/**
 * The command line contract (`parseConfig()`): the documented defaults, flags
 * and SLUICE_* variables (the flag preferred), `--help` and `--version`, and
 * every flag given an empty, negative, huge, malformed, duplicated or
 * conflicting value: refused with one line naming the flag, never a
 * half-configured start. A comment starting "Was a bug" marks a test pinning a
 * fix.
 *
 * @module
 */
import {
  assert,
  assertEquals,
  assertMatch,
  assertStringIncludes,
} from "../../tests/support/assert.ts";
import {
  type Config,
  envName,
  FLAGS,
  parseBytes,
  parseConfig,
  parseDuration,
  type ParseResult,
} from "./config.ts";

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
    [[], {}, "allowCrossNamespaceSecrets", false],
    [["--allow-cross-namespace-secrets"], {}, "allowCrossNamespaceSecrets", true],
    [[], { SLUICE_ALLOW_CROSS_NAMESPACE_SECRETS: "true" }, "allowCrossNamespaceSecrets", true],
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

function parse(args: string[], env: Record<string, string> = {}, cpus = 4): ParseResult {
  return parseConfig(args, { env, cpus });
}

function configOf(args: string[], env: Record<string, string> = {}): Config {
  const r = parse(args, env);
  if (r.kind !== "config") {
    throw new Error(`Expected a config for ${args}, got ${JSON.stringify(r)}`);
  }
  return r.config;
}

/** Asserts `args` is refused with one line that names `flag` (as `--flag` or its variable). */
function assertRefused(args: string[], flag: string, env: Record<string, string> = {}): string {
  const r = parse(args, env);
  const what = `${JSON.stringify(args)} ${JSON.stringify(env)}`;
  assertEquals(r.kind, "error", `${what} is refused (got ${JSON.stringify(r)})`);
  if (r.kind !== "error") return "";
  assert(!r.message.includes("\n"), `one line for ${what}: ${JSON.stringify(r.message)}`);
  assert(
    r.message.includes(`--${flag}`) || r.message.includes(envName(flag)),
    `the message for ${what} names --${flag}: ${r.message}`,
  );
  return r.message;
}

const valued = FLAGS.filter((f) => f.kind !== "boolean");
const ints = FLAGS.filter((f) => f.kind === "int");
const durations = FLAGS.filter((f) => f.kind === "duration");
const booleans = FLAGS.filter((f) => f.kind === "boolean");
const refs = FLAGS.filter((f) => f.kind === "ref");

Deno.test("every flag that takes a value refuses an empty or blank one, naming the flag", () => {
  // Lists are the exception: an empty list is their default (all namespaces, no addresses).
  for (const f of valued.filter((f) => f.kind !== "list")) {
    assertRefused([`--${f.name}=`], f.name);
    assertRefused([`--${f.name}`, ""], f.name);
    assertRefused([`--${f.name}=   `], f.name);
  }
  for (const f of booleans) assertRefused([`--${f.name}=`], f.name);
});

Deno.test("every flag that takes a value refuses to be last without one, naming the flag", () => {
  for (const f of valued) {
    const message = assertRefused([`--${f.name}`], f.name);
    assertMatch(message, /missing; see --help$/);
  }
});

Deno.test("an empty SLUICE_* variable counts as unset, a blank one is refused naming it", () => {
  assertEquals(configOf([], { SLUICE_HTTP_PORT: "" }).httpPort, 8080);
  assertEquals(configOf([], { SLUICE_KUBECONFIG: "" }).kubeconfig, undefined);
  assertRefused([], "http-port", { SLUICE_HTTP_PORT: " " });
  assertRefused([], "ingress-class", { SLUICE_INGRESS_CLASS: "\t" });
});

Deno.test("every number flag refuses signs, fractions, hex, exponents, non-ASCII digits and out-of-range values", () => {
  const bad = ["-1", "+1", "1.5", "1.", ".5", "0x10", "1e3", "1_000", "1,000", "١٢", "Infinity"];
  bad.push("NaN", "99999999999999999999999", String(2 ** 53 + 1));
  for (const f of ints) {
    for (const value of bad) assertRefused([`--${f.name}=${value}`], f.name);
    assertRefused([`--${f.name}=${f.max! + 1}`], f.name);
    if (f.min! > 0) assertRefused([`--${f.name}=${f.min! - 1}`], f.name);
    // The bounds themselves are accepted, with surrounding blanks trimmed.
    assertEquals(configOf([`--${f.name}=${f.min}`])[f.key], f.min);
    assertEquals(configOf([`--${f.name}= ${f.max} `])[f.key], f.max);
  }
});

Deno.test("ports 0 and 65536 are refused for every port flag; 1 and 65535 are accepted", () => {
  for (const flag of ["http-port", "https-port", "health-port", "https-redirect-port"]) {
    assertMatch(assertRefused([`--${flag}=0`], flag), /from 1 to 65535/);
    assertMatch(assertRefused([`--${flag}=65536`], flag), /from 1 to 65535/);
    assertRefused([], flag, { [envName(flag)]: "65536" });
  }
  assertEquals([configOf(["--http-port=1"]).httpPort, configOf(["--http-port=65535"]).httpPort], [
    1,
    65535,
  ]);
});

Deno.test("--flag=value and --flag value parse alike, for good and bad values", () => {
  const cases: [string, string][] = [
    ["http-port", "9000"],
    ["http-port", "nine"],
    ["proxy-read-timeout", "2m"],
    ["proxy-read-timeout", "2 minutes"],
    ["max-body-size", "1g"],
    ["max-body-size", "1t"],
    ["log-level", "debug"],
    ["log-level", "verbose"],
    ["publish-service", "ns/svc"],
    ["publish-service", "svc"],
    ["watch-namespace", "a,b"],
  ];
  for (const [flag, value] of cases) {
    assertEquals(
      parse([`--${flag}`, value]),
      parse([`--${flag}=${value}`]),
      `--${flag} ${value}`,
    );
  }
});

Deno.test("a value starting with a dash is refused naming the flag, never taken as the next flag", () => {
  assertRefused(["--http-port", "-1"], "http-port");
  assertRefused(["--ingress-class", "--http-port=1"], "ingress-class");
  // With = the value is taken as written and then validated.
  assertRefused(["--http-port=-1"], "http-port");
  assertEquals(configOf(["--ingress-class=-odd"]).ingressClass, "-odd");
});

Deno.test("unknown flags and stray arguments are refused, naming what was not understood", () => {
  const cases: [string[], string][] = [
    [["--bogus"], "--bogus"],
    [["--bogus=1"], "--bogus"],
    [["--no-bogus"], "--no-bogus"],
    [["--HTTP-PORT=80"], "--HTTP-PORT"],
    [["--http_port=80"], "--http_port"],
    [["-x"], "-x"],
    [["-p", "80"], "-p"],
    [["--", "--http-port=80"], "--http-port=80"],
    [["stray"], "stray"],
    [["--no-http-port"], "--no-http-port"],
  ];
  for (const [args, named] of cases) {
    const r = parse(args);
    assertEquals(r.kind, "error", JSON.stringify(args));
    if (r.kind === "error") {
      assert(
        r.message.includes(`'${named}'`),
        `${JSON.stringify(args)} names ${named}: ${r.message}`,
      );
      assertMatch(r.message, /; see --help$/);
    }
  }
  // --help does not hide a bad flag.
  assertEquals(parse(["--help", "--bogus"]).kind, "error");
});

Deno.test("boolean flags take true/false/1/0/yes/no after = and refuse anything else", () => {
  for (const f of booleans) {
    for (const [value, expected] of [["TRUE", true], ["1", true], ["yes", true], ["no", false]]) {
      assertEquals(configOf([`--${f.name}=${value}`])[f.key], expected, `--${f.name}=${value}`);
    }
    assertEquals(configOf([`--no-${f.name}`])[f.key], false);
    assertRefused([`--${f.name}=maybe`], f.name);
    assertRefused([`--${f.name}=on`], f.name);
    assertRefused([], f.name, { [envName(f.name)]: "enabled" });
    // "--flag false" is refused (the value is read as a stray argument), not silently true.
    assertEquals(parse([`--${f.name}`, "false"]).kind, "error");
    assertEquals(parse([`--no-${f.name}=true`]).kind, "error");
  }
});

Deno.test("durations refuse negatives, exponents, unknown units, blanks inside and bare units", () => {
  for (const f of durations) {
    for (const value of ["-1s", "1e3", "5d", "5 s", "s", "ms", "1h30m", "5S", "0x10", ".5s"]) {
      assertRefused([`--${f.name}=${value}`], f.name);
    }
  }
});

Deno.test("--max-body-size refuses negatives, fractions and unknown units", () => {
  for (const value of ["-1", "1.5m", "1t", "m", "10 m", "0x10", "1e6"]) {
    assertRefused([`--max-body-size=${value}`], "max-body-size");
  }
});

Deno.test("namespace/name flags refuse a value without exactly one slash, upper case, blanks or a port where none is allowed", () => {
  const bad = [
    "sluice",
    "/sluice",
    "sluice/",
    "a/b/c",
    "Sluice/sluice",
    "sluice/Sluice",
    "sl_uice/x",
    "-a/b",
    "a-/b",
    "a/b-",
    "a /b",
    "a/b c",
    "a\\b",
    "a/b:",
  ];
  for (const f of refs) {
    for (const value of bad) assertRefused([`--${f.name}=${value}`], f.name);
  }
  for (const flag of ["publish-service", "default-ssl-certificate"]) {
    assertMatch(assertRefused([`--${flag}=ns/svc:80`], flag), /without a port/);
  }
  assertEquals(
    configOf(["--default-backend-service=ns/svc-v2:http"]).defaultBackendService,
    "ns/svc-v2:http",
  );
});

// Was a bug: a bad --trusted-proxy-cidrs range was found only when each worker started, and the
// message named the range but not the flag.
Deno.test({
  name: "parseConfig() refuses a malformed --trusted-proxy-cidrs range, naming the flag",
  fn() {
    for (const range of ["10.0.0.0/33", "::/129", "010.0.0.1", "10.0.0.0/8,nonsense", "[::1]"]) {
      assertRefused([`--trusted-proxy-cidrs=${range}`], "trusted-proxy-cidrs");
      assertRefused([], "trusted-proxy-cidrs", { SLUICE_TRUSTED_PROXY_CIDRS: range });
    }
    assertEquals(
      configOf(["--trusted-proxy-cidrs=::ffff:1.2.3.4/128,10.0.0.0/8"]).trustedProxyCidrs,
      [
        "::ffff:1.2.3.4/128",
        "10.0.0.0/8",
      ],
    );
  },
});

// Was a bug: ports were never compared; equal --http-port and --https-port both bound (reusePort)
// and the kernel split connections between plain HTTP and TLS.
Deno.test({
  name: "parseConfig() refuses the same port for two of HTTP, HTTPS and health, naming both flags",
  fn() {
    const cases: [string[], string, string][] = [
      [["--http-port=9000", "--https-port=9000"], "http-port", "https-port"],
      [["--http-port=9000", "--health-port=9000"], "http-port", "health-port"],
      [["--https-port=9000", "--health-port=9000"], "https-port", "health-port"],
      [["--http-port=10254"], "http-port", "health-port"],
      [["--https-port=8080"], "http-port", "https-port"],
    ];
    for (const [args, a, b] of cases) {
      const message = assertRefused(args, a);
      assert(message.includes(`--${b}`), `${JSON.stringify(args)} names --${b}: ${message}`);
    }
  },
});

// Was a bug: durations had no upper bound (setTimeout fires at once past 2^31-1 ms, about 596 h),
// and --proxy-connect-timeout=0 aborted every connect.
Deno.test({
  name: "durations a timer cannot hold, and a zero connect timeout, are refused",
  fn() {
    for (const f of durations) assertRefused([`--${f.name}=600h`], f.name);
    assertRefused(["--proxy-connect-timeout=0"], "proxy-connect-timeout");
    assertRefused(["--proxy-read-timeout=0s"], "proxy-read-timeout");
    assertEquals(configOf(["--shutdown-timeout=596h"]).shutdownTimeoutMs, 596 * 3_600_000);
  },
});

// Was a bug: the CPU-count default of --workers failed its own maximum (256) on a larger machine.
Deno.test({
  name: "the default of --workers never makes a flag-less start fail on a large machine",
  fn() {
    const r = parse([], {}, 384);
    assertEquals(r.kind, "config", JSON.stringify(r));
    if (r.kind === "config") assert(r.config.workers >= 1 && r.config.workers <= 256);
  },
});

// Was a bug: namespace and Lease-name flags were free text, failing only at the apiserver.
Deno.test({
  name: "namespace and object-name flags refuse what Kubernetes would refuse",
  fn() {
    for (const value of ["Shop", "a/b", "..", "a b", "x".repeat(64), "-a"]) {
      assertRefused([`--watch-namespace=default,${value}`], "watch-namespace");
      assertRefused([`--election-namespace=${value}`], "election-namespace");
    }
    for (const value of ["Leader", "a/b", "a b", "x".repeat(254)]) {
      assertRefused([`--election-id=${value}`], "election-id");
    }
    assertRefused([`--publish-service=${"n".repeat(64)}/svc`], "publish-service");
    for (const port of ["0", "65536", "-", "http-"]) {
      assertRefused([`--default-backend-service=ns/svc:${port}`], "default-backend-service");
    }
  },
});

// Was a bug: --publish-status-address took any text, which the apiserver then refused (422) on every
// status write, for every Ingress.
Deno.test({
  name: "--publish-status-address takes IP addresses and DNS names only",
  fn() {
    const ok = configOf(["--publish-status-address=192.0.2.7,2001:db8::1,lb.example.com"]);
    assertEquals(ok.publishStatusAddresses, ["192.0.2.7", "2001:db8::1", "lb.example.com"]);
    for (
      const value of ["http://lb", "lb.example.com:80", "a b", "::::", "lb_1.example", "LB.example"]
    ) {
      assertRefused([`--publish-status-address=10.0.0.1,${value}`], "publish-status-address");
    }
  },
});

Deno.test({
  name: "--gateway-addresses takes distinct literal IPs, none a wildcard or the bind address",
  fn() {
    assertEquals(configOf([]).gatewayAddresses, []);
    const ok = configOf(["--gateway-addresses=127.0.1.1,127.0.1.2,2001:db8::7"]);
    assertEquals(ok.gatewayAddresses, ["127.0.1.1", "127.0.1.2", "2001:db8::7"]);
    for (const value of ["gw.example.com", "0.0.0.0", "::", "127.0.1.1", "10.0.0.0/8", "1.2.3"]) {
      assertRefused([`--gateway-addresses=127.0.1.1,${value}`], "gateway-addresses");
    }
    assertRefused(
      ["--bind-address=127.0.0.1", "--gateway-addresses=127.0.0.1"],
      "gateway-addresses",
    );
  },
});

// Was a bug: with --manifests, the flags that need a cluster were accepted and silently ignored:
// --watch-namespace=a served every namespace's files, and status and election were never run.
Deno.test({
  name:
    "--manifests refuses the flags that need a cluster, from the command line or the environment",
  fn() {
    for (
      const flag of [
        "--kubeconfig=k",
        "--watch-namespace=shop",
        "--publish-service=ns/svc",
        "--publish-status-address=192.0.2.1",
        "--election-id=lead",
        "--election-namespace=ns",
      ]
    ) {
      assertRefused(["--manifests=dir", flag], flag.slice(2, flag.indexOf("=")));
    }
    assertRefused(["--manifests=dir"], "watch-namespace", { SLUICE_WATCH_NAMESPACE: "shop" });
    const ok = configOf([
      "--manifests=dir",
      "--default-backend-service=ns/svc",
      "--ingress-class=x",
    ]);
    assertEquals(ok.manifests, "dir");
  },
});

// Was a bug: node:util parseArgs kept the last of a repeated flag, so "--watch-namespace=a
// --watch-namespace=b" watched only "b". List flags now add up; other flags keep the last value,
// as most command lines do (tests/support/sluice_process.ts relies on that for ports).
Deno.test("a repeated list flag adds up its values; another repeated flag keeps the last", () => {
  assertEquals(configOf(["--watch-namespace=a", "--watch-namespace=b,c"]).watchNamespaces, [
    "a",
    "b",
    "c",
  ]);
  assertEquals(configOf(["--http-port=9000", "--http-port=9001"]).httpPort, 9001);
});

// Was a bug: the raw value was quoted as-is, so a value holding a newline made a two-line error.
Deno.test({
  name: "an error quoting a value with a newline or control character stays on one line",
  fn() {
    assertRefused(["--http-port=80\nforged: line"], "http-port");
    assertRefused(["--log-format=json\rx"], "log-format");
    assertRefused([], "max-body-size", { SLUICE_MAX_BODY_SIZE: "1\n2" });
  },
});
