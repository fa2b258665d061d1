import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { isAlias, isMap, isScalar, isSeq, LineCounter, parseDocument, visit } from 'yaml';
import { parseFrontMatterDocument } from '../../src/contracts/markdown.js';
import { yamlOffsetOf } from '../../src/contracts/yaml-lines.js';
import { parseYamlSubsetText, resolvePlain, resolvePlainByTags } from '../../src/contracts/yaml-subset.js';

// More runs locally with e.g. FC_RUNS=50000 (the slower properties run a third of that).
const RUNS = Number(process.env.FC_RUNS ?? 3000);
const SLOW_RUNS = Math.ceil(RUNS / 3);

type Path = (string | number)[];

/** The `yaml` package's reading, and the line lookup markdown.ts used before the fast path. */
function reference(text: string) {
  const counter = new LineCounter();
  const doc = parseDocument(text, { lineCounter: counter, uniqueKeys: true, prettyErrors: false, schema: 'core', version: '1.2', logLevel: 'error' }); // toJS of a collection key would print a process warning
  let alias = false;
  visit(doc, (_k, node) => {
    if (isAlias(node) || ((isScalar(node) || isMap(node) || isSeq(node)) && (node.anchor || node.tag))) alias = true;
  });
  const root = doc.contents;
  const lineOf = (path: readonly (string | number)[]): number => counter.linePos(yamlOffsetOf(root, path)).line;
  return { errors: doc.errors, alias, data: doc.errors.length === 0 && !alias ? (doc.toJS() as unknown) : undefined, lineOf };
}

/** Every path to a key or item, and probes next to them that must resolve the same way. */
function probePaths(data: unknown): Path[] {
  const out: Path[] = [[], ['missing'], [0]];
  const walk = (v: unknown, path: Path): void => {
    if (v === null || typeof v !== 'object') return;
    out.push([...path, 'nope'], [...path, 99], [...path, -1], [...path, 1.5], [...path, '0'], [...path, 0, 'x']);
    const entries: [string | number, unknown][] = Array.isArray(v) ? v.map((x, i) => [i, x]) : Object.entries(v);
    for (const [k, x] of entries) {
      out.push([...path, k], [...path, k, 'deeper']);
      walk(x, [...path, k]);
    }
  };
  walk(data, []);
  return out;
}

