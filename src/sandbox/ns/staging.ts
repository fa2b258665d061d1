// Per-run host staging: a root-owned directory with the /in copies, the /out mount point (a
// size-capped tmpfs when root), overlay upper/work dirs for scopes, and the strace log.
// Everything mounted here is unmounted at the end, even on errors (in the background: see runner.ts).
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, chownSync, createReadStream, mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { chmod, copyFile, lstat, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { idmapOps, type HostOps } from './hostops.js';
import { ownerStamp, ownerTag } from '../../base/owner.js';
import { cleanOnExit, sweepOrphans } from './sweep.js';

let baseDir: Promise<string> | null = null;

/**
 * One base per process: root's, mode 0711 (the sandbox uid can traverse, not list); an ordinary user's,
 * 0700 (its sandboxes run as that user, and the run's stdout and stderr FIFOs, which the program may
 * chmod through its own descriptors, are the user's: nobody else may reach them). With a mounter
 * (root), the base is its own tmpfs: per-run staging (dirs, FIFOs, /in copies, scope upper dirs) never
 * touches a disk journal (measured on a 2-core VM's ext4: ~1 ms of a run's mkdirs and removals). What
 * processes that are gone left (bases, mounts, cgroups, temp folders) is swept first; never a live one's.
 */
export function stagingBase(mnt: Mounter | null = null, sandboxUser: { uid: number; gid: number } | null = null): Promise<string> {
  if (!baseDir) {
    baseDir = (async () => {
      sweepOrphans();
      // The owner is in the name (owner.ts): no moment where the base exists without saying whose it is.
      const d = await mkdtemp(join(tmpdir(), `airlock-ns-${ownerTag()}-`));
      // Who owns these runs: this process removes them at exit; after a crash, the next sweep.
      await writeFile(join(d, 'owner.pid'), ownerStamp(), { mode: 0o600 });
      cleanOnExit(d);
      await chmod(d, process.getuid?.() === 0 ? 0o711 : 0o700);
      const unreachable = untraversable(d, sandboxUser);
      if (unreachable) throw Object.assign(new Error(unreachable), { code: 'NS_TMPDIR_UNREACHABLE' });
      // Half the RAM at most (tmpfs's own default); a failure leaves the staging on tmpdir's filesystem.
      if (mnt) {
        await mnt.tmpfs(d, Math.floor(totalmem() / 2), 0, 0, 0o711).catch(() => undefined);
        await writeFile(join(d, 'owner.pid'), ownerStamp(), { mode: 0o600 });
      }
      return d;
    })().catch((e: unknown) => {
      baseDir = null; // the next run tries again (TMPDIR may have been fixed)
      throw e;
    });
  }
  return baseDir;
}

/**
 * Why the sandbox's host user cannot reach `dir` (a folder on the way it may not search), or null.
 * bwrap runs as that user and binds the run's staging from below `dir`.
 */
export function untraversable(dir: string, user: { uid: number; gid: number } | null): string | null {
  if (!user) return null; // not root: the sandbox runs as us, and we made the folder
  for (let p = dir; ; p = dirname(p)) {
    const st = statSync(p);
    const bit = st.uid === user.uid ? 0o100 : st.gid === user.gid ? 0o010 : 0o001;
    if (!(st.mode & bit)) {
      return `the staging folder ${dir} is below ${p} (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')}), which the sandbox's host user (uid ${user.uid}) cannot enter: set TMPDIR to a folder every user can traverse (e.g. /tmp), or make ${p} traversable (chmod o+x)`;
    }
    if (p === '/') return null;
  }
}

export function runCommand(file: string, args: string[]): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' }, timeout: 10_000 }, (err, _o, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      resolve({ code, stderr: String(stderr).trim() });
    });
  });
}

