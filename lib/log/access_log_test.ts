import { assert, assertEquals } from "../../tests/support/assert.ts";
import { DataPlaneMetrics } from "../metrics/data_plane_metrics.ts";
import { renderMetrics, snapshotMetrics } from "../metrics/exposition.ts";
import { AccessLogWriter, encodeAccessLine, jsonString } from "./access_log.ts";
import { redactLine } from "./logging.ts";

const RECORD = {
  client: "10.0.0.1",
  method: "GET",
  host: 'shöp.test"',
  path: "/a\nb",
  status: 200,
  bytes: 12,
  duration_ms: 1.5,
  upstream: "10.1.0.2:8080",
  ingress: "shop/web",
  service: "shop/web",
  attempts: 1,
  request_id: "abc",
};

Deno.test("encodeAccessLine() writes one ASCII JSON line that parses back to the record", () => {
  const line = encodeAccessLine(RECORD, Date.UTC(2026, 0, 2));
  assert(line.endsWith("}\n") && !line.slice(0, -1).includes("\n"));
  assert(/^[\x20-\x7e]*\n$/.test(line), "pure ASCII");
  const parsed = JSON.parse(line);
  assertEquals(parsed["@timestamp"], "2026-01-02T00:00:00.000Z");
  assertEquals({ ...parsed, "@timestamp": undefined }, {
    "@timestamp": undefined,
    level: "INFO",
    message: "request",
    logger: "sluice.access",
    component: "access",
    ...RECORD,
  });
  assertEquals(JSON.parse(jsonString("\u2028\u0000é")), "\u2028\u0000é");
});

Deno.test("AccessLogWriter writes whole lines in writes of at most 4 KiB and flushes on close", async () => {
  const writes: string[] = [];
  const output = {
    write: (b: Uint8Array) => {
      writes.push(new TextDecoder().decode(b));
      return Promise.resolve(b.length);
    },
    writeSync: (b: Uint8Array) => {
      writes.push(new TextDecoder().decode(b));
      return b.length;
    },
  };
  const writer = new AccessLogWriter({ output, flushMs: 60_000, now: () => 0 });
  for (let i = 0; i < 40; i++) writer.write(RECORD);
  await writer.settled();
  writer.close();
  const all = writes.join("");
  assertEquals(all.split("\n").filter((l) => l !== "").length, 40);
  for (const w of writes) {
    assert(w.length <= 4096 && w.endsWith("\n"), `a write of ${w.length} bytes, whole lines`);
  }
  writer.write(RECORD);
  assertEquals(writes.join("").split("\n").length - 1, 40, "nothing written after close");
});

Deno.test("encodeAccessLine() in pretty format writes a line for people, escaping what a client chose", () => {
  const at = Date.UTC(2026, 0, 2, 3, 4, 5, 6);
  assertEquals(
    encodeAccessLine({ ...RECORD, host: "shop.test", path: "/cart" }, at, "pretty"),
    "2026-01-02 03:04:05.006 +00 [INF] sluice·access: GET shop.test/cart 200, 12 bytes in 1.5 ms, " +
      "client 10.0.0.1, ingress shop/web, service shop/web, upstream 10.1.0.2:8080, request abc\n",
  );
  // A quote, a newline, an escape sequence and non-ASCII come out escaped, on one line.
  const hostile = encodeAccessLine(
    { ...RECORD, path: "/a\nb\u001b[2J", attempts: 3, error: "upstream reset" },
    at,
    "pretty",
  );
  assert(!hostile.slice(0, -1).includes("\n") && !hostile.includes("\u001b"), hostile);
  assert(hostile.includes(String.raw`GET "sh\u00f6p.test\"/a\nb\u001b[2J" 200`), hostile);
  assert(hostile.includes(`, 3 attempts, error "upstream reset", request abc`), hostile);
  // Nothing to say, nothing written: no endpoint reached.
  const unrouted = encodeAccessLine(
    { ...RECORD, host: "x.test", path: "/", status: 404, ingress: "", service: "", upstream: "" },
    at,
    "pretty",
  );
  assert(unrouted.includes("x.test/ 404, 12 bytes in 1.5 ms, client 10.0.0.1, request abc"));
});

Deno.test("AccessLogWriter in pretty format keeps each write within 4 KiB, counting bytes not characters", async () => {
  const writes: Uint8Array[] = [];
  const output = {
    write: (b: Uint8Array) => {
      writes.push(b.slice());
      return Promise.resolve(b.length);
    },
    writeSync: (b: Uint8Array) => {
      writes.push(b.slice());
      return b.length;
    },
  };
  const writer = new AccessLogWriter({ output, flushMs: 60_000, now: () => 0, format: "pretty" });
  // Lines of exactly 256 characters: 16 of them are 4,096 characters but more bytes (the `·`).
  const plain = { ...RECORD, host: "shop.test", path: "/" };
  const pad = 256 - encodeAccessLine(plain, 0, "pretty").length;
  const record = { ...plain, path: `/${"a".repeat(pad)}` };
  assertEquals(encodeAccessLine(record, 0, "pretty").length, 256);
  for (let i = 0; i < 200; i++) writer.write(record);
  await writer.settled();
  writer.close();
  const text = writes.map((w) => new TextDecoder().decode(w)).join("");
  assertEquals(text.split("\n").filter((l) => l.includes("sluice·access")).length, 200);
  for (const w of writes) assert(w.length <= 4096 && w.at(-1) === 10, `a write of ${w.length}`);
});

