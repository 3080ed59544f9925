import { assert, assertEquals } from "../../tests/support/assert.ts";
import { within } from "../../tests/support/wait.ts";
import { defaultBindAddress } from "./sluice.ts";

Deno.test("defaultBindAddress() picks an address this host can listen on for IPv4", async () => {
  const address = await within(5_000, "the bind-address probe", defaultBindAddress());
  assert(address === "::" || address === "0.0.0.0", `picked "${address}"`);
  const listener = Deno.listen({ hostname: address, port: 0 });
  try {
    const conn = await Deno.connect({
      hostname: "127.0.0.1",
      port: (listener.addr as Deno.NetAddr).port,
    });
    conn.close();
    (await listener.accept()).close();
  } finally {
    listener.close();
  }
});

// Was a bug: a probe connection that never completed (dropped by a firewall) or was taken by
// another process's IPv4 listener on the same port (IPv6-only sockets) held start-up forever.
Deno.test("defaultBindAddress() falls back to 0.0.0.0 when the probe connection stalls", async () => {
  let aborted = false;
  const address = await within(
    5_000,
    "the bind-address probe",
    defaultBindAddress({
      timeoutMs: 100,
      connect: (options) =>
        new Promise((_, reject) => {
          options.signal?.addEventListener("abort", () => {
            aborted = true;
            reject(options.signal?.reason);
          }, { once: true });
        }),
    }),
  );
  assertEquals(address, "0.0.0.0");
  assert(aborted, "the stalled connect was aborted");
});

Deno.test("defaultBindAddress() falls back to 0.0.0.0 when another listener takes the probe", async () => {
  const other = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const otherAccepted = other.accept();
  try {
    const address = await within(
      5_000,
      "the bind-address probe",
      defaultBindAddress({
        timeoutMs: 100,
        connect: (options) => Deno.connect({ ...options, port: (other.addr as Deno.NetAddr).port }),
      }),
    );
    assertEquals(address, "0.0.0.0");
  } finally {
    other.close();
    await otherAccepted.then((conn) => conn.close(), () => {});
  }
});
