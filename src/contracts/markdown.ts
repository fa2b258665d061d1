import { Composer, isAlias, isMap, isScalar, isSeq, LineCounter, Parser, visit, type CST, type Node } from 'yaml';
import type { Problem, Result } from '../base/problem.js';
import { yamlOffsetOf } from './yaml-lines.js';
import { parseYamlSubset } from './yaml-subset.js';

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

/**
 * Front matter outside the fast subset goes to the full `yaml` parser, which needs up to ~10 µs per
 * character on hostile text (measured: ~0.55 s for 64 KiB of stray `]` lines). Above this size such
 * front matter is refused instead, so one document never costs more than a fraction of a second.
 */
export const MAX_FULL_YAML_CHARS = 32 * 1024;
/** Deeper front matter is refused before composing: `yaml` recurses per level and can crash V8. */
export const MAX_YAML_DEPTH = 64;
/** A hostile document can yield thousands of YAML errors; the first ones are enough to act on. */
const MAX_YAML_PROBLEMS = 50;

const NOT_MAPPING = (line: number): Problem => ({ code: 'FM_NOT_MAPPING', message: 'front matter must be a mapping of fields', line });

/** What the front matter reader hands on: data and where each key/item is. */
interface FrontMatter {
  data: unknown;
  lineOf(path: readonly (string | number)[]): number;
}

/** Splits and parses front matter and `## ` sections. Never throws on any input string. */
export function parseFrontMatterDocument(text: string): Result<FrontMatterDocument> {
  const lines = text.split('\n');
  if (lines[0]?.trimEnd() !== '---') {
    return { ok: false, problems: [{ code: 'FM_MISSING', message: 'document must start with a `---` front matter line', line: 1 }] };
  }
  const close = findClosingFence(lines);
  if (close < 0) {
    return { ok: false, problems: [{ code: 'FM_MISSING', message: 'front matter is never closed with a `---` line', line: 1 }] };
  }
  const firstYamlLine = 2;
  // Fast path first; anything outside the subset is read (and its problems reported) by `yaml`.
  let fm: FrontMatter | undefined = parseYamlSubset(lines, 1, close, firstYamlLine);
  if (!fm) {
    const full = parseFullYaml(lines.slice(1, close).join('\n'), firstYamlLine);
    if (!full.ok) return full;
    fm = full.value;
  }
  const data = fm.data;
  if (data === null || typeof data !== 'object' || Array.isArray(data)) return { ok: false, problems: [NOT_MAPPING(firstYamlLine)] };
  const { preamble, sections } = splitSections(lines, close + 1);
  return { ok: true, value: { data, lineOf: fm.lineOf, preamble, sections } };
}

/** Index of the closing `---` (or `...`) line, or -1. */
function findClosingFence(lines: readonly string[]): number {
  for (let i = 1; i < lines.length; i++) {
    const l = lines[i] as string;
    const c = l.charCodeAt(0);
    if (c !== 45 && c !== 46) continue; // only `-` or `.` can start a fence: skip trimEnd for the rest
    const t = l.trimEnd();
    if (t === '---' || t === '...') return i;
  }
  return -1;
}

/** Body lines after the front matter, split at `## ` headings outside code fences. */
function splitSections(lines: readonly string[], from: number): { preamble: BodyLine[]; sections: Section[] } {
  const preamble: BodyLine[] = [];
  const sections: Section[] = [];
  let target = preamble;
  let inFence = false;
  for (let i = from; i < lines.length; i++) {
    const textLine = lines[i] as string;
    const line = i + 1;
    // FENCE only when the line holds a fence character (the regex is the rare, slow case).
    if ((textLine.includes('`') || textLine.includes('~')) && FENCE.test(textLine)) inFence = !inFence;
    if (!inFence && textLine.startsWith('## ') && textLine.charCodeAt(3) !== 35 /* # */) {
      const section: Section = { title: textLine.slice(3).trim(), line, lines: [] };
      sections.push(section);
      target = section.lines;
    } else target.push({ text: textLine, line });
  }
  return { preamble, sections };
}

/**
 * The full YAML 1.2 (core schema) reading of front matter, with Airlock's limits: size and depth
 * caps (hostile input), no anchors/aliases/tags, plain scalar keys only, each key once.
 */
