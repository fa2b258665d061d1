// How a VM guest's idle CPUs wake (src/sandbox/idle-cpus.ts): doctor's "idle CPUs" line, and
// `airlock setup --poll-idle-cpus` (root, a KVM guest with haltpoll).
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { HALTPOLL_PARAM as REAL_POLL, IDLE_POLL_NS, pollIdleCpus, probeIdleCpus } from '../../src/sandbox/idle-cpus.js';
import { airlock, airlockAsNobody } from '../helpers/cli.js';

const root = process.getuid?.() === 0;

/** A folder laid out as /sys for the two files read. */
function fakeSys(driver: string | null, pollNs: string | null): string {
  const sys = mkdtempSync(join(tmpdir(), 'airlock-sys-'));
  const put = (rel: string, text: string) => {
    mkdirSync(dirname(join(sys, rel)), { recursive: true });
    writeFileSync(join(sys, rel), text);
  };
  if (driver !== null) put('devices/system/cpu/cpuidle/current_driver', `${driver}\n`);
  if (pollNs !== null) put('module/haltpoll/parameters/guest_halt_poll_ns', `${pollNs}\n`);
  return sys;
}

test('the idle driver and haltpoll\'s polling time are read as /sys gives them', () => {
  assert.deepEqual(probeIdleCpus(fakeSys('haltpoll', '0')), { driver: 'haltpoll', pollNs: 0 });
  assert.deepEqual(probeIdleCpus(fakeSys('haltpoll', '200000')), { driver: 'haltpoll', pollNs: 200_000 });
  assert.deepEqual(probeIdleCpus(fakeSys('intel_idle', '0')), { driver: 'intel_idle', pollNs: null }, 'a polling time counts only under haltpoll');
  assert.deepEqual(probeIdleCpus(fakeSys(null, null)), { driver: null, pollNs: null });
  assert.deepEqual(probeIdleCpus(fakeSys('haltpoll', 'junk')), { driver: 'haltpoll', pollNs: null });
});

test('setting the polling (root) writes haltpoll\'s parameter once, says when it already polled, and refuses another driver', { skip: !root ? 'needs root' : false }, () => {
  const sys = fakeSys('haltpoll', '0');
  assert.deepEqual(pollIdleCpus(sys), { ok: true, already: false, before: 0 });
  assert.equal(readFileSync(join(sys, 'module/haltpoll/parameters/guest_halt_poll_ns'), 'utf8'), String(IDLE_POLL_NS));
  assert.deepEqual(pollIdleCpus(sys), { ok: true, already: true, before: IDLE_POLL_NS });
  const other = pollIdleCpus(fakeSys('intel_idle', null));
  assert.equal(other.ok, false);
  assert.equal(!other.ok && other.problem.code, 'SETUP_POLL_NOT_HALTPOLL');
});

test('setup --poll-idle-cpus is refused for a user who is not root (SETUP_POLL_NOT_ROOT, exit 2)', { skip: !root ? 'needs root (runs it as nobody)' : false }, () => {
  const r = airlockAsNobody(['setup', '--poll-idle-cpus']);
  assert.equal(r.code, 2, r.stdout + r.stderr);
  assert.match(r.stderr, /SETUP_POLL_NOT_ROOT: only root can change how idle CPUs wait/);
});

test('doctor\'s "idle CPUs" line says what this host\'s /sys says, with the fix where idle vCPUs halt at once', () => {
  const real = probeIdleCpus();
  const j = JSON.parse(airlock(['doctor', '--json']).stdout) as { idleCpus: unknown };
  assert.deepEqual(j.idleCpus, real);
  const text = airlock(['doctor']).stdout;
  const line = text.split('\n').find((l) => l.startsWith('idle CPUs'));
  assert.ok(line, 'doctor prints an "idle CPUs" line');
  if (real.driver !== 'haltpoll') assert.match(line, /nothing to set/);
  else if (real.pollNs === 0) assert.match(text, /idle CPUs\s+HALT AT ONCE: haltpoll with guest_halt_poll_ns=0[^\n]*\n\s+fix \(root\): airlock setup --poll-idle-cpus/);
  else assert.match(line, /haltpoll: an idle vCPU polls [\d.]+ µs before it halts/);
});

test('setup --poll-idle-cpus (root, in a haltpoll guest) sets the real parameter; doctor then says so; a second call changes nothing', { skip: !root || probeIdleCpus().pollNs === null ? 'needs root and a KVM guest whose cpuidle driver is haltpoll' : false }, () => {
  const before = readFileSync(REAL_POLL, 'utf8').trim();
  try {
    writeFileSync(REAL_POLL, '0');
    const first = airlock(['setup', '--poll-idle-cpus', '--json']);
    assert.equal(first.code, 0, first.stdout + first.stderr);
    assert.deepEqual(JSON.parse(first.stdout), { ok: true, guestHaltPollNs: IDLE_POLL_NS, already: false, before: 0 });
    assert.equal(readFileSync(REAL_POLL, 'utf8').trim(), String(IDLE_POLL_NS));
    assert.match(airlock(['doctor']).stdout, /idle CPUs\s+haltpoll: an idle vCPU polls 200 µs before it halts/);
    assert.match(airlock(['setup', '--poll-idle-cpus']).stdout, /idle CPUs already poll 200 µs before they halt: nothing changed/);
  } finally {
    writeFileSync(REAL_POLL, before); // a host setting: put back as found
  }
});
