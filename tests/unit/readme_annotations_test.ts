/**
 * The README's table of ingress-nginx annotations says what the catalogue
 * (`lib/translate/nginx/catalogue.ts`) says: every annotation, in the
 * catalogue's groups and order, with its support and note. When this
 * fails, regenerate the table (see `tests/support/annotation_table.ts`).
 */
import { assert, assertEquals } from "../support/assert.ts";
import {
  annotationTable,
  catalogueRows,
  readmeRows,
  TABLE_BEGIN,
  TABLE_END,
  withTable,
} from "../support/annotation_table.ts";
import { NGINX_ANNOTATIONS } from "../../lib/translate/nginx/catalogue.ts";

const readme = await Deno.readTextFile(new URL("../../README.md", import.meta.url));
const FIX =
  "regenerate it: tools/deno run --allow-read --allow-write tests/support/annotation_table.ts --write && tools/deno fmt README.md";

Deno.test("the README's annotation table lists the catalogue's annotations, groups, support and notes", () => {
  const expected = catalogueRows();
  assert(
    expected.length > Object.keys(NGINX_ANNOTATIONS).length - 1,
    "the catalogue is read whole",
  );
  const actual = readmeRows(readme);
  const key = (r: { annotation: string }) => r.annotation;
  const missing = expected.filter((r) => !actual.some((a) => key(a) === key(r))).map(key);
  const extra = actual.filter((r) => !expected.some((e) => key(e) === key(r))).map(key);
  assertEquals({ missing, extra }, { missing: [], extra: [] }, `README table: ${FIX}`);
  assertEquals(actual, expected, `README table differs from the catalogue: ${FIX}`);
});

Deno.test("the annotation table reads back as written, whatever the padding", () => {
  const rows = [
    ...catalogueRows().slice(0, 3),
    { group: "Odd", annotation: "x-*", support: "refused", note: "a | b, `c`" },
  ];
  const text = withTable(
    `intro\n${TABLE_BEGIN}\nold\n${TABLE_END}\nafter\n`,
    annotationTable(rows),
  );
  assert(text.startsWith(`intro\n${TABLE_BEGIN}\n\n#### `), text);
  assert(text.endsWith(`|\n\n${TABLE_END}\nafter\n`), text);
  assertEquals(readmeRows(text), rows);
  // As deno fmt pads a table's cells.
  const padded = text.replace(/ \| /g, "   |   ").replace(/\| --- \|/g, "|:------|");
  assertEquals(readmeRows(padded), rows);
});
