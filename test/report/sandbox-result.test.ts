// renderSandboxResult's self-check is the contract's parse of the rendered text, only cheaper:
// same outcome (value or problems, with lines) for valid and invalid results.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { SANDBOX_RESULT_MAX_BYTES, sandboxResultContract, type SandboxResult } from '../../src/contracts/sandbox-result.js';
import { renderSandboxResult } from '../../src/report/sandbox-result.js';
import { repoPath } from '../helpers/paths.js';

function results(): [string, SandboxResult][] {
  const out: [string, SandboxResult][] = [];
  const valid = repoPath('examples/sandbox-results');
  for (const f of readdirSync(valid)) out.push([f, JSON.parse(readFileSync(join(valid, f), 'utf8')) as SandboxResult]);
  const invalid = repoPath('test/fixtures/invalid');
  for (const code of readdirSync(invalid).filter((d) => d.startsWith('SR_'))) {
    for (const f of readdirSync(join(invalid, code))) {
      try {
        out.push([`${code}/${f}`, JSON.parse(readFileSync(join(invalid, code, f), 'utf8')) as SandboxResult]);
      } catch {
        /* not JSON at all: nothing JSON.stringify could render */
      }
    }
  }
  return out;
}

test('the self-check gives what sandboxResultContract.parse gives on the rendered text', () => {
  const all = results();
  assert.ok(all.some(([, r]) => sandboxResultContract.parse(sandboxResultContract.render(r)).ok), 'a valid result is among them');
  assert.ok(all.filter(([, r]) => !sandboxResultContract.parse(sandboxResultContract.render(r)).ok).length >= 10, 'invalid results are among them');
  for (const [name, r] of all) {
    const text = sandboxResultContract.render(r);
    const got = renderSandboxResult(r);
    assert.equal(got.text, text, name);
    assert.deepEqual(got.self, sandboxResultContract.parse(text), name);
  }
});

test('a rendered result over the document size limit fails the self-check as the parse does', () => {
  const [, valid] = results().find(([, r]) => sandboxResultContract.parse(sandboxResultContract.render(r)).ok) as [string, SandboxResult];
  const big: SandboxResult = { ...valid, outputs: { ...valid.outputs, stdout: { ...valid.outputs.stdout, text: 'x'.repeat(SANDBOX_RESULT_MAX_BYTES) } } };
  const got = renderSandboxResult(big);
  assert.equal(got.self.ok, false);
  assert.deepEqual(got.self, sandboxResultContract.parse(got.text));
  assert.ok(!got.self.ok && got.self.problems.some((p) => p.code === 'DOC_TOO_LARGE'));
});
