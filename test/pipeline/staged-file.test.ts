import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { stageFile } from '../../src/base/staged-file.js';

// A run's result files are made while its sandbox runs and appear whole, by a rename, at the end.

test('a staged file is invisible under its name until published, then exactly its new content with its mode; discard leaves nothing', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-staged-'));
  const target = join(dir, 'sandbox-result.json');
  const staged = await stageFile(target, 0o640, '4242 1234567 (the owner stamp, longer than what replaces it)\n');
  assert.deepEqual(readdirSync(dir), ['sandbox-result.json.partial'], 'only the partial exists before publishing');
  assert.match(readFileSync(join(dir, 'sandbox-result.json.partial'), 'utf8'), /^4242 1234567 /, 'the partial holds its initial content meanwhile');
  staged.publish('{"whole": true}\n');
  assert.deepEqual(readdirSync(dir), ['sandbox-result.json']);
  assert.equal(readFileSync(target, 'utf8'), '{"whole": true}\n');
  assert.equal(statSync(target).mode & 0o777, 0o640);

  const other = await stageFile(join(dir, 'scopes.json'), 0o600);
  other.discard();
  other.discard(); // twice is harmless
  assert.deepEqual(readdirSync(dir), ['sandbox-result.json']);
});

test('staging refuses a partial file that already exists (exclusive create), naming the error', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-staged-'));
  const first = await stageFile(join(dir, 'x.json'), 0o600);
  await assert.rejects(stageFile(join(dir, 'x.json'), 0o600), /EEXIST/);
  first.discard();
});
