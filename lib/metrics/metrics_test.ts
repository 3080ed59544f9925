import {
  assert,
  assertEquals,
  assertMatch,
  assertStringIncludes,
  assertThrows,
} from "../../tests/support/assert.ts";
import { ControlPlaneMetrics } from "./control_plane_metrics.ts";
import { DataPlaneMetrics, statusClass } from "./data_plane_metrics.ts";
import { METRICS_CONTENT_TYPE, renderMetrics, snapshotMetrics } from "./exposition.ts";
import { parseExposition, samples } from "../../tests/support/exposition_reader.ts";

Deno.test("renderMetrics() sums two workers' request counters and histograms", async () => {
  const a = new DataPlaneMetrics();
  const b = new DataPlaneMetrics();
  const ok = {
    ingress: "shop/web",
    host: "shop.example.com",
    method: "GET",
    status: 200,
    durationSeconds: 0.004,
  };
  a.request(ok);
  a.request(ok);
  b.request(ok);
  b.request({ ...ok, status: 503, method: "BREW" });
  const text = await renderMetrics([
    await snapshotMetrics(a.registry),
    await snapshotMetrics(b.registry),
  ]);
  assertStringIncludes(
    text,
    'sluice_requests_total{ingress="shop/web",host="shop.example.com",status="2xx",method="GET"} 3',
  );
  assertStringIncludes(
    text,
    'sluice_requests_total{ingress="shop/web",host="shop.example.com",status="5xx",method="OTHER"} 1',
  );
  assertStringIncludes(
    text,
    'sluice_request_duration_seconds_bucket{le="0.005",ingress="shop/web",host="shop.example.com"} 4',
  );
  assertStringIncludes(
    text,
    'sluice_request_duration_seconds_count{ingress="shop/web",host="shop.example.com"} 4',
  );
});

Deno.test("ControlPlaneMetrics exposes version, issues by kind and certificate expiry, replacing old series", async () => {
  const m = new ControlPlaneMetrics({
    watches: () => [
      {
        kind: "Ingress",
        lastSyncTime: Date.UTC(2026, 0, 1),
        restarts: 2,
        relists: 1,
        malformed: 0,
      },
      {
        kind: "Ingress",
        lastSyncTime: Date.UTC(2025, 0, 1),
        restarts: 1,
        relists: 0,
        malformed: 3,
      },
    ],
  });
  const issue = { kind: "Ingress", namespace: "a", name: "b", field: "spec", message: "x" };
  m.published(3, [issue, issue, { ...issue, kind: "Secret" }], [
    { host: "shop.example.com", secret: "shop/tls", notAfter: Date.UTC(2030, 0, 1) },
  ]);
  m.published(4, [issue], [{
    host: "api.example.com",
    secret: "api/tls",
    notAfter: Date.UTC(2031, 0, 1),
  }]);
  m.build("published", 0.02);
  const text = await renderMetrics([await snapshotMetrics(m.registry)]);
  assertStringIncludes(text, "sluice_config_version 4");
  assertStringIncludes(text, 'sluice_issues{kind="Ingress"} 1');
  assert(!text.includes('sluice_issues{kind="Secret"}'), "stale issue series removed");
  assertStringIncludes(
    text,
    `sluice_certificate_expiry_timestamp_seconds{host="api.example.com",secret="api/tls"} ${
      Date.UTC(2031, 0, 1) / 1000
    }`,
  );
  assert(!text.includes("shop.example.com"), "stale certificate series removed");
  assertStringIncludes(text, 'sluice_snapshot_builds_total{result="published"} 1');
  assertStringIncludes(text, 'sluice_watch_relists_total{kind="Ingress"} 1');
  assertStringIncludes(text, 'sluice_watch_restarts_total{kind="Ingress"} 3');
  assertStringIncludes(text, 'sluice_watch_malformed_lines_total{kind="Ingress"} 3');
  assertStringIncludes(
    text,
    `sluice_last_successful_sync_timestamp_seconds{kind="Ingress"} ${Date.UTC(2026, 0, 1) / 1000}`,
  );
});

Deno.test("statusClass() groups statuses and names anything else other", () => {
  assert(
    [statusClass(101), statusClass(204), statusClass(308), statusClass(404), statusClass(504)]
      .join() ===
      "1xx,2xx,3xx,4xx,5xx",
  );
  assert(statusClass(0) === "other" && statusClass(999) === "other");
});

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