/** Copy one input into the staging /in (mode 0444) and hash the copy: what the sandbox reads is what we hashed. */
export async function stageInput(hostPath: string, dest: string): Promise<{ sha256: string; bytes: number }> {
  const st = await lstat(hostPath);
  if (!st.isFile()) throw new Error(`input ${hostPath} is not a regular file`);
  await copyFile(hostPath, dest);
  await chmod(dest, 0o444);
  const h = createHash('sha256');
  let bytes = 0;
  for await (const chunk of createReadStream(dest)) {
    h.update(chunk as Buffer);
    bytes += (chunk as Buffer).length;
  }
  return { sha256: h.digest('hex'), bytes };
}

/** What the runner needs to mount and unmount: the perl helper when present, else execs of mount/umount. */
/** A scope seen through an idmapped clone: the files of uid `from` (the sandbox user) show as the run's own `to`. */
export interface ScopeIdmap {
  from: number;
  to: number;
}

export interface Mounter {
  /** Size-capped tmpfs (tmpfs rounds up to whole pages; nosuid/nodev so nothing privileged can be planted), with at most `inodes` entries when given. */
  tmpfs(dir: string, sizeBytes: number, uid: number, gid: number, mode?: number, inodes?: number): Promise<void>;
  /** With `idmap`, the lower dir is an idmapped clone of `lower` in which uid `from`'s files are `to`'s (native/idmap.c). */
  overlay(lower: string, upper: string, work: string, merged: string, readOnly?: boolean, idmap?: ScopeIdmap): Promise<void>;
  /** `dir` bound onto itself, shared: an overlay mounted on it later reaches a sandbox already started (pool.ts). */
  sharedSelfBind(dir: string): Promise<void>;
  /** Unmount; a busy mount is detached lazily (gone from the tree, freed when the last user goes). Null: done. */
  unmount(dir: string): Promise<string | null>;
}

/**
 * How long an idmapped overlay's refusal holds: `host` for every scope of this host (no helper, or a
 * kernel without idmapped mounts: ENOSYS); `scope` for this scope's filesystem (EINVAL, EOPNOTSUPP:
 * no idmapped mounts there, or no overlay over one); `once` for anything else (the helper stopped,
 * ENOMEM...). Said by a property of the error, never by its text: what the runner reports holds the
 * scope's path, which its owner names (runner.ts remembers `host` and `scope`).
 */
export interface IdmapError extends Error {
  holds: 'host' | 'scope' | 'once';
}

/** The helper's own message (a step and strerror, no path) ends with its errno. */
export function idmapErrorHolds(helperBuilt: boolean, err: string): IdmapError['holds'] {
  const errno = Number(/\(errno (\d+)\)$/.exec(err)?.[1]);
  return !helperBuilt || errno === 38 ? 'host' : errno === 22 || errno === 95 ? 'scope' : 'once';
}

