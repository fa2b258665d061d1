// Review of the per-run host ids (src/sandbox/run-ids.ts): attacks and error paths the first tests
// did not cover. Root only (per-run ids are root's).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ownerTag } from '../../src/base/owner.js';
import { RUN_ID_CLAIMS } from '../../src/sandbox/run-ids.js';
import { sandboxIdle } from '../../src/sandbox/ns/runner.js';
import { run, text } from './helpers-ns.js';
import { as, liveRuns, type LiveRun } from './helpers-run-ids.js';
import { dedicatedSandboxUser } from '../helpers/sandbox-user.js';

const ours = (): string[] => {
  try {
    return readdirSync(RUN_ID_CLAIMS).filter((n) => readlinkSync(join(RUN_ID_CLAIMS, n)) === ownerTag()).sort();
  } catch {
    return [];
  }
};


test('a run refused before launch (hash mismatch, bad scope, unusable outDir, a missing input) gives its ids back, and leaves no unhandled rejection', async (t) => {
  if (process.getuid?.() !== 0) return t.skip('root only');
  // A service process ends on an unhandled rejection (node's default): none may come of a refusal.
  const unhandled: unknown[] = [];
  const onUnhandled = (e: unknown): void => void unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  t.after(() => process.off('unhandledRejection', onUnhandled));
  await sandboxIdle();
  const before = ours();
  const dir = mkdtempSync(join(tmpdir(), 'airlock-review-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const input = join(dir, 'in.txt');
  writeFileSync(input, 'x\n');
  const notEmpty = join(dir, 'full');
  mkdtempSync(join(notEmpty + '-'));
  const outFile = join(dir, 'afile');
  writeFileSync(outFile, '');
  const refused = await Promise.all([
    run(['/bin/true'], { inputs: [{ hostPath: input, name: 'in.txt', sha256: '0'.repeat(64) }] }),
    run(['/bin/true'], { scopes: [{ hostPath: '/var/tmp/airlock-review-no-such-scope' }] }),
    run(['/bin/true'], { outDir: outFile }),
    // Refused for its scope before its (missing) input's staging is awaited.
    run(['/bin/true'], { inputs: [{ hostPath: join(dir, 'missing.txt'), name: 'missing.txt' }], scopes: [{ hostPath: '/var/tmp/airlock-review-no-such-scope' }] }),
  ]);
  for (const o of refused) assert.notEqual(o.status, 'SUCCESS', text(o));
  await sandboxIdle();
  assert.deepEqual(ours(), before, `claims left by refused runs: ${JSON.stringify(refused.map((o) => o.problems))}`);
  await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual(unhandled.map(String), []);
});

test('a run that may write a scope shared with the sandbox user\'s group can write it, with or without the host tracer', async (t) => {
  if (process.getuid?.() !== 0) return t.skip('root only');
  const u = dedicatedSandboxUser();
  const scope = mkdtempSync(join('/var/tmp', 'airlock-review-scope-'));
  t.after(() => rmSync(scope, { recursive: true, force: true }));
  // The README: "what a folder's owner shares with that group stays readable and writable".
  // A subfolder (the scope's root is its overlay's upper dir, the run's own): root's, shared with the group.
  mkdirSync(join(scope, 'shared'));
  chownSync(join(scope, 'shared'), 0, u.gid);
  chmodSync(join(scope, 'shared'), 0o775);
  const write = ['/bin/sh', '-c', `echo hi > ${scope}/shared/new.txt`];
  const traced = await run(write, { scopes: [{ hostPath: scope }] });
  assert.equal(traced.status, 'SUCCESS', text(traced));
  const untraced = await run(write, { scopes: [{ hostPath: scope }], traceSyscalls: false });
  assert.equal(untraced.status, 'SUCCESS', `without the tracer (node drops the ids, and every supplementary group): ${text(untraced)}`);
  assert.deepEqual([traced.host.hostIds, untraced.host.hostIds], ['own', 'own']);
});

test('a scope whose filesystem cannot be idmapped: its writer has the sandbox user\'s uid, and the result says why', async (t) => {
  if (process.getuid?.() !== 0) return t.skip('root only');
  const u = dedicatedSandboxUser();
  // ramfs has no idmapped mounts (ext4, xfs, btrfs and tmpfs do).
  const scope = mkdtempSync(join('/var/tmp', 'airlock-review-ramfs-'));
  assert.equal(spawnSync('mount', ['-t', 'ramfs', '-o', 'mode=0755', 'none', scope]).status, 0);
  t.after(() => {
    spawnSync('umount', [scope]);
    rmSync(scope, { recursive: true, force: true });
  });
  chownSync(scope, u.uid, u.gid);
  writeFileSync(join(scope, 'theirs.txt'), 'x\n', { mode: 0o600 });
  chownSync(join(scope, 'theirs.txt'), u.uid, u.gid);
  const write = ['/bin/sh', '-c', `echo more >> ${scope}/theirs.txt`];
  for (const attempt of ['first', 'remembered']) {
    const o = await run(write, { scopes: [{ hostPath: scope }] });
    assert.equal(o.status, 'SUCCESS', `${attempt}: ${text(o)}`);
    assert.equal(o.host.hostIds, 'own-gid', attempt);
    assert.equal(o.host.hostUid, u.uid, attempt);
    assert.match(o.host.hostIdsWhy ?? '', /NS_SCOPE_IDMAP|idmapped/, attempt);
    assert.equal(o.fs.scopes[0]?.changes?.[0]?.change, 'modified', `${attempt}: ${JSON.stringify(o.fs.scopes)}`);
  }
  // A run that only reads it keeps a uid of its own (nothing of the sandbox user's is needed).
  const reader = await run(['/bin/true'], { scopes: [{ hostPath: scope, readOnly: true }] });
  assert.equal(reader.host.hostIds, 'own', text(reader));
});

test('attack: a run without scopes (a uid of its own) cannot enter a live strace-fallback run, whose folder is root:<sandbox group>', async (t) => {
  if (process.getuid?.() !== 0) return t.skip('root only');
  const sleeper = (name: string, s: number): string[] => ['/bin/sh', '-c', `echo ${name} > /out/marker; echo secret > /tmp/secret; exec sleep ${s}`];
  // The strace fallback (operator's choice, or ptrace refused once in this process): the shared sandbox user.
  process.env.AIRLOCK_SYSCALL_TRACER = 'strace';
  const shared = run(sleeper('S', 4), { limits: { wallMs: 15_000 } });
  let s: LiveRun;
  try {
    s = (await liveRuns(['S']))[0]!;
  } finally {
    delete process.env.AIRLOCK_SYSCALL_TRACER;
  }
  const own = run(sleeper('A', 3), { limits: { wallMs: 15_000 } });
  const a = (await liveRuns(['A']))[0]!;
  const r = JSON.parse(as(a, `
const fs = require('node:fs'); const r = {};
const at = (k, f) => { try { f(); r[k] = 'ok'; } catch (e) { r[k] = e.code || String(e); } };
at('readOut', () => fs.readFileSync(${JSON.stringify(join(s.runDir, 'rw', 'out', 'marker'))}));
at('plantTmp', () => fs.writeFileSync(${JSON.stringify(join(s.runDir, 'scratch', 'tmp', 'planted'))}, 'x'));
process.stdout.write(JSON.stringify(r));`)) as Record<string, string>;
  const [os, oa] = await Promise.all([shared, own]);
  assert.equal(os.host.hostIds, 'shared', text(os));
  assert.equal(oa.host.hostIds, 'own', text(oa));
  assert.deepEqual(r, { readOut: 'EACCES', plantTmp: 'EACCES' }, `the supplementary group (${a.groups}) opens the strace run's folder (root:<sandbox group> 0710)`);
});

// An id handed out again while a file of it is left on the host: run-id-ledger.test.ts (each id goes
// to one sandbox until a rescan, which looks for such files first).

test('the sweep never removes a claim made anew after it judged the id\'s old owner dead (another sweeper freed it meanwhile)', async (t) => {
  const fs = (await import('node:fs')).default;
  const { syncBuiltinESMExports } = await import('node:module');
  const { sweepRunIdClaims } = await import('../../src/sandbox/run-ids.js');
  const dir = mkdtempSync(join(tmpdir(), 'airlock-run-ids-'));
  const id = '2048000200';
  fs.symlinkSync(`${process.pid.toString(36)}.1`, join(dir, id)); // a dead owner (our pid, another start time)
  const real = fs.readdirSync;
  // While this sweep reads /proc: another sweeper frees the id and a live run claims it.
  fs.readdirSync = ((p: string, ...rest: unknown[]) => {
    if (p === '/proc' && fs.readlinkSync(join(dir, id)) !== ownerTag()) {
      fs.unlinkSync(join(dir, id));
      fs.symlinkSync(ownerTag(), join(dir, id));
    }
    return (real as (...a: unknown[]) => unknown)(p, ...rest);
  }) as typeof fs.readdirSync;
  syncBuiltinESMExports();
  t.after(() => {
    fs.readdirSync = real;
    syncBuiltinESMExports();
  });
  const errors: string[] = [];
  const freed = sweepRunIdClaims(dir, errors);
  fs.readdirSync = real;
  syncBuiltinESMExports();
  assert.equal(fs.lstatSync(join(dir, id), { throwIfNoEntry: false }) ? readlinkSync(join(dir, id)) : 'removed', ownerTag(), `the live claim was removed: the next claim of the id shares it with a live run (${JSON.stringify({ freed, errors })})`);
});
