// Attacks on promotion / rollback / recovery (review): each A-test failed before its fix (the workspace
// stayed wedged, or a change that could never be rolled back was promoted).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { promote } from '../../src/commit/promote.js';
import { recover } from '../../src/commit/recover.js';
import { rollback } from '../../src/commit/rollback.js';
import { TEST_SCOPE_ROOT, testScopeDir } from '../helpers/workspace.js';
import { ScopeFs, ScopeFsError } from '../../src/base/scope-fs.js';
import { readJournal, setInflight, writeJournal } from '../../src/commit/store.js';
import type { Workspace } from '../../src/workspace/workspace.js';
import { auditTypes, cli, descriptor, OWNER_UID, ownedTree, run, workspace } from './helpers.js';

const root = process.getuid?.() === 0;
const U = OWNER_UID;


const inflight = (ws: Workspace): string[] => (existsSync(join(ws.root, 'promotions', 'inflight')) ? readdirSync(join(ws.root, 'promotions', 'inflight')) : []);
const mode = (p: string): string => (statSync(p).mode & 0o7777).toString(8);
const codes = (o: { ok: boolean; problems?: { code: string }[] }): string[] => (o.ok ? [] : (o.problems ?? []).map((p) => p.code));

/** The workspace still works: an unrelated scope's run is promoted. */
async function unrelatedPromotes(ws: Workspace): Promise<void> {
  const t2 = ownedTree({ 'a.txt': 'a' });
  const r2 = await run(ws, cmd(t2, `echo b > ${t2}/b.txt`, { create: [`${t2}/b.txt`] }));
  const p2 = await promote(ws, r2.sandboxId);
  assert.ok(p2.ok, `an unrelated promotion is refused: ${JSON.stringify(p2)}`);
}

const cmd = (scope: string, sh: string, fx: { create?: string[]; modify?: string[]; delete?: string[] }) =>
  descriptor(scope, { action_type: 'COMMAND_EXECUTION', command: ['/bin/sh', '-c', sh], effects: { filesystem: { create: fx.create ?? [], modify: fx.modify ?? [], delete: fx.delete ?? [] }, network: false, system_state_change: false } });

test('A1: deleting a set-gid file or a sticky dir (it could never be rolled back) is BLOCKed by the judge and refused by the plan; nothing wedges', { skip: !root, timeout: 120_000 }, async (tc) => {
  const ws = workspace();
  const t = ownedTree({ 'tool': '#!/bin/sh\necho hi\n', 'keep.txt': 'k' });
  mkdirSync(join(t, 'shared'));
  spawnSync('chown', [`${U}:${U}`, join(t, 'shared')]);
  chmodSync(join(t, 'tool'), 0o2777); // set-gid, group U (the owner's own group): U could set it himself
  chmodSync(join(t, 'shared'), 0o1777); // sticky, like any shared drop folder
  const r = await run(ws, cmd(t, `rm ${t}/tool && rmdir ${t}/shared`, { delete: [`${t}/tool`, `${t}/shared`] }));
  const v = r.sandboxResult.verdict;
  tc.diagnostic(`verdict ${v.recommended_action}: ${v.reasons.join(' | ')}`);
  assert.equal(v.recommended_action, 'BLOCK');
  assert.equal(r.sandboxResult.compliance.rollback_possible, false);
  assert.ok(v.reasons.some((x) => /^FS_UNRESTORABLE_MODE: deleted .*\/tool, whose mode was 2777 \(set-gid\)/.test(x)), v.reasons.join('\n'));
  assert.ok(v.reasons.some((x) => /^FS_UNRESTORABLE_MODE: deleted .*\/shared, whose mode was 1777 \(sticky\)/.test(x)), v.reasons.join('\n'));
  assert.deepEqual(codes(await promote(ws, r.sandboxId)), ['PROMOTE_VERDICT']);
  // The plan, second line: the run saw an ordinary file; its owner set the bit afterwards.
  const r2 = await run(ws, cmd(t, `rm ${t}/keep.txt`, { delete: [`${t}/keep.txt`] }));
  assert.equal(r2.sandboxResult.verdict.recommended_action, 'PROMOTE', r2.sandboxResult.verdict.reasons.join('|'));
  assert.equal(spawnSync('chmod', ['g+s', join(t, 'keep.txt')], { uid: U, gid: U }).status, 0);
  const p2 = await promote(ws, r2.sandboxId);
  tc.diagnostic(`promote after g+s: ${JSON.stringify(p2).slice(0, 400)}`);
  assert.deepEqual(codes(p2), ['PROMOTE_UNRESTORABLE_MODE']);
  assert.match(JSON.stringify(p2), /keep\.txt has mode 2666 \(set-gid\): a rollback would have to write that bit back/);
  assert.equal(mode(join(t, 'tool')), '2777');
  assert.equal(mode(join(t, 'shared')), '1777');
  assert.equal(readFileSync(join(t, 'keep.txt'), 'utf8'), 'k');
  assert.deepEqual(inflight(ws), []);
  await unrelatedPromotes(ws);
});

