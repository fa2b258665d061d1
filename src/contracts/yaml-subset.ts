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
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const FORBIDDEN_CHARS = /[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
/** Cheap pre-test: printable ASCII only needs no further character check. */
const NON_PRINTABLE_ASCII = /[^\x20-\x7e]/;

/** A parse failure: the text is outside the subset. Thrown internally only, caught in parseYamlSubset. */
class OutsideSubset {}
const OUTSIDE = new OutsideSubset();

/** The meaningful lines (not blank, not comments): indentation, text after it, 1-based line number. */
interface Lines {
  ind: number[];
  text: string[];
  line: number[];
}

/**
 * Parses `lines[start..end)` (the front matter without its `---` fences) if it is within the subset.
 * `firstLine` is the 1-based line number of `lines[start]` in the whole file.
 */
export function parseYamlSubset(lines: readonly string[], start = 0, end = lines.length, firstLine = 1): SubsetDocument | undefined {
  const ls: Lines = { ind: [], text: [], line: [] };
  for (let i = start; i < end; i++) {
    const raw = lines[i] as string;
    if (NON_PRINTABLE_ASCII.test(raw) && FORBIDDEN_CHARS.test(raw)) return undefined;
    let ind = 0;
    while (raw.charCodeAt(ind) === 32) ind++;
    if (ind === raw.length || raw.charCodeAt(ind) === 35 /* # */) continue; // blank or comment line
    if (ind === 0 && isDocumentMarker(raw)) return undefined;
    ls.ind.push(ind);
    ls.text.push(ind === 0 ? raw : raw.slice(ind));
    ls.line.push(firstLine + (i - start));
  }
  if (ls.ind.length === 0 || ls.ind[0] !== 0) return undefined; // empty, or not a mapping at column 0: let `yaml` judge
  const data = read(ls, false)?.value;
  if (data === undefined) return undefined;
  // Lines are rarely asked for (only when reporting a problem): read them on first use.
  let kids: LineKids | undefined;
  const lineOf = (path: YamlPath): number => {
    kids ??= read(ls, true)?.kids ?? new Map<string, LineEntry>();
    return lookupLine(kids, path, firstLine);
  };
  return { data, lineOf };
}

function read(ls: Lines, track: boolean): { value: Record<string, unknown>; kids: LineKids | undefined } | undefined {
  try {
    const r = new Reader(ls, track);
    const value = r.map(0, 1, undefined);
    return r.pos === ls.ind.length ? { value, kids: r.kids } : undefined;
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

/**
 * Recursive descent over the meaningful lines; every method either consumes input or throws
 * OUTSIDE. With `track`, each method also leaves the line entries of what it read in `kids`.
 */
class Reader {
  pos = 0;
  kids: LineKids | undefined = undefined;
  constructor(
    private readonly ls: Lines,
    private readonly track: boolean,
  ) {}

  /**
   * A block mapping whose keys sit at column `ind`; the current line is its first key. `firstText`
   * replaces the current line's text when the mapping starts after a `- ` on that line.
   */
  map(ind: number, depth: number, firstText: string | undefined): Record<string, unknown> {
    if (depth > MAX_DEPTH) throw OUTSIDE;
    const value: Record<string, unknown> = {};
    const kids = this.track ? new Map<string, LineEntry>() : undefined;
    const { ind: inds, text: texts, line: lineNos } = this.ls;
    let text = firstText;
    while (this.pos < inds.length) {
      if (text === undefined) {
        const at = inds[this.pos] as number;
        if (at < ind) break;
        if (at > ind) throw OUTSIDE;
        text = texts[this.pos] as string;
      }
      const keyEnd = keyLength(text);
      if (keyEnd === 0) throw OUTSIDE;
      const key = text.slice(0, keyEnd);
      // `!== undefined` first: most keys are new, and a miss is cheaper than hasOwn (values are never undefined).
      if (!isPlainStringKey(key) || (value[key] !== undefined && Object.hasOwn(value, key))) throw OUTSIDE;
      const line = lineNos[this.pos] as number;
      this.pos++;
      let v = keyEnd + 1;
      while (text.charCodeAt(v) === 32) v++;
      this.kids = undefined;
      value[key] =
        v === text.length || text.charCodeAt(v) === 35 /* # after a space: comment */ ? this.blockValue(ind, depth + 1) : this.inline(text, v, line);
      kids?.set(key, { line, kids: this.kids });
      text = undefined;
    }
    this.kids = kids;
    return value;
  }

  /** The value of a key written without an inline value: a nested block, or null. */
  private blockValue(keyInd: number, depth: number): unknown {
    if (this.pos >= this.ls.ind.length) return null;
    const at = this.ls.ind[this.pos] as number;
    const text = this.ls.text[this.pos] as string;
    if (at < keyInd) return null;
    const isItem = isSeqItem(text);
    if (at === keyInd) return isItem ? this.seq(at, depth) : null;
    if (isItem) return this.seq(at, depth);
    if (keyLength(text) > 0) return this.map(at, depth, undefined);
    throw OUTSIDE; // a more indented scalar line: a multi-line scalar
  }

  /** A block sequence whose `-` indicators sit at column `ind`; the current line is its first item. */
  private seq(ind: number, depth: number): unknown[] {
    if (depth > MAX_DEPTH) throw OUTSIDE;
    const value: unknown[] = [];
    const kids: LineEntry[] | undefined = this.track ? [] : undefined;
    const { ind: inds, text: texts, line: lineNos } = this.ls;
    while (this.pos < inds.length) {
      const at = inds[this.pos] as number;
      const text = texts[this.pos] as string;
      if (at < ind) break;
      if (at > ind) throw OUTSIDE;
      if (!isSeqItem(text)) break;
      const line = lineNos[this.pos] as number;
      let v = 1;
      while (text.charCodeAt(v) === 32) v++;
      // `-` alone (the item on later lines, or null) is outside the subset.
      if (v === text.length || text.charCodeAt(v) === 35) throw OUTSIDE;
      const rest = text.slice(v);
      this.kids = undefined;
      if (keyLength(rest) > 0) {
        // `- key: value`: a mapping whose keys sit at the column of this first key.
        value.push(this.map(ind + v, depth + 1, rest));
      } else {
        this.pos++;
        value.push(this.inline(rest, 0, line)); // `- - x` fails here: `-` then a space is no scalar
      }
      kids?.push({ line, kids: this.kids });
    }
    this.kids = kids;
    return value;
  }

  /** A one-line value; a flow sequence's items all sit on this line. */
  private inline(text: string, from: number, line: number): unknown {
    const value = inlineValue(text, from);
    this.kids = this.track && Array.isArray(value) ? value.map(() => ({ line, kids: undefined })) : undefined;
    return value;
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

/** Identifier keys that the core schema would not read as strings (null/bool words), or that JS objects treat specially. */
function isPlainStringKey(key: string): boolean {
  return key.length <= MAX_KEY_LENGTH && key !== '__proto__' && !(key.length <= 5 && CORE_WORDS.has(key));
}

/**
 * A value written on the key's or item's own line, starting at `text[from]` (not a space):
 * a quoted or plain scalar, or a flow sequence. The rest of the line may only be a comment.
 */
function inlineValue(text: string, from: number): unknown {
  const c = text.charCodeAt(from);
  if (c === 91 /* [ */) return flowSequence(text, from);
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
  return value;
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
function flowSequence(text: string, from: number): unknown[] {
  const value: unknown[] = [];
  let i = from + 1;
  while (text.charCodeAt(i) === 32) i++;
  if (text.charCodeAt(i) === 93 /* ] */) {
    expectLineEnd(text, i + 1);
    return value;
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
    while (text.charCodeAt(i) === 32) i++;
    const sep = text.charCodeAt(i);
    if (sep === 93) break;
    if (sep !== 44) throw OUTSIDE;
    i++;
    while (text.charCodeAt(i) === 32) i++;
    if (text.charCodeAt(i) === 93 || i >= text.length) throw OUTSIDE; // trailing comma or line end
  }
  expectLineEnd(text, i + 1);
  return value;
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
  const close = text.indexOf('"', from + 1);
  const escape = text.indexOf('\\', from + 1);
  if (close > 0 && (escape < 0 || escape > close)) return { value: text.slice(from + 1, close), end: close + 1 }; // no escapes: the common case
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

const CORE_WORDS = new Map<string, null | boolean>([
  ['null', null], ['Null', null], ['NULL', null], ['~', null],
  ['true', true], ['True', true], ['TRUE', true], ['false', false], ['False', false], ['FALSE', false],
]);

/** What the core schema makes of a plain scalar's text. Exported for tests. */
export function resolvePlain(s: string): unknown {
  const c = s.charCodeAt(0);
  // Numbers start with a digit, a sign or a dot; the null and bool words are matched whole.
  // (Equivalent to trying the core tags in order: no word can match a numeric test and vice versa.)
  const numeric = (c >= 48 && c <= 57) || c === 43 || c === 45 || c === 46;
  if (!numeric) {
    if (s.length === 0) return null;
    const word = s.length <= 5 ? CORE_WORDS.get(s) : undefined;
    return word === undefined ? s : word;
  }
  if (CORE_INT_OCT.test(s)) return parseInt(s.slice(2), 8);
  if (CORE_INT.test(s)) return parseInt(s, 10);
  if (CORE_INT_HEX.test(s)) return parseInt(s.slice(2), 16);
  if (CORE_FLOAT_NAN.test(s)) return s.slice(-3).toLowerCase() === 'nan' ? NaN : s[0] === '-' ? -Infinity : Infinity;
  if (CORE_FLOAT_EXP.test(s) || CORE_FLOAT.test(s)) return parseFloat(s);
  return s;
}

/** The same, the slow and obvious way: every core tag's test in `yaml`'s order. Exported for tests. */
export function resolvePlainByTags(s: string): unknown {
  if (CORE_NULL.test(s)) return null;
  if (CORE_BOOL.test(s)) return s[0] === 't' || s[0] === 'T';
  if (CORE_INT_OCT.test(s)) return parseInt(s.slice(2), 8);
  if (CORE_INT.test(s)) return parseInt(s, 10);
  if (CORE_INT_HEX.test(s)) return parseInt(s.slice(2), 16);
  if (CORE_FLOAT_NAN.test(s)) return s.slice(-3).toLowerCase() === 'nan' ? NaN : s[0] === '-' ? -Infinity : Infinity;
  if (CORE_FLOAT_EXP.test(s) || CORE_FLOAT.test(s)) return parseFloat(s);
  return s;
}
