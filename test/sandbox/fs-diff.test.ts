// Filesystem diff on real trees and a real overlayfs mount (root needed for the overlay test).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync, symlinkSync, linkSync, rmSync, chmodSync, renameSync, lstatSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import { snapshotTree, diffSnapshots, diffOverlayUpper, hashFile } from '../../src/sandbox/observe/fs-diff.js';
import { ScopeFs } from '../../src/base/scope-fs.js';
import { lowerTreeOf } from '../../src/sandbox/ns/scopes.js';

/** The lower side as Airlock reads it: through the scope agent of that directory. */
async function diffWithAgent(upper: string, lower: string, mountPoint: string) {
  const fs = await ScopeFs.open(lower, 'dir');
  try {
    return await diffOverlayUpper(upper, lowerTreeOf(fs), mountPoint);
  } finally {
    fs.close();
  }
}

const sha = (s: string): string => createHash('sha256').update(s).digest('hex');
const base = mkdtempSync(join(tmpdir(), 'airlock-fsdiff-'));

test('/out: added files, links, fifos and devices are reported as what they are, never followed', async () => {
  const out = join(base, 'out');
  mkdirSync(out);
  const before = await snapshotTree(out);
  writeFileSync(join(out, 'a.txt'), 'hello');
  mkdirSync(join(out, 'sub'));
  writeFileSync(join(out, 'sub', 'big.bin'), Buffer.alloc(3 * 1024 * 1024 + 7, 1));
  symlinkSync('/etc/shadow', join(out, 'evil-link'));
  writeFileSync(join(base, 'outside.txt'), 'secret');
  linkSync(join(base, 'outside.txt'), join(out, 'hard'));
  spawnSync('mkfifo', [join(out, 'fifo')]);
  const dev = spawnSync('mknod', [join(out, 'null-dev'), 'c', '1', '3']).status === 0;
  const after = await snapshotTree(out);
  const d = diffSnapshots(before, after, { mountPoint: '/out' });
  const by = Object.fromEntries(d.map((c) => [c.path, c]));
  assert.ok(d.every((c) => c.change === 'added'));
  assert.equal(by['/out/a.txt']?.sha256After, sha('hello'));
  assert.equal(by['/out/a.txt']?.type, 'file');
  assert.equal(by['/out/sub']?.type, 'dir');
  assert.equal(by['/out/sub/big.bin']?.sha256After, createHash('sha256').update(Buffer.alloc(3 * 1024 * 1024 + 7, 1)).digest('hex'));
  assert.equal(by['/out/evil-link']?.type, 'symlink');
  assert.equal(by['/out/evil-link']?.linkTarget, '/etc/shadow');
  assert.equal(by['/out/evil-link']?.sha256After, sha('/etc/shadow'), 'a link is hashed as its target text, never followed');
  assert.equal(by['/out/hard']?.type, 'hardlink');
  assert.equal(by['/out/hard']?.nlink, 2);
  assert.equal(by['/out/fifo']?.type, 'fifo');
  if (dev) assert.equal(by['/out/null-dev']?.type, 'char-device');
});

test('content hashes are exact on both sides of the first 64 KiB (read at once) and the rest (streamed)', async () => {
  const root = join(base, 'sizes');
  mkdirSync(root);
  const sizes = [0, 1, 65535, 65536, 65537, 131072, (1 << 20) + 65536 + 3];
  const bodies = new Map(sizes.map((n) => [`f${n}`, randomBytes(n)]));
  for (const [name, b] of bodies) writeFileSync(join(root, name), b);
  const snap = await snapshotTree(root);
  for (const [name, b] of bodies) assert.equal(snap.entries.get(name)?.sha256, createHash('sha256').update(b).digest('hex'), name);
});

test('a hash refuses what is not the regular file lstat saw: a swapped inode, a link, a FIFO (never opened for reading, never waited on)', async () => {
  const root = join(base, 'refusals');
  mkdirSync(root);
  writeFileSync(join(root, 'a'), 'a');
  writeFileSync(join(root, 'b'), 'b');
  const seenA = lstatSync(join(root, 'a'));
  renameSync(join(root, 'b'), join(root, 'a')); // swapped between the lstat and the open
  await assert.rejects(hashFile(join(root, 'a'), seenA), /file changed while hashing/);
  symlinkSync(join(root, 'a'), join(root, 'link'));
  await assert.rejects(hashFile(join(root, 'link')), (e: NodeJS.ErrnoException) => e.code === 'ELOOP');
  spawnSync('mkfifo', [join(root, 'fifo')]);
  await assert.rejects(hashFile(join(root, 'fifo')), /not a regular file/);
});

test('snapshot diff: modified and deleted with hashes before and after', async () => {
  const root = join(base, 'tree');
  mkdirSync(root);
  writeFileSync(join(root, 'keep'), 'k');
  writeFileSync(join(root, 'change'), 'v1');
  writeFileSync(join(root, 'gone'), 'g');
  writeFileSync(join(root, 'mode'), 'm');
  const before = await snapshotTree(root);
  writeFileSync(join(root, 'change'), 'v2');
  rmSync(join(root, 'gone'));
  chmodSync(join(root, 'mode'), 0o600);
  const d = diffSnapshots(before, await snapshotTree(root), { mountPoint: '/scope' });
  assert.deepEqual(d.map((c) => [c.change, c.path]), [['modified', '/scope/change'], ['deleted', '/scope/gone'], ['modified', '/scope/mode']]);
  assert.equal(d[0]?.sha256Before, sha('v1'));
  assert.equal(d[0]?.sha256After, sha('v2'));
  assert.equal(d[1]?.sha256Before, sha('g'));
});

