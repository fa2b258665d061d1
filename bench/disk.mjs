// npm run bench:disk — what a new file costs on ext4 with and without a journal, before and after
// many deletions (the claim behind `airlock doctor`'s "workspace disk" line; src/workspace/disk.ts).
// As root: two 2 GB ext4 images on loop devices, one made with `-O ^has_journal`. In each, CPU
// (user + system) per new empty file, in batches of 100: 2,000 files on the fresh file system, then
// 2,000 more made 1.1 s after BENCH_DELETED files (default 22,000) were made and deleted. The kernel
// skips an inode deleted in the same second, hence the pause. Prints the medians and p99 of the
// batches, and the ratio no journal / journal.
import { spawnSync } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { workspaceDisk } from '../dist/src/workspace/disk.js';
import { fmt, summary } from './stats.mjs';

const DELETED = Number(process.env.BENCH_DELETED ?? 22_000);
const NEW = 2000;
const BATCH = 100;
if (process.getuid?.() !== 0) {
  console.log('bench:disk needs root (it mounts two ext4 images on loop devices): nothing measured');
  process.exit(0);
}
const top = mkdtempSync(join(tmpdir(), 'airlock-bench-disk-'));
const sh = (cmd, ...args) => {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr || r.error?.message}`);
};

/** CPU us per new file, one figure per batch of BATCH files named `${prefix}N`. */
function makeFiles(dir, prefix) {
  const perFile = [];
  for (let b = 0; b < NEW / BATCH; b++) {
    const c0 = process.cpuUsage();
    for (let i = 0; i < BATCH; i++) closeSync(openSync(join(dir, `${prefix}${b * BATCH + i}`), 'wx', 0o600));
    const c = process.cpuUsage(c0);
    perFile.push((c.user + c.system) / BATCH);
  }
  return summary(perFile);
}

async function measure(name, mkfsOptions) {
  const img = join(top, `${name}.img`);
  const mnt = join(top, name);
  mkdirSync(mnt);
  sh('truncate', '-s', '2G', img);
  sh('mkfs.ext4', '-q', '-F', ...mkfsOptions, img);
  sh('mount', '-o', 'loop', img, mnt);
  try {
    const disk = workspaceDisk(mnt);
    const fresh = makeFiles(mnt, 'a');
    for (let i = 0; i < DELETED; i++) closeSync(openSync(join(mnt, `junk${i}`), 'wx'));
    for (let i = 0; i < DELETED; i++) unlinkSync(join(mnt, `junk${i}`));
    await sleep(1100);
    const afterDeletes = makeFiles(mnt, 'b');
    console.log(`${name.padEnd(10)} (${disk.fsType} on ${disk.source}, journal: ${disk.journal}): new file p50 ${fmt(fresh.p50, 1)} us (p99 ${fmt(fresh.p99, 1)}) on the fresh file system; p50 ${fmt(afterDeletes.p50, 1)} us (p99 ${fmt(afterDeletes.p99, 1)}) after ${DELETED} deletions`);
    return { fresh, afterDeletes };
  } finally {
    sh('umount', mnt);
  }
}

try {
  console.log(`CPU per new empty file (open O_CREAT|O_EXCL + close), batches of ${BATCH}, ${NEW} files per figure`);
  const j = await measure('journal', []);
  const n = await measure('nojournal', ['-O', '^has_journal']);
  console.log(`ratio no journal / journal, p50: fresh ${fmt(n.fresh.p50 / j.fresh.p50)}x, after deletions ${fmt(n.afterDeletes.p50 / j.afterDeletes.p50)}x`);
} finally {
  rmSync(top, { recursive: true, force: true });
}
