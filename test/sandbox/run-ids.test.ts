// Each sandbox's host uid of its own (src/sandbox/run-ids.ts): the range check, the claims, the sweep,
// and the attack it exists for: a process with one run's host uid (what an escape from that run's
// namespaces would be) trying to reach another live run's folders and processes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ownerTag } from '../../src/base/owner.js';
import { claimRunIds, rangeConflict, RUN_ID_CLAIMS, RUN_ID_RANGE, sweepRunIdClaims, type RunIds } from '../../src/sandbox/run-ids.js';
import { sandboxIdle } from '../../src/sandbox/ns/runner.js';
import { run, text, until } from './helpers-ns.js';
import { as, liveRuns, type LiveRun } from './helpers-run-ids.js';
import { dedicatedSandboxUser } from '../helpers/sandbox-user.js';

const EMPTY = { passwd: '', group: '', subuid: '', subgid: '' };
const R = { first: 2_048_000_000, count: 65_536 };

test('the range is refused when a user, a group or a subordinate range of the host overlaps it', () => {
  assert.equal(rangeConflict(R, { ...EMPTY, passwd: 'root:x:0:0::/root:/bin/sh\nairlock-sandbox:x:999:999::/nonexistent:/usr/sbin/nologin\n', subuid: 'alice:100000:65536\n' }), null);
  assert.match(rangeConflict(R, { ...EMPTY, passwd: 'x:x:2048000005:1::/:/bin/sh\n' }) ?? '', /user x has uid 2048000005/);
  assert.match(rangeConflict(R, { ...EMPTY, group: 'g:x:2048065535:\n' }) ?? '', /group g has gid 2048065535/);
  // A subordinate range that only touches its last id: its owner could map that id with newuidmap.
  assert.match(rangeConflict(R, { ...EMPTY, subuid: 'bob:2047934465:65536\n' }) ?? '', /\/etc\/subuid gives bob 2047934465-2048000000/);
  assert.match(rangeConflict(R, { ...EMPTY, subgid: 'carol:2048065535:10\n' }) ?? '', /\/etc\/subgid gives carol/);
  assert.equal(rangeConflict(R, { ...EMPTY, subuid: 'dave:2048065536:65536\n', passwd: 'y:x:2047999999:1::/:/bin/sh\n' }), null, 'ranges next to it do not overlap');
});

test('claims: ids in order, each held by one claim and handed out once (given back, it is not handed out again), then the range is used up', () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-run-ids-'));
  const pool = { range: { first: 2_048_000_000, count: 3 }, dir, ledger: join(dir, 'ledger') };
  mkdirSync(pool.ledger, { mode: 0o700 });
  const a = claimRunIds(pool) as RunIds;
  const b = claimRunIds(pool) as RunIds;
  assert.ok(a.kind === 'own' && b.kind === 'own' && a.uid === pool.range.first && b.uid === pool.range.first + 1 && a.gid === a.uid, JSON.stringify([a, b]));
  assert.equal(readlinkSync(join(dir, String(a.uid))), ownerTag(), 'the claim names its owner');
  // Another process's claim (a symlink made first) is skipped, not taken.
  const third = pool.range.first + 2;
  symlinkSync('zz.zz', join(dir, String(third)));
  a.release();
  a.release(); // once only: a second call must not remove a claim someone made meanwhile
  const none = claimRunIds(pool);
  assert.ok('code' in none && none.code === 'NS_RUN_IDS_USED_UP' && /airlock setup --rescan-run-ids/.test(none.message), `the id given back is not handed out again: ${JSON.stringify(none)}`);
  assert.deepEqual(readdirSync(dir).sort(), [String(b.uid), String(third), 'ledger'].sort(), 'a\'s claim is gone, b\'s and the other one stay');
  assert.equal(readlinkSync(join(dir, String(third))), 'zz.zz', 'the other claim was never touched');
  assert.equal(readFileSync(join(pool.ledger, 'state'), 'utf8'), '1 3\n', 'the ledger on disk says all three were handed out in epoch 1');
});

