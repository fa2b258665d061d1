import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { MAX_FULL_YAML_CHARS, MAX_YAML_DEPTH, parseFrontMatterDocument } from '../../src/contracts/markdown.js';
import { MAX_DOCUMENT_BYTES, normalizeText } from '../../src/contracts/text.js';

// Hostile front matter: every case must come back as problems (or data), never as a throw, a hang
// or a crash of the process. (Timings are not asserted; each case runs in well under a second.)

const fm = (yaml: string): string => `---\n${yaml}\n---\n\n## Command\n\nrun\n`;
const FM_CODES = new Set(['FM_MISSING', 'FM_YAML', 'FM_ALIAS', 'FM_NOT_MAPPING']);

function problems(text: string) {
  const r = parseFrontMatterDocument(text);
  assert.equal(r.ok, false, 'expected problems');
  if (r.ok) throw new Error('unreachable');
  for (const p of r.problems) {
    assert.ok(FM_CODES.has(p.code), p.code);
    assert.ok(Number.isInteger(p.line) && (p.line as number) >= 1, JSON.stringify(p));
    assert.ok(p.message.length > 0 && p.message.length < 400, p.message);
  }
  return r.problems;
}

const codes = (text: string): string[] => [...new Set(problems(text).map((p) => p.code))];

test('200,000 nested [ : refused by size before the full parser runs', () => {
  const ps = problems(fm('a: ' + '['.repeat(200_000)));
  assert.deepEqual(ps.map((p) => p.code), ['FM_YAML']);
  assert.match(ps[0]?.message ?? '', /limited to \d+ characters/);
});

test('deep nesting under the size cap: refused by depth, with the line, not by a stack overflow', () => {
  const n = MAX_FULL_YAML_CHARS - 100;
  for (const yaml of ['a: ' + '['.repeat(n), 'a: ' + '{'.repeat(n), 'a: ' + '{['.repeat(n / 2), '- '.repeat(n / 2), '? '.repeat(n / 2), 'x:\n' + '- ['.repeat(n / 3)]) {
    const ps = problems(fm(yaml));
    assert.deepEqual(ps.map((p) => p.code), ['FM_YAML'], yaml.slice(0, 20));
    assert.match(ps[0]?.message ?? '', new RegExp(`deeper than ${MAX_YAML_DEPTH} levels`));
  }
});

test('deep block nesting twice in one process (V8 once crashed compiling a regexp at stack depth)', () => {
  const yaml = '- '.repeat(8000);
  for (let i = 0; i < 3; i++) assert.deepEqual(codes(fm(yaml)), ['FM_YAML']);
  const indented = Array.from({ length: 180 }, (_, i) => ' '.repeat(i) + 'k:').join('\n'); // 16 KB, 180 levels
  for (let i = 0; i < 3; i++) assert.deepEqual(codes(fm(indented)), ['FM_YAML']);
});

test('nesting within the limit still parses through the full parser', () => {
  const yaml = 'a: ' + '['.repeat(MAX_YAML_DEPTH - 2) + ']'.repeat(MAX_YAML_DEPTH - 2) + '\nb: |\n  text';
  const r = parseFrontMatterDocument(fm(yaml));
  assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
});

test('alias bomb (billion laughs) within 1 MiB: FM_ALIAS at the first anchor, nothing expanded', () => {
  const lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'];
  for (let i = 1; i < 10; i++) {
    const name = String.fromCharCode(97 + i);
    lines.push(`${name}: &${name} [${Array(9).fill('*' + String.fromCharCode(96 + i)).join(', ')}]`);
  }
  const ps = problems(fm(lines.join('\n')));
  assert.deepEqual(ps, [{ code: 'FM_ALIAS', message: 'YAML anchors, aliases and explicit tags are not allowed', line: 2 }]);
  // The same with block sequences and many aliases per level.
  const block = ['x: &x lol', ...Array.from({ length: 20 }, (_, i) => `l${i}:\n` + Array(50).fill(`  - *${i === 0 ? 'x' : `l${i - 1}`}`).join('\n'))];
  assert.deepEqual(codes(fm(block.join('\n'))), ['FM_ALIAS']);
});

test('50,000 keys: read by the fast path, with lines', () => {
  const yaml = Array.from({ length: 50_000 }, (_, i) => `k${i}: ${i}`).join('\n');
  const r = parseFrontMatterDocument(fm(yaml));
  assert.ok(r.ok);
  const data = r.value.data as Record<string, number>;
  assert.equal(Object.keys(data).length, 50_000);
  assert.equal(data.k49999, 49_999);
  assert.equal(r.value.lineOf(['k49999']), 50_001);
});

