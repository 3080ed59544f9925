import { deepStrictEqual as assertEquals, strictEqual } from "node:assert/strict";
import { lastHeaderListSource, requestHeaderList } from "./_deno_internal.ts";
import { latin1, RawConnection } from "../../tests/support/raw_http.ts";

// Canary: if this fails after a Deno upgrade, the proxy still works (it falls back to the
// public, sorted and combined `req.headers`) but loses header order and case fidelity.
// Re-check `_deno_internal.ts` against the new Deno's ext/http/00_serve.ts.
Deno.test("requestHeaderList() reads Deno.serve's wire-order header list (Deno 2.9.6 internals)", async () => {
  strictEqual(Deno.version.deno, "2.9.6", "Deno changed: re-check lib/proxy/_deno_internal.ts");
  let seen: [string, string][] = [];
  let source = "";
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    seen = requestHeaderList(req);
    source = lastHeaderListSource();
    return new Response("ok");
  });
  const conn = await RawConnection.open(server.addr.port);
  try {
    await conn.send(
      "GET / HTTP/1.1\r\nHost: a.example\r\nZeta: 1\r\nX-Dup: one\r\nAlpha: 2\r\nx-dup: two\r\n" +
        "X-Obs: caf\xc3\xa9\r\nConnection: close\r\n\r\n",
    );
    const response = await conn.readResponse();
    assertEquals(latin1(response.body), "ok");
  } finally {
    conn.close();
    await server.shutdown();
  }
  strictEqual(source, "internal", "Deno's inner request changed shape; header fidelity is lost");
  assertEquals(seen, [
    ["Host", "a.example"],
    ["Zeta", "1"],
    ["X-Dup", "one"],
    ["Alpha", "2"],
    ["x-dup", "two"],
    ["X-Obs", "caf\xc3\xa9"],
    ["Connection", "close"],
  ]);
});

Deno.test("requestHeaderList() falls back to req.headers for a constructed Request", () => {
  const req = new Request("http://a.example/", { headers: [["B", "1"], ["A", "2"]] });
  const list = requestHeaderList(req);
  // Either source is acceptable here; both must carry the same fields.
  assertEquals(list.map(([k, v]) => [k.toLowerCase(), v]).sort(), [["a", "2"], ["b", "1"]]);
});