/** The property: whenever the subset answers, `yaml` agrees on data and lines. Returns whether it answered. */
function agrees(text: string): boolean {
  const sub = parseYamlSubsetText(text);
  if (sub === undefined) return false;
  const ref = reference(text);
  assert.deepEqual(ref.errors.map((e) => e.message), [], `subset accepted what yaml rejects:\n${JSON.stringify(text)}`);
  assert.equal(ref.alias, false);
  assert.deepStrictEqual(sub.data, ref.data, `data differs for:\n${JSON.stringify(text)}`);
  for (const p of probePaths(ref.data)) {
    assert.equal(sub.lineOf(p), ref.lineOf(p), `lineOf(${JSON.stringify(p)}) differs for:\n${JSON.stringify(text)}`);
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Generator: front-matter-like YAML texts from a small grammar, with every scalar style.

const TRICKY = [
  'yes', 'no', 'on', 'off', 'y', 'n', 'null', 'Null', 'NULL', 'nULL', '~', '', ' ', 'true', 'True', 'TRUE', 'tRUE', 'false', 'False',
  '0x1F', '0x1f', '0X1F', '0o17', '0O17', '017', '0', '00', '-0', '+0', '+12', '-12', '1_000', '1__0', '1,000', '1e3', '1E3', '-1e-3', '1.5e+3',
  '1.', '.5', '-.5', '.', '+', '1.0', '1.50', '12345678901234567890', '.inf', '-.Inf', '+.INF', '.nan', '.NaN', '.NAN', 'nan', 'inf', '0x', '0o', '0xG',
  '-', '--', '---', '...', '- a', '-a', ':', '::', 'a:', 'a:b', 'a: b', ':a', '?', '? a', '?a', '#', 'a #b', 'a#b', '# c', 'a  b', ' lead', 'trail ',
  "'", '"', "it's", 'say "hi"', "''", '\\', 'a\\nb', '\\x41', 'é', '日本語', '🎉', '[x]', '[]', '{x}', '{}', 'a,b', 'a, b', 'a]', 'a[', 'a}', '&a', '*a', '!a',
  '!!str', '|', '>', '|-', '%x', '@x', '`x', 'http://x.y/z?q=1#f', '1:2', '12:30', '2026-02-09T16:05:01Z', '2026-02-09', '$HOME', 'a\tb', '\u00a0',
  '\u2028', '\u0085', '\ufeff', 'x\u0000y', '\u0007', '\r', 'a\nb', '\ud800', '<<', '=', 'python -u script.py --in /in/x.csv',
];

const someString = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...TRICKY) },
  { weight: 2, arbitrary: fc.string({ maxLength: 8 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme', maxLength: 4 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 4 }) },
  { weight: 1, arbitrary: fc.stringMatching(/^[a-z0-9 .:#_-]{1,10}$/) },
);

const hex = (n: number, len: number): string => n.toString(16).padStart(len, '0');

/** A double-quoted rendering that mixes raw characters with every escape form YAML has. */
function fancyDoubleQuoted(s: string, seed: number): string {
  let out = '"';
  let i = 0;
  for (const ch of s) {
    const cp = ch.codePointAt(0) as number;
    const form = Math.abs(seed + i++ * 7) % 5;
    const named: Record<string, string> = { '\0': '\\0', '\x07': '\\a', '\b': '\\b', '\x1b': '\\e', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t', '\v': '\\v', '\u0085': '\\N', '\u00a0': '\\_', '\u2028': '\\L', '\u2029': '\\P', ' ': '\\ ', '/': '\\/' };
    if (ch === '"' || ch === '\\') out += '\\' + ch;
    else if (form === 0 && named[ch]) out += named[ch];
    else if (form === 1 && cp < 256) out += '\\x' + hex(cp, 2);
    else if (form === 2 && cp < 0x10000) out += '\\u' + hex(cp, 4);
    else if (form === 3) out += '\\U' + hex(cp, 8);
    else out += ch;
  }
  return out + '"';
}

const scalarToken = fc.oneof(
  { weight: 4, arbitrary: someString },
  { weight: 2, arbitrary: someString.map((s) => JSON.stringify(s)) },
  { weight: 2, arbitrary: fc.tuple(someString, fc.integer()).map(([s, seed]) => fancyDoubleQuoted(s, seed)) },
  { weight: 2, arbitrary: someString.map((s) => `'${s.replace(/'/g, "''")}'`) },
  { weight: 1, arbitrary: fc.oneof(fc.integer().map(String), fc.double().map(String), fc.bigInt().map(String)) },
  { weight: 1, arbitrary: fc.constantFrom('"unterminated', "'unterminated", '"bad \\q escape"', '"\\U00110000"', '"a"b', "'a''b'", '"a" # c', "'a'#c", '"\\"', '"\\\\"') },
);

const keyToken = fc.oneof(
  { weight: 3, arbitrary: fc.stringMatching(/^[a-z_][a-z0-9_]{0,5}$/) },
  { weight: 2, arbitrary: fc.constantFrom('a', 'b', 'name', 'sha256', 'path', 'inputs') },
  {
    weight: 1,
    arbitrary: fc.constantFrom('x-y', 'a.b', '_', 'A1', 'true', 'True', 'null', 'yes', 'on', '__proto__', 'constructor', 'toString', '1', '0x1', '"q"', "'q'", 'a b', '-a', 'k:', '? k', '&k a', '~', 'é', 'a'.repeat(1100)),
  },
);

type GNode =
  | { kind: 'scalar'; text: string }
  | { kind: 'flow'; items: string[]; pad: boolean }
  | { kind: 'seq'; items: GNode[]; compact: boolean; dash: number }
  | { kind: 'map'; entries: [string, GNode][]; step: number; colon: number };

const { node: nodeArb } = fc.letrec<{ node: GNode }>((tie) => ({
  node: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    { weight: 5, arbitrary: scalarToken.map((text) => ({ kind: 'scalar' as const, text })) },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant('flow' as const), items: fc.array(scalarToken, { maxLength: 4 }), pad: fc.boolean() }) },
    {
      weight: 2,
      arbitrary: fc.record({ kind: fc.constant('seq' as const), items: fc.array(tie('node'), { minLength: 1, maxLength: 4 }), compact: fc.boolean(), dash: fc.integer({ min: 1, max: 3 }) }),
    },
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant('map' as const),
        entries: fc.array(fc.tuple(keyToken, tie('node')), { minLength: 1, maxLength: 5 }),
        step: fc.integer({ min: 1, max: 4 }),
        colon: fc.integer({ min: 1, max: 2 }),
      }),
    },
  ),
}));

