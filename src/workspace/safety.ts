// Whether a workspace is this user's alone. Airlock trusts what it wrote there (promotion journals,
// run records, the store, the audit log, policy.yaml) and acts on it later with its own authority:
// `airlock recover` as root replays a journal. A workspace another user can write, or a path to it
// another user can swap, would let them plant those files; it is refused, as ssh refuses keys in a
// folder others can write.
import { lstatSync, statSync, type Stats } from 'node:fs';
import { join } from 'node:path';
import { walkPath } from '../base/path-walk.js';

const mode = (st: Stats): string => (st.mode & 0o7777).toString(8).padStart(4, '0');

/**
 * Why another user could swap a folder on the way to `path` (rename it, or put a link in its place)
 * between two of our steps there, or null: every folder of that path, `path` itself included when it
 * exists, belongs to root or to `me`, and none that others may write is without the sticky bit (in a
 * sticky folder, /tmp, only an entry's owner may rename it). Links are followed as the kernel would,
 * and the folders on the way to each target are checked in turn (a link in a safe folder cannot be
 * swapped; its target's way can).
 */
export function othersCanSwap(path: string, me = process.geteuid?.() ?? 0): string | null {
  // A component not made yet ends the walk: it will be made by us, in a folder checked before it.
  return walkPath(path, {
    reached: (at, st) => {
      if (st.uid !== 0 && st.uid !== me) return `${at} belongs to uid ${st.uid}`;
      if (st.mode & 0o022 && !(st.mode & 0o1000)) return `${at} can be written by others (mode ${mode(st)})`;
      return null;
    },
  });
}

/** The workspace's own folders and files Airlock acts on later (the rest of FOLDERS is data). */
const KEPT = ['store', 'audit', 'promotions', 'runs', 'blobs', 'tombstones', 'inputs', 'running', 'policy.yaml', 'airlock.db', 'airlock.db-wal', 'airlock.db-shm', 'airlock.db-journal'];

/**
 * Why the workspace at `root` is not this user's alone, or null: no folder on the way to it may be
 * swapped by another user (above), and the root itself and what Airlock keeps in it must be owned by
 * the caller and not writable by group or others.
 */
export function unsafeWorkspace(root: string, me = process.geteuid?.() ?? 0): string | null {
  const way = othersCanSwap(root, me);
  if (way) return way;
  for (const name of ['', ...KEPT]) {
    const p = join(root, name);
    let st: Stats;
    try {
      // The root may be a link (its way, target included, was checked above); nothing in it may be.
      st = name === '' ? statSync(p) : lstatSync(p);
    } catch {
      continue; // made by us, below a root checked first
    }
    if (st.isSymbolicLink()) return `${p} is a link: Airlock makes none there`;
    if (st.uid !== me) return `${p} belongs to uid ${st.uid}, not to this user (uid ${me})`;
    if (st.mode & 0o022) return `${p} (mode ${mode(st)}) can be written by others`;
  }
  return null;
}
