/**
 * Whether the access log and the data plane's metrics tell the truth about
 * what the proxy did: the status logged is the one the client received, and
 * bytes, duration, upstream, attempts and request id match what happened,
 * for Sluice's own answers, retries, cut bodies and upgrades. Real handler
 * on `Deno.serve`, real loopback backends (scripted where the failure must
 * be exact), raw clients; the entries go through the worker's own
 * `accessLogFields()` and `observeRequest()`.
 *
 * @module
 */
import { assert, assertBetween, assertEquals, assertMatch } from "../../tests/support/assert.ts";
import { startProxy } from "../../tests/support/proxy_harness.ts";
import { RawConnection, rawRequest } from "../../tests/support/raw_http.ts";
import { waitFor } from "../../tests/support/wait.ts";
import type { AccessRecord } from "../log/access_log.ts";
import { DataPlaneMetrics } from "../metrics/data_plane_metrics.ts";
import { snapshotMetrics } from "../metrics/exposition.ts";
import type { Endpoint } from "../routing/snapshot.ts";
import { accessLogFields, observeRequest } from "../workers/sluice_worker.ts";
import type { AccessLogEntry, ProxyHandlerOptions } from "./proxy_handler.ts";
import {
  closedPort,
  ok,
  startBackend,
  type UpstreamBackend,
} from "../../tests/support/upstream_backends.ts";
import { upgradeHead } from "../../tests/support/echo_world.ts";

const HOST = "shop.example.com";

interface Books {
  readonly port: number;
  /** Access-log records, as the worker writes them. */
  readonly lines: AccessRecord[];
  readonly entries: AccessLogEntry[];
  /** A sample's value (0 when absent), labels matched as a subset. */
  sample(name: string, labels?: Record<string, string>): Promise<number>;
}

async function withBooks(
  endpoints: readonly Endpoint[],
  fn: (books: Books) => Promise<void>,
  options: Partial<ProxyHandlerOptions> & { tls?: boolean } = {},
): Promise<void> {
  const metrics = new DataPlaneMetrics();
  const lines: AccessRecord[] = [];
  const entries: AccessLogEntry[] = [];
  const { tls = false, ...rest } = options;
  const proxy = await startProxy({
    routes: [{ host: HOST, endpoints, tls, ingress: "shop/web", service: "shop/web" }],
    readTimeoutMs: 5_000,
    ...rest,
    onAccess(entry) {
      entries.push(entry);
      observeRequest(metrics, entry);
      lines.push(accessLogFields(entry));
    },
  });
  try {
    await fn({
      port: proxy.port,
      lines,
      entries,
      async sample(name, labels = {}) {
        const snap = await snapshotMetrics(metrics.registry);
        let total = 0;
        for (const family of snap) {
          for (const value of family.values) {
            const metricName = (value as { metricName?: string }).metricName ?? family.name;
            if (metricName !== name) continue;
            const l = value.labels as Record<string, string | number>;
            if (Object.entries(labels).every(([k, v]) => String(l[k]) === v)) total += value.value;
          }
        }
        return total;
      },
    });
  } finally {
    await proxy.close();
  }
}

function get(port: number, target: string, extra = "") {
  return rawRequest(port, `GET ${target} HTTP/1.1\r\nHost: ${HOST}\r\n${extra}\r\n`);
}

/** The request id field a backend saw in `head`. */
function requestIdOf(head: string): string {
  return /\r\nx-request-id:\s*([^\r]*)/i.exec(head)?.[1] ?? "";
}

/** A backend that answers `ok(body)` and records each request head. */
function recordingBackend(body: string): UpstreamBackend & { heads: string[] } {
  const heads: string[] = [];
  const backend = startBackend(async (conn) => {
    for (;;) {
      const head = await conn.readHead();
      if (head === null) return;
      heads.push(head);
      await conn.write(ok(body));
    }
  });
  return Object.assign(backend, { heads });
}