function parseFullYaml(yamlText: string, firstYamlLine: number): Result<FrontMatter> {
  const fail = (message: string, line = firstYamlLine): Result<FrontMatter> => ({ ok: false, problems: [{ code: 'FM_YAML', message, line }] });
  if (yamlText.length > MAX_FULL_YAML_CHARS) {
    return fail(
      `front matter is ${yamlText.length} characters and not in the simple form Airlock reads quickly ` +
        `(plain \`key: value\` lines, lists, one-line values, each key once); front matter outside that form ` +
        `is limited to ${MAX_FULL_YAML_CHARS} characters: simplify it or make it smaller`,
    );
  }
  const counter = new LineCounter();
  const lineAt = (offset: number): number => counter.linePos(offset).line + firstYamlLine - 1;
  try {
    // The CST parser is iterative; the composer and toJS recurse, so depth is checked in between.
    const tokens = Array.from(new Parser(counter.addNewLine).parse(yamlText));
    const deep = tooDeepOffset(tokens, MAX_YAML_DEPTH);
    if (deep !== undefined) return fail(`front matter nests deeper than ${MAX_YAML_DEPTH} levels`, lineAt(deep));
    const docs = Array.from(new Composer({ uniqueKeys: false, schema: 'core', version: '1.2' }).compose(tokens, true, yamlText.length));
    const doc = docs[0];
    if (!doc) return fail('front matter cannot be parsed');
    const problems: Problem[] = doc.errors.map((err) => ({ code: 'FM_YAML', message: err.message.split('\n')[0] ?? 'YAML error', line: lineAt(err.pos?.[0] ?? 0) }));
    const second = docs[1];
    if (second) problems.push({ code: 'FM_YAML', message: 'Source contains multiple documents; please use YAML.parseAllDocuments()', line: lineAt(second.range[0]) });
    if (problems.length > 0) return { ok: false, problems: problems.slice(0, MAX_YAML_PROBLEMS) };

    // Duplicates first (`yaml` used to report them as parse errors), then aliases, then odd keys.
    const keys = keyProblems(doc.contents, lineAt);
    if (keys.duplicates.length > 0) return { ok: false, problems: keys.duplicates.slice(0, MAX_YAML_PROBLEMS) };
    visit(doc, (_key, node) => {
      if (isAlias(node) || ((isScalar(node) || isMap(node) || isSeq(node)) && (node.anchor || node.tag))) {
        problems.push({ code: 'FM_ALIAS', message: 'YAML anchors, aliases and explicit tags are not allowed', line: lineAt((node as Node).range?.[0] ?? 0) });
        return visit.BREAK;
      }
      return undefined;
    });
    if (problems.length > 0) return { ok: false, problems };
    if (!isMap(doc.contents)) return { ok: false, problems: [NOT_MAPPING(firstYamlLine)] };
    if (keys.notPlain.length > 0) return { ok: false, problems: keys.notPlain.slice(0, MAX_YAML_PROBLEMS) };

    const data: unknown = doc.toJS({ maxAliasCount: 0 });
    const root = doc.contents;
    const lineOf = (path: readonly (string | number)[]): number => lineAt(yamlOffsetOf(root, path));
    return { ok: true, value: { data, lineOf } };
  } catch (e) {
    // Should not happen after the caps above; a parser bug must still not crash the caller.
    return fail(`front matter cannot be parsed: ${(e as Error).message}`);
  }
}

/** Offset of the first CST token nested deeper than `max` (iterative: the CST may be very deep). */
function tooDeepOffset(tokens: CST.Token[], max: number): number | undefined {
  const stack: [CST.Token, number][] = tokens.map((t) => [t, 0]);
  while (stack.length > 0) {
    const [tok, depth] = stack.pop() as [CST.Token, number];
    if (depth > max) return tok.offset;
    if (tok.type === 'document') {
      if (tok.value) stack.push([tok.value, depth]);
    } else if (tok.type === 'block-map' || tok.type === 'block-seq' || tok.type === 'flow-collection') {
      for (const item of tok.items) {
        if (item.key) stack.push([item.key, depth + 1]);
        if (item.value) stack.push([item.value, depth + 1]);
      }
    }
  }
  return undefined;
}

/**
 * Keys must be plain scalars (a collection key would be stringified, slowly and with a process
 * warning), and each key may appear once per mapping, also after conversion to a JS property name
 * (`1` and `"1"` would silently overwrite each other). Linear: `yaml`'s own uniqueKeys is quadratic.
 */
function keyProblems(root: unknown, lineAt: (offset: number) => number): { duplicates: Problem[]; notPlain: Problem[] } {
  const duplicates: Problem[] = [];
  const notPlain: Problem[] = [];
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const node = stack.pop();
    if (isSeq(node)) {
      for (const item of node.items) stack.push(item);
    } else if (isMap(node)) {
      const seen = new Set<string>();
      for (const pair of node.items) {
        const key = pair.key;
        stack.push(pair.value);
        if (isAlias(key)) continue; // reported as FM_ALIAS
        if (!isScalar(key)) {
          stack.push(key); // a collection key can hold duplicates of its own
          const at = (key as Node | null)?.range?.[0] ?? node.range?.[0] ?? 0;
          notPlain.push({ code: 'FM_YAML', message: 'mapping keys must be plain field names, not collections or empty keys', line: lineAt(at) });
          continue;
        }
        const name = key.value === null ? '' : String(key.value);
        if (seen.has(name)) duplicates.push({ code: 'FM_YAML', message: 'Map keys must be unique', line: lineAt(key.range?.[0] ?? 0) });
        seen.add(name);
      }
    }
  }
  return { duplicates, notPlain };
}

/** The body of a section without its leading and trailing blank lines. */
export function sectionBody(section: Section): BodyLine[] {
  let start = 0;
  let end = section.lines.length;
  while (start < end && section.lines[start]?.text.trim() === '') start++;
  while (end > start && section.lines[end - 1]?.text.trim() === '') end--;
  return section.lines.slice(start, end);
}
