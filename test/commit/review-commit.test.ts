// Review (promotion): each test failed against the code before its fix.
// T1: recovery and `rollback --force` keep "a path that holds neither state" in the tombstone store
// before they set it; the scope's owner chooses that content. A sparse file costs its owner no disk,
// and was copied in full (no longer sparse) into root's workspace.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { recover } from '../../src/commit/recover.js';
import { scopedWorkspace } from '../helpers/workspace.js';
import { cli, descriptor, OWNER_UID, ownedTree, run } from './helpers.js';

const root = process.getuid?.() === 0;
const U = OWNER_UID;

const freeBytes = (dir: string): number => {
  const s = statfsSync(dir);
  return s.bavail * s.bsize;
};

test("T1: recovery does not copy a huge (sparse) file the scope's owner put at a journal's path into the workspace until its disk is full", { skip: !root, timeout: 180_000 }, async (tc) => {
  // The workspace on a small file system of its own, so that "full" is cheap to reach.
  const dir = mkdtempSync(join(tmpdir(), 'airlock-small-ws-'));
  assert.equal(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64m,mode=0700', 'tmpfs', dir]).status, 0);
  tc.after(() => {
    spawnSync('umount', ['-l', dir]);
    rmSync(dir, { recursive: true, force: true });
  });
  const ws = scopedWorkspace(dir);
  const t = ownedTree({ 'keep.txt': 'k' });
  const r = await run(ws, descriptor(t, { action_type: 'COMMAND_EXECUTION', command: ['/bin/sh', '-c', `for i in 1 2 3; do echo $i > ${t}/f$i; done`], effects: { filesystem: { create: [`${t}/f*`], modify: [], delete: [] }, network: false, system_state_change: false } }));
  assert.equal(r.sandboxResult.verdict.recommended_action, 'PROMOTE', r.sandboxResult.verdict.reasons.join('; '));
  const c = cli(['promote', r.sandboxId, '--workspace', ws.root], { AIRLOCK_TEST_COMMIT_CRASH_AFTER: '1' });
  assert.equal(c.signal, 'SIGKILL');
  // The owner, as himself: sparse files (no disk of his) where the promotion was adding files.
  const before = freeBytes(dir);
  const size = before - (2 << 20);
  for (const f of ['f2', 'f3']) assert.equal(spawnSync('truncate', ['-s', String(size), join(t, f)], { uid: U, gid: U }).status, 0);
  const rec = await recover(ws);
  tc.diagnostic(`recover: ${JSON.stringify(rec).slice(0, 600)}`);
  const after = freeBytes(dir);
  tc.diagnostic(`workspace free: ${before >> 20} MiB before, ${after >> 20} MiB after (file system of ${(statfsSync(dir).blocks * statfsSync(dir).bsize) >> 20} MiB)`);
  assert.ok(after >= before / 2, `the owner's sparse files filled root's workspace: ${after >> 20} MiB free of ${before >> 20} MiB`);
  // Refused instead, naming the file; an operator can end it, leaving the owner's files as they are.
  assert.ok('recovered' in rec);
  assert.equal(rec.recovered[0]?.outcome, 'failed');
  assert.match(rec.recovered[0]?.problems[0]?.message ?? '', /f[23] has \d+ bytes or more: keeping it in .*tombstones would leave its file system less than 10% free/);
  const ab = cli(['recover', '--abandon', r.sandboxId, '--workspace', ws.root]);
  tc.diagnostic(`recover --abandon: ${ab.code} ${ab.stdout}${ab.stderr}`);
  assert.equal(ab.code, 0, ab.stderr);
  assert.match(ab.stdout, /ABANDONED by .*: 2 path\(s\) left as they are/);
  assert.ok(freeBytes(dir) >= before / 2);
  assert.equal(spawnSync('stat', ['-c', '%s', join(t, 'f2')], { encoding: 'utf8' }).stdout.trim(), String(size));
});