const rootArb = fc.record({
  kind: fc.constant('map' as const),
  entries: fc.array(fc.tuple(keyToken, nodeArb), { minLength: 1, maxLength: 7 }),
  step: fc.integer({ min: 1, max: 4 }),
  colon: fc.integer({ min: 1, max: 2 }),
});

const inline = (n: GNode): string | undefined =>
  n.kind === 'scalar' ? n.text : n.kind === 'flow' ? (n.pad ? `[ ${n.items.join(' , ')} ]` : `[${n.items.join(', ')}]`) : undefined;

function renderMap(m: Extract<GNode, { kind: 'map' }>, ind: number): string[] {
  const lines: string[] = [];
  for (const [key, value] of m.entries) {
    const head = ' '.repeat(ind) + key + ':';
    const text = inline(value);
    if (text !== undefined) lines.push(head + ' '.repeat(m.colon) + text);
    else if (value.kind === 'map') lines.push(head, ...renderMap(value, ind + m.step));
    else if (value.kind === 'seq') lines.push(head, ...renderSeq(value, value.compact ? ind : ind + m.step));
  }
  return lines;
}

function renderSeq(s: Extract<GNode, { kind: 'seq' }>, ind: number): string[] {
  const lines: string[] = [];
  const prefix = ' '.repeat(ind) + '-' + ' '.repeat(s.dash);
  const col = ind + 1 + s.dash;
  for (const item of s.items) {
    const text = inline(item);
    if (text !== undefined) {
      lines.push(prefix + text);
      continue;
    }
    const sub = item.kind === 'map' ? renderMap(item, col) : renderSeq(item as Extract<GNode, { kind: 'seq' }>, col);
    lines.push(prefix + (sub[0] ?? '').slice(col), ...sub.slice(1));
  }
  return lines;
}

/** Decorations that keep the structure: comments, blank lines, trailing spaces, a final newline. */
const decorationsArb = fc.record({
  extra: fc.array(fc.tuple(fc.nat(), fc.constantFrom('', '   ', '# full-line comment', '  # indented comment', ' #', '#', '      # deep comment')), { maxLength: 3 }),
  trailers: fc.array(fc.tuple(fc.nat(), fc.constantFrom(' ', '   ', ' # c', '  #comment: x', ' #')), { maxLength: 3 }),
  finalNewline: fc.boolean(),
});

type Decorations = { extra: [number, string][]; trailers: [number, string][]; finalNewline: boolean };

function render(root: Extract<GNode, { kind: 'map' }>, deco: Decorations): string {
  const lines = renderMap(root, 0);
  for (const [at, t] of deco.trailers) if (lines.length > 0) lines[at % lines.length] += t;
  for (const [at, l] of deco.extra) lines.splice(at % (lines.length + 1), 0, l);
  return lines.join('\n') + (deco.finalNewline ? '\n' : '');
}

const textArb = fc.tuple(rootArb, decorationsArb).map(([root, deco]) => render(root, deco));

/** Random edits with characters that matter to YAML. */
const MUTATION_CHARS = [' ', ' ', '\n', ':', '-', '#', '"', "'", '[', ']', ',', '{', '}', '&', '*', '!', '|', '>', '?', '\\', '\t', 'a', '0', '.', 'x', '~', '%', '@', '`', '\r', '\u00a0', 'é'];
type Edit = { op: 'insert' | 'delete' | 'replace' | 'dupLine' | 'dropLine' | 'indent' | 'dedent'; at: number; ch: string };
const editArb = fc.record({
  op: fc.constantFrom<Edit['op']>('insert', 'delete', 'replace', 'dupLine', 'dropLine', 'indent', 'dedent'),
  at: fc.nat(),
  ch: fc.constantFrom(...MUTATION_CHARS),
});

