import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Action } from '../../src/action/action.js';
import { judge } from '../../src/judge/judge.js';
import type { Observation } from '../../src/sandbox/types.js';

// The judge's rules on hand-made observations (pure logic; the real runs are in test/pipeline and
// test/sandbox): any false compliance forbids PROMOTE, every section-13 hard failure is a BLOCK.

const action = (over: Partial<Action> = {}): Action => ({
  id: 'a1',
  source: 'action-descriptor',
  lane: 'ns',
  kind: 'TEST',
  preconditions: { pathsExist: [], networkAvailable: false, userIdle: false },
  cooldownOnRepeat: false,
  run: { kind: 'argv', argv: ['/bin/true'] },
  inputs: [],
  outputsExpected: [],
  scope: { paths: ['/srv/app'], recursive: true },
  effects: { create: ['/srv/app/new.txt'], modify: [], delete: [], network: false, systemStateChange: false },
  limits: { wallMs: 1000, cpuMs: 1000, memoryBytes: 1 << 26, diskBytes: 1 << 20, files: 1000, pids: 8, stdoutBytes: 1024, stderrBytes: 1024 },
  network: { mode: 'none', allowlist: [] },
  risk: 'LOW',
  confirmationRequired: false,
  rollbackSupported: true,
  sandboxRequired: true,
  display: '/bin/true',
  ...over,
});

