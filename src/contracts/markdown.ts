import { isAlias, isMap, isPair, isScalar, isSeq, LineCounter, parseDocument, visit, type Node } from 'yaml';
import type { Problem, Result } from './problem.js';

/** A line of a markdown body with its 1-based line number in the whole file. */
export interface BodyLine {
  text: string;
  line: number;
}

/** A `## Title` section: the heading's line and every line up to the next `## ` heading. */
export interface Section {
  title: string;
  line: number;
  lines: BodyLine[];
}

/** A markdown document with YAML front matter, as ThreeGate's TR/TS files are. */
export interface FrontMatterDocument {
  /** The front matter as plain JS values (YAML 1.2 core schema: dates stay strings). */
  data: unknown;
  /** 1-based line of the deepest existing node on `path` (the key's line for map entries). */
  lineOf(path: readonly (string | number)[]): number;
  /** Lines between the closing `---` and the first `## ` heading. */
  preamble: BodyLine[];
  sections: Section[];
}

export const markdownRules = [
  {
    code: 'FM_MISSING',
    spec: 'Required Front Matter: the document opens with a YAML front matter block between `---` lines.',
    fix: 'Start the file with a line `---`, the YAML fields, and a closing `---` line.',
  },
  {
    code: 'FM_YAML',
    spec: 'Required Front Matter: the front matter is valid YAML (Airlock: duplicate keys are errors).',
    fix: 'Fix the YAML syntax at the line given; each key may appear once.',
  },
  {
    code: 'FM_ALIAS',
    spec: 'Airlock: YAML anchors, aliases and tags are not allowed in front matter (they hide content and allow alias bombs).',
    fix: 'Write every value out in full; remove `&anchor`, `*alias` and `!tag` syntax.',
  },
  {
    code: 'FM_NOT_MAPPING',
    spec: 'Required Front Matter: the front matter is a mapping of field names to values.',
    fix: 'Write the front matter as `key: value` lines.',
  },
] as const;

const FENCE = /^\s*(```|~~~)/;

/** Splits and parses front matter and `## ` sections. Never throws on any input string. */
export function parseFrontMatterDocument(text: string): Result<FrontMatterDocument> {
  const lines = text.split('\n');
  if (lines[0]?.trimEnd() !== '---') {
    return { ok: false, problems: [{ code: 'FM_MISSING', message: 'document must start with a `---` front matter line', line: 1 }] };
  }
  const close = lines.findIndex((l, i) => i > 0 && (l.trimEnd() === '---' || l.trimEnd() === '...'));
  if (close < 0) {
    return { ok: false, problems: [{ code: 'FM_MISSING', message: 'front matter is never closed with a `---` line', line: 1 }] };
  }
  const yamlText = lines.slice(1, close).join('\n');
  const firstYamlLine = 2;
  const counter = new LineCounter();
  const problems: Problem[] = [];
  let doc;
  try {
    doc = parseDocument(yamlText, { lineCounter: counter, uniqueKeys: true, prettyErrors: false, schema: 'core', version: '1.2' });
  } catch (e) {
    // The yaml package recurses on nesting; a hostile document can exhaust the stack.
    return { ok: false, problems: [{ code: 'FM_YAML', message: `front matter cannot be parsed: ${(e as Error).message}`, line: firstYamlLine }] };
  }
  for (const err of doc.errors) {
    const at = err.pos?.[0] ?? 0;
    problems.push({ code: 'FM_YAML', message: err.message.split('\n')[0] ?? 'YAML error', line: counter.linePos(at).line + firstYamlLine - 1 });
  }
  if (problems.length > 0) return { ok: false, problems };
  visit(doc, (_key, node) => {
    if (isAlias(node) || ((isScalar(node) || isMap(node) || isSeq(node)) && (node.anchor || node.tag))) {
      const at = (node as Node).range?.[0] ?? 0;
      problems.push({ code: 'FM_ALIAS', message: 'YAML anchors, aliases and explicit tags are not allowed', line: counter.linePos(at).line + firstYamlLine - 1 });
      return visit.BREAK;
    }
    return undefined;
  });
  if (problems.length > 0) return { ok: false, problems };
  let data: unknown;
  try {
    data = doc.toJS({ maxAliasCount: 0 });
  } catch (e) {
    return { ok: false, problems: [{ code: 'FM_YAML', message: `front matter cannot be read: ${(e as Error).message}`, line: firstYamlLine }] };
  }
  if (data === null || typeof data !== 'object' || Array.isArray(data)) {
    return { ok: false, problems: [{ code: 'FM_NOT_MAPPING', message: 'front matter must be a mapping of fields', line: firstYamlLine }] };
  }

  const root = doc.contents;
  const lineOf = (path: readonly (string | number)[]): number => {
    let node: unknown = root;
    let offset = 0;
    for (const seg of path) {
      if (isMap(node)) {
        const pair = node.items.find((p) => isPair(p) && isScalar(p.key) && p.key.value === seg);
        if (!pair) break;
        offset = (pair.key as Node).range?.[0] ?? offset;
        node = pair.value;
      } else if (isSeq(node) && typeof seg === 'number') {
        const item = node.items[seg];
        if (!item) break;
        offset = (item as Node).range?.[0] ?? offset;
        node = item;
      } else break;
    }
    return counter.linePos(offset).line + firstYamlLine - 1;
  };

  const preamble: BodyLine[] = [];
  const sections: Section[] = [];
  let inFence = false;
  for (let i = close + 1; i < lines.length; i++) {
    const textLine = lines[i] as string;
    const line = i + 1;
    if (FENCE.test(textLine)) inFence = !inFence;
    const heading = !inFence && /^## (?!#)/.test(textLine);
    if (heading) sections.push({ title: textLine.slice(3).trim(), line, lines: [] });
    else (sections.at(-1)?.lines ?? preamble).push({ text: textLine, line });
  }
  return { ok: true, value: { data, lineOf, preamble, sections } };
}

/** The body of a section without its leading and trailing blank lines. */
export function sectionBody(section: Section): BodyLine[] {
  let start = 0;
  let end = section.lines.length;
  while (start < end && section.lines[start]?.text.trim() === '') start++;
  while (end > start && section.lines[end - 1]?.text.trim() === '') end--;
  return section.lines.slice(start, end);
}