function mutate(text: string, edits: Edit[]): string {
  for (const e of edits) {
    const at = text.length === 0 ? 0 : e.at % text.length;
    const lines = text.split('\n');
    const li = e.at % lines.length;
    switch (e.op) {
      case 'insert':
        text = text.slice(0, at) + e.ch + text.slice(at);
        break;
      case 'delete':
        text = text.slice(0, at) + text.slice(at + 1);
        break;
      case 'replace':
        text = text.slice(0, at) + e.ch + text.slice(at + 1);
        break;
      case 'dupLine':
        lines.splice(li, 0, lines[li] as string);
        text = lines.join('\n');
        break;
      case 'dropLine':
        lines.splice(li, 1);
        text = lines.join('\n');
        break;
      case 'indent':
        lines[li] = ' ' + lines[li];
        text = lines.join('\n');
        break;
      case 'dedent':
        lines[li] = (lines[li] as string).replace(/^ /, '');
        text = lines.join('\n');
        break;
    }
  }
  return text;
}

// ---------------------------------------------------------------------------------------------

test('differential: generated front matter — whenever the subset answers, yaml agrees (data and lineOf)', () => {
  let answered = 0;
  fc.assert(
    fc.property(textArb, (text) => {
      if (agrees(text)) answered++;
    }),
    { numRuns: RUNS },
  );
  // The generator must exercise the fast path, not only the fallback.
  // (Most generated texts hold some tricky scalar outside the subset; about 15% are fully inside.)
  assert.ok(answered > RUNS * 0.08, `subset answered only ${answered} of ${RUNS}`);
});

test('differential: mutated front matter — whenever the subset answers, yaml agrees', () => {
  fc.assert(
    fc.property(textArb, fc.array(editArb, { minLength: 1, maxLength: 4 }), (text, edits) => {
      agrees(mutate(text, edits));
    }),
    { numRuns: RUNS },
  );
});

test('differential: line-level junk from YAML characters', () => {
  const lineArb = fc.tuple(fc.integer({ min: 0, max: 4 }), fc.array(fc.constantFrom('a', 'b:', ': ', '- ', '-', '"', "'", '[', ']', ', ', '#', ' ', 'x', '1', '.5', 'k: v', '\\'), { maxLength: 6 }));
  fc.assert(
    fc.property(fc.array(lineArb, { minLength: 1, maxLength: 8 }), (lines) => {
      agrees(lines.map(([ind, parts]) => ' '.repeat(ind) + parts.join('')).join('\n'));
    }),
    { numRuns: RUNS },
  );
});

/** Plain JSON-like data rendered the canonical way must always take the fast path. */
const { value: plainData } = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    fc.string(),
    fc.integer(),
    fc.boolean(),
    fc.constant(null),
    fc.array(fc.oneof(fc.string(), fc.integer(), fc.boolean(), fc.constant(null)), { maxLength: 3 }),
    // Block sequences hold mappings (a sequence directly in a sequence, `- - x`, is outside the subset).
    fc.array(fc.dictionary(fc.stringMatching(/^[a-z_][a-z0-9_]{0,8}$/), tie('value'), { minKeys: 1, maxKeys: 3 }), { minLength: 1, maxLength: 3 }),
    fc.dictionary(fc.stringMatching(/^[a-z_][a-z0-9_]{0,8}$/), tie('value'), { minKeys: 1, maxKeys: 4 }),
  ),
}));

function canonical(v: unknown, ind: number): { inline?: string; block?: string[] } {
  if (v === null || typeof v !== 'object') return { inline: typeof v === 'string' ? JSON.stringify(v) : String(v) };
  if (Array.isArray(v)) {
    if (v.every((x) => x === null || typeof x !== 'object')) return { inline: `[${v.map((x) => canonical(x, 0).inline).join(', ')}]` };
    return {
      block: v.flatMap((x) => {
        const c = canonical(x, ind + 2);
        return c.inline !== undefined ? [`${' '.repeat(ind)}- ${c.inline}`] : [`${' '.repeat(ind)}- ${(c.block?.[0] ?? '').trimStart()}`, ...(c.block ?? []).slice(1)];
      }),
    };
  }
  return {
    block: Object.entries(v).flatMap(([k, x]) => {
      const c = canonical(x, ind + 2);
      return c.inline !== undefined ? [`${' '.repeat(ind)}${k}: ${c.inline}`] : [`${' '.repeat(ind)}${k}:`, ...(c.block ?? [])];
    }),
  };
}

