import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { airlock } from '../helpers/cli.js';
import { repoPath } from '../helpers/paths.js';
import { writeRequest } from '../helpers/requests.js';

// `airlock approve` shows the operator what they sign. The request is drafted by the AI: terminal
// control sequences (ESC, CR, C1) or bidi overrides in it must not reach the terminal as such, or the
// draft decides what the person sees (hide the real code, print a fake command line).
// eslint-disable-next-line no-control-regex -- control characters are what is looked for
const RAW = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]/u;

function setup() {
  const ws = mkdtempSync(join(tmpdir(), 'airlock-approve-'));
  const keys = mkdtempSync(join(tmpdir(), 'airlock-keys-'));
  assert.equal(airlock(['init', ws]).code, 0);
  assert.equal(airlock(['keygen', '--operator', 'alice', '--workspace', ws, '--key-dir', keys]).code, 0);
  return { ws, keys };
}

test('approve shows control characters and bidi overrides of the draft escaped, never raw (purpose, code, risk)', () => {
  const env = setup();
  // purpose: YAML escapes become CR, LF and ESC in the parsed value: a forged "command" line, then concealed text.
  const ns = writeRequest({ slug: 'esc-purpose', command: 'python3 evil.py', inputs: { 'evil.py': 'print(1)\n' } }, mkdtempSync(join(env.ws, 'drafts', 'd-')));
  writeFileSync(
    ns.file,
    readFileSync(ns.file, 'utf8')
      .replace(/purpose: ".*"/, 'purpose: "summarise\\r\\ncommand   python3 stats.py\\e[8m"')
      .replace('Justification: a test.', 'Justification: a test.\x1b[1A\x1b[2K'),
  );
  const a = airlock(['approve', ns.file, '--operator', 'alice', '--workspace', env.ws, '--key-dir', env.keys, '--yes']);
  assert.equal(a.code, 0, a.stderr);
  assert.doesNotMatch(a.stdout, RAW);
  assert.equal(a.stdout.split('\n').filter((l) => l.startsWith('command')).length, 1, a.stdout);

  // Monty code: an ESC sequence that moves the cursor up over the lines before it, and a bidi override (Trojan Source).
  const dir = mkdtempSync(join(env.ws, 'drafts', 'd-'));
  const monty = join(dir, 'TR-20260211-140000Z-monty-fib.md');
  writeFileSync(
    monty,
    readFileSync(repoPath('examples/requests/TR-20260211-140000Z-monty-fib.md'), 'utf8')
      .replace('    return a\n', '    return a  # \u202e } \u2066\n')
      .replace('print({"checked"', 'x = 1  # \x1b[3A\x1b[2Kprint("fine")\nprint({"checked"'),
  );
  const m = airlock(['approve', monty, '--operator', 'alice', '--workspace', env.ws, '--key-dir', env.keys, '--yes']);
  assert.equal(m.code, 0, m.stderr);
  assert.doesNotMatch(m.stdout, RAW);
  assert.match(m.stdout, /\\u001b\[3A/, 'the escape is shown, visibly');
});
