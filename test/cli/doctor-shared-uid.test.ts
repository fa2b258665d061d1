// The sandbox's host user: Airlock's own (airlock-sandbox, made by setup), never the host's shared
// `nobody` when that exists. Another process running as the sandbox's uid could reach live runs'
// /out and scope folders as the sandbox can: `airlock doctor` names such processes.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { airlock, airlockAsNobody } from '../helpers/cli.js';
import { dedicatedSandboxUser } from '../helpers/sandbox-user.js';

const root = process.getuid?.() === 0;

test('airlock doctor names the sandbox\'s own host user, and warns about other processes running as it (only those)', { skip: !root ? 'needs root (the sandbox runs as the caller otherwise)' : false }, async () => {
  const own = dedicatedSandboxUser();
  const quiet = airlock(['doctor']);
  assert.match(quiet.stdout, new RegExp(`\\nsandbox uid +host airlock-sandbox \\(${own.uid}\\), Airlock's own user; uid 65534 inside`), quiet.stdout);
  assert.match(quiet.stdout, /\nrun uids +each sandbox its own uid and gid from \d+-\d+, a run that may write a scope too, seeing the sandbox user's files there as its own through an idmapped mount/, quiet.stdout);
  // A process of the host's nobody is no longer the sandbox's concern; one of the sandbox's uid is.
  const nobody = spawn('/bin/sleep', ['30'], { uid: 65534, gid: 65534, stdio: 'ignore' });
  const intruder = spawn('/bin/sleep', ['30'], { uid: own.uid, gid: own.gid, stdio: 'ignore' });
  try {
    await new Promise((r) => setTimeout(r, 100)); // both have exec'd
    const loud = airlock(['doctor']);
    assert.match(loud.stdout, new RegExp(`\\n +WARNING: [0-9]+ other process\\(es\\) run as uid ${own.uid} \\([^)]*${intruder.pid} sleep[^)]*\\): they can reach live runs' /out and scope folders`), loud.stdout);
    assert.doesNotMatch(loud.stdout, new RegExp(`\\b${nobody.pid} sleep\\b`), 'nobody\'s processes are not the sandbox user\'s');
    if (!/WARNING/.test(quiet.stdout)) assert.match(quiet.stdout, /; uid 65534 inside: no other process runs as it now\n/, quiet.stdout);
  } finally {
    nobody.kill('SIGKILL');
    intruder.kill('SIGKILL');
  }
});

test('airlock doctor says when scope writers would share the sandbox user\'s uid: no idmapped mounts on TMPDIR\'s filesystem (ramfs)', { skip: !root ? 'needs root' : false }, (t) => {
  const tmp = mkdtempSync(join('/var/tmp', 'airlock-doctor-ramfs-'));
  assert.equal(spawnSync('mount', ['-t', 'ramfs', '-o', 'mode=1777', 'none', tmp]).status, 0);
  t.after(() => {
    spawnSync('umount', [tmp]);
    rmSync(tmp, { recursive: true, force: true });
  });
  const r = airlock(['doctor'], { env: { TMPDIR: tmp } });
  assert.match(r.stdout, /\nrun uids +each sandbox its own uid and gid from \d+-\d+, but a run that may write a scope has the SANDBOX USER'S UID \(its own gid\): idmapped scope mounts fail here \(mount_setattr \(the filesystem may not support idmapped mounts\): Invalid argument/, r.stdout);
  assert.deepEqual(readdirSync(tmp), [], 'the probe left nothing');
});

test('airlock setup --sandbox-user: again on a host that has it changes nothing; refused without root (SETUP_NOT_ROOT, exit 2)', { skip: !root ? 'needs root' : false }, () => {
  const own = dedicatedSandboxUser();
  const again = airlock(['setup', '--sandbox-user', '--json']);
  assert.equal(again.code, 0, again.stdout + again.stderr);
  assert.deepEqual(JSON.parse(again.stdout), { ok: true, created: false, user: { name: 'airlock-sandbox', uid: own.uid, gid: own.gid } });
  const r = airlockAsNobody(['setup', '--sandbox-user']);
  assert.equal(r.code, 2, r.stdout + r.stderr);
  assert.match(r.stderr, /SETUP_NOT_ROOT: making a system user needs root: sudo airlock setup --sandbox-user/);
});
