/**
 * Test support: a strict reader of the Prometheus text exposition format
 * (version 0.0.4) for the metrics tests: metric and label names, HELP and TYPE
 * lines, label escaping and histogram shape are checked, and anything the
 * format forbids throws.
 *
 * @module
 */

// ---------------------------------------------------------------------------
// A strict reader of the Prometheus text exposition format (version 0.0.4).

export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

export interface Family {
  readonly name: string;
  type: string | undefined;
  help: string | undefined;
  readonly samples: Sample[];
}

export const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
export const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
export const TYPES = new Set(["counter", "gauge", "histogram", "summary", "untyped"]);
export const FLOAT = /^(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN)$/;

export function number(text: string): number {
  if (text === "+Inf" || text === "Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  return Number(text);
}

/** Undoes the escapes allowed in `what` (`\\`, `\n`, and `\"` in label values); throws on any other. */
export function unescape(text: string, quotes: boolean, where: string): string {
  return text.replace(/\\(.?)/gs, (_, c: string) => {
    if (c === "\\") return "\\";
    if (c === "n") return "\n";
    if (c === '"' && quotes) return '"';
    throw new Error(`${where}: invalid escape "\\${c}"`);
  });
}

/** Reads `{a="x",b="y"}` starting at `text[start] === "{"`; returns the labels and the end. */
export function readLabels(text: string, start: number, where: string) {
  const labels: Record<string, string> = {};
  let i = start + 1;
  while (text[i] !== "}") {
    const name = /^[^=]*/.exec(text.slice(i))![0];
    if (!LABEL_NAME.test(name) || name.startsWith("__")) {
      throw new Error(`${where}: invalid label name "${name}"`);
    }
    if (name in labels) throw new Error(`${where}: label "${name}" twice`);
    i += name.length;
    if (text.slice(i, i + 2) !== '="') throw new Error(`${where}: expected =" after ${name}`);
    i += 2;
    let raw = "";
    for (;;) {
      const c = text[i];
      if (c === undefined) throw new Error(`${where}: unterminated label value`);
      if (c === "\\") {
        raw += c + (text[i + 1] ?? "");
        i += 2;
        continue;
      }
      i++;
      if (c === '"') break;
      raw += c;
    }
    labels[name] = unescape(raw, true, where);
    if (text[i] === ",") i++;
    else if (text[i] !== "}") throw new Error(`${where}: expected , or } after a label`);
  }
  return { labels, end: i + 1 };
}

/**
 * Parses an exposition and checks it against the format: metric and label
 * names, at most one HELP and TYPE per family and both before its samples,
 * each family's samples contiguous, no series twice, only the allowed
 * escapes, float values, counters non-negative, and histograms complete
 * (ascending `le` ending at `+Inf`, cumulative counts, `_count` equal to the
 * `+Inf` bucket, a `_sum`).
 *
 * @throws naming the line and the rule broken.
 */
export function parseExposition(text: string): Map<string, Family> {
  if (text.length > 0 && !text.endsWith("\n")) throw new Error("the last line is unterminated");
  const families = new Map<string, Family>();
  const ended = new Set<string>();
  const series = new Set<string>();
  let current: Family | undefined;
  const enter = (family: Family, where: string) => {
    if (current === family) return;
    if (ended.has(family.name)) throw new Error(`${where}: family ${family.name} is split`);
    if (current !== undefined) ended.add(current.name);
    current = family;
  };
  const family = (name: string): Family => {
    let f = families.get(name);
    if (f === undefined) {
      f = { name, type: undefined, help: undefined, samples: [] };
      families.set(name, f);
    }
    return f;
  };
  const lines = text.split("\n").slice(0, -1);
  lines.forEach((line, index) => {
    const where = `line ${index + 1} (${JSON.stringify(line.slice(0, 80))})`;
    if (line === "") return;
    if (line.startsWith("#")) {
      const m = /^# (HELP|TYPE) (\S+)(?: (.*))?$/s.exec(line);
      if (m === null) {
        if (/^#\s*(HELP|TYPE)\b/.test(line)) throw new Error(`${where}: malformed ${line}`);
        return; // a comment
      }
      const [, keyword, name, rest = ""] = m;
      if (!METRIC_NAME.test(name!)) throw new Error(`${where}: invalid metric name`);
      const f = family(name!);
      enter(f, where);
      if (f.samples.length > 0) throw new Error(`${where}: ${keyword} after samples`);
      if (keyword === "HELP") {
        if (f.help !== undefined) throw new Error(`${where}: second HELP`);
        f.help = unescape(rest, false, where);
      } else {
        if (f.type !== undefined) throw new Error(`${where}: second TYPE`);
        if (!TYPES.has(rest)) throw new Error(`${where}: unknown type "${rest}"`);
        f.type = rest;
      }
      return;
    }
    const name = /^[^{\s]*/.exec(line)![0];
    if (!METRIC_NAME.test(name)) throw new Error(`${where}: invalid metric name "${name}"`);
    let i = name.length;
    let labels: Record<string, string> = {};
    if (line[i] === "{") ({ labels, end: i } = readLabels(line, i, where));
    const tail = line.slice(i);
    const m = /^ (\S+)(?: (-?\d+))?$/.exec(tail);
    if (m === null || !FLOAT.test(m[1]!)) throw new Error(`${where}: invalid value "${tail}"`);
    const suffix = /_(bucket|sum|count)$/.exec(name);
    const base = suffix === null ? undefined : families.get(name.slice(0, suffix.index));
    const f = base !== undefined && (base.type === "histogram" || base.type === "summary")
      ? base
      : family(name);
    enter(f, where);
    const key = `${name}${JSON.stringify(Object.entries(labels).sort())}`;
    if (series.has(key)) throw new Error(`${where}: series twice`);
    series.add(key);
    const value = number(m[1]!);
    if (f.type === "counter" && !(value >= 0)) throw new Error(`${where}: negative counter`);
    f.samples.push({ name, labels, value });
  });
  for (const f of families.values()) if (f.type === "histogram") checkHistogram(f);
  return families;
}

export function checkHistogram(f: Family): void {
  const groups = new Map<string, { buckets: [number, number][]; sum?: number; count?: number }>();
  for (const s of f.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const g = groups.get(key) ?? { buckets: [] };
    groups.set(key, g);
    if (s.name === `${f.name}_bucket`) {
      if (le === undefined || !FLOAT.test(le)) throw new Error(`${f.name}: bucket without le`);
      g.buckets.push([number(le), s.value]);
    } else if (s.name === `${f.name}_sum`) g.sum = s.value;
    else if (s.name === `${f.name}_count`) g.count = s.value;
    else throw new Error(`${f.name}: unexpected sample ${s.name}`);
  }
  for (const [key, g] of groups) {
    const where = `${f.name}${key}`;
    if (g.buckets.length === 0 || g.buckets.at(-1)![0] !== Infinity) {
      throw new Error(`${where}: no +Inf bucket last`);
    }
    for (let i = 1; i < g.buckets.length; i++) {
      if (!(g.buckets[i]![0] > g.buckets[i - 1]![0])) throw new Error(`${where}: le not ascending`);
      if (g.buckets[i]![1] < g.buckets[i - 1]![1]) throw new Error(`${where}: counts decrease`);
    }
    if (g.count !== g.buckets.at(-1)![1]) {
      throw new Error(`${where}: _count is not the +Inf bucket`);
    }
    if (g.sum === undefined) throw new Error(`${where}: no _sum`);
  }
}

/** The samples of `name` whose labels include `labels`. */
export function samples(
  families: Map<string, Family>,
  name: string,
  labels: Record<string, string> = {},
) {
  const out: Sample[] = [];
  for (const f of families.values()) {
    for (const s of f.samples) {
      if (s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)) {
        out.push(s);
      }
    }
  }
  return out;
}
