import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { airlock } from '../helpers/cli.js';
import { repoPath } from '../helpers/paths.js';

test('airlock check: every bundled example is valid (exit 0, one verdict line per file)', () => {
  const files = ['examples/requests/TR-20260209-160501Z-python-stats.md', 'examples/actions/delete-logs.json', 'examples/utp/tool-command.json'].map((f) => repoPath(f));
  const r = airlock(['check', ...files]);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.equal(r.stdout.trim().split('\n').length, 3);
  assert.match(r.stdout, /python-stats\.md: valid tool-request/);
});

test('airlock check: an invalid document prints FILE:LINE: CODE: message and exits 2', () => {
  const r = airlock(['check', repoPath('test/fixtures/invalid/FM_YAML/TR-20260209-160501Z-duplicate-key.md')]);
  assert.equal(r.code, 2);
  assert.match(r.stdout, /duplicate-key\.md:3: FM_YAML: /);
  assert.match(r.stdout, /INVALID tool-request \(1 problem\)/);
});

test('airlock check: warnings are printed as FILE:LINE: warning: CODE and do not fail the check (exit 0)', () => {
  const f = repoPath('test/fixtures/warning/TS_PROVENANCE_FORM/limits-in-words/TS-20260209-161030Z-TR-20260209-160501Z-python-stats.md');
  const r = airlock(['check', f]);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /python-stats\.md:\d+: warning: TS_PROVENANCE_FORM: /);
  assert.match(r.stdout, /: valid tool-result \(1 warning\)\n$/);
  const json = airlock(['check', '--json', f]);
  assert.equal(json.code, 0);
  const report = JSON.parse(json.stdout) as { valid: boolean; files: { problems: unknown[]; warnings: { code: string; severity: string }[] }[] };
  assert.equal(report.valid, true);
  assert.deepEqual(report.files[0]?.problems, []);
  assert.deepEqual(report.files[0]?.warnings.map((w) => [w.code, w.severity]), [['TS_PROVENANCE_FORM', 'warning']]);
  // An invalid document with warnings: both are listed, the verdict counts both.
  const bad = airlock(['check', repoPath('test/fixtures/invalid/TS_STREAM_AMBIGUOUS/statement-in-plain-stderr/TS-20260209-161030Z-TR-20260209-160501Z-python-stats.md')]);
  assert.equal(bad.code, 2);
  assert.match(bad.stdout, /: TS_STREAM_AMBIGUOUS: /);
  assert.match(bad.stdout, /: warning: TS_STREAM_BLOCK: /);
  assert.match(bad.stdout, /INVALID tool-result \(1 problem, 1 warning\)/);
});

test('airlock check --explain says whether a rule is a warning, where it comes from and what an error protects', () => {
  const w = airlock(['check', '--explain', 'TS_FILE_NAME']);
  assert.match(w.stdout, /Severity: warning/);
  assert.match(w.stdout, /Source: Airlock's own stricter choice/);
  const e = airlock(['check', '--explain', 'TS_STREAM_AMBIGUOUS']);
  assert.match(e.stdout, /Severity: error/);
  assert.match(e.stdout, /Protects: .+/);
});

test('airlock check: an unreadable file exits 2 (bad input, as for airlock run); --json gives a machine-readable report', () => {
  assert.equal(airlock(['check', '/nonexistent/TR-x.md']).code, 2);
  const r = airlock(['check', '--json', repoPath('test/fixtures/invalid/DOC_UNKNOWN_KIND/notes.json')]);
  assert.equal(r.code, 2);
  const report = JSON.parse(r.stdout) as { valid: boolean; files: { problems: { code: string }[] }[] };
  assert.equal(report.valid, false);
  assert.equal(report.files[0]?.problems[0]?.code, 'DOC_UNKNOWN_KIND');
});

test('airlock check --explain knows the UTP service\'s and the approvals\' codes too (a refused tool registration, say)', () => {
  const r = airlock(['check', '--explain', 'UTPS_TOOL_TAMPERED']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^UTPS_TOOL_TAMPERED \(utp service\)\n {2}Rule: .*unchanged since it was signed/);
  assert.match(r.stdout, /Fix: +Register the tool again/);
  assert.match(airlock(['check', '--explain', 'utps_unknown_tool']).stdout, /Register the tool with `airlock tools add`/);
  assert.match(airlock(['check', '--explain', 'APPROVAL_INPUT_CHANGED']).stdout, /^APPROVAL_INPUT_CHANGED \(approval\)\n {2}Rule: .*read once without following a link/);
});

test('airlock check --explain prints the rule and the fix; an unknown code exits 2', () => {
  const r = airlock(['check', '--explain', 'TR_COMMAND_PIPE']);
  assert.equal(r.code, 0);
  assert.match(r.stdout, /^TR_COMMAND_PIPE \(tool-request\)\n {2}Rule: .+\n {2}Fix: {2}.+/);
  assert.equal(airlock(['check', '--explain', 'NOPE_NOT_A_CODE']).code, 2);
});

test('the CLI bundle has no dynamic import() left: it runs from a code-cached vm.Script, where Node 20 cannot resolve one', () => {
  const bundle = readFileSync(repoPath('dist/bundle/airlock.cjs'), 'utf8');
  assert.deepEqual(bundle.match(/\bimport\("[^"]*"\)/g) ?? [], []);
});
