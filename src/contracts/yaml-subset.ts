/**
 * A strict, fast reader for the small part of YAML that ThreeGate front matter uses.
 *
 * Why: the full `yaml` package manages a few thousand small documents per second; Airlock must
 * check tens of thousands of requests per second. Front matter only ever needs block mappings with
 * plain keys, block sequences, one-line flow sequences of scalars and one-line scalars, so this
 * reader handles exactly that and gives up (returns `undefined`) on anything else. The caller then
 * uses the full `yaml` parser, which reports the same problems it always did.
 *
 * Contract (checked by a differential property test against `yaml`): whenever this returns a
 * value, the value deep-equals `parseDocument(text, { schema: 'core', version: '1.2',
 * uniqueKeys: true }).toJS()` for a document without errors, and `lineOf` gives the line of the
 * same node the `yaml`-based lookup in markdown.ts gives. When in doubt, it returns `undefined`.
 *
 * Supported:
 * - block mappings whose keys are plain identifiers (`[A-Za-z_][A-Za-z0-9_.-]*`, not null/bool words)
 * - block sequences, indented under their key or at the key's own column; items are one-line
 *   scalars, one-line flow sequences, or mappings (`- key: value` and further keys at that column)
 * - one-line flow sequences of scalars: `[]`, `[a, b]`, `["a", 'b']`
 * - scalars on one line: double-quoted (YAML escapes), single-quoted (`''`), plain (core schema)
 * - `# comments` after whitespace, full-line comments, blank lines
 * Refused (→ `undefined`): anchors, aliases, tags, block scalars, multi-line scalars, flow
 * mappings, nested flow sequences, complex or quoted keys, duplicate keys, tabs anywhere, control
 * characters, document markers, directives, empty sequence items, nesting deeper than 64.
 */

/** Where a key or item starts, and the same for its children (a mapping's keys or a sequence's items). */
interface LineEntry {
  line: number;
  kids: LineKids | undefined;
}
type LineKids = Map<string, LineEntry> | LineEntry[];

export type YamlPath = readonly (string | number)[];

export interface SubsetDocument {
  /** The front matter mapping, as `yaml`'s toJS() would give it. */
  data: Record<string, unknown>;
  /** 1-based line of the deepest existing key or item on `path`; `firstLine` for the root. */
  lineOf(path: YamlPath): number;
}

/** Nesting deeper than this is never front matter; the full parser reports it. */
const MAX_DEPTH = 64;
/** `yaml` rejects implicit keys longer than 1024 characters; stay well below. */
const MAX_KEY_LENGTH = 1000;

