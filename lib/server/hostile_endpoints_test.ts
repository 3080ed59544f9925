/**
 * Adversarial tests of the operator-facing endpoints: the health port
 * (`/healthz`, `/readyz`, `/metrics`) against odd methods, query strings,
 * oversized requests and failing collectors; the Prometheus exposition parsed
 * strictly (names, HELP/TYPE lines, label escaping, histogram shape), also
 * with label values holding quotes, backslashes and newlines; and a real
 * Sluice process whose proxy ports must never answer for the health port.
 *
 * @module
 */
import { generateSelfSignedCertificate } from "../tls/self_signed.ts";
import { ControlPlaneMetrics } from "../metrics/control_plane_metrics.ts";
import { DataPlaneMetrics } from "../metrics/data_plane_metrics.ts";
import { METRICS_CONTENT_TYPE, renderMetrics, snapshotMetrics } from "../metrics/exposition.ts";
import { healthResponse, type HealthServerOptions, serveHealth } from "./health_server.ts";
import { assert, assertEquals, assertMatch, assertThrows } from "../../tests/support/assert.ts";
import { headerValue, latin1, RawConnection, rawExchange } from "../../tests/support/raw_http.ts";
import { startEchoBackend } from "../../tests/support/echo_backend.ts";
import { writeManifestDir } from "../../tests/support/manifest_dir.ts";
import { spawnSluice } from "../../tests/support/sluice_process.ts";
import { waitFor } from "../../tests/support/wait.ts";

// ---------------------------------------------------------------------------
// A strict reader of the Prometheus text exposition format (version 0.0.4).

interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