test('canonical rendering of plain data always takes the fast path and round-trips', () => {
  const reserved = new Set(['true', 'false', 'null', '__proto__']);
  fc.assert(
    fc.property(fc.dictionary(fc.stringMatching(/^[a-z_][a-z0-9_]{0,8}$/).filter((k) => !reserved.has(k)), plainData, { minKeys: 1, maxKeys: 6 }), (data) => {
      // Nested dictionaries may use reserved words too: skip those cases (they are fallbacks by design).
      if (/"(true|false|null|__proto__)":/.test(JSON.stringify(data))) return;
      const text = (canonical(data, 0).block ?? []).join('\n');
      assert.ok(agrees(text), `fast path refused:\n${text}`);
      assert.deepStrictEqual(parseYamlSubsetText(text)?.data, JSON.parse(JSON.stringify(data)));
    }),
    { numRuns: SLOW_RUNS },
  );
});

test('integration: parseFrontMatterDocument agrees with yaml on generated and mutated front matter', () => {
  fc.assert(
    fc.property(textArb, fc.array(editArb, { maxLength: 2 }), (text, edits) => {
      const yamlText = mutate(text, edits);
      if (yamlText.split('\n').some((l) => l.trimEnd() === '---' || l.trimEnd() === '...')) return; // would move the fence
      const r = parseFrontMatterDocument(`---\n${yamlText}\n---\n\n## Command\n`);
      const ref = reference(yamlText);
      if (r.ok) {
        assert.deepEqual(ref.errors, []);
        assert.equal(ref.alias, false);
        assert.deepStrictEqual(r.value.data, ref.data);
        for (const p of probePaths(ref.data)) assert.equal(r.value.lineOf(p), ref.lineOf(p) + 1, `lineOf(${JSON.stringify(p)})`);
        assert.deepEqual(r.value.sections.map((s) => [s.title, s.line]), [['Command', yamlText.split('\n').length + 4]]);
      } else {
        const codes = new Set(r.problems.map((p) => p.code));
        if (ref.errors.length > 0) assert.deepEqual([...codes], ['FM_YAML']);
        else if (ref.alias) assert.deepEqual([...codes], ['FM_ALIAS']);
        for (const p of r.problems) assert.ok(typeof p.line === 'number' && p.line >= 2, JSON.stringify(p));
      }
    }),
    { numRuns: SLOW_RUNS },
  );
});

// ---------------------------------------------------------------------------------------------

const typical = `request_type: tool_request
schema_version: 1
request_id: "TR-20260209-160501Z-python-stats"
created_utc: "2026-02-09T16:05:01Z"
approved_by: 'alice o''hara'
purpose: Compute statistics # why
network: none
network_allowlist: [] # only if network=allowlist
tags: [a, "b c", 'd', 1, 0x10, .5, ~]
cpu_limit: "2"
memory_limit_mb: 1024

inputs:
  - name: "input.csv"
    sha256: "9f86d0"
  # a comment between items
  -   name: script.py
      sha256: ab12
outputs_expected:
- path: output.json
  description: "Summary \\u00e9 \\x41\\t"
constraints:
  - No network unless allowlisted
  - "No writes outside /out"
nested:
  deeper:
    deepest: true
empty:
`;

