import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { parse } from 'yaml';
import { policyDoc } from '../../src/policy/doc.js';
import { DEFAULT_POLICY_YAML, policySchema } from '../../src/policy/policy.js';
import { repoPath } from '../helpers/paths.js';

test('docs/policy.md is the page generated from the policy schema (run `npm run docs:policy` after changing it)', () => {
  assert.equal(readFileSync(repoPath('docs/policy.md'), 'utf8'), policyDoc());
});

test('the reference names every key of the default policy, each with a meaning', () => {
  const doc = policyDoc();
  const keys: string[] = [];
  const walk = (v: unknown, path: string[]): void => {
    if (v && typeof v === 'object' && !Array.isArray(v)) for (const [k, c] of Object.entries(v)) walk(c, [...path, k]);
    else keys.push(path.join('.'));
  };
  walk(parse(DEFAULT_POLICY_YAML), []);
  assert.ok(keys.length >= 20);
  for (const k of keys) {
    const row = doc.split('\n').find((l) => l.startsWith(`| \`${k}\` |`));
    assert.ok(row, `docs/policy.md has no row for ${k}`);
    assert.ok((row.split('|')[5] ?? '').trim().length > 10, `${k} has no meaning in docs/policy.md`);
  }
  assert.ok(doc.includes('| `operators[].public_key` |'));
  assert.ok(policySchema.safeParse(parse(DEFAULT_POLICY_YAML)).success);
});
