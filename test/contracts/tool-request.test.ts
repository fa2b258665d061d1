import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { test } from 'node:test';
import fc from 'fast-check';
import { allRules, checkText } from '../../src/contracts/index.js';
import { parseToolRequest, renderToolRequest, toolRequestContract, type ToolRequest } from '../../src/contracts/tool-request.js';
import { toolRequestFrontMatterSchema } from '../../src/contracts/tool-request-schema.js';
import { timestampMs } from '../../src/contracts/tool-request-front-matter.js';
import { findInstall } from '../../src/contracts/tool-request-content.js';
import { parseFrontMatterDocument } from '../../src/contracts/markdown.js';
import { repoPath } from '../helpers/paths.js';

const examplesDir = repoPath('examples/requests');
const exampleFiles = readdirSync(examplesDir).filter((f) => f.endsWith('.md'));
const read = (name: string): string => readFileSync(join(examplesDir, name), 'utf8');
const STATS = 'TR-20260209-160501Z-python-stats.md';
const MONTY = 'TR-20260211-140000Z-monty-fib.md';
const CMD = 'python3 -u stats.py --in /in/input.csv --out /out/stats.json';
const stats = read(STATS);

function codes(text: string, fileName = STATS): string[] {
  const r = parseToolRequest(text, { fileName });
  return r.ok ? [] : r.problems.map((p) => p.code);
}
function problemsOf(text: string, fileName = STATS) {
  const r = parseToolRequest(text, { fileName });
  assert.equal(r.ok, false, 'expected the request to be rejected');
  return r.ok ? [] : r.problems;
}
/** Warnings of a request that is accepted (reported, not rejected). */
function warningsOf(text: string, fileName = STATS) {
  const r = parseToolRequest(text, { fileName });
  assert.ok(r.ok, `expected an accepted request, got ${JSON.stringify(!r.ok && r.problems)}`);
  for (const w of r.warnings ?? []) assert.equal(w.severity, 'warning');
  return r.warnings ?? [];
}
function valueOf(text: string, fileName = STATS): ToolRequest {
  const r = parseToolRequest(text, { fileName });
  assert.ok(r.ok, `expected a valid request, got ${JSON.stringify(!r.ok && r.problems)}`);
  return r.value;
}
const withCommand = (cmd: string, text = stats): string => text.replace(CMD, cmd);
const lineOf = (text: string, needle: string): number => text.split('\n').findIndex((l) => l.includes(needle)) + 1;

test('every example parses, and parse(render(x)) deep-equals x', () => {
  assert.ok(exampleFiles.length >= 3);
  for (const f of exampleFiles) {
    const x = valueOf(read(f), f);
    const again = parseToolRequest(renderToolRequest(x), { fileName: f });
    assert.ok(again.ok, `${f}: rendered text is invalid: ${JSON.stringify(!again.ok && again.problems)}`);
    assert.deepEqual(again.value, x, f);
  }
});

test('the examples reference their input files with the right sha256', () => {
  for (const f of exampleFiles) {
    for (const input of valueOf(read(f), f).inputs) {
      const bytes = readFileSync(join(examplesDir, input.name));
      assert.equal(createHash('sha256').update(bytes).digest('hex'), input.sha256, `${f}: ${input.name}`);
    }
  }
});