test('the sweep frees a dead owner\'s claims, never a live owner\'s, one a process runs with, or one whose staging is left', async (t) => {
  if (process.getuid?.() !== 0) return t.skip('running as another uid needs root');
  const dir = mkdtempSync(join(tmpdir(), 'airlock-run-ids-'));
  // Dead owners: our pid with another start time (a pid reused since is not the owner).
  const deadPid = process.pid;
  const dead = `${deadPid.toString(36)}.1`;
  const ids = [2_048_000_100, 2_048_000_101, 2_048_000_102, 2_048_000_103, 2_048_000_104, 2_048_000_105];
  symlinkSync(dead, join(dir, String(ids[0])));
  symlinkSync(ownerTag(), join(dir, String(ids[1])));
  symlinkSync(dead, join(dir, String(ids[2])));
  const deadStaging = `${deadPid.toString(36)}.2`;
  symlinkSync(deadStaging, join(dir, String(ids[3])));
  const left = join(tmpdir(), `airlock-ns-${deadStaging}-left`);
  mkdirSync(left);
  t.after(() => rmSync(left, { recursive: true, force: true }));
  // A process still runs as ids[2], and one with ids[4] as its gid only (a scope writer: the sandbox
  // user's uid, a gid of its own): what a run that outlived its owner would be.
  symlinkSync(dead, join(dir, String(ids[4])));
  const sleepers = [spawn('/bin/sleep', ['30'], { uid: ids[2]!, gid: ids[2]! }), spawn('/bin/sleep', ['30'], { uid: 65534, gid: ids[4]! })];
  t.after(() => sleepers.forEach((p) => p.kill('SIGKILL')));
  await until('the sleepers run with their ids', () => sleepers.every((p) => /^Gid:\s+20480001/m.test(readFileSync(`/proc/${p.pid}/status`, 'utf8'))), () => sleepers.map((p) => p.pid));
  // A dead owner whose staging base is still mounted under another TMPDIR than ours.
  const elsewhereTag = `${deadPid.toString(36)}.3`;
  symlinkSync(elsewhereTag, join(dir, String(ids[5])));
  const otherTmp = mkdtempSync(join('/var/tmp', 'airlock-other-tmpdir-'));
  const base = join(otherTmp, `airlock-ns-${elsewhereTag}-x`);
  mkdirSync(base);
  assert.equal(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'none', base]).status, 0);
  t.after(() => {
    spawnSync('umount', [base]);
    rmSync(otherTmp, { recursive: true, force: true });
  });
  const errors: string[] = [];
  assert.deepEqual(sweepRunIdClaims(dir, errors), [ids[0]]);
  assert.deepEqual(errors, []);
  assert.deepEqual(readdirSync(dir).sort(), [ids[1], ids[2], ids[3], ids[4], ids[5]].map(String).sort());
});

/** What a process with `who`'s credentials (uid, gid and supplementary groups) can do to `target`'s folder and program. */
function attack(who: LiveRun, target: LiveRun, plant: string): Record<string, string> {
  return JSON.parse(
    as(
      who,
      `
const fs = require('node:fs');
const t = ${JSON.stringify({ ...target, plant })};
const r = {};
const attempt = (k, f) => { try { f(); r[k] = 'ok'; } catch (e) { r[k] = e.code || String(e); } };
attempt('listRun', () => fs.readdirSync(t.runDir));
attempt('readOut', () => fs.readFileSync(t.out + '/marker'));
attempt('writeOut', () => fs.writeFileSync(t.out + '/' + t.plant, 'x'));
attempt('readIn', () => fs.readFileSync(t.runDir + '/in/secret.txt'));
attempt('signal', () => process.kill(t.pid, 0));
attempt('environ', () => fs.readFileSync('/proc/' + t.pid + '/environ'));
process.stdout.write(JSON.stringify(r));`,
    ),
  ) as Record<string, string>;
}

const sleeper = (name: string): string[] => ['/bin/sh', '-c', `echo ${name} > /out/marker; exec sleep 3`];
function secretInput(): { hostPath: string; name: string }[] {
  const secret = join(mkdtempSync(join(tmpdir(), 'airlock-run-ids-')), 'secret.txt');
  writeFileSync(secret, 'an input of the run\n');
  return [{ hostPath: secret, name: 'secret.txt' }];
}
const NOTHING = { listRun: 'EACCES', readOut: 'EACCES', writeOut: 'EACCES', readIn: 'EACCES', signal: 'EPERM', environ: 'EACCES' };
const inRange = (id: number): boolean => id >= RUN_ID_RANGE.first && id < RUN_ID_RANGE.first + RUN_ID_RANGE.count;

test('attack: a process with one live run\'s host ids cannot reach another run\'s folders, inputs or processes', async (t) => {
  if (process.getuid?.() !== 0) return t.skip('per-run ids are root\'s (not root: every run is the caller)');
  const more = { limits: { wallMs: 15_000 }, inputs: secretInput() };
  const runs = Promise.all([run(sleeper('A'), more), run(sleeper('B'), more)]);
  const [a, b] = await liveRuns(['A', 'B']);
  // Control: with B's own credentials the same steps reach B (the paths and pid are right).
  const own = attack(b!, b!, 'own');
  assert.deepEqual({ readOut: own.readOut, readIn: own.readIn, signal: own.signal }, { readOut: 'ok', readIn: 'ok', signal: 'ok' }, JSON.stringify(own));
  // The attack: with A's, nothing of B.
  assert.deepEqual(attack(a!, b!, 'planted'), NOTHING);
  assert.ok(a!.uid !== b!.uid && inRange(a!.uid) && inRange(b!.uid), `two live runs, two uids of the range: ${a!.uid} ${b!.uid}`);
  const [oa, ob] = await runs;
  assert.equal(oa.status, 'SUCCESS', text(oa));
  assert.equal(ob.status, 'SUCCESS', text(ob));
  assert.deepEqual([oa.host.hostIds, ob.host.hostIds], ['own', 'own']);
  assert.deepEqual([oa.host.hostUid, ob.host.hostUid], [a!.uid, b!.uid], 'the results name the uids the runs had');
  assert.deepEqual(ob.fs.out?.map((c) => c.path).sort(), ['/out/marker', '/out/own'], 'B\'s own ids could write its /out; A\'s could not');
  // Both ids are given back once the runs' folders are gone.
  await sandboxIdle();
  const held = readdirSync(RUN_ID_CLAIMS).filter((n) => readlinkSync(join(RUN_ID_CLAIMS, n)) === ownerTag());
  assert.ok(!held.includes(String(a!.gid)) && !held.includes(String(b!.gid)), `still claimed: ${held}`);
});

