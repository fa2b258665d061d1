// Review of the idmapped scope overlays (a scope writer's uid of its own, native/idmap.c): attacks on
// when a run falls back to the sandbox user's uid. Root only (per-run ids are root's).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { nativeBinaryPath } from '../../src/base/native.js';
import { ScopeFs } from '../../src/base/scope-fs.js';
import { doctor } from '../../src/sandbox/doctor.js';
import { hostOps } from '../../src/sandbox/ns/hostops.js';
import { mountScopeOverlay } from '../../src/sandbox/ns/scopes.js';
import { idmapErrorHolds, mounter } from '../../src/sandbox/ns/staging.js';
import { RUN_ID_RANGE } from '../../src/sandbox/run-ids.js';
import { run, text } from './helpers-ns.js';
import { dedicatedSandboxUser } from '../helpers/sandbox-user.js';

const root = process.getuid?.() === 0;

test('attack: a scope owner who kills its agent while the idmapped overlay is made gets NS_SCOPE_UNSAFE, never NS_SCOPE_IDMAP (which would rerun with the sandbox user\'s uid and keep that for the scope)', { skip: !root ? 'root only' : false }, async (t) => {
  const U = 4247; // the scope's owner: the agent runs as it, so it may kill it at any moment
  const scope = mkdtempSync(join('/var/tmp', 'airlock-idmap-kill-'));
  chownSync(scope, U, U);
  chmodSync(scope, 0o755);
  writeFileSync(join(scope, 'mine.txt'), 'mine\n');
  const staging = mkdtempSync(join(tmpdir(), 'airlock-idmap-kill-'));
  const mounted: string[] = [];
  const c = await doctor();
  const mnt = mounter(c, hostOps(c.perlBinary));
  t.after(async () => {
    for (const m of mounted) await mnt.unmount(m);
    rmSync(scope, { recursive: true, force: true });
    rmSync(staging, { recursive: true, force: true });
  });
  const seen: Record<string, number> = {};
  // The kill lands at some point of the helper's round trip: before open_tree (its descriptor is
  // gone), or after (the overlay holds the tree it cloned from the agent's descriptor: harmless).
  for (let i = 0; i < 40; i++) {
    const [upper, work, merged] = ['upper', 'work', 'merged'].map((n) => join(staging, String(i), n)) as [string, string, string];
    for (const d of [upper, work, merged]) mkdirSync(d, { recursive: true });
    const fs = await ScopeFs.open(scope, 'dir');
    try {
      process.kill(Number(fs.rootByDescriptor.split('/')[2]), 'SIGKILL'); // as the owner could
      const p = await mountScopeOverlay(mnt, { hostPath: scope, kind: 'dir', fs, fileRel: '', openedMs: Date.now(), upper, work, merged }, mounted, false, { from: dedicatedSandboxUser().uid, to: RUN_ID_RANGE.first });
      const k = p?.code ?? 'mounted';
      seen[k] = (seen[k] ?? 0) + 1;
      for (const m of mounted.splice(0)) await mnt.unmount(m);
    } finally {
      fs.close();
    }
  }
  assert.equal(seen.NS_SCOPE_IDMAP, undefined, `a killed agent was taken for a filesystem that cannot be idmapped: ${JSON.stringify(seen)}`);
});

test('the idmap helper takes hex digits and decimal ids only, and a huge field in linear time', { skip: !root ? 'root only' : nativeBinaryPath('airlock-idmap') === null ? 'airlock-idmap is not built' : false }, (t) => {
  const d = mkdtempSync(join(tmpdir(), 'airlock-idmap-parse-'));
  t.after(() => {
    while (readFileSync('/proc/self/mountinfo', 'utf8').includes(join(d, 'm'))) if (spawnSync('umount', [join(d, 'm')]).status !== 0) break; // a lax helper mounted them
    rmSync(d, { recursive: true, force: true });
  });
  for (const n of ['l', 'u', 'w', 'm']) mkdirSync(join(d, n));
  const hex = (x: string): string => Buffer.from(x).toString('hex');
  const req = (id: number, f: string[]): string => `${id} O ${f.join(' ')}\n`;
  const good = (k: string): string => hex(join(d, k));
  const input = [
    req(1, [good('l'), '-1-1', good('w'), good('m'), hex('0'), hex('999'), hex('5000')]), // sscanf's %2x read "-1" as 0xff: a relative upper dir
    req(2, [good('l'), good('u'), good('w'), good('m'), hex('0'), hex(' 999'), hex('5000')]),
    req(3, [good('l'), good('u'), good('w'), good('m'), hex('0'), hex('999'), hex('+5000')]),
    `4 O ${'aa'.repeat(2_000_000)}\n`, // a scanf per byte over the whole string: quadratic
  ].join('');
  const t0 = Date.now();
  const p = spawnSync(nativeBinaryPath('airlock-idmap')!, [], { input, encoding: 'utf8', timeout: 20_000 });
  const answers = p.stdout.trim().split('\n').map((l) => l.split(' ').slice(0, 2).join(' '));
  assert.deepEqual(answers, ['1 22', '2 22', '3 22', '4 22'], `${p.stdout} ${p.error}`);
  assert.ok(Date.now() - t0 < 5000, `${Date.now() - t0} ms`);
  assert.ok(!readFileSync('/proc/self/mountinfo', 'utf8').includes(d), 'nothing was mounted');
});

