// Airlock as an ordinary user (issue 19 point 1), with a real non-root user made for the test:
// before delegation doctor says memory and processes are not enforced and a run is BLOCKed with the
// fix in its reasons (and `airlock demo` fails); after `airlock setup --delegate USER` (root) the
// same run is PROMOTEd with its peak memory measured, and a memory hog is killed by the delegated
// cgroup. Then the delegation and the user are removed.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { parseCgroupMounts } from '../../src/sandbox/cgroup/index.js';
import { readOr } from '../../src/sandbox/cgroup/util.js';
import { airlock } from '../helpers/cli.js';
import { repoPath } from '../helpers/paths.js';

const root = process.getuid?.() === 0;
const hasUseradd = spawnSync('sh', ['-c', 'command -v useradd && command -v userdel && command -v runuser'], { stdio: 'ignore' }).status === 0;
const REQUEST = repoPath('examples/requests/TR-20260209-160501Z-python-stats.md');

/** Runs a command as `user` with a clean environment (their own HOME and TMPDIR, system PATH). */
function asUser(user: string, home: string, argv: string[]) {
  const path = [dirname(process.execPath), '/usr/local/bin', '/usr/bin', '/bin'].join(':');
  const r = spawnSync('runuser', ['-u', user, '--', 'env', '-i', `PATH=${path}`, `HOME=${home}`, `TMPDIR=${home}`, 'LANG=C.UTF-8', ...argv], { cwd: home, encoding: 'utf8', timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const lastLine = (s: string): string => s.trimEnd().split('\n').at(-1) ?? '';

test('rootless: before delegation every run is BLOCKed and doctor says why and how to fix it; after `airlock setup --delegate` runs are PROMOTEd with limits enforced by the delegated cgroup', { skip: !root ? 'needs root (creates a user)' : !hasUseradd ? 'useradd/runuser missing' : false, timeout: 300_000 }, () => {
  const user = `alt${randomBytes(4).toString('hex')}`;
  const made = spawnSync('useradd', ['-M', '-s', '/usr/sbin/nologin', user], { encoding: 'utf8' });
  assert.equal(made.status, 0, made.stderr);
  // The user's own workspace (only this temp folder is theirs; the repository is only read).
  const home = mkdtempSync(join(tmpdir(), 'airlock-rootless-'));
  try {
    const id = Number(spawnSync('id', ['-u', user], { encoding: 'utf8' }).stdout.trim());
    chownSync(home, id, id);
    chmodSync(home, 0o700);
    const bin = repoPath('bin/airlock');

    // The host finding everything rests on: an unprivileged bwrap can make its namespaces.
    const userns = asUser(user, home, ['bwrap', '--unshare-all', '--ro-bind', '/', '/', 'true']);
    assert.equal(userns.code, 0, `unprivileged user namespaces do not work here for a non-root user (doctor must say so): ${userns.stderr}`);

    // ---- before: nothing delegated ----
    let doc = asUser(user, home, [bin, 'doctor']);
    assert.equal(doc.code, 1, doc.stdout + doc.stderr);
    assert.match(doc.stdout, /running as non-root/);
    assert.match(doc.stdout, /\nwarm sandboxes +NO: they need root and the host syscall tracer/, 'the pool is said to be unavailable to an ordinary user');
    assert.match(doc.stdout, /\nheld launchers +NO: they need root and the host syscall tracer/, 'so is the held launcher');
    assert.match(doc.stdout, /\n {2}memory +rlimit only, NOT COUNTED AS ENFORCED +.*RLIMIT_AS/);
    assert.match(doc.stdout, /\n {2}processes +rlimit only, NOT COUNTED AS ENFORCED +.*RLIMIT_NPROC/);
    assert.match(doc.stdout, /\n {2}wall time +enforced by the host/);
    assert.match(lastLine(doc.stdout), new RegExp(`^every ns run will be BLOCKed here: limits not enforced: memoryBytes, pids; .*Fix: as root: airlock setup --delegate ${user}$`));

    let run = asUser(user, home, [bin, 'run', REQUEST, '--workspace', join(home, 'ws'), '--json']);
    assert.equal(run.code, 0, run.stderr);
    let sr = JSON.parse(run.stdout) as { verdict: { recommended_action: string; reasons: string[] }; resources: { peak_memory_bytes: number | null } };
    assert.equal(sr.verdict.recommended_action, 'BLOCK');
    const reasons = sr.verdict.reasons.join('\n');
    assert.match(reasons, /limits only reported, not enforced on this host: memoryBytes, pids/);
    assert.match(reasons, new RegExp(`peakMemoryBytes \\(.*fix: as root: airlock setup --delegate ${user}\\)`));
    assert.equal(sr.resources.peak_memory_bytes, null);

    // Meanwhile the backstop: RLIMIT_NPROC on the sandbox's user namespace stops a fork spree at --pids.
    const forks = asUser(user, home, [bin, 'exec', '--workspace', join(home, 'ws'), '--pids', '8', '--timeout', '30', '--', 'sh', '-c', 'for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 3 & done; wait']);
    assert.equal(forks.code, 126, forks.stderr);
    assert.match(forks.stderr, /Cannot fork/);

    // `airlock demo` quarantines what it expected to pass: it must not exit 0.
    const demo = asUser(user, home, [bin, 'demo', '--workspace', join(home, 'demo1')]);
    assert.equal(demo.code, 1, demo.stdout + demo.stderr);
    assert.match(demo.stderr, /airlock demo: FAILED: \d of 3 bundled requests/);

    // A non-root user cannot delegate to themselves.
    const self = asUser(user, home, [bin, 'setup', '--delegate', user]);
    assert.equal(self.code, 2);
    assert.match(self.stderr, /SETUP_NOT_ROOT/);

    // ---- root delegates once ----
    const setup = airlock(['setup', '--delegate', user, '--json']);
    assert.equal(setup.code, 0, setup.stderr);
    const dirs = (JSON.parse(setup.stdout) as { dirs: string[] }).dirs;
    assert.ok(dirs.length > 0);
    for (const d of dirs) assert.equal(statSync(d).uid, id, `${d} is the user's`);

    // ---- after ----
    doc = asUser(user, home, [bin, 'doctor']);
    assert.equal(doc.code, 0, doc.stdout + doc.stderr);
    assert.match(doc.stdout, /\n {2}memory +enforced by a delegated cgroup/);
    assert.match(doc.stdout, /\n {2}processes +enforced by a delegated cgroup/);
    assert.match(doc.stdout, /\n {2}CPU time +enforced by a delegated cgroup/);
    assert.match(lastLine(doc.stdout), /^the ns lane can run here, and runs can be PROMOTEd \(limits enforced through the cgroup delegated to this user\)\.$/);

    run = asUser(user, home, [bin, 'run', REQUEST, '--workspace', join(home, 'ws'), '--json']);
    assert.equal(run.code, 0, run.stderr);
    sr = JSON.parse(run.stdout) as typeof sr;
    assert.equal(sr.verdict.recommended_action, 'PROMOTE', sr.verdict.reasons.join('; '));
    assert.ok(typeof sr.resources.peak_memory_bytes === 'number' && sr.resources.peak_memory_bytes > 0, 'peak memory measured in the delegated cgroup');

    // Attack: a program that allocates without end. The delegated cgroup's limit kills it.
    writeFileSync(join(home, 'hog.py'), 'b = []\nwhile True:\n    b.append(bytearray(16 << 20))\n');
    chownSync(join(home, 'hog.py'), id, id);
    const hog = asUser(user, home, [bin, 'exec', '--workspace', join(home, 'ws'), '--memory', '64', '--timeout', '60', '--in', join(home, 'hog.py'), '--', 'python3', '/in/hog.py']);
    assert.equal(hog.code, 126, hog.stderr);
    assert.match(hog.stderr, /RESOURCE_KILLED/);
    assert.match(hog.stderr, /resource limits exceeded \(memoryBytes\): memory limit 67108864 bytes: the kernel OOM-killed a process/);

    // Nothing of the runs is left in the delegated folders (every run removes its own group).
    for (const d of dirs) assert.deepEqual(spawnSync('find', [d, '-mindepth', '1', '-type', 'd'], { encoding: 'utf8' }).stdout, '', `${d} has leftover groups`);
  } finally {
    const un = airlock(['setup', '--undelegate', user, '--json']);
    rmSync(home, { recursive: true, force: true });
    spawnSync('userdel', [user]);
    assert.equal(un.code, 0, un.stdout + un.stderr);
    const { v1, v2 } = parseCgroupMounts(readOr('/proc/self/mountinfo') ?? '');
    for (const m of [...Object.values(v1), ...v2]) assert.equal(existsSync(join(m, `airlock-${user}`)), false, `${m}/airlock-${user} removed`);
  }
});
