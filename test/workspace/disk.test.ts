// The workspace's file system, as `airlock doctor` reports it: real ext4 images (with and without a
// journal) mounted on loop devices, a real tmpfs, and mountinfo lines as the kernel writes them.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { parseMountinfoLine } from '../../src/base/mountinfo.js';
import { newFileCpuUs, workspaceDisk } from '../../src/workspace/disk.js';
import { othersCanSwap } from '../../src/workspace/safety.js';
import { airlock } from '../helpers/cli.js';

const root = process.getuid?.() === 0;
const top = mkdtempSync(join(tmpdir(), 'airlock-disk-'));
const mounted: string[] = [];
after(() => {
  for (const m of mounted) spawnSync('umount', [m]);
  rmSync(top, { recursive: true, force: true });
});

/** A 32 MB ext4 image made with `mkfs.ext4 [options]`, loop-mounted; returns the mount point. */
function ext4(name: string, options: string[]): string {
  const img = join(top, `${name}.img`);
  const mnt = join(top, name);
  mkdirSync(mnt);
  for (const [cmd, args] of [['truncate', ['-s', '32M', img]], ['mkfs.ext4', ['-q', '-F', ...options, img]], ['mount', ['-o', 'loop', img, mnt]]] as const) {
    const r = spawnSync(cmd, args, { encoding: 'utf8' });
    assert.equal(r.status, 0, `${cmd} ${args.join(' ')}: ${r.stderr}`);
  }
  mounted.push(mnt);
  return mnt;
}

test('an ext4 without a journal is found, and doctor says what it costs and what to do before a recovery', { skip: !root && 'needs root (loop mounts)' }, () => {
  const mnt = ext4('nojournal', ['-O', '^has_journal']);
  const ws = join(mnt, 'ws');
  mkdirSync(ws);
  const d = workspaceDisk(ws);
  assert.equal(d.fsType, 'ext4');
  assert.equal(d.journal, false);
  assert.equal(d.mountPoint, mnt);
  assert.match(d.source, /^\/dev\/loop\d+$/);
  const r = airlock(['doctor', '--workspace', ws]);
  const line = r.stdout.split('\n').find((l) => l.startsWith('workspace disk'));
  assert.ok(line, r.stdout);
  assert.match(line, new RegExp(`${ws}: ext4 on ${d.source} \\(mounted at ${mnt}\\), NO JOURNAL; a new file costs \\d+ us of CPU here now`));
  assert.match(line, new RegExp(`run e2fsck on ${d.source} before \`airlock recover\``));
  assert.match(r.stdout, /fix: a workspace on a file system with a journal/);
  const json = JSON.parse(airlock(['doctor', '--json', '--workspace', ws]).stdout) as { workspaceDisk: { journal: boolean; newFile: { us: number } } };
  assert.equal(json.workspaceDisk.journal, false);
  assert.ok(json.workspaceDisk.newFile.us > 0);
  assert.deepEqual(readdirSync(ws), [], 'the probe leaves nothing in the workspace');
});

test('an ext4 with a journal is reported as such, with no warning', { skip: !root && 'needs root (loop mounts)' }, () => {
  const mnt = ext4('journal', []);
  const d = workspaceDisk(mnt);
  assert.equal(d.fsType, 'ext4');
  assert.equal(d.journal, true);
  const r = airlock(['doctor', '--workspace', mnt]);
  const line = r.stdout.split('\n').find((l) => l.startsWith('workspace disk')) ?? '';
  assert.match(line, /: ext4 on \/dev\/loop\d+ \(mounted at .*\), with a journal; a new file costs \d+ us/);
  assert.doesNotMatch(r.stdout, /NO JOURNAL|e2fsck/);
});

test('a workspace in memory (tmpfs) is said to be lost at reboot; one not made yet is checked at its parent and not made', () => {
  const shm = mkdtempSync('/dev/shm/airlock-disk-');
  try {
    assert.equal(workspaceDisk(shm).fsType, 'tmpfs');
    assert.equal(workspaceDisk(shm).journal, null);
    const r = airlock(['doctor', '--workspace', join(shm, 'later')]);
    const line = r.stdout.split('\n').find((l) => l.startsWith('workspace disk')) ?? '';
    assert.match(line, new RegExp(`${shm}/later \\(not made yet: checked ${shm}\\): tmpfs \\(mounted at /dev/shm\\), in memory: run records, the audit log and the promotion journal are lost at reboot$`));
    assert.deepEqual(readdirSync(shm), [], 'doctor made neither the workspace nor a probe');
  } finally {
    rmSync(shm, { recursive: true, force: true });
  }
});

