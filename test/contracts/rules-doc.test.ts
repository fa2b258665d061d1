import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { FORBIDDEN_CODES, FORBIDDEN_WARNINGS } from '../../src/contracts/forbidden-content.js';
import { allRules } from '../../src/contracts/index.js';
import { contractsDoc } from '../../src/contracts/rules-doc.js';
import { explain } from '../../src/cli/check.js';
import { repoPath } from '../helpers/paths.js';

function testFiles(): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (dir: string) => {
    for (const n of readdirSync(dir)) {
      const p = join(dir, n);
      if (statSync(p).isDirectory()) walk(p);
      else if (n.endsWith('.test.ts')) out[relative(repoPath(), p)] = readFileSync(p, 'utf8');
    }
  };
  walk(repoPath('test'));
  return out;
}

test('docs/contracts.md lists every rule as the registry has it (run `npm run docs:contracts` after changing rules)', () => {
  assert.equal(readFileSync(repoPath('docs/contracts.md'), 'utf8'), contractsDoc(testFiles()));
});

test('rule codes are unique, and --explain knows every one of them', async () => {
  const codes = allRules().map((r) => r.rule.code);
  assert.deepEqual(codes.filter((c, i) => codes.indexOf(c) !== i), []);
  for (const c of codes) assert.match((await explain(c)) ?? '', new RegExp(`^${c} `));
  assert.equal(await explain('NO_SUCH_CODE'), undefined);
});

test('every Tool Request and Tool Result rule says where it comes from; an Airlock-strict error says what it protects', () => {
  for (const { kind, rule } of allRules()) {
    if (kind !== 'tool-request' && kind !== 'tool-result') continue;
    assert.ok(rule.source, `${rule.code} has no source`);
    if (rule.severity === 'warning') assert.equal(rule.protects, undefined, `${rule.code}: a warning protects nothing (else it would be an error)`);
    else if (rule.source !== 'spec') assert.ok((rule.protects ?? '').length > 20, `${rule.code}: an Airlock-strict error must say what it protects`);
    else assert.equal(rule.protects, undefined, `${rule.code}: a spec rule needs no protects`);
  }
});

test('the detector module and the Tool Result rules agree on which findings are warnings', () => {
  const severity = new Map(allRules().map((r) => [r.rule.code, r.rule.severity ?? 'error']));
  for (const code of Object.values(FORBIDDEN_CODES)) {
    assert.ok(severity.has(code), `${code} is a Tool Result rule`);
    assert.equal(severity.get(code), FORBIDDEN_WARNINGS.has(code) ? 'warning' : 'error', code);
  }
});
