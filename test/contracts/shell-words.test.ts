import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { shellWords, type ShellOperatorKind } from '../../src/contracts/shell-words.js';

const values = (line: string): string[] => shellWords(line).words.map((w) => w.value);
const kinds = (line: string): ShellOperatorKind[] => shellWords(line).operators.map((o) => o.kind);

test('splits on blanks and reports 1-based columns', () => {
  const r = shellWords('  python3 -u  script.py\t--in /in/a.csv ');
  assert.deepEqual(
    r.words.map((w) => [w.value, w.column]),
    [
      ['python3', 3],
      ['-u', 11],
      ['script.py', 15],
      ['--in', 25],
      ['/in/a.csv', 30],
    ],
  );
  assert.deepEqual(r.operators, []);
  assert.equal(r.error, null);
});

test('quoted metacharacters are data, not operators', () => {
  for (const [line, word] of [
    ['"a;b"', 'a;b'],
    ["'a|b'", 'a|b'],
    ["'&&'", '&&'],
    ['"x > y"', 'x > y'],
    ["'$(rm -rf /)'", '$(rm -rf /)'],
    ["'`id`'", '`id`'],
    ["'*.csv'", '*.csv'],
    ["'~/x'", '~/x'],
    ["'# not a comment'", '# not a comment'],
    ['a\\;b', 'a;b'],
    ['\\|', '|'],
    ['\\$HOME', '$HOME'],
    ['\\*', '*'],
    ['"(x)"', '(x)'],
  ] as const) {
    const r = shellWords(line);
    assert.deepEqual(r.words.map((w) => w.value), [word], line);
    assert.deepEqual(r.operators, [], line);
    assert.equal(r.words[0]!.quoted, true, line);
  }
});

test('POSIX escapes: backslash outside quotes, the four escapes inside double quotes, none inside single quotes', () => {
  assert.deepEqual(values('a\\ b'), ['a b']);
  assert.deepEqual(values('"a\\"b"'), ['a"b']);
  assert.deepEqual(values('"a\\\\b"'), ['a\\b']);
  assert.deepEqual(values('"a\\$b"'), ['a$b']);
  assert.deepEqual(values('"a\\nb"'), ['a\\nb'], 'backslash before n stays inside double quotes');
  assert.deepEqual(values("'a\\b'"), ['a\\b']);
  assert.deepEqual(values("'it'\\''s'"), ["it's"]);
  assert.deepEqual(values('a\\\nb'), ['ab'], 'backslash-newline is a line continuation');
  assert.deepEqual(values('a"b c"\'d\'e'), ['ab cde'], 'adjacent quoted parts form one word');
  assert.deepEqual(values("'' \"\""), ['', ''], 'empty quotes are empty arguments');
  assert.deepEqual(values('cost$ "$" a$'), ['cost$', '$', 'a$'], 'a $ not starting an expansion is literal');
  assert.deepEqual(values('a#b'), ['a#b'], '# inside a word is not a comment');
  assert.deepEqual(kinds('a#b a~b'), []);
});

