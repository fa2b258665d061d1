import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { test } from 'node:test';
import { allRules, checkText } from '../../src/contracts/index.js';
import { decodeDocument } from '../../src/contracts/text.js';
import { repoPath } from '../helpers/paths.js';

const invalidDir = repoPath('test/fixtures/invalid');
const warningDir = repoPath('test/fixtures/warning');
const examplesDir = repoPath('examples');

function check(file: string) {
  const decoded = decodeDocument(readFileSync(file));
  if ('problem' in decoded) return { kind: null, problems: [decoded.problem], warnings: [] };
  return checkText(basename(file), decoded.text);
}

function filesUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? filesUnder(p) : [p];
  });
}

for (const { rule } of allRules()) {
  if (rule.severity === 'warning') {
    // A warning must stay a warning: its fixtures are otherwise valid documents, accepted, that report it.
    test(`warning ${rule.code}: every fixture under test/fixtures/warning/${rule.code} is accepted and reports it`, () => {
      const files = filesUnder(join(warningDir, rule.code));
      assert.ok(files.length > 0, `no warning fixture for ${rule.code}`);
      for (const f of files) {
        const { problems, warnings } = check(f);
        assert.deepEqual(problems, [], `${f}: a warning fixture must have no errors`);
        assert.ok(warnings.some((p) => p.code === rule.code && p.severity === 'warning'), `${f}: expected warning ${rule.code}, got ${JSON.stringify(warnings.map((p) => p.code))}`);
      }
    });
    continue;
  }
  test(`rule ${rule.code}: every fixture under test/fixtures/invalid/${rule.code} is rejected with it`, () => {
    const files = filesUnder(join(invalidDir, rule.code));
    assert.ok(files.length > 0, `no invalid fixture for ${rule.code}`);
    for (const f of files) {
      const { problems } = check(f);
      assert.ok(
        problems.some((p) => p.code === rule.code),
        `${f}: expected ${rule.code}, got ${JSON.stringify(problems.map((p) => p.code))}`,
      );
    }
  });
}

test('every fixture folder names a known rule of its severity (errors under invalid/, warnings under warning/)', () => {
  const severity = new Map(allRules().map((r) => [r.rule.code, r.rule.severity ?? 'error']));
  for (const [dir, want] of [[invalidDir, 'error'], [warningDir, 'warning']] as const) {
    for (const name of existsSync(dir) ? readdirSync(dir) : []) {
      assert.ok(severity.has(name), `fixture folder ${name} is not a rule code`);
      assert.equal(severity.get(name), want, `fixture folder ${dir}/${name}: ${name} is a rule of severity ${severity.get(name)}`);
    }
  }
});

test('every document under test/fixtures/conformant/ (written to the letter of the spec by another executor) is accepted', () => {
  const files = filesUnder(repoPath('test/fixtures/conformant'));
  assert.ok(files.length >= 2);
  for (const f of files) {
    const { kind, problems, warnings } = check(f);
    assert.ok(kind, `${f}: kind not detected`);
    assert.deepEqual(problems, [], `${f} must be accepted`);
    for (const w of warnings) assert.equal(w.severity, 'warning');
  }
});

test('every example under examples/ checks clean', () => {
  for (const f of filesUnder(examplesDir).filter((f) => /\.(md|json)$/.test(f) && !f.includes('/inputs/'))) {
    const { kind, problems, warnings } = check(f);
    assert.ok(kind, `${f}: kind not detected`);
    assert.deepEqual(problems, [], `${f} should be valid`);
    assert.deepEqual(warnings, [], `${f} is Airlock's own form: no warnings`);
  }
});