Deno.test("redactLine() cuts PEM blocks, bearer and basic credentials and JWTs", () => {
  const pem = "-----BEGIN PRIVATE KEY-----\\nMIGHAgEAMBMG\\n-----END PRIVATE KEY-----";
  const jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJl";
  const line = `{"a":"${pem}","b":"Bearer abc.def","c":"basic dXNlcjpw","d":"${jwt}"}`;
  const out = redactLine(line);
  for (const secret of ["MIGHAgEAMBMG", "abc.def", "dXNlcjpw", jwt]) {
    assert(!out.includes(secret), `${secret} redacted`);
  }
  assertEquals(JSON.parse(out).a, "[REDACTED PEM]");
});

// Was a bug: a client's 8 KiB path or 30 KiB Host made a line longer than 4 KiB, written in one
// write that a pipe does not keep atomic, so lines of several workers could interleave.
Deno.test("encodeAccessLine() cuts an over-long host and path so every line fits one atomic 4 KiB write", () => {
  const huge = { ...RECORD, host: "h\u00e9".repeat(15_000), path: `/${"\u{1F600}".repeat(4_000)}` };
  const line = encodeAccessLine(huge, 0);
  assert(line.length <= 4096, `a line of ${line.length} bytes`);
  const parsed = JSON.parse(line);
  assert(parsed.path.startsWith("/\u{1F600}") && parsed.path.endsWith("..."));
  assert(parsed.host.startsWith("h\u00e9h") && parsed.host.endsWith("..."));
  assert(!/[\ud800-\udbff]\.\.\.$/.test(parsed.path), "no half surrogate pair");
  assertEquals([parsed.status, parsed.request_id], [200, "abc"]);
  const plain = { ...RECORD, path: `/${"a".repeat(3_000)}` };
  assertEquals(
    JSON.parse(encodeAccessLine(plain, 0)).path,
    plain.path,
    "a line that fits is whole",
  );
});

// Was a bug: bytes handed to the output stopped counting against `maxBufferedBytes`, so with a
// stalled standard error nothing was ever dropped and pending writes grew without bound.
Deno.test("AccessLogWriter drops lines past maxBufferedBytes while the output stalls, and sluice_access_log_dropped_lines_total counts exactly those", async () => {
  const metrics = new DataPlaneMetrics();
  const written: string[] = [];
  let open: () => void = () => {};
  const opened = new Promise<void>((resolve) => open = resolve);
  const output = {
    // Stalled until the test opens it, as a standard error nobody reads.
    write: async (b: Uint8Array) => {
      await opened;
      written.push(new TextDecoder().decode(b));
      return b.length;
    },
    writeSync: (b: Uint8Array) => {
      written.push(new TextDecoder().decode(b));
      return b.length;
    },
  };
  const lineBytes = encodeAccessLine(RECORD, 0).length;
  const maxBufferedBytes = 16 * 1024;
  const writer = new AccessLogWriter({
    output,
    flushMs: 60_000,
    maxBufferedBytes,
    now: () => 0,
    onDrop: () => metrics.accessLogDropped(),
  });
  try {
    for (let i = 0; i < 200; i++) writer.write(RECORD);
    const kept = Math.floor(maxBufferedBytes / lineBytes);
    assertEquals(writer.dropped, 200 - kept);
    const dropped = (text: string) =>
      text.match(/^sluice_access_log_dropped_lines_total (\d+)$/m)?.[1];
    // Two workers' registries, summed as /metrics sums them.
    const idle = new DataPlaneMetrics();
    const text = await renderMetrics([
      await snapshotMetrics(metrics.registry),
      await snapshotMetrics(idle.registry),
    ]);
    assertEquals(dropped(text), String(200 - kept));
    // Once the output catches up, lines are taken again, and every line was written or counted.
    open();
    await writer.settled();
    writer.write(RECORD);
    assertEquals(writer.dropped, 200 - kept);
    await writer.settled();
    writer.close();
    assertEquals(written.join("").split("\n").length - 1, kept + 1);
    assertEquals(
      dropped(await renderMetrics([await snapshotMetrics(metrics.registry)])),
      String(200 - kept),
    );
  } finally {
    open();
    writer.close();
  }
});