test('every unquoted operator is reported with its kind, text and column', () => {
  const cases: [string, ShellOperatorKind, string, number][] = [
    ['a ; b', 'sequence', ';', 3],
    ['a;b', 'sequence', ';', 2],
    ['a;; b', 'sequence', ';;', 2],
    ['a && b', 'and', '&&', 3],
    ['a || b', 'or', '||', 3],
    ['a | b', 'pipe', '|', 3],
    ['a |& b', 'pipe', '|&', 3],
    ['a &', 'background', '&', 3],
    ['a > f', 'redirect', '>', 3],
    ['a >> f', 'redirect', '>>', 3],
    ['a < f', 'redirect', '<', 3],
    ['a <> f', 'redirect', '<>', 3],
    ['a >| f', 'redirect', '>|', 3],
    ['a 2>&1', 'redirect', '2>&', 3],
    ['a 2> err', 'redirect', '2>', 3],
    ['a &> f', 'redirect', '&>', 3],
    ['a &>> f', 'redirect', '&>>', 3],
    ['a <(b)', 'redirect', '<', 3],
    ['a << EOF', 'heredoc', '<<', 3],
    ['a <<- EOF', 'heredoc', '<<-', 3],
    ['a <<< word', 'heredoc', '<<<', 3],
    ['(a)', 'subshell', '(', 1],
    ['a $(id)', 'command-substitution', '$(', 3],
    ['a $((1+2))', 'command-substitution', '$((', 3],
    ['a "$(id)"', 'command-substitution', '$(', 4],
    ['a `id`', 'backtick', '`', 3],
    ['a "`id`"', 'backtick', '`', 4],
    ['a $HOME', 'parameter', '$HOME', 3],
    ['a ${HOME}', 'parameter', '${HOME}', 3],
    ['a "$HOME"', 'parameter', '$HOME', 4],
    ['a $1', 'parameter', '$1', 3],
    ['a $@', 'parameter', '$@', 3],
    ["a $'x'", 'parameter', "$'", 3],
    ['a *.csv', 'glob', '*', 3],
    ['a f?.csv', 'glob', '?', 4],
    ['a [ab].csv', 'glob', '[', 3],
    ['a {x,y}', 'brace', '{', 3],
    ['a ~/x', 'tilde', '~', 3],
    ['a --p=~/x', 'tilde', '~', 7],
    ['a # rest', 'comment', '# rest', 3],
  ];
  for (const [line, kind, text, column] of cases) {
    const op = shellWords(line).operators[0];
    assert.ok(op, `${line}: no operator reported`);
    assert.deepEqual([op.kind, op.text, op.column], [kind, text, column], line);
  }
  assert.equal(shellWords('a "$HOME"').operators[0]!.quoted, true);
  assert.equal(shellWords('a $HOME').operators[0]!.quoted, false);
});

test('an all-digit word before < or > is its io number; other words are not', () => {
  const r = shellWords('a 2>&1');
  assert.deepEqual(values('a 2>&1'), ['a', '1']);
  assert.equal(r.operators[0]!.text, '2>&');
  assert.deepEqual(values('a2>b'), ['a2', 'b']);
  assert.equal(shellWords('"2">b').operators[0]!.text, '>', 'a quoted 2 is a word, not an io number');
});

test('a comment hides the rest of the line, as in a shell', () => {
  const r = shellWords('a b # c d');
  assert.deepEqual(r.words.map((w) => w.value), ['a', 'b']);
  assert.deepEqual(r.operators.map((o) => o.kind), ['comment']);
});

test('unterminated quotes and a trailing backslash are errors with the column of the opening', () => {
  assert.deepEqual(shellWords("a 'b c").error, { kind: 'unterminated-single-quote', column: 3 });
  assert.deepEqual(shellWords('a "b c').error, { kind: 'unterminated-double-quote', column: 3 });
  assert.deepEqual(shellWords('a b\\').error, { kind: 'trailing-backslash', column: 4 });
  assert.deepEqual(shellWords('a "b\\"').error, { kind: 'unterminated-double-quote', column: 3 });
});

test('property: single-quoting any argv gives it back exactly, with no operators', () => {
  const quote = (s: string): string => `'${s.replace(/'/g, "'\\''")}'`;
  fc.assert(
    fc.property(fc.array(fc.string({ maxLength: 20 }), { maxLength: 8 }), (argv) => {
      const r = shellWords(argv.map(quote).join(' '));
      assert.equal(r.error, null);
      assert.deepEqual(r.operators, []);
      assert.deepEqual(r.words.map((w) => w.value), argv);
    }),
    { numRuns: 500 },
  );
});

test('property: any string tokenizes without throwing; columns point into the line', () => {
  const alphabet = fc.constantFrom(...'ab 1\t\n\'"\\$`;&|<>(){}[]*?~#=-/'.split(''));
  fc.assert(
    fc.property(fc.oneof(fc.string({ maxLength: 60 }), fc.array(alphabet, { maxLength: 60 }).map((a) => a.join(''))), (line) => {
      const r = shellWords(line);
      for (const x of [...r.words, ...r.operators]) assert.ok(x.column >= 1 && x.column <= line.length, `column ${x.column} in ${JSON.stringify(line)}`);
      if (r.error) assert.ok(r.error.column >= 1 && r.error.column <= line.length);
    }),
    { numRuns: 2000 },
  );
});
