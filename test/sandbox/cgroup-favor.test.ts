// How a sandbox's move into its cgroup goes on this host (src/sandbox/cgroup/favor.ts): doctor
// measures a real move after a pause and says whether it waits, and `airlock setup
// --favor-cgroup-moves` (root) turns the kernel's favordynmods on.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { favorsDynmods } from '../../src/sandbox/cgroup/prime.js';
import { airlock, airlockAsNobody } from '../helpers/cli.js';

const root = process.getuid?.() === 0;
// favordynmods lasts until the next reboot and recent kernels cannot turn it off: only on a machine
// that is thrown away after (CI), or when asked.
const mayChangeHost = root && (process.env.CI === 'true' || process.env.AIRLOCK_TEST_HOST_SETTINGS === '1');

function doctorJson() {
  const r = airlock(['doctor', '--json']);
  return JSON.parse(r.stdout) as { cgroup: { usable: boolean }; cgroupMoves: { favored: boolean; where: string[]; measuredMs: number | null } | null };
}

test('doctor times a real move into a cgroup after a pause, and says fast or slow (with the fix) from what it measured', { skip: !root ? 'needs root (a cgroup of its own)' : false }, () => {
  const j = doctorJson();
  if (!j.cgroup.usable) {
    assert.equal(j.cgroupMoves, null, 'no usable cgroup: nothing to measure');
    return;
  }
  assert.ok(j.cgroupMoves, 'doctor --json carries cgroupMoves');
  assert.equal(typeof j.cgroupMoves.measuredMs, 'number', 'a move was measured');
  assert.equal(j.cgroupMoves.favored, favorsDynmods(readFileSync('/proc/self/mountinfo', 'utf8')));
  const line = airlock(['doctor']).stdout.split('\n').find((l) => l.startsWith('cgroup moves'));
  assert.ok(line, 'doctor prints a "cgroup moves" line');
  if (j.cgroupMoves.favored) assert.match(line, /^cgroup moves\s+fast: favordynmods on \//);
  else assert.match(line, /^cgroup moves\s+(fast|SLOW AFTER A PAUSE): a move after a 150 ms pause took [\d.]+ ms/);
  // Its group is gone with it (named with doctor's own process: swept if it were left).
  for (const m of ['pids', 'memory']) {
    const left = spawnSync('sh', ['-c', `ls /sys/fs/cgroup/${m}/airlock 2>/dev/null | grep '^doctor-' || true`], { encoding: 'utf8' }).stdout.trim();
    assert.equal(left, '', `no doctor group left in ${m}`);
  }
});

test('setup --favor-cgroup-moves is refused for a user who is not root (SETUP_FAVOR_NOT_ROOT, exit 2)', { skip: !root ? 'needs root (runs it as nobody)' : false }, () => {
  const r = airlockAsNobody(['setup', '--favor-cgroup-moves']);
  assert.equal(r.code, 2, r.stdout + r.stderr);
  assert.match(r.stderr, /SETUP_FAVOR_NOT_ROOT: only root can change how the kernel locks cgroup moves/);
});

test('setup refuses two jobs at once (SETUP_USAGE)', () => {
  const r = airlock(['setup', '--favor-cgroup-moves', '--delegate', 'nobody']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /SETUP_USAGE: give exactly one of --delegate USER, --undelegate USER, --favor-cgroup-moves, --poll-idle-cpus, --sandbox-user or --rescan-run-ids/);
});

test('setup --favor-cgroup-moves (root) turns favordynmods on; doctor then says so; a second call changes nothing', { skip: !mayChangeHost ? 'changes a host-wide kernel setting until reboot: runs when CI=true or AIRLOCK_TEST_HOST_SETTINGS=1 (as root)' : false }, () => {
  const first = airlock(['setup', '--favor-cgroup-moves', '--json']);
  if (first.code === 3) {
    // An older kernel (before 6.1) has no such option: said, with the kernel's words.
    assert.match(first.stdout, /SETUP_FAVOR_FAILED/);
    return;
  }
  assert.equal(first.code, 0, first.stdout + first.stderr);
  const made = JSON.parse(first.stdout) as { ok: boolean; favordynmods: boolean; already: boolean; where: string };
  assert.equal(made.ok, true);
  assert.ok(favorsDynmods(readFileSync('/proc/self/mountinfo', 'utf8')), 'a cgroup mount has favordynmods');
  const j = doctorJson();
  assert.equal(j.cgroupMoves?.favored, true);
  assert.ok(j.cgroupMoves?.where.includes(made.where), `doctor names ${made.where}`);
  assert.match(airlock(['doctor']).stdout, /cgroup moves\s+fast: favordynmods on /);
  const again = airlock(['setup', '--favor-cgroup-moves', '--json']);
  assert.equal(again.code, 0);
  assert.equal((JSON.parse(again.stdout) as { already: boolean }).already, true);
  assert.match(airlock(['setup', '--favor-cgroup-moves']).stdout, /favordynmods was already on \(.+\): nothing changed/);
});