interface Family {
  readonly name: string;
  type: string | undefined;
  help: string | undefined;
  readonly samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(["counter", "gauge", "histogram", "summary", "untyped"]);
const FLOAT = /^(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN)$/;

function number(text: string): number {
  if (text === "+Inf" || text === "Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  return Number(text);
}

/** Undoes the escapes allowed in `what` (`\\`, `\n`, and `\"` in label values); throws on any other. */
function unescape(text: string, quotes: boolean, where: string): string {
  return text.replace(/\\(.?)/gs, (_, c: string) => {
    if (c === "\\") return "\\";
    if (c === "n") return "\n";
    if (c === '"' && quotes) return '"';
    throw new Error(`${where}: invalid escape "\\${c}"`);
  });
}

/** Reads `{a="x",b="y"}` starting at `text[start] === "{"`; returns the labels and the end. */
function readLabels(text: string, start: number, where: string) {
  const labels: Record<string, string> = {};
  let i = start + 1;
  while (text[i] !== "}") {
    const name = /^[^=]*/.exec(text.slice(i))![0];
    if (!LABEL_NAME.test(name) || name.startsWith("__")) {
      throw new Error(`${where}: invalid label name "${name}"`);
    }
    if (name in labels) throw new Error(`${where}: label "${name}" twice`);
    i += name.length;
    if (text.slice(i, i + 2) !== '="') throw new Error(`${where}: expected =" after ${name}`);
    i += 2;
    let raw = "";
    for (;;) {
      const c = text[i];
      if (c === undefined) throw new Error(`${where}: unterminated label value`);
      if (c === "\\") {
        raw += c + (text[i + 1] ?? "");
        i += 2;
        continue;
      }
      i++;
      if (c === '"') break;
      raw += c;
    }
    labels[name] = unescape(raw, true, where);
    if (text[i] === ",") i++;
    else if (text[i] !== "}") throw new Error(`${where}: expected , or } after a label`);
  }
  return { labels, end: i + 1 };
}

/**
 * Parses an exposition and checks it against the format: metric and label
 * names, at most one HELP and TYPE per family and both before its samples,
 * each family's samples contiguous, no series twice, only the allowed
 * escapes, float values, counters non-negative, and histograms complete
 * (ascending `le` ending at `+Inf`, cumulative counts, `_count` equal to the
 * `+Inf` bucket, a `_sum`).
 *
 * @throws naming the line and the rule broken.
 */
function parseExposition(text: string): Map<string, Family> {
  if (text.length > 0 && !text.endsWith("\n")) throw new Error("the last line is unterminated");
  const families = new Map<string, Family>();
  const ended = new Set<string>();
  const series = new Set<string>();
  let current: Family | undefined;
  const enter = (family: Family, where: string) => {
    if (current === family) return;
    if (ended.has(family.name)) throw new Error(`${where}: family ${family.name} is split`);
    if (current !== undefined) ended.add(current.name);
    current = family;
  };
  const family = (name: string): Family => {
    let f = families.get(name);
    if (f === undefined) {
      f = { name, type: undefined, help: undefined, samples: [] };
      families.set(name, f);
    }
    return f;
  };
  const lines = text.split("\n").slice(0, -1);
  lines.forEach((line, index) => {
    const where = `line ${index + 1} (${JSON.stringify(line.slice(0, 80))})`;
    if (line === "") return;
    if (line.startsWith("#")) {
      const m = /^# (HELP|TYPE) (\S+)(?: (.*))?$/s.exec(line);
      if (m === null) {
        if (/^#\s*(HELP|TYPE)\b/.test(line)) throw new Error(`${where}: malformed ${line}`);
        return; // a comment
      }
      const [, keyword, name, rest = ""] = m;
      if (!METRIC_NAME.test(name!)) throw new Error(`${where}: invalid metric name`);
      const f = family(name!);
      enter(f, where);
      if (f.samples.length > 0) throw new Error(`${where}: ${keyword} after samples`);
      if (keyword === "HELP") {
        if (f.help !== undefined) throw new Error(`${where}: second HELP`);
        f.help = unescape(rest, false, where);
      } else {
        if (f.type !== undefined) throw new Error(`${where}: second TYPE`);
        if (!TYPES.has(rest)) throw new Error(`${where}: unknown type "${rest}"`);
        f.type = rest;
      }
      return;
    }
    const name = /^[^{\s]*/.exec(line)![0];
    if (!METRIC_NAME.test(name)) throw new Error(`${where}: invalid metric name "${name}"`);
    let i = name.length;
    let labels: Record<string, string> = {};
    if (line[i] === "{") ({ labels, end: i } = readLabels(line, i, where));
    const tail = line.slice(i);
    const m = /^ (\S+)(?: (-?\d+))?$/.exec(tail);
    if (m === null || !FLOAT.test(m[1]!)) throw new Error(`${where}: invalid value "${tail}"`);
    const suffix = /_(bucket|sum|count)$/.exec(name);
    const base = suffix === null ? undefined : families.get(name.slice(0, suffix.index));
    const f = base !== undefined && (base.type === "histogram" || base.type === "summary")
      ? base
      : family(name);
    enter(f, where);
    const key = `${name}${JSON.stringify(Object.entries(labels).sort())}`;
    if (series.has(key)) throw new Error(`${where}: series twice`);
    series.add(key);
    const value = number(m[1]!);
    if (f.type === "counter" && !(value >= 0)) throw new Error(`${where}: negative counter`);
    f.samples.push({ name, labels, value });
  });
  for (const f of families.values()) if (f.type === "histogram") checkHistogram(f);
  return families;
}

function checkHistogram(f: Family): void {
  const groups = new Map<string, { buckets: [number, number][]; sum?: number; count?: number }>();
  for (const s of f.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const g = groups.get(key) ?? { buckets: [] };
    groups.set(key, g);
    if (s.name === `${f.name}_bucket`) {
      if (le === undefined || !FLOAT.test(le)) throw new Error(`${f.name}: bucket without le`);
      g.buckets.push([number(le), s.value]);
    } else if (s.name === `${f.name}_sum`) g.sum = s.value;
    else if (s.name === `${f.name}_count`) g.count = s.value;
    else throw new Error(`${f.name}: unexpected sample ${s.name}`);
  }
  for (const [key, g] of groups) {
    const where = `${f.name}${key}`;
    if (g.buckets.length === 0 || g.buckets.at(-1)![0] !== Infinity) {
      throw new Error(`${where}: no +Inf bucket last`);
    }
    for (let i = 1; i < g.buckets.length; i++) {
      if (!(g.buckets[i]![0] > g.buckets[i - 1]![0])) throw new Error(`${where}: le not ascending`);
      if (g.buckets[i]![1] < g.buckets[i - 1]![1]) throw new Error(`${where}: counts decrease`);
    }
    if (g.count !== g.buckets.at(-1)![1]) {
      throw new Error(`${where}: _count is not the +Inf bucket`);
    }
    if (g.sum === undefined) throw new Error(`${where}: no _sum`);
  }
}

/** The samples of `name` whose labels include `labels`. */
function samples(families: Map<string, Family>, name: string, labels: Record<string, string> = {}) {
  const out: Sample[] = [];
  for (const f of families.values()) {
    for (const s of f.samples) {
      if (s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)) {
        out.push(s);
      }
    }
  }
  return out;
}

Deno.test("parseExposition() refuses what the exposition format forbids", () => {
  const bad: [string, RegExp][] = [
    ["# TYPE a counter\n# TYPE a gauge\na 1\n", /second TYPE/],
    ["# TYPE a bogus\na 1\n", /unknown type/],
    ["a 1\n# HELP a late\n", /after samples/],
    ["a 1\nb 1\na 2\n", /split/],
    ['a{l="x"} 1\na{l="x"} 2\n', /twice/],
    ['a{l="x\\t"} 1\n', /invalid escape/],
    ["# HELP a bad \\q\n", /invalid escape/],
    ['a{l="x} 1\n', /unterminated|expected/],
    ['a{__l="x"} 1\n', /invalid label name/],
    ['a{l="x",l="y"} 1\n', /twice/],
    ["a one\n", /invalid value/],
    ["1a 1\n", /invalid metric name/],
    ["# TYPE c counter\nc -1\n", /negative counter/],
    ['# TYPE h histogram\nh_bucket{le="1"} 1\nh_sum 1\nh_count 1\n', /\+Inf/],
    [
      '# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n',
      /decrease/,
    ],
    ['# TYPE h histogram\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 1\n', /_count/],
  ];
  for (const [text, pattern] of bad) {
    const error = assertThrows(() => parseExposition(text.endsWith("\n") ? text : text + "\n"));
    assertMatch(error.message, pattern, JSON.stringify(text));
  }
  assertMatch(assertThrows(() => parseExposition("a 1")).message, /unterminated/);
  const ok = parseExposition(
    '# HELP a A \\\\ and \\n.\n# TYPE a gauge\na{l="q\\"b\\\\n\\n"} +Inf\nb NaN 1700000000000\n',
  );
  assertEquals(ok.get("a")!.help, "A \\ and \n.");
  assertEquals(ok.get("a")!.samples[0]!.labels.l, 'q"b\\n\n');
});

// ---------------------------------------------------------------------------
// The exposition Sluice renders.

const HOSTILE = [
  'quote"inside',
  "back\\slash",
  "new\nline",
  '\\"}{le="+Inf"} 1\n# TYPE evil counter',
  "trailing\\",
  "ünïcødé ✓",
  "",
];

Deno.test("renderMetrics() escapes quotes, backslashes and newlines in every label and parses strictly", async () => {
  const data = [new DataPlaneMetrics(), new DataPlaneMetrics()];
  for (const [i, value] of HOSTILE.entries()) {
    const m = data[i % 2]!;
    m.request({ ingress: value, host: value, method: "GET", status: 200, durationSeconds: 0.01 });
    m.connectError(value);
    m.retry(value);
  }
  const control = new ControlPlaneMetrics({
    watches: () =>
      HOSTILE.map((kind) => ({
        kind,
        lastSyncTime: 1_700_000_000_000,
        restarts: 1,
        relists: 0,
        malformed: 2,
      })),
  });
  control.published(
    3,
    HOSTILE.map((kind) => ({ kind, namespace: "a", name: "b", field: "spec", message: kind })),
    HOSTILE.map((host) => ({ host, secret: host, notAfter: 1_800_000_000_000 })),
  );
  control.build("published", 0.002);
  const text = await renderMetrics([
    await snapshotMetrics(control.registry),
    ...await Promise.all(data.map((d) => snapshotMetrics(d.registry))),
  ]);
  const families = parseExposition(text);
  assert(!families.has("evil"), "no family injected through a label value");
  for (const value of HOSTILE) {
    assertEquals(
      samples(families, "sluice_requests_total", { ingress: value, host: value })
        .map((s) => s.value),
      [1],
      JSON.stringify(value),
    );
    assertEquals(
      samples(families, "sluice_request_duration_seconds_count", { ingress: value })
        .map((s) => s.value),
      [1],
    );
    for (const name of ["sluice_upstream_connect_errors_total", "sluice_upstream_retries_total"]) {
      assertEquals(samples(families, name, { backend: value }).map((s) => s.value), [1], name);
    }
    assertEquals(samples(families, "sluice_issues", { kind: value }).map((s) => s.value), [1]);
    assertEquals(
      samples(families, "sluice_watch_malformed_lines_total", { kind: value })
        .map((s) => s.value),
      [2],
    );
    assertEquals(
      samples(families, "sluice_certificate_expiry_timestamp_seconds", {
        host: value,
        secret: value,
      }).map((s) => s.value),
      [1_800_000_000],
    );
  }
});

const EXPECTED_FAMILIES: Record<string, string> = {
  sluice_requests_total: "counter",
  sluice_request_duration_seconds: "histogram",
  sluice_upstream_connect_errors_total: "counter",
  sluice_upstream_retries_total: "counter",
  sluice_access_log_dropped_lines_total: "counter",
  sluice_client_timeouts_total: "counter",
  sluice_active_requests: "gauge",
  sluice_active_websockets: "gauge",
  sluice_snapshot_builds_total: "counter",
  sluice_snapshot_build_duration_seconds: "histogram",
  sluice_config_version: "gauge",
  sluice_last_successful_sync_timestamp_seconds: "gauge",
  sluice_watch_restarts_total: "counter",
  sluice_watch_relists_total: "counter",
  sluice_watch_malformed_lines_total: "counter",
  sluice_issues: "gauge",
  sluice_certificate_expiry_timestamp_seconds: "gauge",
};

Deno.test("every Sluice metric family has one HELP and one TYPE, a valid name, and counters end in _total", async () => {
  // sluice_client_timeouts_total comes from both threads (the reaper's and the workers'): one family.
  const text = await renderMetrics([
    await snapshotMetrics(
      new ControlPlaneMetrics({ clientTimeouts: () => ({ idle: 1 }) }).registry,
    ),
    await snapshotMetrics(new DataPlaneMetrics().registry),
  ]);
  const families = parseExposition(text);
  assertEquals(
    Object.fromEntries([...families.values()].map((f) => [f.name, f.type])),
    EXPECTED_FAMILIES,
  );
  for (const f of families.values()) {
    assert(f.help !== undefined && f.help.trim() !== "", `${f.name} has HELP`);
    assertEquals(f.type === "counter", f.name.endsWith("_total"), `${f.name} is ${f.type}`);
    assert(f.name.startsWith("sluice_"), f.name);
    if (f.type === "histogram" || f.name.endsWith("_seconds")) {
      assertMatch(f.name, /_seconds$/, "durations are in seconds");
    }
  }
  assertMatch(METRICS_CONTENT_TYPE, /^text\/plain; version=0\.0\.4; charset=utf-8$/);
});

// ---------------------------------------------------------------------------
// The health port.

const BODY = "# HELP sluice_config_version v\n# TYPE sluice_config_version gauge\n" +
  "sluice_config_version 7\n";

function options(overrides: Partial<HealthServerOptions> = {}): HealthServerOptions {
  return {
    hostname: "127.0.0.1",
    port: 0,
    live: () => true,
    ready: () => true,
    metrics: () => Promise.resolve({ body: BODY, contentType: METRICS_CONTENT_TYPE }),
    ...overrides,
  };
}

async function withHealth(
  overrides: Partial<HealthServerOptions>,
  run: (port: number) => Promise<void>,
): Promise<void> {
  const server = serveHealth(options(overrides));
  try {
    await run(server.addr.port);
  } finally {
    await server.shutdown();
  }
}

/** One request on a fresh connection; the response with its raw body text. */
async function exchange(port: number, head: string, isHead = false) {
  const conn = await RawConnection.open(port);
  try {
    await conn.send(head);
    const r = await conn.readResponse({ head: isHead, timeoutMs: 5_000 });
    return { ...r, text: latin1(r.body) };
  } finally {
    conn.close();
  }
}

Deno.test("HEAD works on /healthz, /readyz and /metrics: same status and type as GET, no body", async () => {
  await withHealth({ ready: () => false }, async (port) => {
    for (
      const [path, status, type] of [
        ["/healthz", 200, "text/plain; charset=utf-8"],
        ["/readyz", 503, "text/plain; charset=utf-8"],
        ["/metrics", 200, METRICS_CONTENT_TYPE],
        ["/nothing", 404, "text/plain; charset=utf-8"],
      ] as const
    ) {
      const get = await exchange(port, `GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`);
      const head = await exchange(port, `HEAD ${path} HTTP/1.1\r\nHost: x\r\n\r\n`, true);
      assertEquals([get.status, head.status], [status, status], path);
      assertEquals(headerValue(head.headers, "content-type"), type, path);
      assertEquals(headerValue(get.headers, "content-type"), type, path);
      assertEquals(head.body.length, 0, path);
    }
  });
});

Deno.test("every other method is answered 405 with Allow: GET, HEAD, on every path, and the port keeps serving", async () => {
  await withHealth({}, async (port) => {
    for (const method of ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "BREW"]) {
      for (const path of ["/healthz", "/readyz", "/metrics", "/other"]) {
        const r = await exchange(
          port,
          `${method} ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc`,
        );
        assertEquals(r.status, 405, `${method} ${path}`);
        assertEquals(headerValue(r.headers, "allow"), "GET, HEAD");
        assert(!r.text.includes("sluice_"), "no metrics in a 405");
      }
    }
    const r = await exchange(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assertEquals([r.status, r.text], [200, "ok\n"]);
  });
});

Deno.test("query strings and fragments do not change what the endpoints answer; near-miss paths are 404", async () => {
  const state = { ready: false };
  const o = options({ ready: () => state.ready });
  const answer = async (target: string) => {
    const r = await healthResponse(new Request(`http://x${target}`), o);
    return [r.status, await r.text()] as const;
  };
  for (const q of ["?", "?verbose", "?exclude=etcd&verbose=1", "?%00%0a", "#frag"]) {
    assertEquals(await answer(`/healthz${q}`), [200, "ok\n"], q);
    assertEquals(await answer(`/readyz${q}`), [503, "not ready\n"], q);
    assertEquals(await answer(`/metrics${q}`), [200, BODY], q);
  }
  for (const path of ["/healthz/", "/HEALTHZ", "//healthz", "/%68ealthz", "/metrics.txt", "/"]) {
    assertEquals((await answer(path))[0], 404, path);
  }
  // Over a real socket too, with an absolute-form target.
  await withHealth({}, async (port) => {
    const r = await exchange(
      port,
      `GET http://x/readyz?full=1 HTTP/1.1\r\nHost: x\r\n\r\n`,
    );
    assertEquals([r.status, r.text], [200, "ok\n"]);
  });
});

Deno.test("oversized requests are refused or cut without taking the health port down", async () => {
  await withHealth({}, async (port) => {
    const big = "a".repeat(1024 * 1024);
    const attacks = [
      `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${big}\r\n\r\n`,
      `GET /healthz?${big} HTTP/1.1\r\nHost: x\r\n\r\n`,
      `GET /healthz HTTP/1.1\r\nHost: x\r\n${"X-H: v\r\n".repeat(5_000)}\r\n`,
    ];
    for (const attack of attacks) {
      const bytes = await rawExchange(port, attack, { timeoutMs: 10_000 });
      const status = /^HTTP\/1\.1 (\d{3})/.exec(latin1(bytes))?.[1];
      assert(
        status === undefined || (Number(status) >= 400 && Number(status) < 500),
        `refused or cut (got ${status})`,
      );
    }
    // A large body the handler never reads: 405 at once, without waiting for 8 MiB.
    const conn = await RawConnection.open(port);
    try {
      await conn.send(
        `POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: ${8 * 2 ** 20}\r\n\r\n${
          "b".repeat(65_536)
        }`,
      );
      assertEquals((await conn.readResponse({ timeoutMs: 5_000 })).status, 405);
    } finally {
      conn.close();
    }
    const r = await exchange(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assertEquals([r.status, r.text], [200, "ok\n"]);
  });
});

Deno.test("a failing collector answers 500 without its message, and the next scrape works", async () => {
  const errors: unknown[] = [];
  let fail = true;
  await withHealth({
    metrics: () =>
      fail
        ? Promise.reject(new Error('secret detail "token=abc"'))
        : Promise.resolve({ body: BODY, contentType: METRICS_CONTENT_TYPE }),
    onError: (e) => errors.push(e),
  }, async (port) => {
    const r = await exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assertEquals([r.status, r.text], [500, "Internal error\n"]);
    assertEquals(errors.length, 1);
    fail = false;
    const again = await exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assertEquals([again.status, again.text], [200, BODY]);
  });
});

Deno.test("/healthz and /readyz answer while a /metrics scrape hangs", async () => {
  const release = Promise.withResolvers<void>();
  await withHealth({
    metrics: async () => {
      await release.promise;
      return { body: BODY, contentType: METRICS_CONTENT_TYPE };
    },
  }, async (port) => {
    const hanging = RawConnection.open(port).then(async (conn) => {
      try {
        await conn.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        return (await conn.readResponse({ timeoutMs: 10_000 })).status;
      } finally {
        conn.close();
      }
    });
    try {
      for (const path of ["/healthz", "/readyz"]) {
        const r = await exchange(port, `GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`);
        assertEquals(r.status, 200, path);
      }
    } finally {
      release.resolve();
    }
    assertEquals(await hanging, 200);
  });
});

// ---------------------------------------------------------------------------
// A real Sluice: the scrape parses strictly, and the proxy ports are not the health port.

Deno.test("a live Sluice's /metrics parses strictly, and its proxy ports never answer for the health port", async () => {
  const backend = await startEchoBackend({ name: "web" });
  const cert = await generateSelfSignedCertificate({
    hostnames: ["shop.example.com"],
    commonName: "shop.example.com",
  });
  const dir = await writeManifestDir([
    { namespace: "shop", name: "web", host: "shop.test", port: backend.port },
    {
      namespace: "secure",
      name: "shop",
      host: "shop.example.com",
      port: backend.port,
      tls: { certPem: cert.certPem, keyPem: cert.keyPem },
    },
  ]);
  const sluice = await spawnSluice([
    `--manifests=${dir.path}`,
    "--workers=2",
    "--shutdown-delay=0s",
  ]);
  using client = Deno.createHttpClient({ allowHost: true });
  /** One request over TLS with SNI shop.example.com; the status and the echoed target. */
  const tlsGet = async (host: string, path: string) => {
    const tcp = await Deno.connect({ hostname: "127.0.0.1", port: sluice.httpsPort });
    const conn = await Deno.startTls(tcp, {
      hostname: "shop.example.com",
      caCerts: [cert.certPem],
    });
    try {
      await conn.write(
        new TextEncoder().encode(
          `GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`,
        ),
      );
      const text = new TextDecoder().decode(
        await new Response(conn.readable).arrayBuffer().then((b) => new Uint8Array(b)),
      );
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]);
      const target = /"target":"([^"]*)"/.exec(text)?.[1];
      return [status, target] as const;
    } finally {
      try {
        conn.close();
      } catch {
        // closed with its readable stream
      }
    }
  };
  try {
    await sluice.ready();
    const proxied = async (host: string, path: string, method = "GET") => {
      const r = await fetch(`http://127.0.0.1:${sluice.httpPort}${path}`, {
        method,
        headers: { host },
        client,
      });
      return [r.status, await r.text()] as const;
    };
    // Unknown hosts, hostile Host values and methods: answered by the proxy, never the health port.
    for (const host of ["127.0.0.1", "localhost", "unknown.test", 'evil"host', "a\\b"]) {
      for (const path of ["/metrics", "/healthz", "/readyz", "/metrics?x=1"]) {
        const [status, text] = await proxied(host, path);
        assert(status === 404 || status === 400, `${host}${path}: ${status}`);
        assert(!text.includes("sluice_") && text !== "ok\n", `${host}${path}: ${text}`);
      }
    }
    // A routed host passes the paths on to its backend.
    const before = backend.requests.length;
    for (const path of ["/metrics", "/healthz", "/readyz"]) {
      const [status, text] = await proxied("shop.test", path, "BREW");
      assertEquals(status, 200, path);
      assertEquals(JSON.parse(text).target, path);
    }
    // Over TLS, for a routed host and for an unknown Host on the routed host's certificate.
    assertEquals(await tlsGet("shop.example.com", "/metrics"), [200, "/metrics"]);
    const [status] = await tlsGet("127.0.0.1", "/metrics");
    assert(status !== 200, `unknown Host over TLS: ${status}`);
    assertEquals(backend.requests.slice(before).map((r) => r.target), [
      "/metrics",
      "/healthz",
      "/readyz",
      "/metrics",
    ]);

    const families = await waitFor("the proxied requests to be counted", async () => {
      const r = await fetch(`http://127.0.0.1:${sluice.healthPort}/metrics`);
      assertEquals(r.headers.get("content-type"), METRICS_CONTENT_TYPE);
      const f = parseExposition(await r.text());
      const counted = samples(f, "sluice_requests_total").reduce((a, s) => a + s.value, 0);
      return counted >= 25 ? f : undefined;
    });
    for (const [name, type] of Object.entries(EXPECTED_FAMILIES)) {
      assertEquals(families.get(name)?.type, type, name);
    }
    // Label values come from the routing table, never from the client.
    for (const s of samples(families, "sluice_requests_total")) {
      assert(["", "shop/web", "secure/shop"].includes(s.labels.ingress!), s.labels.ingress);
      assert(["", "shop.test", "shop.example.com"].includes(s.labels.host!), s.labels.host);
    }
    assertEquals(
      samples(families, "sluice_requests_total", { ingress: "shop/web", method: "OTHER" })
        .reduce((a, s) => a + s.value, 0),
      3,
    );
    // HEAD on the live health port.
    const head = await fetch(`http://127.0.0.1:${sluice.healthPort}/metrics`, { method: "HEAD" });
    assertEquals([head.status, await head.text()], [200, ""]);
  } finally {
    assertEquals(await sluice.stop(), 0);
    await backend.close();
    await dir.remove();
  }
});