const stream = { bytes: Buffer.alloc(0), totalBytes: 0, sha256: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', truncated: false };

const clean = (over: Partial<Observation> = {}): Observation =>
  ({
    runId: 'ns-1',
    startedAt: '2026-11-24T00:00:00.000Z',
    endedAt: '2026-11-24T00:00:00.010Z',
    wallMs: 10,
    exit: { code: 0, signal: null, source: 'tracer' },
    status: 'SUCCESS',
    reason: 'exited with 0',
    limitsExceeded: [],
    stdout: stream,
    stderr: stream,
    resources: { cpuUserMs: 1, cpuSystemMs: 1, peakMemoryBytes: 1000, diskWriteBytes: 0, networkBytesIn: 0, networkBytesOut: 0, wallMs: 10, unmeasured: {}, basis: {} },
    sideEffects: { bwrapPid: 1, programPid: 2, processesSpawned: { count: 1, threads: 0, executables: [], outlivedProgram: 0 }, signalsSent: [], networkAttempts: [], privilegedSyscalls: [], deviceAccess: [], fileAccess: [], unparsedLines: 0 },
    fs: { out: [], scopes: [{ hostPath: '/srv/app', kind: 'dir', root: { ident: '1:2', uid: 0, gid: 0 }, mechanism: 'host-overlayfs', changes: [{ change: 'added', path: '/srv/app/new.txt', type: 'file', mode: 0o100644, size: 1, sha256After: 'a'.repeat(64) }] }] },
    inputs: [],
    host: { bwrapVersion: '0.8.0', cgroupVersion: 1, hostUid: 65534, sandboxUid: 65534, seccomp: true, syscallTracer: 'airlock-tracer', outMechanism: 'tmpfs-size', limits: [{ limit: 'wallMs', enforcedBy: 'host timer' }] },
    problems: [],
    ...over,
  }) as Observation;

const falses = (j: ReturnType<typeof judge>) => Object.entries(j.compliance).filter(([, v]) => !v).map(([k]) => k);

test('a clean, declared run is PROMOTEd with every compliance true', () => {
  const j = judge(action(), clean());
  assert.equal(j.verdict, 'PROMOTE');
  assert.deepEqual(falses(j), []);
});

test('TIMEOUT is a BLOCK: resources not within limits', () => {
  const j = judge(action(), clean({ status: 'TIMEOUT', reason: 'wall time 1000 ms exceeded', limitsExceeded: ['wallMs'], exit: { code: null, signal: 'SIGKILL', source: 'tracer' } }));
  assert.equal(j.verdict, 'BLOCK');
  assert.deepEqual(falses(j), ['resources_within_limits']);
  assert.ok(j.reasons.some((r) => r.startsWith('resource limits exceeded (wallMs)')), j.reasons.join('; '));
});

test('SANDBOX_ERROR is a BLOCK: sandbox requirements not met', () => {
  const j = judge(action(), clean({ status: 'SANDBOX_ERROR', reason: 'bwrap could not set up the sandbox', exit: { code: null, signal: null, source: 'none' } }));
  assert.equal(j.verdict, 'BLOCK');
  assert.ok(falses(j).includes('sandbox_requirements_met'));
  assert.ok(j.reasons.includes('sandbox error: bwrap could not set up the sandbox'));
});

test('a limit the run reached is said even when the sandbox then failed', () => {
  const j = judge(action(), clean({ status: 'SANDBOX_ERROR', reason: 'the Monty worker failed: Error: x', limitsExceeded: ['files'], exit: { code: null, signal: null, source: 'none' } }));
  assert.equal(j.verdict, 'BLOCK');
  assert.ok(j.reasons.some((r) => r.startsWith('resource limits exceeded (files)')), j.reasons.join('; '));
});

test('an unverifiable diff is a BLOCK (and rollback is not possible)', () => {
  const j = judge(action(), clean({ fs: { out: [], scopes: [{ hostPath: '/srv/app', kind: 'dir', root: { ident: '1:2', uid: 0, gid: 0 }, mechanism: 'host-overlayfs', changes: null, error: 'the scope diff failed: EIO' }] } }));
  assert.equal(j.verdict, 'BLOCK');
  assert.deepEqual(falses(j).sort(), ['effects_within_declaration', 'rollback_possible', 'within_scope']);
  assert.ok(j.reasons.some((r) => r.startsWith('filesystem diff cannot be verified: the scope diff failed: EIO')));
});

test('a limit the host could only report, not enforce, is a BLOCK', () => {
  const obs = clean();
  obs.host.limits.push({ limit: 'memoryBytes', enforcedBy: null, reportedOnlyReason: 'no memory cgroup controller' });
  const j = judge(action(), obs);
  assert.equal(j.verdict, 'BLOCK');
  assert.deepEqual(falses(j), ['sandbox_requirements_met']);
  assert.ok(j.reasons.includes('limits only reported, not enforced on this host: memoryBytes'));
});

test('unobserved side effects forbid PROMOTE: privileged, device and network compliance are unknown, so false', () => {
  const j = judge(action(), clean({ sideEffects: null, sideEffectsUnavailable: 'no syscall tracer on this host' }));
  assert.equal(j.verdict, 'BLOCK');
  assert.deepEqual(falses(j).sort(), ['no_device_access', 'no_privileged_syscalls', 'no_undeclared_network']);
});

test('an undeclared change and a change outside the scope are BLOCKs, each named', () => {
  const obs = clean();
  obs.fs.scopes[0]!.changes!.push({ change: 'modified', path: '/srv/app/config', type: 'file', mode: 0o100644, size: 2, sha256Before: 'b'.repeat(64), sha256After: 'c'.repeat(64) });
  obs.fs.out = [{ change: 'added', path: '/out/x', type: 'file', mode: 0o100644, size: 1, sha256After: 'd'.repeat(64) }];
  const j = judge(action(), obs);
  assert.equal(j.verdict, 'BLOCK');
  assert.ok(j.reasons.includes('undeclared filesystem effect: modified /srv/app/config'));
  assert.ok(j.reasons.includes('added /out/x is outside the declared scope'), 'a descriptor has no /out');
});

test('soft findings alone ask for a person: HIGH risk, a non-zero exit, a declared confirmation', () => {
  assert.equal(judge(action({ risk: 'HIGH' }), clean()).verdict, 'REQUIRE_CONFIRMATION');
  assert.equal(judge(action({ confirmationRequired: true }), clean()).verdict, 'REQUIRE_CONFIRMATION');
  const failed = judge(action(), clean({ status: 'FAILURE', reason: 'exited with 1', exit: { code: 1, signal: null, source: 'tracer' } }));
  assert.equal(failed.verdict, 'REQUIRE_CONFIRMATION');
  assert.deepEqual(falses(failed), []);
  assert.equal(judge(action({ risk: 'CRITICAL' }), clean()).verdict, 'BLOCK');
});

test('refused file accesses and processes left running ask for a person; a name with control characters is a BLOCK', () => {
  const withFiles = clean();
  withFiles.sideEffects!.fileAccess = [
    { path: '/etc/shadow', syscall: 'openat', access: 'read', result: null },
    { path: '/etc/x', syscall: 'openat', access: 'write', result: 'EROFS' },
  ];
  const j = judge(action(), withFiles);
  assert.equal(j.verdict, 'REQUIRE_CONFIRMATION');
  assert.deepEqual(falses(j), []);
  assert.ok(j.reasons.includes('writes outside /out, /tmp and the declared scope were attempted: /etc/x (EROFS)'), j.reasons.join('; '));
  assert.ok(j.reasons.includes('reads of host-secret paths were attempted (they are not in the sandbox): /etc/shadow'));

  const daemon = clean();
  daemon.sideEffects!.processesSpawned.outlivedProgram = 2;
  assert.equal(judge(action(), daemon).verdict, 'REQUIRE_CONFIRMATION');
  // a run the host killed ends every task at once: no finding from the order they ended in
  const killed = clean({ status: 'TIMEOUT', reason: 'wall time exceeded', limitsExceeded: ['wallMs'] });
  killed.sideEffects!.processesSpawned.outlivedProgram = 2;
  assert.ok(!judge(action(), killed).reasons.some((r) => r.includes('still running')));

  const evil = clean();
  evil.fs.scopes[0]!.changes!.push({ change: 'added', path: '/srv/app/a\nb', type: 'file', mode: 0o100644, size: 1, sha256After: 'e'.repeat(64) });
  const e = judge(action({ effects: { ...action().effects, create: ['/srv/app/*'] } }), evil);
  assert.equal(e.verdict, 'BLOCK');
  assert.ok(e.reasons.some((r) => r.includes('has control characters in its name')), e.reasons.join('; '));
});

test('scopes: a non-recursive scope covers its direct children only; deleting a declared directory covers its contents', () => {
  const flat = action({ scope: { paths: ['/srv/app'], recursive: false }, effects: { create: ['/srv/app/new.txt', '/srv/app/sub/deep.txt'], modify: [], delete: [], network: false, systemStateChange: false } });
  const obs = clean();
  obs.fs.scopes[0]!.changes = [
    { change: 'added', path: '/srv/app/new.txt', type: 'file', mode: 0o100644, size: 1, sha256After: 'a'.repeat(64) },
    { change: 'added', path: '/srv/app/sub/deep.txt', type: 'file', mode: 0o100644, size: 1, sha256After: 'b'.repeat(64) },
  ];
  const j = judge(flat, obs);
  assert.deepEqual(j.reasons.filter((r) => r.includes('outside the declared scope')), ['added /srv/app/sub/deep.txt is outside the declared scope']);

  const rm = action({ effects: { create: [], modify: [], delete: ['/srv/app/old'], network: false, systemStateChange: false } });
  const gone = clean();
  gone.fs.scopes[0]!.changes = ['/srv/app/old', '/srv/app/old/a.txt', '/srv/app/old/sub', '/srv/app/old/sub/b.txt'].map((path) => ({ change: 'deleted' as const, path, type: path.endsWith('.txt') ? ('file' as const) : ('dir' as const), mode: 0o100644, size: 1, ...(path.endsWith('.txt') ? { sha256Before: 'c'.repeat(64) } : {}) }));
  assert.equal(judge(rm, gone).verdict, 'PROMOTE', judge(rm, gone).reasons.join('; '));
  // the same contents deleted while the directory itself stays: not covered
  gone.fs.scopes[0]!.changes = gone.fs.scopes[0]!.changes!.filter((c) => c.path !== '/srv/app/old');
  assert.equal(judge(rm, gone).verdict, 'BLOCK');
});