/** Characters the subset never accepts: tabs, control and C1 characters, line/paragraph separators, BOM, non-characters, lone surrogates. */
const FORBIDDEN_CHARS = /[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
/** Cheap pre-test: printable ASCII only needs no further character check. */
const NON_PRINTABLE_ASCII = /[^\x20-\x7e]/;

/** A parse failure: the text is outside the subset. Thrown internally only, caught in parseYamlSubset. */
class OutsideSubset {}
const OUTSIDE = new OutsideSubset();

/** One meaningful line: its indentation, the text after it, and its 1-based line number. */
interface Rec {
  ind: number;
  text: string;
  line: number;
}

/**
 * Parses `lines[start..end)` (the front matter without its `---` fences) if it is within the subset.
 * `firstLine` is the 1-based line number of `lines[start]` in the whole file.
 */
export function parseYamlSubset(lines: readonly string[], start = 0, end = lines.length, firstLine = 1): SubsetDocument | undefined {
  const recs: Rec[] = [];
  for (let i = start; i < end; i++) {
    const raw = lines[i] as string;
    if (NON_PRINTABLE_ASCII.test(raw) && FORBIDDEN_CHARS.test(raw)) return undefined;
    let ind = 0;
    while (raw.charCodeAt(ind) === 32) ind++;
    if (ind === raw.length || raw.charCodeAt(ind) === 35 /* # */) continue; // blank or comment line
    if (ind === 0 && isDocumentMarker(raw)) return undefined;
    recs.push({ ind, text: ind === 0 ? raw : raw.slice(ind), line: firstLine + (i - start) });
  }
  const first = recs[0];
  if (!first || first.ind !== 0) return undefined; // empty, or not a mapping at column 0: let `yaml` judge
  try {
    const p = new Reader(recs);
    const { value, kids } = p.map(0, 1);
    if (p.pos !== recs.length) return undefined;
    return { data: value, lineOf: (path) => lookupLine(kids, path, firstLine) };
  } catch (e) {
    if (e === OUTSIDE) return undefined;
    throw e; // a bug, not an input problem
  }
}

/** Convenience for tests and tools: the subset reading of a whole YAML text. */
export function parseYamlSubsetText(text: string): SubsetDocument | undefined {
  return parseYamlSubset(text.split('\n'));
}

function isDocumentMarker(raw: string): boolean {
  return (raw.startsWith('---') || raw.startsWith('...')) && (raw.length === 3 || raw.charCodeAt(3) === 32);
}

function lookupLine(root: LineKids, path: YamlPath, firstLine: number): number {
  let kids: LineKids | undefined = root;
  let line = firstLine;
  for (const seg of path) {
    let entry: LineEntry | undefined;
    if (kids instanceof Map) entry = typeof seg === 'string' ? kids.get(seg) : undefined;
    else if (kids && typeof seg === 'number') entry = kids[seg];
    if (!entry) break;
    line = entry.line;
    kids = entry.kids;
    if (!kids) break;
  }
  return line;
}

/** Recursive descent over the meaningful lines; every method either consumes input or throws OUTSIDE. */
class Reader {
  pos = 0;
  constructor(private readonly recs: Rec[]) {}

  /** A block mapping whose keys sit at column `ind`; the current line is its first key. */
  map(ind: number, depth: number): { value: Record<string, unknown>; kids: Map<string, LineEntry> } {
    if (depth > MAX_DEPTH) throw OUTSIDE;
    const value: Record<string, unknown> = {};
    const kids = new Map<string, LineEntry>();
    const recs = this.recs;
    while (this.pos < recs.length) {
      const r = recs[this.pos] as Rec;
      if (r.ind < ind) break;
      if (r.ind > ind) throw OUTSIDE;
      const keyEnd = keyLength(r.text);
      if (keyEnd === 0) throw OUTSIDE;
      const key = r.text.slice(0, keyEnd);
      if (!isPlainStringKey(key) || kids.has(key)) throw OUTSIDE;
      this.pos++;
      let v = keyEnd + 1;
      while (r.text.charCodeAt(v) === 32) v++;
      const entry: LineEntry = { line: r.line, kids: undefined };
      if (v === r.text.length || r.text.charCodeAt(v) === 35 /* # after a space: comment */) {
        const nested = this.blockValue(ind, depth + 1);
        value[key] = nested.value;
        entry.kids = nested.kids;
      } else {
        const inline = inlineValue(r.text, v, r.line);
        value[key] = inline.value;
        entry.kids = inline.kids;
      }
      kids.set(key, entry);
    }
    return { value, kids };
  }

  /** The value of a key written without an inline value: a nested block, or null. */
  private blockValue(keyInd: number, depth: number): { value: unknown; kids: LineKids | undefined } {
    const r = this.recs[this.pos];
    if (!r || r.ind < keyInd) return { value: null, kids: undefined };
    const isItem = isSeqItem(r.text);
    if (r.ind === keyInd) return isItem ? this.seq(r.ind, depth) : { value: null, kids: undefined };
    if (isItem) return this.seq(r.ind, depth);
    if (keyLength(r.text) > 0) return this.map(r.ind, depth);
    throw OUTSIDE; // a more indented scalar line: a multi-line scalar
  }

  /** A block sequence whose `-` indicators sit at column `ind`; the current line is its first item. */
  seq(ind: number, depth: number): { value: unknown[]; kids: LineEntry[] } {
    if (depth > MAX_DEPTH) throw OUTSIDE;
    const value: unknown[] = [];
    const kids: LineEntry[] = [];
    const recs = this.recs;
    while (this.pos < recs.length) {
      const r = recs[this.pos] as Rec;
      if (r.ind < ind) break;
      if (r.ind > ind) throw OUTSIDE;
      if (!isSeqItem(r.text)) break;
      let v = 1;
      while (r.text.charCodeAt(v) === 32) v++;
      // `-` alone (the item on later lines or null) and `- - x` are outside the subset.
      if (v === r.text.length || r.text.charCodeAt(v) === 35 || isSeqItem(r.text.slice(v))) throw OUTSIDE;
      const rest = r.text.slice(v);
      if (keyLength(rest) > 0) {
        // `- key: value`: a mapping whose keys sit at the column of this first key.
        recs[this.pos] = { ind: ind + v, text: rest, line: r.line };
        const m = this.map(ind + v, depth + 1);
        value.push(m.value);
        kids.push({ line: r.line, kids: m.kids });
      } else {
        this.pos++;
        const inline = inlineValue(rest, 0, r.line);
        value.push(inline.value);
        kids.push({ line: r.line, kids: inline.kids });
      }
    }
    return { value, kids };
  }
}

function isSeqItem(text: string): boolean {
  return text.charCodeAt(0) === 45 /* - */ && (text.length === 1 || text.charCodeAt(1) === 32);
}

/** Length of a plain identifier key followed by `:` and a space or the line end; 0 if the line is not one. */
function keyLength(text: string): number {
  const c0 = text.charCodeAt(0);
  if (!(isAsciiLetter(c0) || c0 === 95)) return 0;
  let i = 1;
  for (;;) {
    const c = text.charCodeAt(i);
    if (isAsciiLetter(c) || (c >= 48 && c <= 57) || c === 95 || c === 45 || c === 46) i++;
    else break;
  }
  if (text.charCodeAt(i) !== 58 /* : */) return 0;
  const after = text.charCodeAt(i + 1);
  return i + 1 === text.length || after === 32 ? i : 0;
}

function isAsciiLetter(c: number): boolean {
  return (c >= 65 && c <= 90) || (c >= 97 && c <= 122);
}

/** Identifier keys that the core schema would not read as strings, or that JS objects treat specially. */
function isPlainStringKey(key: string): boolean {
  if (key.length > MAX_KEY_LENGTH || key === '__proto__') return false;
  return resolvePlain(key) === key;
}

/**
 * A value written on the key's or item's own line, starting at `text[from]` (not a space):
 * a quoted or plain scalar, or a flow sequence. The rest of the line may only be a comment.
 */
function inlineValue(text: string, from: number, line: number): { value: unknown; kids: LineKids | undefined } {
  const c = text.charCodeAt(from);
  if (c === 91 /* [ */) return flowSequence(text, from, line);
  let value: unknown;
  let end: number;
  if (c === 34 /* " */ || c === 39 /* ' */) {
    const q = c === 34 ? doubleQuoted(text, from) : singleQuoted(text, from);
    value = q.value;
    end = q.end;
  } else {
    end = plainEnd(text, from, false);
    value = resolvePlain(trimSpaces(text.slice(from, end)));
  }
  expectLineEnd(text, end);
  return { value, kids: undefined };
}

/** After a value: only spaces, optionally followed by a `# comment`. */
function expectLineEnd(text: string, at: number): void {
  if (at === text.length) return;
  if (text.charCodeAt(at) !== 32) throw OUTSIDE;
  let i = at;
  while (text.charCodeAt(i) === 32) i++;
  if (i !== text.length && text.charCodeAt(i) !== 35) throw OUTSIDE;
}

function trimSpaces(s: string): string {
  let e = s.length;
  while (e > 0 && s.charCodeAt(e - 1) === 32) e--;
  return e === s.length ? s : s.slice(0, e);
}

/** Characters that may not start a plain scalar (YAML indicators); `-?:` are handled separately. */
const BAD_PLAIN_START = new Set([...',[]{}#&*!|>%@`\'"'].map((ch) => ch.charCodeAt(0)));
const FLOW_INDICATORS = new Set([...',[]{}'].map((ch) => ch.charCodeAt(0)));

/**
 * End (exclusive, at the space before any comment) of a one-line plain scalar starting at `from`. Refuses what
 * would make YAML read more than a plain scalar: a `: ` (a nested mapping), a bad first character,
 * and in a flow sequence any flow indicator other than the `,` or `]` that ends it.
 */
function plainEnd(text: string, from: number, inFlow: boolean): number {
  const c0 = text.charCodeAt(from);
  if (Number.isNaN(c0) || c0 === 32 || BAD_PLAIN_START.has(c0)) throw OUTSIDE;
  if (c0 === 45 || c0 === 63 || c0 === 58) {
    // `-`, `?`, `:` start a plain scalar only when followed by a "safe" character.
    const n = text.charCodeAt(from + 1);
    if (Number.isNaN(n) || n === 32 || (inFlow && FLOW_INDICATORS.has(n))) throw OUTSIDE;
  }
  let i = from;
  for (; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 58 /* : */) {
      const n = text.charCodeAt(i + 1);
      if (Number.isNaN(n) || n === 32 || (inFlow && FLOW_INDICATORS.has(n))) throw OUTSIDE;
    } else if (c === 35 /* # */ && text.charCodeAt(i - 1) === 32) {
      if (inFlow) throw OUTSIDE; // a comment inside a flow sequence: it continues on another line
      return i - 1; // at the space before the comment
    } else if (inFlow && FLOW_INDICATORS.has(c)) {
      if (c === 44 || c === 93) return i; // `,` or `]` ends the item
      throw OUTSIDE;
    }
  }
  if (inFlow) throw OUTSIDE; // unterminated flow sequence: continues on another line
  return i;
}