test('A2: deleting a file in a group its owner is not in (root chgrp\'ed it) is refused by the plan (a rollback could not give the group back); nothing wedges', { skip: !root, timeout: 120_000 }, async (tc) => {
  const ws = workspace();
  const t = ownedTree({ 'www.conf': 'conf\n', 'keep.txt': 'k' });
  spawnSync('chgrp', ['4343', join(t, 'www.conf')]); // e.g. root gave it to www-data so the web server may read it
  const r = await run(ws, cmd(t, `rm ${t}/www.conf`, { delete: [`${t}/www.conf`] }));
  tc.diagnostic(`verdict ${r.sandboxResult.verdict.recommended_action}: ${r.sandboxResult.verdict.reasons.join(' | ')}`);
  const p = await promote(ws, r.sandboxId);
  tc.diagnostic(`promote: ${JSON.stringify(p).slice(0, 400)}`);
  assert.deepEqual(codes(p), ['PROMOTE_FOREIGN_GROUP']);
  assert.match(JSON.stringify(p), /www\.conf is in group 4343, which the scope's owner \(uid 4242\) is not a member of/);
  const st = statSync(join(t, 'www.conf'));
  assert.deepEqual([st.uid, st.gid, readFileSync(join(t, 'www.conf'), 'utf8')], [U, 4343, 'conf\n']);
  assert.deepEqual(inflight(ws), []);
  await unrelatedPromotes(ws);
});

test('A3: a set-gid file modified by a run (the kernel clears the bit on write) is BLOCKed: its rollback could not set the bit again', { skip: !root, timeout: 120_000 }, async (tc) => {
  const ws = workspace();
  const t = ownedTree({ 'run.sh': '#!/bin/sh\n', 'keep.txt': 'k' });
  chmodSync(join(t, 'run.sh'), 0o2777);
  const r = await run(ws, cmd(t, `echo 'echo x' >> ${t}/run.sh; stat -c %a ${t}/run.sh`, { modify: [`${t}/run.sh`] }));
  const v = r.sandboxResult.verdict;
  tc.diagnostic(`verdict ${v.recommended_action}: ${v.reasons.join(' | ')}; diff ${JSON.stringify(r.sandboxResult.filesystem_diff.modified)}`);
  assert.equal(v.recommended_action, 'BLOCK');
  assert.ok(v.reasons.some((x) => /^FS_UNRESTORABLE_MODE: modified .*\/run\.sh, whose mode was 2777 \(set-gid\)/.test(x)), v.reasons.join('\n'));
  assert.deepEqual(codes(await promote(ws, r.sandboxId)), ['PROMOTE_VERDICT']);
  assert.equal(mode(join(t, 'run.sh')), '2777');
  assert.equal(readFileSync(join(t, 'run.sh'), 'utf8'), '#!/bin/sh\n');
  assert.deepEqual(inflight(ws), []);
});

test('A3b: an in-flight rollback journal of an older Airlock (a set-gid pre-image, a group the owner is not in) is finished by recover: never stuck', { skip: !root, timeout: 120_000 }, async (tc) => {
  const ws = workspace();
  const t = ownedTree({ 'tool': 'tool\n', 'www.conf': 'conf\n', 'keep.txt': 'k' });
  const r = await run(ws, cmd(t, `rm ${t}/tool ${t}/www.conf`, { delete: [`${t}/tool`, `${t}/www.conf`] }));
  assert.equal(r.sandboxResult.verdict.recommended_action, 'PROMOTE', r.sandboxResult.verdict.reasons.join('|'));
  assert.ok((await promote(ws, r.sandboxId)).ok);
  // What an older Airlock promoted (its plan let these through), then failed to roll back: in flight.
  const j = readJournal(ws, r.sandboxId);
  assert.ok(j);
  for (const op of j.ops) {
    if (op.path.endsWith('/tool') && op.before) op.before.mode = 0o2777;
    if (op.path.endsWith('/www.conf') && op.before) op.before.gid = 4343;
  }
  Object.assign(j, { phase: 'rolling_back', rollback_token: 'a0a0a0a0a0a0', rollback_actor: 'operator' });
  writeJournal(ws, j);
  setInflight(ws, r.sandboxId, true);
  const rec = await recover(ws);
  tc.diagnostic(`recover: ${JSON.stringify(rec).slice(0, 800)}`);
  assert.ok('recovered' in rec);
  const one = rec.recovered[0];
  assert.equal(one?.outcome, 'old_state');
  assert.deepEqual((one?.notRestored ?? []).map((n) => [n.path.slice(t.length), n.what]), [
    ['/www.conf', "group 4343 (not one of the owner's) left as the owner's group 4242"],
    ['/tool', 'mode 2777 written as 0777 (set-gid never written)'],
  ]);
  assert.deepEqual(inflight(ws), []);
  assert.equal(mode(join(t, 'tool')), '777');
  assert.equal(readFileSync(join(t, 'tool'), 'utf8'), 'tool\n');
  assert.equal(statSync(join(t, 'www.conf')).gid, U);
  const recs = auditTypes(ws).filter((a) => a.type === 'recovered' || a.type === 'rolled_back');
  assert.ok(recs.every((a) => Array.isArray(a.detail?.not_restored) && a.detail.not_restored.length === 2), JSON.stringify(recs));
  await unrelatedPromotes(ws);
});

test('A4: after a promotion killed mid-way and one rename by the scope owner, recover fails (the folder was replaced) until an operator abandons it: audited, the new folder untouched, the workspace unblocked', { skip: !root, timeout: 120_000 }, async (tc) => {
  const ws = workspace();
  const t = ownedTree({ 'sub/keep.txt': 'k' });
  const r = await run(ws, cmd(t, `for i in 1 2 3 4; do echo $i > ${t}/sub/f$i; done`, { create: [`${t}/sub/*`] }));
  assert.equal(r.sandboxResult.verdict.recommended_action, 'PROMOTE');
  const c = cli(['promote', r.sandboxId, '--workspace', ws.root], { AIRLOCK_TEST_COMMIT_CRASH_AFTER: '2' });
  tc.diagnostic(`promote killed: signal ${c.signal}`);
  assert.equal(c.signal, 'SIGKILL');
  // The owner, once, as himself: moves the folder aside and makes a new one of the same name.
  const mv = spawnSync('/bin/sh', ['-c', `mv ${t}/sub ${t}/sub.old && mkdir ${t}/sub && echo mine > ${t}/sub/mine.txt && rm -rf ${t}/sub.old`], { uid: U, gid: U });
  assert.equal(mv.status, 0);
  const newSub = statSync(join(t, 'sub')).ino;
  const rec = await recover(ws);
  tc.diagnostic(`recover: ${JSON.stringify(rec).slice(0, 400)}`);
  assert.ok('recovered' in rec);
  assert.equal(rec.recovered[0]?.outcome, 'failed');
  assert.equal(rec.recovered[0]?.problems[0]?.code, 'PROMOTE_PATH_CHANGED');
  assert.match(rec.recovered[0]?.problems[0]?.message ?? '', /airlock recover --abandon sbx-/);
  // Only what is in flight can be abandoned.
  const wrong = cli(['recover', '--abandon', 'sbx-not-in-flight', '--workspace', ws.root]);
  assert.equal(wrong.code, 2, wrong.stderr);
  assert.match(wrong.stderr, /RECOVER_NOT_IN_FLIGHT: sbx-not-in-flight is not an interrupted promotion or rollback/);
  const ab = cli(['recover', '--abandon', r.sandboxId, '--workspace', ws.root], { USER: 'alice' });
  tc.diagnostic(`recover --abandon: ${ab.code} ${ab.stdout}${ab.stderr}`);
  assert.equal(ab.code, 0, ab.stderr);
  assert.match(ab.stdout, new RegExp(`${r.sandboxId}: interrupted promotion -> OLD state \\(as before the promotion\\), ABANDONED by alice: 4 path\\(s\\) left as they are`));
  assert.match(ab.stdout, /left undone: .*\/sub\/f1: PROMOTE_PATH_CHANGED: left as it is: .*sub: this directory was replaced/);
  assert.deepEqual(inflight(ws), []);
  assert.deepEqual([statSync(join(t, 'sub')).ino, readdirSync(join(t, 'sub'))], [newSub, ['mine.txt']]);
  const j = readJournal(ws, r.sandboxId);
  assert.equal(j?.phase, 'aborted');
  assert.equal(j?.abandoned?.actor, 'alice');
  assert.equal(j?.abandoned?.left_undone.length, 4);
  const last = auditTypes(ws).filter((a) => a.type === 'recovered').at(-1);
  assert.equal(last?.detail?.abandoned, true);
  assert.equal((last as { actor?: string } | undefined)?.actor, 'alice');
  assert.equal((last?.detail?.left_undone as unknown[]).length, 4);
  assert.match(cli(['history', r.sandboxResult.action_id, '--workspace', ws.root]).stdout, /ABANDONED by alice, 4 path\(s\) left as they were/);
  await unrelatedPromotes(ws);
});

test('A5: strace of promote + rollback: every write in the scope is made by a process that has dropped to the owner', { skip: !root, timeout: 120_000 }, async (tc) => {
  const ws = workspace();
  const t = ownedTree({ 'sub/keep.txt': 'k', 'mod.txt': 'm' });
  const r = await run(ws, cmd(t, `echo n > ${t}/sub/new.txt; echo mm > ${t}/mod.txt; mkdir ${t}/d; rm ${t}/sub/keep.txt`, { create: [`${t}/sub/*`, `${t}/d`], modify: [`${t}/mod.txt`], delete: [`${t}/sub/keep.txt`] }));
  assert.equal(r.sandboxResult.verdict.recommended_action, 'PROMOTE', r.sandboxResult.verdict.reasons.join('|'));
  const out = mkdtempSync('/var/tmp/strace-');
  tc.after(() => rmSync(out, { recursive: true, force: true }));
  for (const verb of ['promote', 'rollback']) {
    const log = join(out, verb);
    const s = spawnSync('strace', ['-f', '-qq', '-o', log, '-e', 'trace=setresuid,openat,renameat2,unlinkat,mkdirat,fchmod,fchown,chmod,chown,fchmodat,fchownat,linkat,utimensat', 'bin/airlock', verb, r.sandboxId, '--workspace', ws.root], { encoding: 'utf8' });
    assert.equal(s.status, 0, s.stderr);
    const lines = (await import('node:fs')).readFileSync(log, 'utf8').split('\n');
    const dropped = new Set<string>();
    const bad: string[] = [];
    let writes = 0;
    for (const l of lines) {
      const pid = l.split(' ')[0] ?? '';
      if (/setresuid\(4242, 4242, 4242\)\s+= 0/.test(l)) dropped.add(pid);
      const write = /^(\d+)\s+(renameat2|unlinkat|mkdirat|fchmod|fchown|chmod|chown|fchmodat|fchownat|linkat|utimensat)\(/.test(l) || (/openat\(.*O_CREAT/.test(l));
      if (!write || /= -1/.test(l)) continue;
      if (l.includes(t) || /airlock-stage|\/proc\/self\/fd|"(mod\.txt|d|new\.txt|keep\.txt)"/.test(l)) {
        writes++;
        if (!dropped.has(pid)) bad.push(l);
      }
    }
    tc.diagnostic(`${verb}: ${writes} writes in the scope, by dropped pids ${[...dropped].join(',')}; not dropped: ${bad.length}`);
    for (const b of bad.slice(0, 10)) tc.diagnostic(`  ${b}`);
    assert.ok(writes > 0);
    assert.deepEqual(bad, []);
  }
});

test('A6: hard links to a file outside the scope (root-owned scope): delete refused by plan; rollback --force over a link leaves the outside file untouched', { skip: !root, timeout: 120_000 }, async (tc) => {
  const { linkSync, readFileSync, unlinkSync } = await import('node:fs');
  const ws = workspace();
  const t = testScopeDir('acroot-');
  chmodSync(t, 0o777); // root's scope, writable by the sandbox's user
  const outside = mkdtempSync(join(TEST_SCOPE_ROOT, 'outside-'));
  const shadow = join(outside, 'shadow');
  writeFileSync(shadow, 'root:$6$secret\n');
  chmodSync(shadow, 0o600);
  linkSync(shadow, join(t, 'shadow-link'));
  writeFileSync(join(t, 'a.txt'), 'a\n');
  chmodSync(join(t, 'a.txt'), 0o666);
  // 1. A run deletes the link (the sandbox user may unlink it in a 0777 folder).
  const r1 = await run(ws, cmd(t, `rm -f ${t}/shadow-link`, { delete: [`${t}/shadow-link`] }));
  tc.diagnostic(`delete verdict ${r1.sandboxResult.verdict.recommended_action}: ${r1.sandboxResult.verdict.reasons.join(' | ').slice(0, 300)}`);
  const p1 = await promote(ws, r1.sandboxId);
  tc.diagnostic(`promote delete: ${JSON.stringify(p1).slice(0, 300)}`);
  assert.ok(!p1.ok);
  // 2. A run modifies a.txt; promoted; then a.txt becomes a hard link to the outside file; rollback --force.
  const r2 = await run(ws, cmd(t, `echo b > ${t}/a.txt`, { modify: [`${t}/a.txt`] }));
  const p2 = await promote(ws, r2.sandboxId);
  assert.ok(p2.ok, JSON.stringify(p2));
  unlinkSync(join(t, 'a.txt'));
  linkSync(shadow, join(t, 'a.txt'));
  const rb = await rollback(ws, r2.sandboxId, { force: true });
  tc.diagnostic(`rollback --force: ${JSON.stringify(rb).slice(0, 400)}`);
  const st = statSync(shadow);
  assert.equal(readFileSync(shadow, 'utf8'), 'root:$6$secret\n');
  assert.equal(st.mode & 0o7777, 0o600);
  assert.equal(st.uid, 0);
  tc.diagnostic(`outside file after: nlink ${st.nlink} mode ${(st.mode & 0o7777).toString(8)}; a.txt now ${readFileSync(join(t, 'a.txt'), 'utf8').trim()}`);
});

test('A7: modifying a file of the owner whose group the owner is not in: refused by the plan with its own code (not a bare "write failed"); the agent says why a write fails', { skip: !root, timeout: 120_000 }, async (tc) => {
  const ws = workspace();
  const t = ownedTree({ 'www.conf': 'conf\n' });
  spawnSync('chgrp', ['4343', join(t, 'www.conf')]);
  const r = await run(ws, cmd(t, `echo more >> ${t}/www.conf`, { modify: [`${t}/www.conf`] }));
  const p = await promote(ws, r.sandboxId);
  tc.diagnostic(`verdict ${r.sandboxResult.verdict.recommended_action}; promote: ${JSON.stringify(p).slice(0, 400)}`);
  assert.deepEqual(codes(p), ['PROMOTE_FOREIGN_GROUP']);
  assert.equal(readFileSync(join(t, 'www.conf'), 'utf8'), 'conf\n');
  assert.equal(statSync(join(t, 'www.conf')).gid, 4343);
  assert.deepEqual(inflight(ws), []);
  // The agent's own failures carry the kernel's reason.
  const fs = await ScopeFs.open(t, 'dir');
  try {
    assert.equal(fs.maySetGroup(4343), false);
    assert.equal(fs.maySetGroup(U), true);
    const e = await fs.write('other.conf', '.airlock-stage-test-0-other.conf', Buffer.from('x'), { mode: 0o644, gid: 4343, expect: null }).then(() => null, (x: unknown) => x);
    assert.ok(e instanceof ScopeFsError);
    assert.equal(e.errno, 'EPERM');
    assert.match(e.message, /^write other\.conf: Operation not permitted$/);
  } finally {
    fs.close();
  }
  assert.ok(!existsSync(join(t, 'other.conf')));
});
