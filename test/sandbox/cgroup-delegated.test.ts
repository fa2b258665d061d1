// Which cgroup subtree a non-root user may use (src/sandbox/cgroup/delegated.ts), read from folders
// laid out like the cgroup hierarchies, and the doctor's prediction of what a run will get.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { delegatedV1, delegatedV2, ownV2Path } from '../../src/sandbox/cgroup/delegated.js';
import { planLimits, runOutlook } from '../../src/sandbox/doctor.js';

const uid = process.getuid?.() ?? 0;

function tree(): string {
  return mkdtempSync(join(tmpdir(), 'airlock-cgfake-'));
}

test('v1: the per-controller folders delegated to the user are the bases; nothing delegated says the fix', () => {
  const t = tree();
  try {
    const mounts = { memory: join(t, 'memory'), pids: join(t, 'pids'), cpuacct: join(t, 'cpuacct'), freezer: join(t, 'freezer') };
    for (const m of Object.values(mounts)) mkdirSync(m);
    const none = delegatedV1(mounts, 'alice', uid);
    assert.equal(none.usable, false);
    assert.equal(none.fix, 'as root: airlock setup --delegate alice');
    mkdirSync(join(mounts.memory, 'airlock-alice'));
    mkdirSync(join(mounts.pids, 'airlock-alice'));
    const some = delegatedV1(mounts, 'alice', uid);
    assert.equal(some.usable, true);
    assert.deepEqual(some.controllers.sort(), ['memory', 'pids']);
    assert.equal(some.bases.memory, join(mounts.memory, 'airlock-alice'));
    assert.match(some.detail, /not delegated: cpuacct, freezer/);
    assert.deepEqual(some.delegation && some.delegation.kind, 'delegated');
    // A folder owned by someone else is not a delegation to us.
    assert.equal(delegatedV1(mounts, 'alice', uid + 1).usable, false);
  } finally {
    rmSync(t, { recursive: true, force: true });
  }
});

test('v2: the topmost folder we own on our own cgroup path is the subtree; a delegated folder we are outside of is not usable, and says why', () => {
  const t = tree();
  try {
    // /user.slice (not ours: simulated by asking as another uid below) / scope (ours) / leaf
    const scope = join(t, 'user.slice', 'app.scope');
    mkdirSync(join(scope, 'airlock-host'), { recursive: true });
    for (const d of [scope, join(scope, 'airlock-host')]) writeFileSync(join(d, 'cgroup.procs'), '');
    writeFileSync(join(scope, 'cgroup.controllers'), 'cpu memory pids\n');
    writeFileSync(join(t, 'user.slice', 'cgroup.procs'), '');
    const self = '0::/user.slice/app.scope/airlock-host\n';
    assert.equal(ownV2Path(self), '/user.slice/app.scope/airlock-host');
    assert.equal(ownV2Path('0::/../x\n'), null);
    // Everything here is ours (a temp dir), so the walk stops at the first level: user.slice.
    const top = delegatedV2(t, 'alice', uid, self);
    assert.equal(top.usable, false, 'user.slice has no controllers for its children');
    writeFileSync(join(t, 'user.slice', 'cgroup.controllers'), 'memory pids\n');
    const ok = delegatedV2(t, 'alice', uid, self);
    assert.equal(ok.usable, true);
    assert.equal(ok.bases.unified, join(t, 'user.slice'));
    assert.deepEqual(ok.controllers, ['memory', 'pids']);
    // Not ours at all: not usable, and the fix names the systemd scope and the setup command.
    const other = delegatedV2(t, 'alice', uid + 1, self);
    assert.equal(other.usable, false);
    assert.match(other.fix ?? '', /systemd-run --user --scope -p Delegate=yes/);
    assert.match(other.fix ?? '', /airlock setup --delegate alice/);
  } finally {
    rmSync(t, { recursive: true, force: true });
  }
});

test('the outlook says a run will be BLOCKed without memory and pids cgroups, and names the fix; with them, nothing', () => {
  const base = { tmpfsSizeCaps: { hostOut: false, sandboxTmp: true, detail: '' }, prlimitBinary: '/usr/bin/prlimit', perlBinary: '/usr/bin/perl', isRoot: false, strace: { path: '/usr/bin/strace', version: '6' }, blockers: [] };
  const none = { ...base, cgroup: { version: 1 as const, controllers: [], mounts: {}, swapAccounting: false, usable: false, bases: {}, delegation: null, detail: 'nothing delegated', fix: 'as root: airlock setup --delegate alice' } };
  const limits = planLimits(none);
  const mem = limits.find((l) => l.limit === 'memoryBytes')!;
  assert.deepEqual([mem.enforced, mem.mechanism], [false, 'rlimit']);
  const o = runOutlook({ ...none, limits }, false);
  assert.deepEqual(o.blockedBecause, ['limits not enforced: memoryBytes, pids', 'not measurable without a cgroup: CPU time, peak memory']);
  assert.equal(o.fix, 'as root: airlock setup --delegate alice');
  const some = { ...base, cgroup: { ...none.cgroup, controllers: ['memory' as const, 'pids' as const, 'cpuacct' as const], usable: true, delegation: { kind: 'delegated' as const, user: 'alice', via: '' }, fix: undefined } };
  const l2 = planLimits(some);
  assert.equal(l2.find((l) => l.limit === 'memoryBytes')?.mechanism, 'cgroup-delegated');
  assert.deepEqual(runOutlook({ ...some, limits: l2 }, false), { blockedBecause: [] });
  // No tracer usable (not built, or yama refuses its attach) and no strace: side effects unobserved,
  // every run BLOCKed. The host tracer alone, an ordinary user's too, is enough.
  assert.match(runOutlook({ ...some, limits: l2, strace: null }, false).blockedBecause.join(), /side effects cannot be observed/);
  assert.deepEqual(runOutlook({ ...some, limits: l2, strace: null }, true), { blockedBecause: [] });
});