/** `[a, "b", 'c']` on one line. Empty items, trailing commas and nested collections are refused. */
function flowSequence(text: string, from: number, line: number): { value: unknown[]; kids: LineEntry[] } {
  const value: unknown[] = [];
  const kids: LineEntry[] = [];
  let i = from + 1;
  while (text.charCodeAt(i) === 32) i++;
  if (text.charCodeAt(i) === 93 /* ] */) {
    expectLineEnd(text, i + 1);
    return { value, kids };
  }
  for (;;) {
    const c = text.charCodeAt(i);
    if (c === 34 || c === 39) {
      const q = c === 34 ? doubleQuoted(text, i) : singleQuoted(text, i);
      value.push(q.value);
      i = q.end;
    } else {
      const e = plainEnd(text, i, true);
      value.push(resolvePlain(trimSpaces(text.slice(i, e))));
      i = e;
    }
    kids.push({ line, kids: undefined });
    while (text.charCodeAt(i) === 32) i++;
    const sep = text.charCodeAt(i);
    if (sep === 93) break;
    if (sep !== 44) throw OUTSIDE;
    i++;
    while (text.charCodeAt(i) === 32) i++;
    if (text.charCodeAt(i) === 93 || i >= text.length) throw OUTSIDE; // trailing comma or line end
  }
  expectLineEnd(text, i + 1);
  return { value, kids };
}