export function mounter(bins: { mountBinary: string | null; umountBinary: string | null }, ops: HostOps | null): Mounter {
  const need = (b: string | null, what: string): string => {
    if (!b) throw new Error(`no ${what} binary and the host helper failed`);
    return b;
  };
  return {
    async tmpfs(dir, sizeBytes, uid, gid, mode = 0o755, inodes) {
      const err = ops ? await ops.mountTmpfs(dir, sizeBytes, uid, gid, mode, inodes) : 'no host helper';
      if (err === null) return;
      if (ops && !/helper stopped/.test(err)) throw new Error(`cannot mount the /out tmpfs: ${err}`);
      const r = await runCommand(need(bins.mountBinary, 'mount'), ['-n', '-t', 'tmpfs', '-o', `size=${sizeBytes},${inodes ? `nr_inodes=${inodes},` : ''}mode=0${mode.toString(8)},uid=${uid},gid=${gid},nosuid,nodev`, 'airlock-out', dir]);
      if (r.code !== 0) throw new Error(`cannot mount the /out tmpfs: ${r.stderr}`);
    },
    async overlay(lower, upper, work, merged, readOnly = false, idmap) {
      for (const p of [lower, upper, work]) if (/[,:\\]/.test(p)) throw new Error(`path ${p} contains a character overlayfs options cannot carry (, : \\)`);
      if (idmap) {
        const helper = idmapOps();
        const err = helper ? await helper.mountIdmappedOverlay(lower, upper, work, merged, readOnly, idmap.from, idmap.to) : 'airlock-idmap is not built (no C compiler when Airlock was built: apt-get install gcc libc6-dev, then npm run build)';
        if (err !== null) throw Object.assign(new Error(err), { holds: idmapErrorHolds(helper !== null, err) }) satisfies IdmapError;
        return;
      }
      const err = ops ? await ops.mountOverlay(lower, upper, work, merged, readOnly) : 'no host helper';
      if (err === null) return;
      if (ops && !/helper stopped/.test(err)) throw new Error(`cannot mount the overlay for ${lower}: ${err}`);
      const r = await runCommand(need(bins.mountBinary, 'mount'), ['-n', '-t', 'overlay', '-o', `${readOnly ? 'ro,' : ''}lowerdir=${lower},upperdir=${upper},workdir=${work},metacopy=off,redirect_dir=off`, 'airlock-scope', merged]);
      if (r.code !== 0) throw new Error(`cannot mount the overlay for ${lower}: ${r.stderr}`);
    },
    async sharedSelfBind(dir) {
      const err = ops ? await ops.sharedSelfBind(dir) : 'no host helper';
      if (err !== null) throw new Error(`cannot prepare ${dir} for a scope: ${err}`);
    },
    async unmount(dir) {
      const err = ops ? await ops.unmount(dir) : 'no host helper';
      if (err === null) return null;
      if (ops && !/helper stopped/.test(err)) return `cannot unmount ${dir}: ${err}`;
      if (!bins.umountBinary) return `cannot unmount ${dir}: no umount binary (${err})`;
      let r = await runCommand(bins.umountBinary, ['-n', dir]);
      if (r.code === 0) return null;
      r = await runCommand(bins.umountBinary, ['-n', '-l', dir]);
      return r.code === 0 ? null : `cannot unmount ${dir}: ${r.stderr}`;
    },
  };
}

// Metadata calls on the local staging dir take microseconds: they run synchronously, which is cheaper
// than a thread-pool round trip each (measured, the four dirs of a scope with the chown: 0.34 ms ->
// 0.12 ms on an idle 2-core VM, ~2 ms -> ~1 ms during a run under load).
/** Synchronous mkdir + chmod (umask-proof): a few microseconds on a local dir, cheaper than two thread-pool round trips. */
export const mkdirModeSync = (p: string, mode: number): void => {
  mkdirSync(p, { mode });
  chmodSync(p, mode);
};
/** mkdirModeSync behind a promise (errors reject it). */
export const mkdirMode = async (p: string, mode: number): Promise<void> => mkdirModeSync(p, mode);
/** Synchronous chown behind a promise (errors reject it). */
export const chownTo = async (p: string, uid: number, gid: number): Promise<void> => chownSync(p, uid, gid);
/** Past this many inputs a run's folder is removed on the thread pool (removeRunFolder). */
const SYNC_REMOVAL_MAX_INPUTS = 256;

/**
 * Removes a run's folder once its mounts are undone: what is left is its skeleton and /in's files
 * (one per input, no subfolders) in the staging base. Links are removed, never followed. Synchronously while /in is small: as a
 * thread-pool round trip each, those few dozen metadata calls cost the main thread 0.3-0.5 ms of
 * wake-ups per run on a 2-core VM. A run with many inputs is removed on the thread pool instead,
 * so that it does not hold the event loop. Failures are left to the staging base's removal at exit.
 */
export async function removeRunFolder(dir: string, inStage: string): Promise<void> {
  const opts = { recursive: true, force: true } as const;
  let inputs = 0;
  try {
    inputs = readdirSync(inStage).length;
  } catch {
    /* no /in: the run ended before its folders were made */
  }
  try {
    if (inputs > SYNC_REMOVAL_MAX_INPUTS) await rm(dir, opts);
    else rmSync(dir, opts);
  } catch {
    /* what is left goes with the staging base at exit (sweep.ts, cleanOnExit) */
  }
}
