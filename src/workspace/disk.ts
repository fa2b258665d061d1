// The file system a workspace lives on, and what a new file costs there. Every run makes new files
// and folders in the workspace (its run folder and Sandbox Result, scopes.json, out/, the gate's
// documents). On ext4 without a journal (the root file system of some VM images), the kernel makes
// each new inode step over every inode deleted in the last minutes, one buffer lookup each
// (fs/ext4/ialloc.c, recently_deleted; skipped when there is a journal). Measured on loop-mounted
// 2 GB images, 2,000 new files made 1 s after 22,000 were deleted: 18 us of CPU each with a journal,
// 965 us without. Without a journal a rename is also not atomic across a crash. `airlock doctor`
// says so, and the benches print it beside their figures.
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, realpathSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { othersCanSwap } from './safety.js';
import { parseMountinfoLine, type MountEntry } from '../base/mountinfo.js';

export interface WorkspaceDisk {
  /** The folder checked: the workspace, or its nearest existing parent when it is not made yet. */
  checked: string;
  /** The workspace folder exists (otherwise `checked` is the parent it would be made in). */
  exists: boolean;
  /** As mountinfo names it: ext4, xfs, tmpfs, overlay... ('unknown' when no mount matched). */
  fsType: string;
  /** The mount's source: a device for a disk. */
  source: string;
  mountPoint: string;
  /** ext2/3/4: whether it keeps a journal; null for other file systems, or a kernel that does not say. */
  journal: boolean | null;
}

/** glibc's dev_t encoding (what libuv hands Node): major in bits 8-19 and 32-63, minor in bits 0-7 and 20-31. */
function majorMinor(dev: bigint): string {
  const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn);
  const minor = (dev & 0xffn) | ((dev >> 12n) & ~0xffn);
  return `${major}:${minor}`;
}

/** The file system under `dir` (or under its nearest existing parent). */
export function workspaceDisk(dir: string): WorkspaceDisk {
  let checked = dir;
  while (!existsSync(checked) && dirname(checked) !== checked) checked = dirname(checked);
  const dev = majorMinor(statSync(checked, { bigint: true }).dev);
  let mounts: MountEntry[] = [];
  try {
    mounts = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').map(parseMountinfoLine).filter((m): m is MountEntry => m?.majorMinor === dev);
  } catch {
    /* no /proc: nothing matched */
  }
  // A device mounted more than once (bind mounts): the mount point nearest to the folder, for the message.
  const real = realpathSync.native(checked);
  const under = (m: MountEntry): boolean => m.mountPoint === '/' || real === m.mountPoint || real.startsWith(`${m.mountPoint}/`);
  const m = mounts.filter(under).sort((a, b) => b.mountPoint.length - a.mountPoint.length)[0] ?? mounts[0];
  if (!m) return { checked, exists: checked === dir, fsType: 'unknown', source: '', mountPoint: '', journal: null };
  return { checked, exists: checked === dir, fsType: m.fsType, source: m.source, mountPoint: m.mountPoint, journal: journalOf(m) };
}

/** ext2 has none; ext3/ext4 tell through /sys/fs/ext4/<device>/journal_task (`<none>` without one; Linux 5.11+). */
function journalOf(m: MountEntry): boolean | null {
  if (m.fsType === 'ext2') return false;
  if (m.fsType !== 'ext3' && m.fsType !== 'ext4') return null;
  try {
    const device = basename(realpathSync(`/sys/dev/block/${m.majorMinor}`));
    const task = readFileSync(`/sys/fs/ext4/${device}/journal_task`, 'utf8').trim();
    return task === '<none>' ? false : /^\d+$/.test(task) ? true : null;
  } catch {
    return null;
  }
}

/** What a new file costs in a folder, or why it was not timed. */
export type NewFileCost = { us: number } | { notTimed: string };

/**
 * CPU (user + system, us) per new empty file in `dir`: `n` made in a scratch folder of its own, then
 * removed with it; or why it was not timed (`dir` cannot be written, or another user could swap a
 * folder on its way: othersCanSwap).
 */
export function newFileCpuUs(dir: string, n = 200): NewFileCost {
  let scratch: string;
  try {
    // The path checked is the path used: no link on it another user could point elsewhere. The
    // kernel's realpath: Node's own reads a `..` after a link as a string, and so names another folder.
    const real = realpathSync.native(dir);
    const swappable = othersCanSwap(real);
    if (swappable) return { notTimed: `another user could swap a folder on the way (${swappable})` };
    scratch = mkdtempSync(join(real, '.airlock-disk-probe-'));
  } catch (e) {
    return { notTimed: `cannot make a folder in ${dir}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}` };
  }
  try {
    const c0 = process.cpuUsage();
    for (let i = 0; i < n; i++) closeSync(openSync(join(scratch, String(i)), 'wx', 0o600));
    const c = process.cpuUsage(c0);
    return { us: (c.user + c.system) / n };
  } catch (e) {
    return { notTimed: `cannot make a file in ${dir}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}` };
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}
