// One run's host folders, shared by a run started on request and a sandbox started ahead of need
// (pool.ts): the run's root-owned folder, its /in, and (as root) the capped tmpfs every place the
// program can write lives on: /out with the directory scopes' overlay upper dirs under the disk limit,
// /tmp with /dev/shm under the /tmp limit, each capped in bytes and in entries (nr_inodes).
import { chmodSync, chownSync } from 'node:fs';
import { join } from 'node:path';
import type { RunCgroup } from '../cgroup/index.js';
import type { HostCapabilities } from '../doctor.js';
import type { Limits } from '../types.js';
import { hostOps } from './hostops.js';
import { chownTo, mkdirModeSync, mounter, removeRunFolder, type Mounter } from './staging.js';

export interface RunFolders {
  dir: string;
  inStage: string;
  outStage: string;
  /** The tmpfs holding /out and the scope overlays' upper dirs (root only). */
  sharedDisk: string | null;
  /** The tmpfs holding /tmp and /dev/shm (root only). */
  scratch: string | null;
  /** What was mounted for the run, in order (unmounted in reverse at the end). */
  mounted: string[];
}

/** Where the run's folders go (nothing is made yet). */
export function runFolders(base: string, runId: string, caps: HostCapabilities): RunFolders {
  const dir = join(base, runId);
  const sharedDisk = caps.tmpfsSizeCaps.hostOut ? join(dir, 'rw') : null;
  const scratch = caps.tmpfsSizeCaps.hostOut ? join(dir, 'scratch') : null;
  return { dir, inStage: join(dir, 'in'), outStage: join(sharedDisk ?? dir, 'out'), sharedDisk, scratch, mounted: [] };
}

/**
 * Makes the folders, then mounts the capped tmpfs and makes /out, /tmp and /dev/shm on them. The
 * folders (and /in) exist when this returns its promise, so inputs can be staged while it mounts.
 * A failed mount rejects, with what did mount listed in `f.mounted` for the cleanup.
 */
export async function makeRunFolders(f: RunFolders, mnt: Mounter, limits: Limits, ids: { uid: number; gid: number }, asRoot: boolean): Promise<void> {
  mkdirModeSync(f.dir, asRoot ? 0o711 : 0o700);
  // Only root and the sandbox's user pass through a run's staging: its mounts are listed in
  // /proc/self/mountinfo for everyone, and another local user could otherwise write into a scope's
  // overlay (where a directory is writable to them) during the run, and the Sandbox Result would
  // give those changes to the sandboxed program (promoted with the scope owner's authority).
  if (asRoot) {
    chownSync(f.dir, 0, ids.gid);
    chmodSync(f.dir, 0o710);
  }
  mkdirModeSync(f.inStage, 0o755);
  const capped = ([[f.sharedDisk, limits.outBytes], [f.scratch, limits.tmpBytes]] as const).filter((c): c is readonly [string, number] => c[0] !== null);
  for (const [fs] of capped) mkdirModeSync(fs, 0o711);
  const mounts = await Promise.allSettled(capped.map(([fs, bytes]) => mnt.tmpfs(fs, bytes, 0, 0, 0o711, limits.files)));
  mounts.forEach((m, i) => m.status === 'fulfilled' && f.mounted.push(capped[i]![0]));
  for (const m of mounts) if (m.status === 'rejected') throw m.reason;
  mkdirModeSync(f.outStage, 0o755);
  await chownTo(f.outStage, ids.uid, ids.gid).catch(() => undefined);
  if (f.scratch) for (const d of ['tmp', 'shm']) mkdirModeSync(join(f.scratch, d), 0o1777);
}

/**
 * After a run (every process of it dead): its cgroup removed, its mounts undone (last first, on the
 * helper for cleanups), and its folder deleted when nothing failed before (`errors`) or here. Returns
 * what could not be done; the folder is then kept for inspection.
 */
export async function removeRunFolders(f: RunFolders, cg: RunCgroup | null, caps: HostCapabilities, errors: string[] = []): Promise<string[]> {
  if (cg) errors.push(...(await cg.destroy()));
  const unmounter = mounter(caps, hostOps(caps.perlBinary, 'cleanup'));
  // Last mounted first. Asked in one tick, the requests reach the helper in one write and it does
  // them in that order; only if it stopped meanwhile do the umount(8) fallbacks run side by side
  // (a busy tmpfs under a scope's overlay is then detached lazily, which still frees it).
  const failed = await Promise.all([...f.mounted].reverse().map((m) => unmounter.unmount(m)));
  for (const e of failed) if (e) errors.push(e);
  if (errors.length === 0) await removeRunFolder(f.dir, f.inStage);
  return errors;
}

/** bwrap's arguments for the run's writable places and /in: /tmp and /dev/shm on the capped scratch tmpfs (without root, each its own bwrap --size tmpfs). */
export function folderArgs(f: RunFolders, limits: Limits): string[] {
  const a: string[] = [];
  if (f.scratch) a.push('--bind', join(f.scratch, 'tmp'), '/tmp', '--bind', join(f.scratch, 'shm'), '/dev/shm');
  else a.push('--size', String(limits.tmpBytes), '--tmpfs', '/tmp', '--size', String(limits.tmpBytes), '--tmpfs', '/dev/shm');
  a.push('--ro-bind', f.inStage, '/in', '--bind', f.outStage, '/out');
  return a;
}