Deno.test("Sluice's own 414, 400 (ambiguous path) and 308 are logged and counted with the status the client got", async () => {
  await using backend = recordingBackend("x");
  await withBooks([backend.endpoint], async (books) => {
    const long = await get(books.port, `/a?q=${"x".repeat(9000)}`);
    const ambiguous = await get(books.port, "/public/..%2Fadmin?token=s3cret");
    assertEquals([long.status, ambiguous.status], [414, 400]);
    await waitFor("two lines", () => books.lines.length === 2);
    for (const [i, status] of [414, 400].entries()) {
      const line = books.lines[i]!;
      assertEquals([line.status, line.upstream, line.attempts], [status, "", 0]);
      // Was a bug: answers given before routing were logged with an empty request_id.
      assertMatch(line.request_id, /^[0-9a-f]{32}$/);
      assert(!line.path.includes("?"), `path ${line.path} carries no query`);
      assert(!line.path.includes("xxxxxxxx") && !line.path.includes("s3cret"));
    }
    assertEquals(backend.heads.length, 0);
    assertEquals(await books.sample("sluice_requests_total", { status: "4xx" }), 2);
  });
  await withBooks([backend.endpoint], async (books) => {
    const redirect = await get(books.port, "/cart?session=abc");
    assertEquals(redirect.status, 308);
    await waitFor("a line", () => books.lines.length === 1);
    const line = books.lines[0]!;
    assertEquals([line.status, line.path, line.upstream, line.attempts, line.bytes], [
      308,
      "/cart",
      "",
      0,
      0,
    ]);
    assertEquals(line.ingress, "shop/web");
    assertMatch(line.request_id, /^[0-9a-f]{32}$/);
    assertEquals(await books.sample("sluice_requests_total", { status: "3xx", host: HOST }), 1);
    assertEquals(backend.heads.length, 0);
  }, { tls: true });
});

Deno.test("a retry after a reset before any answer logs 2 attempts, the endpoint that answered, and no connect error", async () => {
  await using resetting = startBackend(async (conn) => {
    await conn.readHead();
    conn.close();
  });
  await using good = recordingBackend("good");
  await withBooks([resetting.endpoint, good.endpoint], async (books) => {
    const response = await get(books.port, "/item?id=7");
    assertEquals(response.status, 200);
    await waitFor("a line", () => books.lines.length === 1);
    const line = books.lines[0]!;
    assertEquals(
      [line.status, line.bytes, line.attempts, line.upstream, line.path, line.error],
      [200, 4, 2, `127.0.0.1:${good.port}`, "/item", undefined],
    );
    assertEquals(line.request_id, requestIdOf(good.heads[0]!));
    assert(line.request_id.length > 0);
    assertEquals(await books.sample("sluice_upstream_retries_total"), 1);
    assertEquals(await books.sample("sluice_upstream_connect_errors_total"), 0);
    assertEquals(await books.sample("sluice_requests_total", { status: "2xx" }), 1);
  }, { endpointDownMs: 60_000 });
});

Deno.test("a retry after a refused connect counts one connect error and one retry", async () => {
  await using good = recordingBackend("good");
  const dead = { address: "127.0.0.1", port: closedPort() };
  await withBooks([dead, good.endpoint], async (books) => {
    assertEquals((await get(books.port, "/")).status, 200);
    await waitFor("a line", () => books.lines.length === 1);
    const line = books.lines[0]!;
    assertEquals([line.attempts, line.upstream], [2, `127.0.0.1:${good.port}`]);
    assertEquals(await books.sample("sluice_upstream_connect_errors_total"), 1);
    assertEquals(await books.sample("sluice_upstream_retries_total"), 1);
  }, { endpointDownMs: 60_000 });
});

Deno.test("a HEAD request logs 0 bytes and the backend's status", async () => {
  await using backend = startBackend(async (conn) => {
    for (;;) {
      const head = await conn.readHead();
      if (head === null) return;
      await conn.write("HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n");
    }
  });
  await withBooks([backend.endpoint], async (books) => {
    const response = await rawRequest(books.port, `HEAD / HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`, {
      head: true,
    });
    assertEquals(response.status, 200);
    await waitFor("a line", () => books.lines.length === 1);
    assertEquals([books.lines[0]!.status, books.lines[0]!.bytes], [200, 0]);
    assertEquals(await books.sample("sluice_requests_total", { method: "HEAD", status: "2xx" }), 1);
  });
});

/** A backend sending a 200 head of `total` bytes, `first` of them at once, then nothing until closed. */
function stallingBackend(total: number, first: number): UpstreamBackend {
  return startBackend(async (conn) => {
    await conn.readHead();
    await conn.write(`HTTP/1.1 200 OK\r\nContent-Length: ${total}\r\n\r\n`);
    await conn.write("y".repeat(first));
    await conn.readSome(); // until the proxy closes it
  });
}