test('the typed value holds what later stages need', () => {
  const v = valueOf(stats);
  assert.deepEqual(v.command, { raw: CMD, argv: ['python3', '-u', 'stats.py', '--in', '/in/input.csv', '--out', '/out/stats.json'], interpreter: 'python3', script: '/in/stats.py' });
  assert.equal(v.code, null);
  assert.equal(v.frontMatter.cpu_limit, 2, 'cpu_limit "2" becomes the number 2');
  assert.equal(v.frontMatter.backend, 'ns', 'backend defaults to ns');
  assert.deepEqual(v.outputs, [{ path: '/out/stats.json', description: 'Per-column summary statistics as JSON.' }], 'stats.json means /out/stats.json');
  assert.equal(v.frontMatter.outputs_expected[0]!.path, 'stats.json', 'the front matter keeps the path as written');
  assert.deepEqual(v.inputs.map((i) => i.path), ['/in/stats.py', '/in/input.csv']);
  assert.deepEqual(v.risk, {
    level: 'low',
    justification: 'Pure computation over a small local CSV with the standard library; no network, no writes outside /out.',
    dataSensitivity: 'internal',
    networkRationale: 'none',
  });
  assert.equal(v.preamble, '# Weather statistics for the monthly report');
  const m = valueOf(read(MONTY), MONTY);
  assert.equal(m.command, null);
  assert.match(m.code ?? '', /^def fib\(n\):/);
  assert.doesNotMatch(m.code ?? '', /```/);
});

test('network defaults to none with an empty allowlist when omitted', () => {
  const text = stats.replace('network: "none"\n', '').replace('network_allowlist: []\n', '');
  const v = valueOf(text);
  assert.equal(v.frontMatter.network, 'none');
  assert.deepEqual(v.frontMatter.network_allowlist, []);
});

test('problems carry the line of the offending field, section or command', () => {
  const missingSha = stats.replace('    sha256: "f854fbec2aedfe17afbe12577e691c9ee525ea6dc9f072a55e242f73c4cffed5"\n', '');
  const p1 = problemsOf(missingSha).find((p) => p.code === 'TR_INPUT_SHA256');
  assert.equal(p1?.line, lineOf(missingSha, 'name: "input.csv"'));
  assert.equal(p1?.path, 'inputs[1]');

  const pipe = withCommand(`${CMD} | tee /out/x`);
  const p2 = problemsOf(pipe).find((p) => p.code === 'TR_COMMAND_PIPE');
  assert.equal(p2?.line, lineOf(pipe, '| tee'));
  assert.match(p2?.message ?? '', new RegExp(`column ${CMD.length + 2}:`));

  const badRisk = stats.replace('Risk level: low', 'Risk level: extreme');
  assert.equal(problemsOf(badRisk).find((p) => p.code === 'TR_RISK_LEVEL')?.line, lineOf(badRisk, 'Risk level: extreme'));

  const badLimit = stats.replace('time_limit_sec: 120', 'time_limit_sec: 0');
  const p4 = problemsOf(badLimit).find((p) => p.code === 'TR_LIMIT');
  assert.deepEqual([p4?.line, p4?.path], [lineOf(badLimit, 'time_limit_sec'), 'time_limit_sec']);

  const secret = stats.replace('# Weather statistics', '# Weather statistics AKIAABCDEFGHIJKLMNOP');
  const p5 = problemsOf(secret).find((p) => p.code === 'TR_SECRET');
  assert.equal(p5?.line, lineOf(secret, 'AKIA'));
  assert.doesNotMatch(p5?.message ?? '', /AKIAABCD/, 'the message never echoes the secret');

  const order = `${stats}\n## Extra\n\nNotes for the reviewer.\n`;
  assert.equal(warningsOf(order).find((p) => p.code === 'TR_SECTION_UNKNOWN')?.line, lineOf(order, '## Extra'));

  const install = stats.replace('- stdout:', '- run `npm install left-pad` first\n- stdout:');
  assert.equal(problemsOf(install).find((p) => p.code === 'TR_PACKAGE_INSTALL')?.line, lineOf(install, 'npm install'));
});

test('quoted metacharacters in the command are data and accepted', () => {
  const v = valueOf(withCommand(`${CMD} --label 'a;b|c&&d>e' --title "x > y" --sep \\; --price '$5' --pattern '*.csv'`));
  assert.deepEqual(v.command?.argv.slice(7), ['--label', 'a;b|c&&d>e', '--title', 'x > y', '--sep', ';', '--price', '$5', '--pattern', '*.csv']);
});

test('each unquoted operator is rejected with its own code', () => {
  const cases: [string, string][] = [
    [`${CMD}; id`, 'TR_COMMAND_CHAINING'],
    [`${CMD} && id`, 'TR_COMMAND_CHAINING'],
    [`${CMD} || id`, 'TR_COMMAND_CHAINING'],
    [`${CMD} | id`, 'TR_COMMAND_PIPE'],
    [`${CMD} > /out/log`, 'TR_COMMAND_REDIRECT'],
    [`${CMD} >> /out/log`, 'TR_COMMAND_REDIRECT'],
    [`${CMD} 2>&1`, 'TR_COMMAND_REDIRECT'],
    [`${CMD} < /in/input.csv`, 'TR_COMMAND_REDIRECT'],
    [`${CMD} << EOF`, 'TR_COMMAND_HEREDOC'],
    [`${CMD} --x $(id)`, 'TR_COMMAND_SUBSTITUTION'],
    [`${CMD} --x \`id\``, 'TR_COMMAND_SUBSTITUTION'],
    [`${CMD} &`, 'TR_COMMAND_BACKGROUND'],
    [`${CMD} --x $HOME`, 'TR_COMMAND_EXPANSION'],
    [`${CMD} --x "$HOME"`, 'TR_COMMAND_EXPANSION'],
    [`${CMD} --x ~/y`, 'TR_COMMAND_EXPANSION'],
    [`${CMD} --x *.csv`, 'TR_COMMAND_GLOB'],
    [`${CMD} --x 'open`, 'TR_COMMAND_SYNTAX'],
    [`${CMD} \\`, 'TR_COMMAND_SYNTAX'],
    [`(${CMD})`, 'TR_COMMAND_SYNTAX'],
  ];
  for (const [cmd, code] of cases) assert.ok(codes(withCommand(cmd)).includes(code), `${cmd}: expected ${code}, got ${codes(withCommand(cmd))}`);
});

test('interpreter mapping per language', () => {
  const doc = (language: string, cmd: string, script: string): string =>
    withCommand(cmd, stats).replace('language: "python"', `language: "${language}"`).replaceAll('stats.py', script);
  const accepted: [string, string, string][] = [
    ['python', 'python stats.py', 'stats.py'],
    ['python', 'python3.12 -B -W ignore ./stats.py --in /in/input.csv', 'stats.py'],
    ['python', 'python3 -X dev /in/stats.py', 'stats.py'],
    ['node', 'node --max-old-space-size=512 main.mjs', 'main.mjs'],
    ['node', 'node -r /in/main.cjs main.cjs', 'main.cjs'],
    ['ts', 'node --experimental-strip-types main.ts', 'main.ts'],
    ['go', 'go run main.go --in /in/input.csv', 'main.go'],
    ['go', 'go run -race main.go', 'main.go'],
    ['ruby', 'ruby -w main.rb', 'main.rb'],
  ];
  for (const [language, cmd, script] of accepted) {
    const r = parseToolRequest(doc(language, cmd, script), { fileName: STATS });
    assert.ok(r.ok, `${language}: ${cmd}: ${JSON.stringify(!r.ok && r.problems)}`);
  }
  const rejected: [string, string, string, string][] = [
    ['node', 'node main.ts', 'main.ts', 'TR_INTERPRETER'],
    ['ts', 'node main.js', 'main.js', 'TR_INTERPRETER'],
    ['python', 'ruby stats.py', 'stats.py', 'TR_INTERPRETER'],
    ['python', 'env python3 stats.py', 'stats.py', 'TR_INTERPRETER'],
    ['python', 'sudo python3 stats.py', 'stats.py', 'TR_INTERPRETER'],
    ['go', 'go build main.go', 'main.go', 'TR_INTERPRETER'],
    ['go', 'go run -tags x main.go', 'main.go', 'TR_INTERPRETER'],
    ['python', 'python3 -uc "print(1)"', 'stats.py', 'TR_INLINE_CODE'],
    ['node', 'node -e "1"', 'main.js', 'TR_INLINE_CODE'],
    ['node', 'node --eval=1', 'main.js', 'TR_INLINE_CODE'],
    ['node', 'node -p 1', 'main.js', 'TR_INLINE_CODE'],
    ['ruby', 'ruby -e "puts 1"', 'main.rb', 'TR_INLINE_CODE'],
    ['python', 'python3 -m stats', 'stats.py', 'TR_INLINE_CODE'],
    ['python', 'python3 -u', 'stats.py', 'TR_SCRIPT_NOT_INPUT'],
    ['python', 'python3 lib/stats.py', 'stats.py', 'TR_SCRIPT_NOT_INPUT'],
    ['python', 'bash -c "python3 stats.py"', 'stats.py', 'TR_COMMAND_SHELL'],
    ['python', '/bin/sh stats.py', 'stats.py', 'TR_COMMAND_SHELL'],
  ];
  for (const [language, cmd, script, code] of rejected) {
    const got = codes(doc(language, cmd, script));
    assert.ok(got.includes(code), `${language}: ${cmd}: expected ${code}, got ${got}`);
  }
});

test('paths in arguments: only declared /in files and /out; no host paths, devices or ..', () => {
  const ok = [`${CMD} --cache=/out/cache --dir /out`, `${CMD} --url https://example.org/a/b`, `${CMD} --range 1..5`];
  for (const cmd of ok) assert.deepEqual(codes(withCommand(cmd)), [], cmd);
  const bad: [string, string][] = [
    [`${CMD} --cfg /etc/app.cfg`, 'TR_HOST_PATH'],
    [`${CMD} --cfg=/etc/app.cfg`, 'TR_HOST_PATH'],
    [`${CMD} -I/usr/include`, 'TR_HOST_PATH'],
    [`${CMD} --path /in/input.csv:/etc`, 'TR_HOST_PATH'],
    [`${CMD} --src file:///etc/passwd`, 'TR_HOST_PATH'],
    [`${CMD} --log /dev/stdout`, 'TR_DEVICE'],
    [`${CMD} --x ../secret`, 'TR_PATH_TRAVERSAL'],
    [`${CMD} --x /out/../../etc`, 'TR_PATH_TRAVERSAL'],
    [`${CMD} --x /in/missing.csv`, 'TR_INPUT_UNDECLARED'],
  ];
  for (const [cmd, code] of bad) assert.ok(codes(withCommand(cmd)).includes(code), `${cmd}: expected ${code}, got ${codes(withCommand(cmd))}`);
});

test('package installs are rejected in the command, hidden by quoting, and in prose', () => {
  assert.ok(codes(withCommand(`${CMD} --then "pip install x"`)).includes('TR_PACKAGE_INSTALL'));
  assert.ok(codes(withCommand(`${CMD} --then pip'' install`)).includes('TR_PACKAGE_INSTALL'));
  for (const prose of ['apt-get install curl', 'npm i lodash', 'npx cowsay', 'yarn add x', 'gem install rails', 'go get github.com/x/y', 'cargo install ripgrep', 'uv pip install x', 'conda install numpy', 'brew install jq']) {
    assert.ok(codes(stats.replace('- stdout:', `- ${prose}\n- stdout:`)).includes('TR_PACKAGE_INSTALL'), prose);
  }
  assert.deepEqual(codes(stats.replace('- stdout:', '- we go get the data from the input\n- stdout:')), [], 'plain English is not an install');
  // A field that ends in "npx" is not joined to the next line's key (found by the property test below).
  assert.ok(!codes(stats.replace(/^purpose: .*$/m, 'purpose: "npx"')).includes('TR_PACKAGE_INSTALL'));
  assert.ok(codes(withCommand(`${CMD} --then '["npx", "cowsay"]'`)).includes('TR_PACKAGE_INSTALL'));
});

test('backend monty: ## Code, python only, no network; command rules do not apply', () => {
  const monty = read(MONTY);
  assert.deepEqual(codes(monty.replace('```python\n', '').replace('\n```\n', '\n'), MONTY), [], 'unfenced code is accepted');
  assert.ok(codes(monty.replace('## Code', '## Command'), MONTY).includes('TR_SECTION_WRONG_BACKEND'));
  assert.ok(codes(monty.replace('network: "none"', 'network: "allowlist"\nnetwork_allowlist: ["a.example"]'), MONTY).includes('TR_BACKEND'));
  assert.ok(codes(monty.replace('```python\n', '```python\n```\n'), MONTY).includes('TR_CODE_BLOCK'));
  assert.deepEqual(codes(monty.replace('mismatches = [', 'x = "a; b | c"\nmismatches = ['), MONTY), [], 'shell metacharacters in code are fine');
});

test('file name and request_id must agree; detection', () => {
  assert.ok(codes(stats, 'TR-20260209-160501Z-other.md').includes('TR_ID_FILE_MISMATCH'));
  assert.ok(codes(stats, 'stats.md').includes('TR_FILE_NAME'));
  assert.deepEqual(codes(stats, `/some/dir/${STATS}`), [], 'directories in the file name are ignored');
  assert.ok(parseToolRequest(stats).ok, 'without a file name the name rules are skipped');
  assert.equal(toolRequestContract.detect('notes.md', stats), true, 'detected by request_type');
  assert.equal(toolRequestContract.detect('TS-20260209-161030Z-x.md', stats), false);
  assert.equal(toolRequestContract.detect('x.json', '{"request_type":"tool_request"}'), false);
  assert.equal(checkText(STATS, stats).kind, 'tool-request');
});

test('CRLF, BOM and hostile input never throw', () => {
  const crlf = `\ufeff${stats.replace(/\n/g, '\r\n')}`;
  assert.deepEqual(valueOf(crlf), valueOf(stats));
  const hostile = [
    '',
    '---',
    '---\n---\n',
    '\u0000\u0001binary\uffff',
    `---\n${'a: ['.repeat(5000)}\n---\n`,
    `---\nrequest_type: tool_request\nrequest_type: tool_request\n---\n`,
    `---\n${'- '.repeat(3000)}x\n---\n`,
    `${stats}\n${'## Command\n'.repeat(2000)}`,
    withCommand(`${CMD} ${';'.repeat(100000)}`),
    withCommand('"'.repeat(100001)),
    stats.replace('inputs:', 'inputs: &a [1]\nx: *a\ny:'),
  ];
  for (const h of hostile) {
    const r = parseToolRequest(h, { fileName: STATS });
    assert.equal(r.ok, false);
    if (!r.ok) {
      assert.ok(r.problems.length > 0 && r.problems.length < 200, `problem count ${r.problems.length}`);
      for (const p of r.problems) assert.match(p.code, /^[A-Z][A-Z0-9_]+$/);
    }
  }
});

test('rules: codes are unique and each has its spec sentence and fix', () => {
  const seen = new Set<string>();
  for (const r of toolRequestContract.rules) {
    assert.match(r.code, /^TR_[A-Z0-9_]+$/);
    assert.ok(!seen.has(r.code), `duplicate ${r.code}`);
    seen.add(r.code);
    assert.ok(r.spec.length > 10 && r.fix.length > 10, r.code);
  }
});

test('the published zod schema accepts the examples and rejects what the contract rejects', () => {
  const schema = toolRequestContract.schemas['tool-request.front-matter'];
  assert.equal(schema, toolRequestFrontMatterSchema);
  const data = (text: string): unknown => {
    const d = parseFrontMatterDocument(text);
    assert.ok(d.ok);
    return d.value.data;
  };
  for (const f of exampleFiles) assert.ok(toolRequestFrontMatterSchema.safeParse(data(read(f))).success, f);
  for (const [from, to] of [
    ['language: "python"', 'language: "shell_forbidden"'],
    ['cpu_limit: "2"', 'cpu_limit: "0"'],
    ['time_limit_sec: 120', 'time_limit_sec: 1.5'],
    ['requested_by: "core_draft"', 'requested_by: "robot"'],
    ['f854fbec2aedfe17afbe12577e691c9ee525ea6dc9f072a55e242f73c4cffed5', 'F854'],
    ['time_limit_sec: 120', 'time_limit_sec: 120\nextra: 1'],
  ]) {
    const text = stats.replace(from!, to!);
    assert.equal(toolRequestFrontMatterSchema.safeParse(data(text)).success, false, to);
    assert.ok(codes(text).length > 0, to);
  }
});

// ---- property tests

const knownCodes = new Set(allRules().map((r) => r.rule.code));

test('property: mutated requests never throw and fail only with known codes', () => {
  const mutation = fc.oneof(
    fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), s: fc.string({ maxLength: 8 }) }),
    fc.record({ kind: fc.constant('delete' as const), at: fc.nat(), n: fc.integer({ min: 1, max: 30 }) }),
    fc.record({ kind: fc.constant('swapLines' as const), a: fc.nat(), b: fc.nat() }),
    fc.record({ kind: fc.constant('insertMeta' as const), at: fc.nat(), s: fc.constantFrom(';', '&&', '|', '>', '$(', '`', '"', "'", '*', '~', '\\', '\n', '---', '## ', '```', '..', '/etc', ': ', '- ') }),
  );
  fc.assert(
    fc.property(fc.constantFrom(...exampleFiles), fc.array(mutation, { minLength: 1, maxLength: 4 }), (file, muts) => {
      let text = read(file);
      for (const m of muts) {
        if (m.kind === 'insert' || m.kind === 'insertMeta') {
          const at = m.at % (text.length + 1);
          text = text.slice(0, at) + m.s + text.slice(at);
        } else if (m.kind === 'delete') {
          const at = m.at % (text.length + 1);
          text = text.slice(0, at) + text.slice(at + m.n);
        } else {
          const lines = text.split('\n');
          const a = m.a % lines.length;
          const b = m.b % lines.length;
          [lines[a], lines[b]] = [lines[b]!, lines[a]!];
          text = lines.join('\n');
        }
      }
      const r = parseToolRequest(text, { fileName: file });
      if (r.ok) {
        const again = parseToolRequest(renderToolRequest(r.value), { fileName: file });
        assert.ok(again.ok);
        assert.deepEqual(again.value, r.value);
      } else {
        assert.ok(r.problems.length > 0);
        for (const p of r.problems) {
          assert.ok(knownCodes.has(p.code), `unknown code ${p.code}`);
          assert.ok(p.message.length > 0);
          if (p.line !== undefined) assert.ok(Number.isInteger(p.line) && p.line >= 1 && p.line <= text.split('\n').length, `line ${p.line}`);
        }
      }
    }),
    { numRuns: 600 },
  );
});