/** A `'single quoted'` scalar on one line; `end` is just after the closing quote. */
function singleQuoted(text: string, from: number): { value: string; end: number } {
  let out = '';
  let chunk = from + 1;
  for (let i = from + 1; i < text.length; i++) {
    if (text.charCodeAt(i) !== 39) continue;
    if (text.charCodeAt(i + 1) === 39) {
      out += text.slice(chunk, i + 1);
      chunk = i + 2;
      i++;
      continue;
    }
    return { value: out + text.slice(chunk, i), end: i + 1 };
  }
  throw OUTSIDE; // continues on another line
}

const ESCAPES: Record<string, string> = {
  '0': '\0',
  a: '\x07',
  b: '\b',
  e: '\x1b',
  f: '\f',
  n: '\n',
  r: '\r',
  t: '\t',
  v: '\v',
  N: '\u0085',
  _: '\u00a0',
  L: '\u2028',
  P: '\u2029',
  ' ': ' ',
  '"': '"',
  '/': '/',
  '\\': '\\',
};
const HEX_DIGITS = /^[0-9a-fA-F]+$/;

/** A `"double quoted"` scalar on one line, with YAML's escapes; `end` is just after the closing quote. */
function doubleQuoted(text: string, from: number): { value: string; end: number } {
  let out = '';
  let chunk = from + 1;
  for (let i = from + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 34) return { value: out + text.slice(chunk, i), end: i + 1 };
    if (c !== 92 /* \ */) continue;
    out += text.slice(chunk, i);
    const e = text[i + 1];
    if (e === undefined) throw OUTSIDE; // escaped line break: continues on another line
    const simple = Object.hasOwn(ESCAPES, e) ? ESCAPES[e] : undefined;
    if (simple !== undefined) {
      out += simple;
      i += 1;
    } else if (e === 'x' || e === 'u' || e === 'U') {
      const len = e === 'x' ? 2 : e === 'u' ? 4 : 8;
      const hex = text.slice(i + 2, i + 2 + len);
      if (hex.length !== len || !HEX_DIGITS.test(hex)) throw OUTSIDE;
      const code = parseInt(hex, 16);
      if (code > 0x10ffff) throw OUTSIDE;
      out += String.fromCodePoint(code);
      i += 1 + len;
    } else {
      throw OUTSIDE; // invalid escape: `yaml` reports it
    }
    chunk = i + 1;
  }
  throw OUTSIDE; // continues on another line
}

