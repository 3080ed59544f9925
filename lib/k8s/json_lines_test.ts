import { assertEquals } from "../../tests/support/assert.ts";
import { type JsonLine, JsonLinesStream } from "./json_lines.ts";

async function parse(chunks: (string | Uint8Array)[]): Promise<JsonLine[]> {
  const enc = new TextEncoder();
  const source = ReadableStream.from(chunks.map((c) => typeof c === "string" ? enc.encode(c) : c));
  return await Array.fromAsync(source.pipeThrough(new JsonLinesStream()));
}

Deno.test("JsonLinesStream joins lines split across chunks", async () => {
  assertEquals(await parse(['{"a":', '1}\n{"b"', ":2}\n"]), [
    { ok: true, value: { a: 1 } },
    { ok: true, value: { b: 2 } },
  ]);
});

Deno.test("JsonLinesStream joins a multi-byte character split across chunks", async () => {
  const bytes = new TextEncoder().encode('{"s":"é€"}\n');
  // Split inside the three-byte euro sign.
  assertEquals(await parse([bytes.slice(0, 9), bytes.slice(9)]), [{
    ok: true,
    value: { s: "é€" },
  }]);
});

Deno.test("JsonLinesStream reports a malformed line and keeps going", async () => {
  const items = await parse(['{"a":1}\nnot json\n{"b":2}\n']);
  assertEquals(items.length, 3);
  assertEquals(items[0], { ok: true, value: { a: 1 } });
  assertEquals(items[1]?.ok, false);
  assertEquals(items[1]?.ok === false ? items[1].line : "", "not json");
  assertEquals(items[2], { ok: true, value: { b: 2 } });
});

Deno.test("JsonLinesStream skips blank lines, strips CR and parses a final line without newline", async () => {
  assertEquals(await parse(['\n{"a":1}\r\n\n', '{"b":2}']), [
    { ok: true, value: { a: 1 } },
    { ok: true, value: { b: 2 } },
  ]);
});

Deno.test("JsonLinesStream cuts a huge malformed line in its report", async () => {
  const [item] = await parse(["x".repeat(10_000) + "\n"]);
  assertEquals(item?.ok, false);
  assertEquals(item?.ok === false ? item.line.length : 0, 513);
});