test('mountinfo lines: optional fields, escaped spaces in the mount point and source; other lines are not mounts', () => {
  assert.deepEqual(parseMountinfoLine('29 1 254:0 / / rw,relatime shared:1 master:2 - ext4 /dev/vda rw,discard'), { majorMinor: '254:0', mountPoint: '/', fsType: 'ext4', source: '/dev/vda' });
  assert.deepEqual(parseMountinfoLine('40 29 7:3 / /mnt/my\\040disk rw - ext4 /dev/loop3 rw'), { majorMinor: '7:3', mountPoint: '/mnt/my disk', fsType: 'ext4', source: '/dev/loop3' });
  assert.equal(parseMountinfoLine('garbage'), null);
  assert.equal(parseMountinfoLine(''), null);
});

test('the new-file probe measures in a folder of its own, removes it, and says why when it cannot write', () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-probe-'));
  try {
    const r = newFileCpuUs(dir, 50);
    assert.ok('us' in r && r.us > 0, JSON.stringify(r));
    assert.deepEqual(readdirSync(dir), []);
    assert.deepEqual(newFileCpuUs(join(dir, 'missing')), { notTimed: `cannot make a folder in ${join(dir, 'missing')}: ENOENT` });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('doctor (as root) makes nothing in a workspace another user could swap: below a folder of theirs, or one everybody may write', { skip: !root && 'needs root (a second uid)' }, () => {
  const mine = mkdtempSync(join(tmpdir(), 'airlock-swap-'));
  try {
    const theirs = join(mine, 'alice');
    mkdirSync(join(theirs, 'ws'), { recursive: true });
    chownSync(theirs, 4242, 4242);
    assert.deepEqual(othersCanSwap(realpathSync(join(theirs, 'ws'))), `${realpathSync(theirs)} belongs to uid 4242`);
    const open = join(mine, 'open');
    mkdirSync(join(open, 'ws'), { recursive: true });
    chmodSync(open, 0o777);
    assert.match(othersCanSwap(realpathSync(join(open, 'ws'))) ?? '', /open can be written by others \(mode 0777\)$/);
    chmodSync(open, 0o1777); // sticky, like /tmp: only an entry's owner may rename it
    assert.equal(othersCanSwap(realpathSync(join(open, 'ws'))), null);
    const line = airlock(['doctor', '--workspace', join(theirs, 'ws')]).stdout.split('\n').find((l) => l.startsWith('workspace disk')) ?? '';
    assert.match(line, /a new file was not timed: another user could swap a folder on the way \(.*alice belongs to uid 4242\)/);
    assert.deepEqual(readdirSync(join(theirs, 'ws')), [], 'nothing made there');
  } finally {
    rmSync(mine, { recursive: true, force: true });
  }
});

test("an owner who swaps its workspace for a link the moment doctor's probe folder appears (as root) gets nothing made in a root folder", { skip: !root && 'needs root (a second uid)' }, async () => {
  const mine = mkdtempSync(join(tmpdir(), 'airlock-race-'));
  chmodSync(mine, 0o755);
  const victim = mkdtempSync(join(tmpdir(), 'airlock-victim-'));
  writeFileSync(join(victim, 'keep'), 'root data');
  const theirs = join(mine, 'alice');
  for (const d of [theirs, join(theirs, 'ws'), join(theirs, 'evil')]) {
    mkdirSync(d);
    chownSync(d, 4242, 4242);
  }
  // inotify tells the owner the probe folder's random name as it is made; it then points a link of
  // that name at the victim and swaps the workspace, in one step (renameat2 RENAME_EXCHANGE), for a
  // link to a folder holding it: the probe's next files would be made in the victim, as root.
  const attacker = spawn('/usr/bin/python3', ['-c', `import ctypes, os, struct, sys
d, victim = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL('libc.so.6', use_errno=True)
fd = libc.inotify_init()
libc.inotify_add_watch(fd, (d + '/ws').encode(), 0x100)
os.symlink(d + '/evil', d + '/link')
print('watching', flush=True)
buf = os.read(fd, 4096)
ln = struct.unpack_from('iIII', buf, 0)[3]
name = buf[16:16 + ln].rstrip(b'\\0').decode()
os.symlink(victim, d + '/evil/' + name)
if libc.renameat2(-100, (d + '/link').encode(), -100, (d + '/ws').encode(), 2) != 0: raise OSError(ctypes.get_errno(), 'renameat2')
print('swapped', name, flush=True)
`, theirs, victim], { uid: 4242, gid: 4242, cwd: '/', stdio: ['ignore', 'pipe', 'inherit'] });
  let said = '';
  attacker.stdout.on('data', (d: Buffer) => (said += d));
  try {
    while (!said.includes('watching')) await new Promise((r) => setTimeout(r, 20));
    airlock(['doctor', '--workspace', join(theirs, 'ws')]);
  } finally {
    await new Promise((r) => {
      attacker.on('close', r);
      attacker.kill('SIGKILL');
    });
  }
  assert.deepEqual(readdirSync(victim), ['keep'], `nothing made in the root folder (the owner: ${said.trim().replace(/\n/g, '; ')})`);
  assert.doesNotMatch(said, /swapped/, 'doctor made no folder there for the owner to see');
  rmSync(mine, { recursive: true, force: true });
  rmSync(victim, { recursive: true, force: true });
});
