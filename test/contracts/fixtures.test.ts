import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { test } from 'node:test';
import { allRules, checkText } from '../../src/contracts/index.js';
import { decodeDocument } from '../../src/contracts/text.js';
import { repoPath } from '../helpers/paths.js';

const invalidDir = repoPath('test/fixtures/invalid');
const examplesDir = repoPath('examples');

function check(file: string) {
  const decoded = decodeDocument(readFileSync(file));
  if ('problem' in decoded) return { kind: null, problems: [decoded.problem] };
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

test('every fixture folder names a known rule', () => {
  const known = new Set(allRules().map((r) => r.rule.code));
  for (const name of existsSync(invalidDir) ? readdirSync(invalidDir) : []) assert.ok(known.has(name), `fixture folder ${name} is not a rule code`);
});

test('every example under examples/ checks clean', () => {
  for (const f of filesUnder(examplesDir).filter((f) => /\.(md|json)$/.test(f) && !f.includes('/inputs/'))) {
    const { kind, problems } = check(f);
    assert.ok(kind, `${f}: kind not detected`);
    assert.deepEqual(problems, [], `${f} should be valid`);
  }
});