test('a typical request: values and lines', () => {
  const doc = parseYamlSubsetText(typical);
  assert.ok(doc, 'typical front matter must take the fast path');
  assert.deepStrictEqual(doc.data, {
    request_type: 'tool_request',
    schema_version: 1,
    request_id: 'TR-20260209-160501Z-python-stats',
    created_utc: '2026-02-09T16:05:01Z',
    approved_by: "alice o'hara",
    purpose: 'Compute statistics',
    network: 'none',
    network_allowlist: [],
    tags: ['a', 'b c', 'd', 1, 16, 0.5, null],
    cpu_limit: '2',
    memory_limit_mb: 1024,
    inputs: [
      { name: 'input.csv', sha256: '9f86d0' },
      { name: 'script.py', sha256: 'ab12' },
    ],
    outputs_expected: [{ path: 'output.json', description: 'Summary é A\t' }],
    constraints: ['No network unless allowlisted', 'No writes outside /out'],
    nested: { deeper: { deepest: true } },
    empty: null,
  });
  assert.equal(doc.lineOf([]), 1);
  assert.equal(doc.lineOf(['request_id']), 3);
  assert.equal(doc.lineOf(['tags', 3]), 9);
  assert.equal(doc.lineOf(['inputs']), 13);
  assert.equal(doc.lineOf(['inputs', 0]), 14);
  assert.equal(doc.lineOf(['inputs', 0, 'sha256']), 15);
  assert.equal(doc.lineOf(['inputs', 1, 'sha256']), 18);
  assert.equal(doc.lineOf(['inputs', 1, 'nope']), 17);
  assert.equal(doc.lineOf(['inputs', 7]), 13);
  assert.equal(doc.lineOf(['outputs_expected', 0, 'description']), 21);
  assert.equal(doc.lineOf(['nested', 'deeper', 'deepest']), 27);
  assert.equal(doc.lineOf(['nested', 'deeper', 'deepest', 'x']), 27);
  assert.equal(doc.lineOf(['missing', 'x']), 1);
  assert.equal(doc.lineOf(['constraints', '0']), 22);
  assert.ok(agrees(typical));
});

test('lineOf counts from the given first line when reading lines of a whole file', async () => {
  const { parseYamlSubset } = await import('../../src/contracts/yaml-subset.js');
  const lines = ['---', 'a: 1', 'b:', '  - x', '---'];
  const doc = parseYamlSubset(lines, 1, 4, 2);
  assert.ok(doc);
  assert.deepStrictEqual(doc.data, { a: 1, b: ['x'] });
  assert.equal(doc.lineOf(['b', 0]), 4);
  assert.equal(doc.lineOf([]), 2);
});

test('property: the fast plain-scalar resolution equals trying every core tag in order', () => {
  const plainish = fc.oneof(fc.constantFrom(...TRICKY), fc.stringMatching(/^[-+.0-9a-fA-FoxXeEnNtTlsuri~_]{0,8}$/), fc.string({ maxLength: 6 }));
  fc.assert(
    fc.property(plainish, (s) => {
      assert.deepStrictEqual(resolvePlain(s), resolvePlainByTags(s));
    }),
    { numRuns: RUNS * 3 },
  );
});

test('plain scalars resolve exactly as the YAML 1.2 core schema', () => {
  const cases: [string, unknown][] = [
    ['~', null], ['null', null], ['Null', null], ['NULL', null], ['nULL', 'nULL'],
    ['true', true], ['True', true], ['TRUE', true], ['tRUE', 'tRUE'], ['false', false], ['yes', 'yes'], ['off', 'off'],
    ['0x1F', 31], ['0X1F', '0X1F'], ['0o17', 15], ['017', 17], ['-0', -0], ['+12', 12], ['1_000', '1_000'],
    ['1e3', 1000], ['-1e-3', -0.001], ['1.', 1], ['.5', 0.5], ['.', '.'], ['.inf', Infinity], ['-.Inf', -Infinity], ['.NaN', NaN], ['nan', 'nan'],
    ['2026-02-09', '2026-02-09'], ['12:30', '12:30'],
  ];
  for (const [text, expected] of cases) {
    assert.deepStrictEqual(resolvePlain(text), expected, text);
    assert.ok(agrees(`k: ${text}`), text);
  }
});