// The YAML 1.2 core schema, in the order and with the tests `yaml` uses (schema/core/*.js).
const CORE_NULL = /^(?:~|[Nn]ull|NULL)?$/;
const CORE_BOOL = /^(?:[Tt]rue|TRUE|[Ff]alse|FALSE)$/;
const CORE_INT_OCT = /^0o[0-7]+$/;
const CORE_INT = /^[-+]?[0-9]+$/;
const CORE_INT_HEX = /^0x[0-9a-fA-F]+$/;
const CORE_FLOAT_NAN = /^(?:[-+]?\.(?:inf|Inf|INF)|\.nan|\.NaN|\.NAN)$/;
const CORE_FLOAT_EXP = /^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$/;
const CORE_FLOAT = /^[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)$/;

/** What the core schema makes of a plain scalar's text. Exported for tests. */
export function resolvePlain(s: string): unknown {
  const c = s.charCodeAt(0);
  // Only these first characters can start a non-string: digits + - . ~ n N t T f F, or empty.
  const maybe =
    s.length === 0 || (c >= 48 && c <= 57) || c === 43 || c === 45 || c === 46 || c === 126 || c === 110 || c === 78 || c === 116 || c === 84 || c === 102 || c === 70;
  if (!maybe) return s;
  if (CORE_NULL.test(s)) return null;
  if (CORE_BOOL.test(s)) return c === 116 || c === 84;
  if (CORE_INT_OCT.test(s)) return parseInt(s.slice(2), 8);
  if (CORE_INT.test(s)) return parseInt(s, 10);
  if (CORE_INT_HEX.test(s)) return parseInt(s.slice(2), 16);
  if (CORE_FLOAT_NAN.test(s)) return s.slice(-3).toLowerCase() === 'nan' ? NaN : s[0] === '-' ? -Infinity : Infinity;
  if (CORE_FLOAT_EXP.test(s) || CORE_FLOAT.test(s)) return parseFloat(s);
  return s;
}
