// Review of issue 15 (the host's own writes and reads in a scope): holes found by attacking it as the
// owner of a scope (a real second uid) and as a hostile sandboxed program, with real processes.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { TEST_SCOPE_ROOT } from '../helpers/workspace.js';
import { cli, descriptor, workspace } from './helpers.js';

const root = process.getuid?.() === 0;
const U = 4242; // the scope owner: an ordinary uid without a passwd entry
const G = 4343; // a group U is not in

/** A folder owned by U (group `gid`), writable by the sandbox's host user. */
function ownedDir(gid = U): string {
  mkdirSync(TEST_SCOPE_ROOT, { recursive: true });
  const t = mkdtempSync(join(TEST_SCOPE_ROOT, 'rv15-'));
  chmodSync(t, 0o777);
  chownSync(t, U, gid);
  return t;
}

const fileRead = (path: string) =>
  descriptor(path, { action_type: 'FILE_READ', scope: { filesystem: { paths: [path], recursive: false }, network: { required: false }, ui: { required: false } }, effects: { filesystem: { create: [], modify: [], delete: [] }, network: false, system_state_change: false } });

test("the agent takes the owner's groups, not the scope root's group: a file only that group may read is not read for the sandbox", { skip: !root }, async () => {
  const ws = workspace();
  // Root gave U's folder to group G (say www-data) so that G can read it; U is not in G.
  const t = ownedDir(G);
  writeFileSync(join(t, 'db.conf'), 'password=hunter2\n', { mode: 0o640 });
  chownSync(join(t, 'db.conf'), 0, G);
  const asOwner = spawnSync('setpriv', ['--reuid', String(U), '--regid', String(U), '--clear-groups', 'cat', join(t, 'db.conf')], { encoding: 'utf8' });
  assert.notEqual(asOwner.status, 0, 'the owner cannot read it');
  const file = join(t, '..', `${t.split('/').pop()}-read.json`);
  writeFileSync(file, JSON.stringify(fileRead(join(t, 'db.conf'))));
  const r = cli(['run', file, '--workspace', ws.root, '--json']);
  assert.doesNotMatch(r.stdout, /hunter2/, 'the sandbox read a file its scope owner cannot read');
  assert.equal(r.code, 2, r.stdout + r.stderr);
  assert.match(r.stderr, /NS_SCOPE_UNREADABLE: scope .*\/db.conf: its owner \(uid 4242\) cannot read it/);
});
