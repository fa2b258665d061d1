// A scope on a FUSE file system whose server never answers (a user can mount one with fusermount):
// the policy refuses it from the mount table without touching it, and a scope agent found waiting on
// one (mounted after the check) is killed after AGENT_IDLE_MS, so nothing of the host waits forever.
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fuseMountOver, fuseMounts, fuseOnTheWay } from '../../src/base/mountinfo.js';
import { AGENT_IDLE_MS, ScopeFs } from '../../src/base/scope-fs.js';
import { airlock } from '../helpers/cli.js';
import { scopedWorkspace, TEST_SCOPE_ROOT, testScopeDir } from '../helpers/workspace.js';

// Mounts a FUSE file system on argv[1], answers INIT, then reads every request and answers none.
// It ends itself after 45 s (its end aborts the waits on it), so a regression fails this file
// instead of hanging it.
const STALL = `
import os, signal, struct, subprocess, sys
signal.alarm(45)
fd = os.open('/dev/fuse', os.O_RDWR)
subprocess.run(['mount', '-t', 'fuse', '-o', f'fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other', 'stall', sys.argv[1]], check=True, pass_fds=(fd,))
buf = os.read(fd, 1 << 20)
unique = struct.unpack_from('<IIQ', buf, 0)[2]
init = struct.pack('<IIIHHIIHHI', 7, 31, 0, 0, 0, 4096, 1, 0, 0, 0) + bytes(28)
os.write(fd, struct.pack('<IiQ', 16 + len(init), 0, unique) + init)
print('ready', flush=True)
while True:
    os.read(fd, 1 << 20)
`;

const canMount = process.getuid?.() === 0 && existsSync('/dev/fuse') && spawnSync('mount', ['--version']).status === 0;
const skip = canMount ? false : 'needs root, /dev/fuse and mount(8) to serve a FUSE file system';