test('attack: runs that may write a scope have uids of their own, see the sandbox user\'s files there as theirs, and cannot reach each other', async (t) => {
  if (process.getuid?.() !== 0) return t.skip('per-run ids are root\'s');
  const u = dedicatedSandboxUser();
  const scope = mkdtempSync(join('/var/tmp', 'airlock-run-ids-scope-'));
  t.after(() => rmSync(scope, { recursive: true, force: true }));
  chownSync(scope, u.uid, u.gid);
  chmodSync(scope, 0o755); // others may pass: each file's own mode decides below
  writeFileSync(join(scope, 'theirs.txt'), 'the sandbox user\'s file\n', { mode: 0o600 });
  chownSync(join(scope, 'theirs.txt'), u.uid, u.gid);
  // Inside, the file is the run's own (idmapped lower dir): it can read it although it is 0600, and write it.
  const writer = (name: string): string[] => ['/bin/sh', '-c', `echo ${name} > /out/marker; cat ${scope}/theirs.txt > /out/read; echo ${name} >> ${scope}/theirs.txt; exec sleep 3`];
  const more = { limits: { wallMs: 15_000 }, inputs: secretInput() };
  const runs = Promise.all([run(writer('A'), { ...more, scopes: [{ hostPath: scope }] }), run(sleeper('B'), more), run(writer('C'), { ...more, scopes: [{ hostPath: scope }] })]);
  const [a, b, c] = await liveRuns(['A', 'B', 'C']);
  assert.ok(inRange(a!.uid) && inRange(c!.uid) && a!.uid !== c!.uid && a!.uid !== u.uid, `the writers have uids of their own: ${a!.uid} ${c!.uid}`);
  assert.deepEqual(attack(a!, c!, 'planted'), NOTHING, 'one writer cannot reach the other');
  assert.deepEqual(attack(c!, a!, 'planted'), NOTHING, 'nor the other way');
  assert.deepEqual(attack(a!, b!, 'planted'), NOTHING, 'nor a run without a scope');
  // What made the files the writer's is gone from the host: its uid has no way to the real scope.
  const real = JSON.parse(as(a!, `
const fs = require('node:fs'); const r = {};
const at = (k, f) => { try { f(); r[k] = 'ok'; } catch (e) { r[k] = e.code || String(e); } };
at('read', () => fs.readFileSync(${JSON.stringify(join(scope, 'theirs.txt'))}));
at('write', () => fs.appendFileSync(${JSON.stringify(join(scope, 'theirs.txt'))}, 'x'));
at('create', () => fs.writeFileSync(${JSON.stringify(join(scope, 'planted'))}, 'x'));
process.stdout.write(JSON.stringify(r));`)) as Record<string, string>;
  assert.deepEqual(real, { read: 'EACCES', write: 'EACCES', create: 'EACCES' }, 'the writer\'s uid on the real scope');
  const idmapped = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter((l) => /\bidmapped\b/.test(l) && l.includes(tmpdir()));
  assert.deepEqual(idmapped, [], 'no idmapped clone of a scope stays mounted during the run');
  const [oa, ob, oc] = await runs;
  for (const o of [oa, ob, oc]) assert.equal(o.status, 'SUCCESS', text(o));
  assert.deepEqual([oa.host.hostIds, ob.host.hostIds, oc.host.hostIds], ['own', 'own', 'own']);
  for (const o of [oa, oc]) {
    assert.equal(o.fs.scopes[0]?.changes?.find((ch) => ch.path.endsWith('theirs.txt'))?.change, 'modified', JSON.stringify(o.fs.scopes));
    assert.equal(o.fs.out?.find((ch) => ch.path === '/out/read')?.size, 'the sandbox user\'s file\n'.length, 'the 0600 file was readable inside');
  }
  assert.equal(readFileSync(join(scope, 'theirs.txt'), 'utf8'), 'the sandbox user\'s file\n', 'the real file is unchanged (the writes are in the overlays)');
  for (const o of [oa, ob, oc]) assert.ok(!o.fs.out?.some((ch) => ch.path.includes('planted')), 'nothing planted');
});