test('many keys outside the fast path: refused by size, or read linearly (no quadratic duplicate check)', () => {
  const big = Array.from({ length: 50_000 }, (_, i) => `k${i}: ${i}`).join('\n');
  assert.deepEqual(codes(fm(big + '\nz: &a 1')), ['FM_YAML']);
  const small = Array.from({ length: 2_500 }, (_, i) => `k${i}: ${i}`).join('\n'); // ~25 KB, under the cap
  assert.deepEqual(problems(fm(small + '\nz: &a 1')), [{ code: 'FM_ALIAS', message: 'YAML anchors, aliases and explicit tags are not allowed', line: 2_502 }]);
  const r = parseFrontMatterDocument(fm(small + '\nz: |\n  block'));
  assert.ok(r.ok);
  assert.equal(Object.keys(r.value.data as object).length, 2_501);
});

test('duplicate keys: FM_YAML at the repeated key, at any depth and after conversion', () => {
  assert.deepEqual(problems(fm('a: 1\nb: 2\na: 3')), [{ code: 'FM_YAML', message: 'Map keys must be unique', line: 4 }]);
  assert.deepEqual(problems(fm('a:\n  - x: 1\n    y: 2\n    x: 3')), [{ code: 'FM_YAML', message: 'Map keys must be unique', line: 5 }]);
  assert.deepEqual(problems(fm('1: a\n"1": b')), [{ code: 'FM_YAML', message: 'Map keys must be unique', line: 3 }]);
  assert.deepEqual(problems(fm('a: {x: 1, x: 2}')), [{ code: 'FM_YAML', message: 'Map keys must be unique', line: 2 }]);
  assert.deepEqual(codes(fm(Array.from({ length: 2_000 }, (_, i) => `k: ${i}`).join('\n'))), ['FM_YAML']);
  assert.deepEqual(codes(fm(Array.from({ length: 50_000 }, (_, i) => `k: ${i}`).join('\n'))), ['FM_YAML']);
});

test('collection keys: refused (stringifying them is slow and prints process warnings)', async () => {
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.message);
  process.on('warning', onWarning);
  try {
    assert.deepEqual(codes(fm('? [a, b]\n: 1')), ['FM_YAML']);
    assert.deepEqual(codes(fm('[a]: 1')), ['FM_YAML']);
    assert.deepEqual(codes(fm('a: ' + '{'.repeat(40) + '}'.repeat(40))), ['FM_YAML']);
    await new Promise((resolve) => setImmediate(resolve));
  } finally {
    process.off('warning', onWarning);
  }
  assert.deepEqual(warnings, []);
});

test('BOM and CRLF: normalised text parses; raw text never throws', () => {
  const raw = '\ufeff---\r\na: 1\r\nb: [x, y]\r\n---\r\n\r\n## Command\r\n';
  const r = parseFrontMatterDocument(normalizeText(raw));
  assert.ok(r.ok);
  assert.deepEqual(r.value.data, { a: 1, b: ['x', 'y'] });
  assert.equal(r.value.lineOf(['b']), 3);
  assert.deepEqual(codes(raw), ['FM_MISSING']); // the BOM hides the opening fence
  // CRs left in (callers normalise first): the subset refuses `\r`, `yaml` decides; no throw.
  const crlf = parseFrontMatterDocument(raw.slice(1));
  if (!crlf.ok) assert.deepEqual(codes(raw.slice(1)), ['FM_YAML']);
  assert.ok(parseFrontMatterDocument('---\r\na: 1\r\n---\r\n').ok);
});

test('huge inputs at the document limit: no throw', () => {
  const unclosed = '---\n' + 'a: 1\n'.repeat(MAX_DOCUMENT_BYTES / 5);
  assert.deepEqual(codes(unclosed), ['FM_MISSING']);
  const flow = parseFrontMatterDocument(fm('a: [' + 'x, '.repeat(300_000) + 'x]'));
  assert.ok(flow.ok);
  assert.equal((flow.value.data as { a: string[] }).a.length, 300_001);
  assert.deepEqual(codes(fm(']\n'.repeat(MAX_DOCUMENT_BYTES / 2))), ['FM_YAML']);
});

test('thousands of YAML errors are reported as the first 50', () => {
  const ps = problems(fm(']\n'.repeat(MAX_FULL_YAML_CHARS / 2 - 10)));
  assert.equal(ps.length, 50);
  assert.ok(ps.every((p) => p.code === 'FM_YAML'));
});

test('binary junk and YAML-character junk: never throws, only front matter problems', () => {
  const junk = fc.oneof(
    fc.string({ unit: 'binary', maxLength: 400 }),
    fc.string({ unit: fc.constantFrom(...'[]{}:,-?#&*!|>\'"%@` \n\t\r\\ax0.~\u0000\ufeff\u2028'), maxLength: 400 }),
  );
  fc.assert(
    fc.property(junk, (yaml) => {
      const r = parseFrontMatterDocument(fm(yaml));
      if (!r.ok) for (const p of r.problems) assert.ok(FM_CODES.has(p.code) && typeof p.line === 'number', JSON.stringify(p));
    }),
    { numRuns: 1000 },
  );
});