/** A stalled FUSE mount under the test scope root, and how to take it down. */
async function stalledMount(): Promise<{ at: string; server: ChildProcess; down: () => void }> {
  const at = testScopeDir('fuse-');
  const server = spawn('python3', ['-c', STALL, at], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  server.stderr!.on('data', (d: Buffer) => (stderr += d));
  await new Promise<void>((ok, no) => {
    server.stdout!.on('data', (d: Buffer) => /ready/.test(String(d)) && ok());
    server.on('exit', (code) => no(new Error(`the FUSE server ended (${code}) before it was ready: ${stderr}`)));
  });
  return { at, server, down: () => (spawnSync('umount', ['-l', at]), server.kill('SIGKILL')) };
}

/** Scope agents (of any test) that sleep in a FUSE wait now, by pid. */
const agentsOnFuse = (): string[] =>
  readdirSync('/proc')
    .filter((p) => /^[0-9]+$/.test(p))
    .filter((p) => {
      try {
        return readFileSync(`/proc/${p}/comm`, 'utf8') === 'airlock-scopefs\n' && /^(request_wait_answer|fuse_)/.test(readFileSync(`/proc/${p}/wchan`, 'utf8'));
      } catch {
        return false;
      }
    });

test('fuseMountOver: the FUSE mount at or above a path, from the mount table alone', () => {
  const info = [
    '22 1 0:21 / / rw - ext4 /dev/vda rw',
    '40 22 0:50 / /home/alice/remote rw,nosuid - fuse.sshfs alice@host:/ rw,user_id=1000',
    '41 22 0:51 / /mnt/ntfs rw - fuseblk /dev/sdb1 rw',
    '42 22 0:52 / /sys/fs/fuse/connections rw - fusectl fusectl rw',
  ].join('\n');
  assert.equal(fuseMountOver('/home/alice/remote', fuseMounts(info))?.fsType, 'fuse.sshfs');
  assert.equal(fuseMountOver('/home/alice/remote/src/a.c', fuseMounts(info))?.mountPoint, '/home/alice/remote');
  assert.equal(fuseMountOver('/home/alice/remote2', fuseMounts(info)), null, 'a sibling sharing the prefix is not below it');
  assert.equal(fuseMountOver('/mnt/ntfs/x', fuseMounts(info))?.fsType, 'fuseblk');
  assert.equal(fuseMountOver('/sys/fs/fuse/connections/1', fuseMounts(info)), null, 'fusectl is the kernel\'s, not served by a process');
  assert.equal(fuseMountOver('/home/alice', fuseMounts(info)), null);
});

test('a scope on (or below) a FUSE mount is refused by the policy at once, without a stat there (POLICY_SCOPE_FUSE)', { skip, timeout: 60_000 }, async () => {
  const m = await stalledMount();
  try {
    const ws = scopedWorkspace();
    for (const scope of [m.at, join(m.at, 'src')]) {
      const t0 = Date.now();
      const r = airlock(['exec', '--workspace', ws.root, '--rw', scope, '--', '/bin/true']);
      assert.equal(r.code, 125, r.stderr);
      assert.match(r.stderr, new RegExp(`POLICY_SCOPE_FUSE: scope ${scope} is on a FUSE file system \\(fuse mounted at ${m.at}\\): a process answers for it and may never answer; nothing ran`));
      assert.ok(Date.now() - t0 < 30_000, `answered in ${Date.now() - t0} ms`);
    }
  } finally {
    m.down();
  }
});

test('--rw through a link onto a FUSE mount is refused at once: exec\'s own folder check does not follow the link', { skip, timeout: 60_000 }, async () => {
  const m = await stalledMount();
  const link = `${m.at}-link`;
  symlinkSync(m.at, link);
  try {
    const ws = scopedWorkspace();
    for (const scope of [link, join(link, 'src')]) {
      const t0 = Date.now();
      const r = airlock(['exec', '--workspace', ws.root, '--rw', scope, '--', '/bin/true']);
      assert.ok(Date.now() - t0 < 30_000, `answered in ${Date.now() - t0} ms (a stat followed the link onto the FUSE mount)`);
      assert.equal(r.code, 125, r.stderr);
      assert.match(r.stderr, new RegExp(`POLICY_SCOPE_LINK: scope ${scope} goes through a symbolic link \\(${link} -> ${m.at}\\)`));
    }
  } finally {
    rmSync(link, { force: true });
    m.down();
  }
});

test('a scope agent waiting on a FUSE file system that never answers is killed: the open fails, naming FUSE', { skip, timeout: 60_000 }, async () => {
  const m = await stalledMount();
  try {
    const t0 = Date.now();
    // As if the mount appeared after the policy's check: the agent's first look at the scope waits on it.
    await assert.rejects(ScopeFs.open(m.at, 'dir'), /the scope agent stopped \(waiting on a FUSE file system after \d+ s without an answer \(a user process serves it, and may never answer: the scope's owner\?\): killed\)/);
    const took = Date.now() - t0;
    assert.ok(took >= AGENT_IDLE_MS - 500 && took < 3 * AGENT_IDLE_MS, `gave up after ${took} ms`);
    // Killed: SIGKILL is pending on it. A request its server has read cannot be taken back, so the
    // kernel keeps the agent (state D) until that server answers or ends; Airlock no longer waits.
    const left = agentsOnFuse().map((pid) => readFileSync(`/proc/${pid}/status`, 'utf8'));
    // ... and the agents' server goes on: a scope opened next (same process, same server) answers.
    const plain = mkdtempSync(join(TEST_SCOPE_ROOT, 'plain-'));
    writeFileSync(join(plain, 'a.txt'), 'a');
    const t1 = Date.now();
    const next = await ScopeFs.open(plain, 'dir');
    assert.deepEqual(await next.list(''), ['a.txt']);
    next.close();
    assert.ok(Date.now() - t1 < 5_000, `the next scope waited ${Date.now() - t1} ms (for the stuck agent's reaping?)`);
    assert.ok(left.every((st) => (BigInt(`0x${/^ShdPnd:\s+(\w+)/m.exec(st)?.[1] ?? '0'}`) & (1n << 8n)) !== 0n), `an agent waiting on FUSE was not killed: ${left.join('\n')}`);
  } finally {
    m.down();
  }
});

test('exec --in a file on a FUSE mount, or through a link onto one, is refused at once without reading it (EXEC_INPUT)', { skip, timeout: 60_000 }, async () => {
  const m = await stalledMount();
  const link = `${m.at}-in-link`;
  symlinkSync(join(m.at, 'data.csv'), link);
  try {
    const ws = scopedWorkspace();
    for (const file of [join(m.at, 'data.csv'), link]) {
      const t0 = Date.now();
      const r = airlock(['exec', '--workspace', ws.root, '--in', file, '--', '/bin/true']);
      assert.ok(Date.now() - t0 < 30_000, `answered in ${Date.now() - t0} ms (it read the file on the FUSE mount)`);
      assert.equal(r.code, 125, r.stderr);
      assert.match(r.stderr, new RegExp(`EXEC_INPUT: --in ${file}: ${m.at} is on a FUSE file system \\(fuse mounted at ${m.at}\\)`));
      assert.match(r.stderr, /nothing ran/);
    }
  } finally {
    rmSync(link, { force: true });
    m.down();
  }
});

test('fuseOnTheWay follows links as the kernel does, from the mount table: `..` after a link is its target\'s parent', () => {
  const root = testScopeDir('way-');
  mkdirSync(join(root, 'deep', 'er'), { recursive: true });
  symlinkSync(join(root, 'deep', 'er'), join(root, 'l'));
  const mounts = fuseMounts(`40 22 0:50 / ${join(root, 'deep', 'x')} rw - fuse.sshfs alice@host:/ rw`);
  // l/../x is deep/x (the parent of l's target), on the FUSE mount; normalising the string (path.join) would say root/x.
  assert.match(fuseOnTheWay(`${root}/l/../x/f`, mounts) ?? '', new RegExp(`^${join(root, 'deep', 'x')} is on a FUSE file system \\(fuse.sshfs mounted at`));
  assert.equal(fuseOnTheWay(join(root, 'x', 'f'), mounts), null);
  assert.equal(fuseOnTheWay(join(root, 'l', 'f'), mounts), null);
  rmSync(root, { recursive: true, force: true });
});
