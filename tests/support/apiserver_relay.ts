/**
 * A TCP relay on loopback in front of the real kube-apiserver, to give one
 * client a network fault the apiserver itself cannot be made to produce: a
 * partition (bytes silently dropped both ways, connections left open, new
 * ones accepted and then ignored), a partition that heals with the bytes
 * held back delivered late (TCP retransmission), and every connection cut at
 * once, and connections refused. TLS passes through untouched (the apiserver's certificate names
 * 127.0.0.1), so the client still verifies the real server.
 *
 * Also a client of the test cluster that goes through the relay, with the
 * admin's token.
 *
 * Test support only; knows nothing of Sluice.
 *
 * @module
 */
import { KubeConfig } from "@kubernetes/client-node";
import { accessFromKubeConfig, type KubeAccess } from "../../lib/k8s/kube_access.ts";
import { KubeClient } from "../../lib/k8s/kube_client.ts";
import { testKubeconfig } from "./kube.ts";

/** What the relay does with bytes. */
export type RelayMode =
  /** Forward both ways. */
  | "pass"
  /** Drop every byte both ways, for good: the connections are dead but nobody knows. */
  | "drop"
  /** Hold every byte both ways, and deliver it when the mode goes back to `pass`. */
  | "hold"
  /** Close new connections at once, as a host with nothing listening would; open ones still pass. */
  | "refuse";

/** A running relay. */
export interface Relay extends AsyncDisposable {
  /** `https://127.0.0.1:<port>`, to use instead of the apiserver's URL. */
  readonly server: string;
  /** Connections accepted so far. */
  readonly accepted: number;
  /** Connections open now. */
  readonly open: number;
  /** Changes what happens to bytes from now on (held bytes are delivered on `pass`). */
  setMode(mode: RelayMode): void;
  /** Closes every open connection (both sides). */
  cutAll(): void;
  close(): Promise<void>;
}

/** One direction of a relayed connection. */
interface Direction {
  readonly to: Deno.Conn;
  /** Bytes held back while the mode is `hold`. */
  readonly held: Uint8Array[];
  /** Writes in order. */
  chain: Promise<void>;
}

interface Pipe {
  readonly client: Deno.Conn;
  readonly upstream: Deno.Conn;
  readonly up: Direction;
  readonly down: Direction;
  /** Set once the pipe has dropped bytes: it can never carry a valid stream again. */
  dead: boolean;
}

function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch {
    // already closed
  }
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let written = 0;
  while (written < bytes.length) written += await conn.write(bytes.subarray(written));
}

/** Queues the held bytes, then `bytes`, for writing in order. */
function send(direction: Direction, bytes?: Uint8Array): void {
  const chunks = direction.held.splice(0);
  if (bytes !== undefined) chunks.push(bytes);
  for (const chunk of chunks) {
    direction.chain = direction.chain.then(() => writeAll(direction.to, chunk)).catch(() => {});
  }
}

/** Starts a relay to `target` (`https://host:port`) on a free loopback port. */
export function startRelay(target: string): Relay {
  const url = new URL(target);
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  let mode = "pass" as RelayMode;
  let accepted = 0;
  const pipes = new Set<Pipe>();
  const tasks = new Set<Promise<void>>();
  const track = (task: Promise<void>) => {
    tasks.add(task);
    void task.finally(() => tasks.delete(task));
  };

  const pump = async (pipe: Pipe, from: Deno.Conn, direction: Direction) => {
    const buffer = new Uint8Array(64 * 1024);
    try {
      while (true) {
        const n = await from.read(buffer);
        if (n === null) break;
        const bytes = buffer.slice(0, n);
        if (mode === "drop" || pipe.dead) pipe.dead = true;
        else if (mode === "hold") direction.held.push(bytes);
        else send(direction, bytes);
      }
    } catch {
      // a side closed
    }
    await direction.chain;
    closeQuietly(pipe.client);
    closeQuietly(pipe.upstream);
    pipes.delete(pipe);
  };

  const accepting = (async () => {
    for await (const client of listener) {
      accepted++;
      if (mode === "refuse") {
        closeQuietly(client);
        continue;
      }
      let upstream: Deno.Conn;
      try {
        upstream = await Deno.connect({ hostname: url.hostname, port: Number(url.port) });
      } catch {
        closeQuietly(client);
        continue;
      }
      const direction = (to: Deno.Conn): Direction => ({ to, held: [], chain: Promise.resolve() });
      const pipe: Pipe = {
        client,
        upstream,
        up: direction(upstream),
        down: direction(client),
        dead: false,
      };
      pipes.add(pipe);
      track(pump(pipe, client, pipe.up));
      track(pump(pipe, upstream, pipe.down));
    }
  })().catch(() => {});

  let closed: Promise<void> | undefined;
  const relay: Relay = {
    server: `https://127.0.0.1:${port}`,
    get accepted() {
      return accepted;
    },
    get open() {
      return pipes.size;
    },
    setMode(next) {
      mode = next;
      if (next !== "pass") return;
      for (const pipe of pipes) {
        if (pipe.dead) continue;
        send(pipe.up);
        send(pipe.down);
      }
    },
    cutAll() {
      for (const pipe of pipes) {
        closeQuietly(pipe.client);
        closeQuietly(pipe.upstream);
      }
    },
    close() {
      closed ??= (async () => {
        listener.close();
        await accepting;
        relay.cutAll();
        while (tasks.size > 0) await Promise.all([...tasks]);
      })();
      return closed;
    },
    [Symbol.asyncDispose]: () => relay.close(),
  };
  return relay;
}

/**
 * A client of the test cluster (`kubeconfig`, default the shared one) that
 * reaches it through `relay`, as the admin; over HTTP/1.1 only with
 * `http2: false`. Close it with `access.close()`.
 */
export async function clientThrough(
  relay: Relay,
  options: { kubeconfig?: string; http2?: boolean } = {},
): Promise<{ client: KubeClient; access: KubeAccess }> {
  const kubeconfig = options.kubeconfig ?? testKubeconfig();
  const admin = new KubeConfig();
  admin.loadFromFile(kubeconfig);
  const cluster = admin.getCurrentCluster();
  const user = admin.getCurrentUser();
  if (cluster === null || user === null) throw new Error(`The kubeconfig "${kubeconfig}" is empty`);
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ ...cluster, name: "relayed", server: relay.server }],
    users: [{ ...user, name: "relayed" }],
    contexts: [{ name: "relayed", cluster: "relayed", user: "relayed" }],
    currentContext: "relayed",
  });
  const access = await accessFromKubeConfig(kc, "relayed");
  if (options.http2 !== false) return { client: new KubeClient(access), access };
  // The same credentials over HTTP/1.1 only: one connection per request in flight.
  access.client.close();
  const ca = cluster.caData !== undefined ? atob(cluster.caData) : undefined;
  const client = Deno.createHttpClient({ http2: false, ...(ca ? { caCerts: [ca] } : {}) });
  const h1: KubeAccess = { ...access, client, close: () => client.close() };
  return { client: new KubeClient(h1), access: h1 };
}
