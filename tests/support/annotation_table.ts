/**
 * The README's table of ingress-nginx annotations, made from the catalogue
 * (`lib/translate/nginx/catalogue.ts`): one Markdown table per group, in the
 * catalogue's order, each annotation with its support and note. The README
 * holds it between two marker comments; `tests/unit/readme_annotations_test.ts`
 * fails when the two disagree.
 *
 * Print it: `tools/deno run tests/support/annotation_table.ts`; rewrite the
 * README's copy: `tools/deno run --allow-read --allow-write
 * tests/support/annotation_table.ts --write`, then `tools/deno fmt README.md`.
 *
 * @module
 */
import {
  type AnnotationEntry,
  NGINX_ANNOTATIONS,
  NGINX_REFUSED_PREFIXES,
} from "../../lib/translate/nginx/catalogue.ts";

/** Marks where the generated table starts in the README. */
export const TABLE_BEGIN = "<!-- annotations table: made from lib/translate/nginx/catalogue.ts -->";
/** Marks where it ends. */
export const TABLE_END = "<!-- end of annotations table -->";

/** One row: the annotation (a prefix ends with `*`), its support and note. */
export interface AnnotationRow {
  readonly group: string;
  readonly annotation: string;
  readonly support: string;
  readonly note: string;
}

/** The catalogue's rows, grouped as it groups them (groups in order of first appearance). */
export function catalogueRows(): AnnotationRow[] {
  const groups = new Map<string, AnnotationRow[]>();
  const add = (annotation: string, entry: AnnotationEntry) => {
    const rows = groups.get(entry.group) ?? [];
    groups.set(entry.group, rows);
    rows.push({ group: entry.group, annotation, support: entry.support, note: noteOf(entry) });
  };
  for (const [name, entry] of Object.entries(NGINX_ANNOTATIONS)) add(name, entry);
  for (const [prefix, entry] of Object.entries(NGINX_REFUSED_PREFIXES)) add(`${prefix}*`, entry);
  return [...groups.values()].flat();
}

/** The note as the table shows it: with the values that leave a refused annotation off. */
function noteOf(entry: AnnotationEntry): string {
  if (entry.off === undefined) return entry.note;
  return `${entry.note} (off: ${entry.off.map((v) => `\`${v}\``).join(", ")})`;
}

/** The tables in Markdown: a `####` heading per group, then its table. */
export function annotationTable(rows: readonly AnnotationRow[] = catalogueRows()): string {
  const out: string[] = [];
  let group: string | undefined;
  for (const row of rows) {
    if (row.group !== group) {
      if (group !== undefined) out.push("");
      group = row.group;
      out.push(`#### ${group}`, "", "| annotation | support | note |", "| --- | --- | --- |");
    }
    out.push(`| \`${row.annotation}\` | ${row.support} | ${row.note.replaceAll("|", "\\|")} |`);
  }
  return out.join("\n");
}

/** Reads the rows back from a README's marked section (formatting and padding do not matter). */
export function readmeRows(readme: string): AnnotationRow[] {
  const begin = readme.indexOf(TABLE_BEGIN);
  const end = readme.indexOf(TABLE_END);
  if (begin === -1 || end < begin) throw new Error("Cannot find the annotations table's markers");
  const rows: AnnotationRow[] = [];
  let group = "";
  for (const line of readme.slice(begin + TABLE_BEGIN.length, end).split("\n")) {
    const heading = /^#{1,6}\s+(.+?)\s*$/.exec(line);
    if (heading !== null) {
      group = heading[1]!;
      continue;
    }
    if (!line.startsWith("|")) continue;
    const cells = line.slice(
      1,
      line.trimEnd().endsWith("|") ? line.trimEnd().length - 1 : undefined,
    )
      .split(/(?<!\\)\|/).map((cell) => cell.trim().replaceAll("\\|", "|"));
    if (cells[0] === "annotation" || /^:?-+:?$/.test(cells[0] ?? "")) continue;
    const [annotation = "", support = "", note = ""] = cells;
    rows.push({ group, annotation: annotation.replace(/^`(.*)`$/, "$1"), support, note });
  }
  return rows;
}

/** The README with its marked section replaced by `table`. */
export function withTable(readme: string, table: string = annotationTable()): string {
  const begin = readme.indexOf(TABLE_BEGIN);
  const end = readme.indexOf(TABLE_END);
  if (begin === -1 || end < begin) throw new Error("Cannot find the annotations table's markers");
  return `${readme.slice(0, begin + TABLE_BEGIN.length)}\n\n${table}\n\n${readme.slice(end)}`;
}

if (import.meta.main) {
  if (Deno.args.includes("--write")) {
    const path = new URL("../../README.md", import.meta.url);
    await Deno.writeTextFile(path, withTable(await Deno.readTextFile(path)));
  } else {
    // deno-lint-ignore no-console
    console.log(annotationTable());
  }
}
