import { assert, assertEquals, assertStringIncludes } from "../../tests/support/assert.ts";
import { generateSelfSignedCertificate } from "../tls/self_signed.ts";
import { tcpNoDelay } from "./_tcp_probe.ts";
import { setNoDelayOnListeningSockets } from "./tcp_nodelay.ts";

/** Connects to `listener` and returns the server's side of the connection with the client's. */
async function acceptOne<C extends Deno.Conn>(
  listener: Deno.Listener<C>,
): Promise<{ server: C; client: Deno.TcpConn }> {
  const [client, server] = await Promise.all([
    Deno.connect({ hostname: "127.0.0.1", port: (listener.addr as Deno.NetAddr).port }),
    listener.accept(),
  ]);
  return { server, client };
}

function serverSideNoDelay(listener: Deno.Listener, client: Deno.TcpConn): boolean {
  return tcpNoDelay((listener.addr as Deno.NetAddr).port, client.localAddr.port);
}

Deno.test("connections accepted after setNoDelayOnListeningSockets() inherit TCP_NODELAY; earlier ones do not have it", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const before = await acceptOne(listener);
  try {
    // Deno does not set it on accepted sockets: without this module they would not have it.
    assertEquals(serverSideNoDelay(listener, before.client), false);
    assertEquals(setNoDelayOnListeningSockets(listener.addr.port), { ok: true, sockets: 1 });
    const after = await acceptOne(listener);
    try {
      assertEquals(serverSideNoDelay(listener, after.client), true);
      assertEquals(serverSideNoDelay(listener, before.client), false);
    } finally {
      after.server.close();
      after.client.close();
    }
  } finally {
    before.server.close();
    before.client.close();
    listener.close();
  }
});

Deno.test("TLS connections accepted from a listening socket with TCP_NODELAY have it, on IPv4 and IPv6 sockets alike", async () => {
  const certificate = await generateSelfSignedCertificate({ hostnames: ["a.test"] });
  for (const hostname of ["127.0.0.1", "::"]) {
    const listener = Deno.listenTls({
      hostname,
      port: 0,
      cert: certificate.certPem,
      key: certificate.keyPem,
    });
    try {
      assertEquals(setNoDelayOnListeningSockets(listener.addr.port), { ok: true, sockets: 1 });
      const { server, client } = await acceptOne(listener);
      try {
        assertEquals(serverSideNoDelay(listener, client), true, hostname);
      } finally {
        server.close();
        client.close();
      }
    } finally {
      listener.close();
    }
  }
});

Deno.test("every listening socket sharing the port (reusePort) gets TCP_NODELAY", () => {
  const first = Deno.listen({ hostname: "127.0.0.1", port: 0, reusePort: true });
  const second = Deno.listen({ hostname: "127.0.0.1", port: first.addr.port, reusePort: true });
  try {
    assertEquals(setNoDelayOnListeningSockets(first.addr.port), { ok: true, sockets: 2 });
  } finally {
    first.close();
    second.close();
  }
});

Deno.test("setNoDelayOnListeningSockets() reports a port nothing listens on, and a connected socket there is left alone", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { server, client } = await acceptOne(listener);
  const port = listener.addr.port;
  listener.close();
  try {
    const outcome = setNoDelayOnListeningSockets(port);
    assertEquals(outcome.ok, false);
    assert(!outcome.ok && outcome.reason.includes(`port ${port}`), JSON.stringify(outcome));
    assertEquals(tcpNoDelay(port, client.localAddr.port), false);
  } finally {
    server.close();
    client.close();
  }
});

Deno.test("without --allow-ffi, setNoDelayOnListeningSockets() says so and does not throw", async () => {
  const module = new URL("./tcp_nodelay.ts", import.meta.url).href;
  const script = `
    import { setNoDelayOnListeningSockets } from "${module}";
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    console.log(JSON.stringify(setNoDelayOnListeningSockets(listener.addr.port)));
    listener.close();`;
  const file = await Deno.makeTempFile({ suffix: ".ts" });
  await Deno.writeTextFile(file, script);
  // `deno eval` would grant every permission: run the file with net and read only.
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-config", "--allow-net", "--allow-read", file],
    stdout: "piped",
    stderr: "piped",
  }).output().finally(() => Deno.remove(file));
  const stdout = new TextDecoder().decode(output.stdout);
  assert(output.success, new TextDecoder().decode(output.stderr));
  const outcome = JSON.parse(stdout);
  assertEquals(outcome.ok, false);
  assertStringIncludes(outcome.reason, "--allow-ffi");
});
