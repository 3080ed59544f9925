/**
 * Micro-benchmark: the proxy handler with its `Deno.connect` upstream client
 * against the same handler logic on `fetch` (baseline), and a direct request
 * to the backend for reference, all on loopback in this process (client,
 * proxies and backend share one event loop, so ratios understate the
 * difference a separate load generator would see).
 *
 *   tools/deno bench -A lib/proxy/proxy_bench.ts
 *
 * Each iteration sends one request on each of N keep-alive client
 * connections at once and waits for all responses.
 *
 * @module
 */

import { createCidrMatcher } from "../net/cidr.ts";
import { forwardRequestHeaders, forwardResponseHeaders } from "./forwarded_headers.ts";
import { createProxyHandler } from "./proxy_handler.ts";
import type { Match, Snapshot } from "../routing/snapshot.ts";

const KIB = new Uint8Array(1024).fill(97);
const MIB = new Uint8Array(1024 * 1024).fill(98);

const backend = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
  const big = req.url.endsWith("/mib");
  if (req.body !== null) {
    return req.arrayBuffer().then((b) => new Response(String(b.byteLength)));
  }
  return new Response(big ? MIB : KIB, { headers: { "content-type": "application/octet-stream" } });
});
const backendPort = backend.addr.port;

const match: Match = {
  ingress: "bench/ingress",
  host: "",
  path: "/",
  pathType: "Prefix",
  tls: false,
  backend: {
    key: "bench/backend:80",
    service: "bench/backend",
    endpoints: [{ address: "127.0.0.1", port: backendPort }],
  },
};
const snapshot: Snapshot = {
  version: 1,
  routes: { lookup: () => match },
  certificates: {
    fingerprint: "",
    resolve() {
      throw new Error("Cannot resolve certificates in the benchmark");
    },
  },
};

const raw = createProxyHandler({ snapshot: () => snapshot });
const rawServer = Deno.serve(
  { hostname: "127.0.0.1", port: 0, onListen() {} },
  (req, info) =>
    raw(req, { remoteAddr: info.remoteAddr as Deno.NetAddr, secure: false, localPort: 0 }),
);

// The same header rules on fetch: what a fetch-based handler must do at least.
const fetchClient = Deno.createHttpClient({ allowHost: true, poolMaxIdlePerHost: 64 });
const trusted = createCidrMatcher([]);
const fetchServer = Deno.serve(
  { hostname: "127.0.0.1", port: 0, onListen() {} },
  async (req, info) => {
    const url = new URL(req.url);
    const forwarded = forwardRequestHeaders([...req.headers], {
      authority: url.host,
      peer: (info.remoteAddr as Deno.NetAddr).hostname,
      scheme: "http",
      port: 0,
    }, { trusted, newRequestId: () => crypto.randomUUID().replaceAll("-", "") });
    const upstream = await fetch(`http://127.0.0.1:${backendPort}${url.pathname}${url.search}`, {
      method: req.method,
      headers: forwarded.headers,
      body: req.body,
      redirect: "manual",
      client: fetchClient,
    });
    return new Response(upstream.body, {
      status: upstream.status,
      headers: forwardResponseHeaders([...upstream.headers], { connectionTokens: [] }),
    });
  },
);

/** A minimal keep-alive client: Content-Length responses only, bytes counted not kept. */
class BenchConnection {
  #conn: Deno.Conn;
  #buf = new Uint8Array(256 * 1024);
  #start = 0;
  #end = 0;

  constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  async request(head: Uint8Array, body?: Uint8Array): Promise<number> {
    await writeAll(this.#conn, head);
    if (body !== undefined) await writeAll(this.#conn, body);
    let headEnd = -1;
    for (;;) {
      const at = indexOfHeadEnd(this.#buf, this.#start, this.#end);
      if (at !== -1) {
        headEnd = at;
        break;
      }
      await this.#fill();
    }
    const text = new TextDecoder().decode(this.#buf.subarray(this.#start, headEnd));
    const length = Number(/content-length: *(\d+)/i.exec(text)?.[1] ?? NaN);
    if (Number.isNaN(length)) throw new Error(`Benchmark needs Content-Length: ${text}`);
    this.#start = headEnd;
    let remaining = length;
    while (remaining > 0) {
      if (this.#start === this.#end) await this.#fill();
      const n = Math.min(remaining, this.#end - this.#start);
      this.#start += n;
      remaining -= n;
    }
    return length;
  }

  close(): void {
    this.#conn.close();
  }

  async #fill(): Promise<void> {
    if (this.#start === this.#end) this.#start = this.#end = 0;
    if (this.#end === this.#buf.length) {
      this.#buf.copyWithin(0, this.#start, this.#end);
      this.#end -= this.#start;
      this.#start = 0;
    }
    const n = await this.#conn.read(this.#buf.subarray(this.#end));
    if (n === null) throw new Error("Connection closed");
    this.#end += n;
  }
}

function indexOfHeadEnd(buf: Uint8Array, start: number, end: number): number {
  for (let i = buf.indexOf(10, start); i !== -1 && i < end; i = buf.indexOf(10, i + 1)) {
    if (buf[i - 1] === 13 && buf[i - 2] === 10 && buf[i - 3] === 13) return i + 1;
  }
  return -1;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < bytes.length) offset += await conn.write(bytes.subarray(offset));
}

async function clients(port: number, n: number): Promise<BenchConnection[]> {
  return await Promise.all(
    Array.from(
      { length: n },
      async () => new BenchConnection(await Deno.connect({ hostname: "127.0.0.1", port })),
    ),
  );
}

const targets = {
  direct: backendPort,
  fetch: fetchServer.addr.port,
  raw: rawServer.addr.port,
};
const CONCURRENCY = 16;
const pools = {
  direct: await clients(targets.direct, CONCURRENCY),
  fetch: await clients(targets.fetch, CONCURRENCY),
  raw: await clients(targets.raw, CONCURRENCY),
};
const encoder = new TextEncoder();
const getKib = encoder.encode(
  "GET /kib HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: bench\r\n\r\n",
);
const getMib = encoder.encode(
  "GET /mib HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: bench\r\n\r\n",
);
const POST_BODY = new Uint8Array(64 * 1024).fill(99);
const post = encoder.encode(
  `POST /upload HTTP/1.1\r\nHost: bench.example\r\nContent-Length: ${POST_BODY.length}\r\n\r\n`,
);

function run(kind: keyof typeof pools, head: Uint8Array, concurrency: number, body?: Uint8Array) {
  return async () => {
    await Promise.all(pools[kind].slice(0, concurrency).map((c) => c.request(head, body)));
  };
}

for (const kind of ["fetch", "raw", "direct"] as const) {
  Deno.bench({
    name: `1 KiB GET x${CONCURRENCY} via ${kind}`,
    group: "1 KiB GET",
    baseline: kind === "fetch",
    fn: run(kind, getKib, CONCURRENCY),
  });
}
for (const kind of ["fetch", "raw", "direct"] as const) {
  Deno.bench({
    name: `1 MiB GET x4 via ${kind}`,
    group: "1 MiB GET",
    baseline: kind === "fetch",
    fn: run(kind, getMib, 4),
  });
}
for (const kind of ["fetch", "raw", "direct"] as const) {
  Deno.bench({
    name: `64 KiB POST x4 via ${kind}`,
    group: "64 KiB POST",
    baseline: kind === "fetch",
    fn: run(kind, post, 4, POST_BODY),
  });
}

globalThis.addEventListener("unload", () => {
  for (const list of Object.values(pools)) for (const c of list) c.close();
  raw.close();
  fetchClient.close();
});
