// What the program leaves in the run's writable places, read by the host after every sandbox process
// is dead: whether a capped tmpfs filled up, what is left in /dev/shm (reported, then discarded), and
// the copy of /out to the caller's folder, which never recreates a link, fifo or device on the host.
import { isUtf8 } from 'node:buffer';
import { copyFile } from 'node:fs/promises';
import { chmodSync, lstatSync, mkdirSync, readdirSync, statfsSync } from 'node:fs';
import { join } from 'node:path';
import { DiffBudget, DiffBudgetExceeded } from '../observe/fs-diff.js';

/** Is a capped tmpfs full, in bytes or in entries (nr_inodes)? */
export function tmpfsFull(dir: string): { bytes: boolean; inodes: boolean } | null {
  try {
    const sf = statfsSync(dir);
    return { bytes: sf.bavail === 0, inodes: sf.files > 0 && sf.ffree === 0 };
  } catch {
    return null;
  }
}

/** The run's /tmp and /dev/shm (one tmpfs): bytes used, and what /dev/shm still holds. */
export interface ScratchUse {
  tmpBytesUsed: number;
  shmFiles: number;
  /** Apparent size of the regular files left in /dev/shm. */
  shmBytes: number;
  /**
   * Why the count is not the whole of /dev/shm: it stopped at the run's file cap or at the deadline,
   * or entries could not be read (a chain of folders deeper than a path can name). The judge BLOCKs
   * a run with it (JG_SCRATCH_UNOBSERVED): what the host could not look at is not known to be harmless.
   */
  incomplete?: string;
}

/**
 * Counts what the program left in /dev/shm. Whatever it left there, this never throws: an entry the
 * host cannot read is counted as unread and the walk goes on, so the run still reports what the
 * program did (its exit, output, network attempts, /out), and `incomplete` says what was not seen.
 * Iterative (a stack, not recursion), so no depth of folders can exhaust the host's own stack.
 */
export async function observeScratch(scratch: string, deadline: number, maxFiles: number): Promise<ScratchUse> {
  const use: ScratchUse = { tmpBytesUsed: 0, shmFiles: 0, shmBytes: 0 };
  const budget = new DiffBudget({ files: maxFiles, bytes: Number.MAX_SAFE_INTEGER, deadline });
  const shm = join(scratch, 'shm');
  const unread: { count: number; first?: string } = { count: 0 };
  const cannotRead = (path: string, e: unknown): void => {
    unread.count++;
    // The first one as an example, shortened: a path deeper than PATH_MAX is thousands of characters.
    const shown = `/dev/shm${path.slice(shm.length)}`;
    unread.first ??= `${(e as NodeJS.ErrnoException).code ?? (e as Error).message} at ${shown.length > 120 ? `${shown.slice(0, 120)}... (${shown.length} characters)` : shown}`;
  };
  let stopped: string | undefined;
  try {
    const sf = statfsSync(scratch);
    use.tmpBytesUsed = (sf.blocks - sf.bfree) * sf.bsize;
    const stack = [shm];
    while (stack.length > 0) {
      const dir = stack.pop() as string;
      let names: Buffer[];
      try {
        names = readdirSync(dir, { encoding: 'buffer' });
      } catch (e) {
        cannotRead(dir, e);
        continue;
      }
      for (const raw of names) {
        budget.entry();
        use.shmFiles++;
        const name = raw.toString('utf8');
        const path = join(dir, name);
        // Decoded, a name that is not valid UTF-8 names no file, or (beside a real name that decodes
        // the same) that other one, counted twice while this one went unseen.
        if (!isUtf8(raw)) {
          cannotRead(path, new Error(`a name that is not valid UTF-8 (bytes ${raw.toString('hex')})`));
          continue;
        }
        try {
          const st = lstatSync(path);
          if (st.isDirectory()) stack.push(path);
          else if (st.isFile()) use.shmBytes += st.size;
        } catch (e) {
          cannotRead(path, e);
        }
      }
    }
  } catch (e) {
    // The file cap or the deadline (DiffBudgetExceeded), or anything else: the count stops here, said.
    stopped = e instanceof DiffBudgetExceeded ? e.message : `the count of /dev/shm failed: ${(e as Error).message}`;
  }
  const notes = [stopped, unread.count > 0 ? `${unread.count} entr${unread.count === 1 ? 'y' : 'ies'} of /dev/shm could not be read (${unread.first}): not observed` : undefined].filter(Boolean);
  if (notes.length > 0) use.incomplete = notes.join('; ');
  return use;
}

/**
 * Why `outDir` cannot receive a run's /out, or null: it must not exist yet, or be an empty folder
 * (never a link), so nothing of a run is mixed into other files. Lanes make it only when the program
 * left something in /out (makeOutDir): most runs leave nothing, and a new folder is a disk's slowest
 * metadata step.
 */
export function outDirProblem(outDir: string): string | null {
  try {
    // Absent is the common case (made after the run): no exception built for it, ~0.1 ms a run here.
    const st = lstatSync(outDir, { throwIfNoEntry: false });
    if (st && (!st.isDirectory() || readdirSync(outDir).length > 0)) return 'it is not an empty directory';
    return null;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ENOENT' ? null : (e as Error).message;
  }
}

/** Makes the folder that receives /out (its parents too when missing); one that exists must be empty (outDirProblem). */
export function makeOutDir(outDir: string): void {
  let code: string | undefined;
  try {
    mkdirSync(outDir, { mode: 0o755 });
    return;
  } catch (e) {
    code = (e as NodeJS.ErrnoException).code;
    if (code !== 'ENOENT' && code !== 'EEXIST') throw e;
  }
  if (code === 'ENOENT') return void mkdirSync(outDir, { recursive: true, mode: 0o755 });
  const why = outDirProblem(outDir);
  if (why !== null) throw new Error(`${outDir}: ${why}`);
}

/**
 * Copies a finished /out tree to the caller's outDir without following anything: directories and
 * regular files are copied; symbolic links, fifos, sockets and devices are not (the diff records
 * them, with a link's target text, and the judge blocks them): nothing on the host that opens the
 * copy can be led to another file. Runs after every sandbox process is dead and after the diff
 * accounted for everything here (so its size is within the run's caps).
 */
export async function copyTreeNoFollow(src: string, dest: string): Promise<void> {
  mkdirSync(dest, { recursive: true });
  for (const name of readdirSync(src)) {
    const s = join(src, name);
    const d = join(dest, name);
    const st = lstatSync(s);
    if (st.isDirectory()) await copyTreeNoFollow(s, d);
    else if (st.isFile()) {
      await copyFile(s, d, 1 /* COPYFILE_EXCL */);
      chmodSync(d, st.mode & 0o111 ? 0o755 : 0o644);
    }
  }
}