test('scalars: quotes, escapes, comments and trailing spaces', () => {
  const cases: [string, unknown][] = [
    [`k: "a # not a comment"`, 'a # not a comment'],
    [`k: 'it''s' # comment`, "it's"],
    [`k: "\\"q\\" \\\\ \\/ \\0\\a\\b\\e\\f\\n\\r\\t\\v\\N\\_\\L\\P\\ "`, '"q" \\ / \0\x07\b\x1b\f\n\r\t\v\u0085\u00a0\u2028\u2029 '],
    [`k: "\\U0001F389 \\ud83c\\udf89"`, '🎉 🎉'],
    [`k: a#b   `, 'a#b'],
    [`k: "  padded  "   `, '  padded  '],
    [`k: -1`, -1],
    [`k: a - b, c]`, 'a - b, c]'],
    [`k: [ "a, b" , 'c''d' , e ]`, ['a, b', "c'd", 'e']],
    [`k: #only a comment`, null],
    [`k: 日本語 🎉`, '日本語 🎉'],
  ];
  for (const [text, expected] of cases) {
    assert.deepStrictEqual(parseYamlSubsetText(text)?.data, { k: expected }, text);
    assert.ok(agrees(text), text);
  }
});

test('outside the subset: returns undefined (the full parser decides)', () => {
  const outside = [
    '', '# only a comment', 'just a scalar', '- a\n- b', '  a: 1', // not a mapping at column 0
    'a: &x 1\nb: *x', 'a: !!str 1', 'a: !tag x', // anchors, aliases, tags
    'a: |\n  text', 'a: >-\n  text', // block scalars
    'a: b\n  c', 'a:\n  b', 'a: "b\n  c"', "a: 'b", 'a: "b\\', // multi-line scalars
    'a: {b: 1}', 'a: [[1]]', 'a: [a, ]', 'a: [a, , b]', 'a: [a #c]', 'a: [a', 'a: ["a": b]', 'a: [a: b]', // flow forms
    '? a\n: b', '"a": 1', "'a': 1", 'a b: 1', '1: x', 'true: x', 'null: x', '__proto__: x', `${'k'.repeat(1100)}: 1`, // keys
    'a:\n\tb: 1', 'a: b\t', 'a: 1\r', 'a: \u0000', 'a: \ufeff', 'a: \ud800', 'a: \u2028', // characters
    'a: 1\na: 2', 'a:\n  b: 1\n  b: 2', // duplicate keys
    'a: 1\n--- \nb: 2', 'a: 1\n...\nb: 2', '%YAML 1.2\na: 1', // document markers, directives
    'a:\n  -\n  - b', 'a:\n  - - b', 'a:\n  - # c', 'a: - b', 'a: b: c', 'a: b:', 'a:b', 'a: "x" y', 'a: "x"#c', 'a: "\\q"', 'a: "\\U00110000"',
    'a: @x', 'a: `x', 'a: %x', 'a: ,x', 'a: ]', 'a: }', 'a: -', 'a: ?', 'a: :', 'a: ? x',
    'a:\n  b: 1\n c: 2', 'a:\n  - x\n   - y', 'a:\n  - x\n  b: 1', // indentation
    Array.from({ length: 70 }, (_, i) => ' '.repeat(i) + 'k:').join('\n'), // deeper than 64
  ];
  for (const text of outside) assert.equal(parseYamlSubsetText(text), undefined, JSON.stringify(text));
});

test('inside the subset: forms that are easy to get wrong', () => {
  const inside: [string, unknown][] = [
    ['a:\n- x\n- y\nb: 1', { a: ['x', 'y'], b: 1 }], // sequence at the key's column
    ['a:\n  - b:\n    - x\n    c: 1', { a: [{ b: ['x'], c: 1 }] }], // compact sequence in an item mapping
    ['a:\n  - b: 1\n  - c:\n  - d', { a: [{ b: 1 }, { c: null }, 'd'] }],
    ['a:\n# comment at column 0\n  b: 1\n\n   # deeper comment\n  c: 2', { a: { b: 1, c: 2 } }],
    ['a: x # c\n  # indented comment after a scalar\nb: 2', { a: 'x', b: 2 }],
    ['a.b-c_d: 1\n_: 2\nconstructor: 3\nyes: 4\nNaN: 5', { 'a.b-c_d': 1, _: 2, constructor: 3, yes: 4, NaN: 5 }],
    ['a: [http://x.y/z, a:b]', { a: ['http://x.y/z', 'a:b'] }],
    ['a:    \nb: 1', { a: null, b: 1 }],
  ];
  for (const [text, expected] of inside) {
    assert.deepStrictEqual(parseYamlSubsetText(text)?.data, expected, text);
    assert.ok(agrees(text), text);
  }
});
