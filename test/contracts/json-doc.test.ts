import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { formatPath, MAX_JSON_DEPTH, parseJsonDocument, schemaProblems } from '../../src/contracts/json-doc.js';

const codes = (text: string) => {
  const r = parseJsonDocument(text);
  return r.ok ? [] : r.problems.map((p) => p.code);
};

test('valid JSON gives the same data as JSON.parse', () => {
  for (const t of ['{}', '[]', '0', '"x"', 'null', '{"a":[1,2,{"b":"c"}],"d":-1.5e3}', ' \n {"__proto__": {"x": 1}} \n']) {
    const r = parseJsonDocument(t);
    assert.ok(r.ok, t);
    assert.deepEqual(r.value.data, JSON.parse(t));
  }
  const proto = parseJsonDocument('{"__proto__": {"polluted": true}}');
  assert.ok(proto.ok);
  assert.equal(({} as Record<string, unknown>).polluted, undefined);
});

test('BOM and CRLF are accepted', () => {
  const r = parseJsonDocument('\ufeff{\r\n  "a": 1,\r\n  "b": 2\r\n}\r\n');
  assert.ok(r.ok);
  assert.equal(r.value.lineOf(['b']), 3);
});

test('syntax errors are JSON_SYNTAX with the line of the error', () => {
  const cases: [string, number][] = [
    ['', 1],
    ['{\n  "a": 1,\n}', 3],
    ['[1,\n2,\n]', 3],
    ['{"a" 1}', 1],
    ['{\n"a": tru}', 2],
    ['{"a": 1} x', 1],
    ['"unterminated', 1],
    ['"bad \\x escape"', 1],
    ['"raw\ttab"', 1],
    ['01', 1],
    ['{\'a\': 1}', 1],
    ['// comment\n{}', 1],
    ['NaN', 1],
  ];
  for (const [t, line] of cases) {
    const r = parseJsonDocument(t);
    assert.ok(!r.ok, t);
    assert.equal(r.problems[0]?.code, 'JSON_SYNTAX', t);
    assert.equal(r.problems[0]?.line, line, t);
  }
});

test('duplicate keys are found at every depth, with line and path', () => {
  const r = parseJsonDocument('{\n  "a": {\n    "b": 1,\n    "b": 2\n  },\n  "c": [{"d": 1, "d": 1}]\n}');
  assert.ok(!r.ok);
  assert.deepEqual(
    r.problems.map((p) => [p.code, p.line, p.path]),
    [
      ['JSON_DUPLICATE_KEY', 4, 'a.b'],
      ['JSON_DUPLICATE_KEY', 6, 'c[0].d'],
    ],
  );
  // Keys that differ only by escapes are the same key.
  assert.deepEqual(codes('{"a": 1, "\\u0061": 2}'), ['JSON_DUPLICATE_KEY']);
  // Same key in sibling objects is fine.
  assert.deepEqual(codes('[{"a": 1}, {"a": 2}]'), []);
});

test('nesting deeper than the limit is JSON_TOO_DEEP, exactly at the limit is fine', () => {
  const nest = (n: number) => '['.repeat(n) + ']'.repeat(n);
  assert.deepEqual(codes(nest(MAX_JSON_DEPTH)), []);
  assert.deepEqual(codes(nest(MAX_JSON_DEPTH + 1)), ['JSON_TOO_DEEP']);
  assert.deepEqual(codes('{"a":'.repeat(100_000)), ['JSON_TOO_DEEP']);
  assert.deepEqual(codes(nest(3)), []);
  assert.deepEqual(parseJsonDocument(nest(3), { maxDepth: 2 }).ok, false);
});

test('oversized input is refused before parsing', () => {
  assert.deepEqual(codes(`"${'x'.repeat(1024 * 1024 + 10)}"`), ['DOC_TOO_LARGE']);
});

test('lineOf gives the key line for members and the item line for array items', () => {
  const r = parseJsonDocument('{\n  "a": {\n    "b": [\n      1,\n      {"c":\n        3}\n    ]\n  },\n  "e": 1\n}');
  assert.ok(r.ok);
  const { lineOf } = r.value;
  assert.equal(lineOf([]), 1);
  assert.equal(lineOf(['a']), 2);
  assert.equal(lineOf(['a', 'b']), 3);
  assert.equal(lineOf(['a', 'b', 0]), 4);
  assert.equal(lineOf(['a', 'b', 1]), 5);
  assert.equal(lineOf(['a', 'b', 1, 'c']), 5);
  assert.equal(lineOf(['e']), 9);
  // Missing tails fall back to the deepest existing node.
  assert.equal(lineOf(['a', 'zzz']), 2);
  assert.equal(lineOf(['a', 'b', 7]), 3);
});

test('formatPath and schemaProblems', () => {
  assert.equal(formatPath(['a', 0, 'b-c', 'odd key']), 'a[0].b-c["odd key"]');
  const r = parseJsonDocument('{\n  "x": {\n    "y": 1,\n    "z": 2\n  }\n}');
  assert.ok(r.ok);
  const problems = schemaProblems(
    [
      { code: 'unrecognized_keys', path: ['x'], keys: ['z'], message: 'Unrecognized key' },
      { code: 'invalid_type', path: ['x', 'w'], message: 'Invalid input: expected string, received undefined' },
    ],
    r.value.lineOf,
    (i) => (i.code === 'unrecognized_keys' ? 'T_UNKNOWN' : 'T_SCHEMA'),
  );
  assert.deepEqual(problems.map((p) => [p.code, p.line, p.path]), [
    ['T_UNKNOWN', 4, 'x.z'],
    ['T_SCHEMA', 2, 'x.w'],
  ]);
  assert.match(problems[1]?.message ?? '', /missing required field `x.w`/);
});

test('property: never throws; accepts exactly what JSON.parse accepts (when shallow and unique)', () => {
  fc.assert(
    fc.property(fc.oneof(fc.string(), fc.json(), fc.json().map((j) => j.slice(0, Math.max(0, j.length - 1)))), (t) => {
      const r = parseJsonDocument(t);
      let native: unknown;
      let nativeOk = true;
      try {
        native = JSON.parse(t.replace(/^\ufeff/, ''));
      } catch {
        nativeOk = false;
      }
      if (r.ok) {
        assert.ok(nativeOk);
        assert.deepEqual(r.value.data, native);
      } else {
        for (const p of r.problems) assert.ok(['JSON_SYNTAX', 'JSON_DUPLICATE_KEY', 'JSON_TOO_DEEP'].includes(p.code));
        if (r.problems.every((p) => p.code === 'JSON_SYNTAX')) assert.ok(!nativeOk, `JSON.parse accepted ${JSON.stringify(t)}`);
      }
    }),
    { numRuns: 2000 },
  );
});

test('property: mutated JSON text (inserted characters) never throws', () => {
  const base = JSON.stringify({ a: [1, { b: 'c\n' }], d: null, e: true }, null, 2);
  fc.assert(
    fc.property(fc.nat(base.length), fc.string({ minLength: 1, maxLength: 3 }), (at, ins) => {
      const r = parseJsonDocument(base.slice(0, at) + ins + base.slice(at));
      if (!r.ok) assert.ok(r.problems.length > 0 && r.problems.every((p) => typeof p.line === 'number' && p.line >= 1));
    }),
    { numRuns: 1000 },
  );
});
