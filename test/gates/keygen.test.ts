import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { airlock } from '../helpers/cli.js';

/** keygen as a README reader runs it: again, in a second workspace, and against a policy that disagrees. */
test('keygen again is a no-op (exit 0), a second workspace gets the existing key, a policy with another key for the name is refused', () => {
  const keys = mkdtempSync(join(tmpdir(), 'airlock-keygen-keys-'));
  const a = mkdtempSync(join(tmpdir(), 'airlock-keygen-a-'));
  const b = mkdtempSync(join(tmpdir(), 'airlock-keygen-b-'));
  try {
    for (const ws of [a, b]) assert.equal(airlock(['init', ws]).code, 0);
    const first = airlock(['keygen', '--operator', 'alice', '--workspace', a, '--key-dir', keys]);
    assert.equal(first.code, 0, first.stderr);
    const pem = readFileSync(join(keys, 'alice.ed25519.pem'), 'utf8');
    const policyA = readFileSync(join(a, 'policy.yaml'), 'utf8');
    const publicKey = first.stdout.match(/ed25519:\S+/)?.[0] ?? '';
    assert.ok(policyA.includes(publicKey));

    const again = airlock(['keygen', '--operator', 'alice', '--workspace', a, '--key-dir', keys]);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /already trusts it: nothing to do/);
    assert.equal(readFileSync(join(a, 'policy.yaml'), 'utf8'), policyA, 'the policy is unchanged');
    assert.equal(readFileSync(join(keys, 'alice.ed25519.pem'), 'utf8'), pem, 'the private key is never replaced');

    const second = airlock(['keygen', '--operator', 'alice', '--workspace', b, '--key-dir', keys]);
    assert.equal(second.code, 0, second.stderr);
    assert.match(second.stdout, /already there; kept/);
    assert.ok(readFileSync(join(b, 'policy.yaml'), 'utf8').includes(publicKey), 'the existing public key is added to the second workspace');

    // Workspace b now lists alice with another key than the one in the key folder: refused, nothing changed.
    const other = 'ed25519:GVZzx0jQi4BXm5VVy4n8xsLRYc3QvwiriqNaFSBQiRo=';
    writeFileSync(join(b, 'policy.yaml'), readFileSync(join(b, 'policy.yaml'), 'utf8').replace(publicKey, other));
    const clash = airlock(['keygen', '--operator', 'alice', '--workspace', b, '--key-dir', keys]);
    assert.equal(clash.code, 2);
    assert.match(clash.stderr, /with another public key/);
    assert.ok(readFileSync(join(b, 'policy.yaml'), 'utf8').includes(other));

    // A name the policy lists but whose private key is elsewhere: no new key is made for it.
    const elsewhere = mkdtempSync(join(tmpdir(), 'airlock-keygen-keys2-'));
    const missing = airlock(['keygen', '--operator', 'alice', '--workspace', b, '--key-dir', elsewhere]);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /already in .* with a key that is not in/);
    rmSync(elsewhere, { recursive: true, force: true });
  } finally {
    for (const d of [keys, a, b]) rmSync(d, { recursive: true, force: true });
  }
});
