// The workspace's file system, as `airlock doctor` reports it: real ext4 images (with and without a
// journal) mounted on loop devices, a real tmpfs, and mountinfo lines as the kernel writes them.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { newFileCpuUs, parseMountinfoLine, workspaceDisk } from '../../src/workspace/disk.js';
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
  const json = JSON.parse(airlock(['doctor', '--json', '--workspace', ws]).stdout) as { workspaceDisk: { journal: boolean; newFileCpuUs: number } };
  assert.equal(json.workspaceDisk.journal, false);
  assert.ok(json.workspaceDisk.newFileCpuUs > 0);
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

test('the new-file probe measures in a folder of its own, removes it, and answers null where it cannot write', () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-probe-'));
  try {
    const us = newFileCpuUs(dir, 50);
    assert.ok(us !== null && us > 0);
    assert.deepEqual(readdirSync(dir), []);
    assert.equal(newFileCpuUs(join(dir, 'missing')), null);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