/** Single-quotes a word when it holds anything but safe characters (POSIX: '\'' for a quote). */
const shQuote = (s: string): string => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, "'\\''")}'`);

const textArb = (max: number) =>
  fc
    .string({ minLength: 1, maxLength: max, unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,;()!?"\'-_é€'.split('')) })
    // A generated text may spell an installer's name ("uvX" is `uvx`), which a valid request never holds.
    .filter((s) => /[a-z]/i.test(s) && findInstall(s) === undefined);

const requestArb = fc
  .record({
    language: fc.constantFrom('python', 'node', 'ts', 'go', 'ruby'),
    slug: fc.stringMatching(/^[a-z0-9][a-z0-9-]{0,20}$/),
    created: fc.date({ min: new Date('2000-01-01T00:00:00Z'), max: new Date('2099-12-31T00:00:00Z'), noInvalidDate: true }),
    approvalDelaySec: fc.integer({ min: 0, max: 86400 * 30 }),
    requestedBy: fc.constantFrom('human', 'core_draft'),
    approver: textArb(20),
    purpose: textArb(80),
    network: fc.constantFrom('none', 'allowlist'),
    hosts: fc.uniqueArray(fc.stringMatching(/^[a-z][a-z0-9]{0,10}\.(?:org|com|example)$/), { minLength: 1, maxLength: 3 }),
    cpu: fc.oneof(fc.integer({ min: 1, max: 64 }), fc.constantFrom('0.5', '2', '16')),
    memory: fc.integer({ min: 1, max: 1 << 20 }),
    time: fc.integer({ min: 1, max: 86400 }),
    dataNames: fc.uniqueArray(fc.stringMatching(/^[a-z][a-z0-9_]{0,10}\.(?:csv|json|txt)$/), { maxLength: 3 }),
    hashes: fc.array(fc.stringMatching(/^[0-9a-f]{64}$/), { minLength: 4, maxLength: 4 }),
    outputs: fc.uniqueArray(fc.stringMatching(/^[a-z][a-z0-9_]{0,10}\.(?:json|csv|png)$/), { maxLength: 3 }),
    absoluteOutputs: fc.boolean(),
    args: fc.array(fc.string({ maxLength: 12, unit: fc.constantFrom(...'abc XY09;|&<>$`*?[]{}()#~"\'\\!'.split('')) }), { maxLength: 5 }),
    risk: fc.constantFrom('low', 'medium', 'high'),
    sensitivity: fc.constantFrom('public', 'internal', 'confidential'),
    justification: textArb(60),
    title: fc.option(textArb(30), { nil: undefined }),
    bold: fc.boolean(),
  })
  .map((g) => {
    const ext = { python: '.py', node: '.mjs', ts: '.ts', go: '.go', ruby: '.rb' }[g.language as 'python'];
    const script = `main${ext}`;
    const interpreter = { python: ['python3'], node: ['node'], ts: ['node'], go: ['go', 'run'], ruby: ['ruby'] }[g.language as 'python'];
    const created = new Date(Math.floor(g.created.getTime() / 1000) * 1000);
    const approved = new Date(created.getTime() + g.approvalDelaySec * 1000);
    const iso = (d: Date) => d.toISOString().replace('.000Z', 'Z');
    const id = `TR-${iso(created).slice(0, 10).replace(/-/g, '')}-${iso(created).slice(11, 19).replace(/:/g, '')}Z-${g.slug}`;
    const names = [script, ...g.dataNames.filter((n) => n !== script)];
    const argv = [...interpreter, script, ...names.slice(1).flatMap((n) => ['--in', `/in/${n}`]), ...g.outputs.flatMap((o) => ['--out', `/out/${o}`]), ...g.args];
    const b = g.bold ? '**' : '';
    const lines = [
      '---',
      'request_type: tool_request',
      'schema_version: 1',
      `request_id: "${id}"`,
      `created_utc: "${iso(created)}"`,
      `requested_by: ${g.requestedBy}`,
      `approved_by: ${JSON.stringify(g.approver)}`,
      `approved_utc: "${iso(approved)}"`,
      `purpose: ${JSON.stringify(g.purpose)}`,
      `language: ${g.language}`,
      `network: ${g.network}`,
      `network_allowlist: ${g.network === 'allowlist' ? JSON.stringify(g.hosts) : '[]'}`,
      `cpu_limit: ${JSON.stringify(g.cpu)}`,
      `memory_limit_mb: ${g.memory}`,
      `time_limit_sec: ${g.time}`,
      names.length ? 'inputs:' : 'inputs: []',
      ...names.flatMap((n, i) => [`  - name: "${n}"`, `    sha256: "${g.hashes[i]}"`]),
      g.outputs.length ? 'outputs_expected:' : 'outputs_expected: []',
      ...g.outputs.flatMap((o) => [`  - path: "${g.absoluteOutputs ? '/out/' : ''}${o}"`, `    description: "Result ${o}"`]),
      'constraints:',
      '  - "No writes outside /out"',
      '---',
      '',
      ...(g.title ? [`# ${g.title}`, ''] : []),
      '## Command',
      '',
      argv.map(shQuote).join(' '),
      '',
      '## Input Files',
      '',
      ...names.map((n, i) => `- /in/${n}${i === 0 ? ` (sha256 ${g.hashes[0]})` : ''}`),
      '',
      '## Output Expectations',
      '',
      ...g.outputs.map((o) => `- /out/${o}: ${o}`),
      'Nothing else.',
      '',
      '## Risk Assessment',
      '',
      `${b}Risk level:${b} ${g.risk}`,
      `- Justification: ${g.justification}`,
      `Data sensitivity: ${g.sensitivity}`,
      `Network rationale: ${g.network === 'allowlist' ? `fetches from ${g.hosts.join(', ')}` : 'none'}`,
      '',
    ];
    return { text: lines.join('\n'), fileName: `${id}.md`, argv };
  });

test('property: generated valid requests validate, keep their argv, and round-trip through render', () => {
  fc.assert(
    fc.property(requestArb, ({ text, fileName, argv }) => {
      const r = parseToolRequest(text, { fileName });
      assert.ok(r.ok, `generated request rejected: ${JSON.stringify(!r.ok && r.problems)}\n${text}`);
      assert.deepEqual(r.value.command?.argv, argv);
      const rendered = renderToolRequest(r.value);
      const again = parseToolRequest(rendered, { fileName });
      assert.ok(again.ok, `rendered request rejected: ${JSON.stringify(!again.ok && again.problems)}\n${rendered}`);
      assert.deepEqual(again.value, r.value);
      assert.equal(renderToolRequest(again.value), rendered, 'render is stable');
    }),
    { numRuns: 400 },
  );
});

test('approval order compares instants, fractions of a second included', () => {
  // Errors and warnings (approval before creation is reported, not refused: the signature and its expiry do not depend on it).
  const codes = (approved: string, created = '2026-02-09T16:05:01Z'): string[] => {
    const r = parseToolRequest(stats.replace('created_utc: "2026-02-09T16:05:01Z"', `created_utc: "${created}"`).replace('approved_utc: "2026-02-09T16:12:00Z"', `approved_utc: "${approved}"`), { fileName: STATS });
    return [...(r.ok ? [] : r.problems), ...(r.warnings ?? [])].map((p) => p.code);
  };
  assert.deepEqual(codes('2026-02-09T16:05:01Z'), []);
  assert.deepEqual(codes('2026-02-09T16:05:01.5Z'), []);
  assert.deepEqual(codes('2026-02-09T16:05:01.25Z', '2026-02-09T16:05:01.5Z'), ['TR_APPROVAL_ORDER']);
  assert.deepEqual(codes('2026-02-09T16:05:00.999Z'), ['TR_APPROVAL_ORDER']);
  assert.deepEqual(codes('2026-02-29T16:05:01Z'), ['TR_TIMESTAMP']);

});

test('a timestamp is the instant Date.parse reads, years 0000-9999 included; impossible dates are null', () => {
  fc.assert(
    fc.property(fc.date({ min: new Date(Date.parse('0000-01-01T00:00:00Z')), max: new Date(Date.parse('9999-12-31T23:59:59.999Z')), noInvalidDate: true }), fc.boolean(), (d, withMs) => {
      const iso = d.toISOString(); // YYYY-MM-DDTHH:MM:SS.mmmZ
      const s = withMs ? iso : `${iso.slice(0, 19)}Z`;
      assert.equal(timestampMs(s), Date.parse(s), s);
    }),
  );
  assert.ok(timestampMs('0099-12-31T23:59:59Z')! < timestampMs('0100-01-01T00:00:00Z')!);
  for (const bad of ['2026-02-30T00:00:00Z', '2025-02-29T00:00:00Z', '2026-01-01T24:00:00Z', '2026-13-01T00:00:00Z', '2026-01-01T00:00:60Z']) assert.equal(timestampMs(bad), null, bad);
  assert.equal(timestampMs('2024-02-29T00:00:00Z'), Date.parse('2024-02-29T00:00:00Z'));
  assert.equal(timestampMs(`2026-02-09T16:05:01.5Z`), Date.parse('2026-02-09T16:05:01.500Z'));
});