Deno.test("a body stalled past the read timeout is logged with the 200 already sent, the bytes relayed and error timeout", async () => {
  await using backend = stallingBackend(500_000, 100_000);
  await withBooks([backend.endpoint], async (books) => {
    const conn = await RawConnection.open(books.port);
    try {
      await conn.send(`GET /big?k=v HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
      const response = await conn.readResponse({ head: true });
      assertEquals(response.status, 200);
      await waitFor("a line", () => books.lines.length === 1, { timeoutMs: 5_000 });
      const line = books.lines[0]!;
      assertEquals([line.status, line.bytes, line.error, line.path], [
        200,
        100_000,
        "timeout",
        "/big",
      ]);
      assertBetween(line.duration_ms, 250, 5_000);
      // The histogram times the whole response too (its help said "to response headers").
      assertBetween(await books.sample("sluice_request_duration_seconds_sum"), 0.25, 5);
    } finally {
      conn.close();
    }
  }, { readTimeoutMs: 300 });
});

Deno.test("a client leaving mid-download is logged with the status sent, the bytes relayed so far and error aborted", async () => {
  await using backend = stallingBackend(500_000, 100_000);
  await withBooks([backend.endpoint], async (books) => {
    const conn = await RawConnection.open(books.port);
    await conn.send(`GET /big HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
    const response = await conn.readResponse({ head: true });
    assertEquals(response.status, 200);
    conn.close();
    await waitFor("a line", () => books.lines.length === 1, { timeoutMs: 4_000 });
    const line = books.lines[0]!;
    assertEquals([line.status, line.error], [200, "aborted"]);
    assertBetween(line.bytes, 1, 100_000);
  }, { readTimeoutMs: 10_000 });
});

Deno.test("a client that never reads a large body is cut by the stall timeout and logged with error timeout", async () => {
  const total = 8 * 1024 * 1024;
  await using backend = startBackend(async (conn) => {
    await conn.readHead();
    await conn.write(`HTTP/1.1 200 OK\r\nContent-Length: ${total}\r\n\r\n`);
    const chunk = "z".repeat(64 * 1024);
    for (let sent = 0; sent < total; sent += chunk.length) await conn.write(chunk);
  });
  await withBooks([backend.endpoint], async (books) => {
    const conn = await RawConnection.open(books.port);
    try {
      await conn.send(`GET /huge HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
      // Never read: the proxy's writes back up and its consumer stalls.
      await waitFor("a line", () => books.lines.length === 1, { timeoutMs: 6_000 });
      const line = books.lines[0]!;
      assertEquals([line.status, line.error], [200, "timeout"]);
      assertBetween(line.bytes, 1, total - 1);
    } finally {
      conn.close();
    }
  }, { readTimeoutMs: 400 });
});

async function acceptKey(key: string): Promise<string> {
  const digest = await crypto.subtle.digest(
    "SHA-1",
    new TextEncoder().encode(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"),
  );
  return btoa(String.fromCharCode(...new Uint8Array(digest)));
}

// Was a bug: proxy_handler.ts logged a relayed WebSocket the moment the handshake was answered,
// so its duration was the handshake's and a session still open was already "done".
Deno.test({
  name: "a relayed WebSocket is logged once the session ends, with the session's duration",
  async fn() {
    const { promise: release, resolve: end } = Promise.withResolvers<void>();
    await using backend = startBackend(async (conn) => {
      const head = (await conn.readHead())!;
      const key = /\r\nsec-websocket-key:\s*([^\r]*)/i.exec(head)![1]!;
      await conn.write(
        `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
          `Sec-WebSocket-Accept: ${await acceptKey(key)}\r\n\r\n`,
      );
      await release;
    });
    await withBooks([backend.endpoint], async (books) => {
      const conn = await RawConnection.open(books.port);
      try {
        await conn.send(upgradeHead(HOST) + "\r\n");
        assertEquals((await conn.readResponse({ head: true })).status, 101);
        const opened = performance.now();
        await waitFor("300 ms of session", () => performance.now() - opened > 300);
        assertEquals(books.lines.length, 0, "a session still open is not logged yet");
        end();
        await waitFor("a line", () => books.lines.length === 1);
        assertEquals(books.lines[0]!.status, 101);
        assertBetween(books.lines[0]!.duration_ms, 300, 10_000);
      } finally {
        end();
        conn.close();
      }
    });
  },
});

Deno.test("the request id logged is the one the backend received, also when the client sent its own", async () => {
  await using backend = recordingBackend("ok");
  await withBooks([backend.endpoint], async (books) => {
    await get(books.port, "/a?x=1");
    await get(books.port, "/b", "X-Request-ID: client-chosen-1\r\n");
    await waitFor("two lines", () => books.lines.length === 2);
    for (const [i, line] of books.lines.entries()) {
      assertEquals(line.request_id, requestIdOf(backend.heads[i]!));
      assert(line.request_id.length > 0);
    }
    assertEquals(books.lines.map((l) => l.path), ["/a", "/b"]);
  });
});