// Last in this file: a failure it provokes is remembered for the rest of the process.
test('attack: a scope path that contains "(errno 38)" does not make every later scope writer of the process fall back to the sandbox user\'s uid', { skip: !root ? 'root only' : false }, async (t) => {
  const u = dedicatedSandboxUser();
  // A folder of an ordinary user's on a filesystem without idmapped mounts (NFS, many FUSE ones;
  // ramfs here), its name chosen to look like the kernel's ENOSYS in the refusal's message.
  const parent = mkdtempSync(join('/var/tmp', 'airlock-idmap-name-'));
  const odd = join(parent, 'x (errno 38)');
  mkdirSync(odd);
  assert.equal(spawnSync('mount', ['-t', 'ramfs', '-o', 'mode=0755', 'none', odd]).status, 0);
  const normal = mkdtempSync(join('/var/tmp', 'airlock-idmap-normal-'));
  t.after(() => {
    spawnSync('umount', [odd]);
    rmSync(parent, { recursive: true, force: true });
    rmSync(normal, { recursive: true, force: true });
  });
  for (const d of [odd, normal]) {
    chownSync(d, u.uid, u.gid);
    writeFileSync(join(d, 'f.txt'), 'x\n');
    chownSync(join(d, 'f.txt'), u.uid, u.gid);
  }
  const odd1 = await run(['/bin/sh', '-c', `echo y >> '${odd}/f.txt'`], { scopes: [{ hostPath: odd }] });
  assert.equal(odd1.status, 'SUCCESS', text(odd1));
  assert.equal(odd1.host.hostIds, 'own-gid', 'its own filesystem cannot be idmapped: the fallback, for it');
  const other = await run(['/bin/sh', '-c', `echo y >> ${normal}/f.txt`], { scopes: [{ hostPath: normal }] });
  assert.equal(other.status, 'SUCCESS', text(other));
  assert.equal(other.host.hostIds, 'own', `another scope's writer keeps a uid of its own (${other.host.hostIdsWhy})`);
});

test('an idmap refusal is remembered for every scope (no helper, ENOSYS), for its scope (EINVAL, EOPNOTSUPP), or not at all (anything that may pass)', () => {
  assert.equal(idmapErrorHolds(false, 'airlock-idmap is not built'), 'host');
  assert.equal(idmapErrorHolds(true, 'open_tree: Function not implemented (errno 38)'), 'host');
  assert.equal(idmapErrorHolds(true, 'mount_setattr (the filesystem may not support idmapped mounts): Invalid argument (errno 22)'), 'scope');
  assert.equal(idmapErrorHolds(true, 'the overlay over the idmapped clone: Operation not supported (errno 95)'), 'scope');
  assert.equal(idmapErrorHolds(true, 'clone(CLONE_NEWUSER): Cannot allocate memory (errno 12)'), 'once');
  assert.equal(idmapErrorHolds(true, 'the host helper stopped (exit null)'), 'once');
  // The scope's path is never in the helper's message, but a message that only mentions an errno elsewhere is not it.
  assert.equal(idmapErrorHolds(true, 'x (errno 38) y: No such file or directory (errno 2)'), 'once');
});

test('the idmap helper\'s way for kernels before 6.15 (the clone attached for the mount\'s time): the same overlay, nothing left mounted or made', { skip: !root ? 'root only' : nativeBinaryPath('airlock-idmap') === null ? 'airlock-idmap is not built' : false }, (t) => {
  const d = mkdtempSync(join(tmpdir(), 'airlock-idmap-attach-'));
  for (const n of ['l', 'u', 'w', 'm']) mkdirSync(join(d, n));
  writeFileSync(join(d, 'l', 'f'), 'x', { mode: 0o600 });
  chownSync(join(d, 'l', 'f'), 999, 995);
  t.after(() => {
    spawnSync('umount', [join(d, 'm')]);
    rmSync(d, { recursive: true, force: true });
  });
  const hex = (x: string | number): string => Buffer.from(String(x)).toString('hex');
  const to = RUN_ID_RANGE.first + 11;
  const p = spawnSync(nativeBinaryPath('airlock-idmap')!, [], { input: `1 O ${[join(d, 'l'), join(d, 'u'), join(d, 'w'), join(d, 'm'), '0', '999', String(to)].map(hex).join(' ')}\n`, encoding: 'utf8', env: { AIRLOCK_IDMAP_ATTACH: '1' }, timeout: 10_000 });
  assert.equal(p.stdout.trim(), '1 0', p.stdout);
  assert.equal(statSync(join(d, 'm', 'f')).uid, to, 'the sandbox user\'s file is the run\'s in the overlay');
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter((l) => l.includes(d));
  assert.equal(mounts.length, 1, `only the overlay on m is mounted: ${mounts.join('\n')}`);
  assert.match(mounts[0]!, / overlay airlock-scope /);
  assert.deepEqual(readdirSync(d).sort(), ['l', 'm', 'u', 'w'], 'its mount point is gone');
});