test('overlay upper: added, modified, deleted, whiteouts and opaque dirs', { skip: process.getuid?.() !== 0 }, async (t) => {
  const o = join(base, 'ov');
  const [lower, upper, work, merged] = ['lower', 'upper', 'work', 'merged'].map((n) => join(o, n)) as [string, string, string, string];
  for (const p of [lower, upper, work, merged]) mkdirSync(p, { recursive: true });
  writeFileSync(join(lower, 'same'), 's');
  writeFileSync(join(lower, 'edit'), 'old');
  writeFileSync(join(lower, 'del'), 'd');
  mkdirSync(join(lower, 'tree/sub'), { recursive: true });
  writeFileSync(join(lower, 'tree/sub/f'), 'f');
  mkdirSync(join(lower, 'opq'));
  writeFileSync(join(lower, 'opq/old1'), '1');
  writeFileSync(join(lower, 'opq/kept'), 'k-old');
  mkdirSync(join(lower, 'dir'));
  writeFileSync(join(lower, 'dir/inner'), 'i');
  const m = spawnSync('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${lower},upperdir=${upper},workdir=${work}`, merged], { encoding: 'utf8' });
  if (m.status !== 0) return t.skip(`overlay mount failed: ${m.stderr}`);
  try {
    writeFileSync(join(merged, 'edit'), 'new');
    rmSync(join(merged, 'del'));
    rmSync(join(merged, 'tree'), { recursive: true });
    rmSync(join(merged, 'opq'), { recursive: true });
    mkdirSync(join(merged, 'opq'));
    writeFileSync(join(merged, 'opq/kept'), 'k-new');
    writeFileSync(join(merged, 'dir/added'), 'a');
    symlinkSync('/etc/passwd', join(merged, 'link'));
    renameSync(join(merged, 'same'), join(merged, 'same2'));
  } finally {
    spawnSync('umount', [merged]);
  }
  const d = await diffWithAgent(upper, lower, '/work/scope');
  assert.deepEqual(d.map((c) => [c.change, c.path, c.type]), [
    ['deleted', '/work/scope/del', 'file'],
    ['added', '/work/scope/dir/added', 'file'],
    ['modified', '/work/scope/edit', 'file'],
    ['added', '/work/scope/link', 'symlink'],
    ['modified', '/work/scope/opq/kept', 'file'],
    ['deleted', '/work/scope/opq/old1', 'file'],
    ['deleted', '/work/scope/same', 'file'],
    ['added', '/work/scope/same2', 'file'],
    ['deleted', '/work/scope/tree', 'dir'],
    ['deleted', '/work/scope/tree/sub', 'dir'],
    ['deleted', '/work/scope/tree/sub/f', 'file'],
  ]);
  const edit = d.find((c) => c.path.endsWith('/edit'));
  assert.equal(edit?.sha256Before, sha('old'));
  assert.equal(edit?.sha256After, sha('new'));
  assert.equal(d.find((c) => c.path.endsWith('/link'))?.linkTarget, '/etc/passwd');
});

test('overlay upper on tmpfs over a lower on disk: a copied-up dir is not "modified" by its size; a mode change is', { skip: process.getuid?.() !== 0 }, async (t) => {
  const o = join(base, 'ov-tmpfs');
  const lower = join(o, 'lower');
  const ram = join(o, 'ram');
  mkdirSync(join(lower, 'sub'), { recursive: true });
  mkdirSync(join(lower, 'moded'));
  writeFileSync(join(lower, 'sub/a.log'), 'a');
  writeFileSync(join(lower, 'sub/keep'), 'k');
  mkdirSync(ram);
  if (spawnSync('mount', ['-t', 'tmpfs', 'tmpfs', ram]).status !== 0) return t.skip('tmpfs mount failed');
  const [upper, work, merged] = ['upper', 'work', 'merged'].map((n) => join(ram, n)) as [string, string, string];
  for (const p of [upper, work, merged]) mkdirSync(p);
  try {
    const m = spawnSync('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${lower},upperdir=${upper},workdir=${work}`, merged], { encoding: 'utf8' });
    if (m.status !== 0) return t.skip(`overlay mount failed: ${m.stderr}`);
    try {
      rmSync(join(merged, 'sub/a.log'));
      chmodSync(join(merged, 'moded'), 0o700);
    } finally {
      spawnSync('umount', [merged]);
    }
    const d = await diffWithAgent(upper, lower, '/work/scope');
    assert.deepEqual(d.map((c) => [c.change, c.path, c.type]), [
      ['modified', '/work/scope/moded', 'dir'],
      ['deleted', '/work/scope/sub/a.log', 'file'],
    ]);
  } finally {
    spawnSync('umount', [ram]);
  }
});

test('a big tree is walked in slices: other work runs meanwhile, and every entry is there', async () => {
  // Empty dirs only: nothing in the walk waits for the thread pool, so only the walk's own yields
  // (every 256 entries) let the event loop run before it ends.
  const root = join(base, 'wide');
  mkdirSync(root);
  for (let i = 0; i < 600; i++) mkdirSync(join(root, `d${String(i).padStart(3, '0')}`));
  mkdirSync(join(root, 'd000', 'inner'));
  let immediateRan = false;
  setImmediate(() => (immediateRan = true));
  const snap = await snapshotTree(root);
  const ranBeforeTheEnd = immediateRan;
  assert.equal(snap.entries.size, 601);
  assert.equal(snap.entries.get('d000/inner')?.type, 'dir');
  assert.ok(ranBeforeTheEnd, 'a callback queued before the walk ran before the walk ended');
  const changes = diffSnapshots({ root, entries: new Map() }, snap, { mountPoint: '/out' });
  assert.equal(changes.length, 601);
  assert.ok(changes.every((c) => c.change === 'added' && c.type === 'dir'));
});
