// Host-side filesystem diff: what the program added, modified or deleted.
//
// Two sources: `/out` (a plain directory: snapshot before and after, usually empty before) and each
// declared scope, seen by the program through overlayfs (the diff is read from the upper dir alone,
// so the cost follows the number of changes, not the size of the scope).
// Safety: links are never followed (lstat; files are hashed through O_NOFOLLOW|O_NONBLOCK and the
// opened fd must be the inode lstat saw); fifos, sockets and device nodes are reported, never opened;
// hashes are streamed so memory stays bounded whatever the file sizes.

import { isUtf8 } from 'node:buffer';
import { createHash } from 'node:crypto';
import { closeSync, constants, fstatSync, lstatSync, openSync, read, readdirSync, readSync, type Stats } from 'node:fs';
import { promisify } from 'node:util';
import { lstat, readlink } from 'node:fs/promises';
import { spawn } from 'node:child_process';
import { posix, join } from 'node:path';
import type { FsChange, FsEntryType } from './types.js';
export type { FsChange } from './types.js';

export interface TreeEntry {
  type: FsEntryType;
  mode: number;
  size: number;
  nlink: number;
  /** `dev:ino`, to group hard links. */
  inode: string;
  /** Owner (a scope's real files: promotion acts only on its owner's). */
  uid?: number;
  sha256?: string;
  linkTarget?: string;
  /** A real file's last change (ctime, ms): one after its scope was opened was not the program's (diffOverlayUpper). */
  changedMs?: number;
}

/**
 * The real side of a scope (the overlay's lower dir), read by the host without ever following a
 * link: in Airlock through the scope's agent (src/base/scope-fs.ts), with the scope owner's authority.
 * Paths are relative to the scope root.
 */
export interface LowerTree {
  /** The entry at rel (hashed when it has content), or null when absent. */
  entry(rel: string): Promise<TreeEntry | null>;
  /** Every entry below the directory rel, keyed by relative path (`rel/a/b`). */
  subtree(rel: string): Promise<Map<string, TreeEntry>>;
}

export interface TreeSnapshot {
  root: string;
  /** Relative path ('a/b', no leading slash) -> entry. The root itself is not included. */
  entries: Map<string, TreeEntry>;
}

function typeOf(st: Stats): FsEntryType {
  if (st.isSymbolicLink()) return 'symlink';
  if (st.isDirectory()) return 'dir';
  if (st.isFIFO()) return 'fifo';
  if (st.isSocket()) return 'socket';
  if (st.isCharacterDevice()) return 'char-device';
  if (st.isBlockDevice()) return 'block-device';
  return st.nlink > 1 ? 'hardlink' : 'file';
}

/**
 * What the host may spend observing a run's files, whatever the program left: entries seen, apparent
 * bytes of what it wrote (a sparse file counts its full size and is never read past the cap), and a
 * deadline. Past any of them the diff stops with DiffBudgetExceeded instead of growing the host's
 * time and memory with the program's output.
 */
/** How long the host may take to observe a run's files after its time limit (diff, hashes, copies). */
export const OBSERVE_MARGIN_MS = 20_000;

export class DiffBudget {
  private files = 0;
  private bytes = 0;

  constructor(readonly limits: { files: number; bytes: number; deadline: number }) {}

  entry(): void {
    if (++this.files > this.limits.files) throw new DiffBudgetExceeded('files', `more than ${this.limits.files} files, folders and links (the run's file cap): the rest was not looked at`);
    this.tick();
  }

  /** Apparent size of content the run wrote, counted before it is read. */
  content(size: number): void {
    this.bytes += size;
    if (this.bytes > this.limits.bytes) throw new DiffBudgetExceeded('outBytes', `more than ${this.limits.bytes} bytes of output (apparent size: sparse files count in full; the run's disk cap): not read, not copied`);
  }

  tick(): void {
    if (Date.now() > this.limits.deadline) throw new DiffBudgetExceeded('time', `the host's time to observe this run ran out (its time limit plus the fixed margin)`);
  }
}

export class DiffBudgetExceeded extends Error {
  constructor(
    readonly limit: 'files' | 'outBytes' | 'time',
    message: string,
  ) {
    super(message);
  }
}

const CHUNK = 64 << 10;
const firstChunk = Buffer.allocUnsafe(CHUNK);
const readAt = promisify(read);

/**
 * sha256 of a regular file; refuses to follow a symlink or a swapped inode. Opened, checked and read
 * up to its first 64 KiB with synchronous calls: most files a run leaves are that small, and a
 * thread-pool round trip per call cost a run that left thousands of them seconds of host time. The
 * rest of a bigger file is streamed through the same descriptor, so memory stays bounded.
 */
export async function hashFile(path: string, expect?: Stats, budget?: DiffBudget): Promise<string> {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new Error(`not a regular file: ${path}`);
    if (expect && (st.ino !== expect.ino || st.dev !== expect.dev)) throw new Error(`file changed while hashing: ${path}`);
    let n = 0;
    for (let r = 1; r > 0 && n < CHUNK; n += r) r = readSync(fd, firstChunk, n, CHUNK - n, null);
    const h = createHash('sha256').update(firstChunk.subarray(0, n));
    if (n < CHUNK) return h.digest('hex'); // the end of the file was read
    const buf = Buffer.allocUnsafe(Math.min(1 << 20, Math.max(CHUNK, st.size)));
    while (n > 0) {
      budget?.tick();
      n = (await readAt(fd, buf, 0, buf.length, null)).bytesRead;
      h.update(buf.subarray(0, n));
    }
    return h.digest('hex');
  } finally {
    closeSync(fd);
  }
}

/** An entry the run wrote (/out, an overlay's upper dir, a file scope's copy): counted against the budget first. */
async function entryOf(path: string, st: Stats, budget?: DiffBudget): Promise<TreeEntry> {
  const type = typeOf(st);
  const e: TreeEntry = { type, mode: st.mode, size: st.size, nlink: st.nlink, inode: `${st.dev}:${st.ino}` };
  budget?.entry();
  if (type === 'file' || type === 'hardlink') {
    budget?.content(st.size);
    e.sha256 = await hashFile(path, st, budget);
  }
  else if (type === 'symlink') {
    // A link is never followed: its content is the target text, and that is what is hashed.
    e.linkTarget = await readlink(path);
    e.sha256 = createHash('sha256').update(e.linkTarget).digest('hex');
  }
  return e;
}

// A walk's directory reads and lstats are synchronous: microseconds each on a run's tmpfs, where a
// thread-pool round trip each cost more than the call (most runs leave /out and the scopes empty).
// A directory holds at most the run's file cap, and the walk lets the event loop run every
// YIELD_EVERY entries (before an lstat, never between an lstat and its use), so a big tree does not
// hold other runs up.
const YIELD_EVERY = 256;
// A name that is not valid UTF-8 has no exact string form: decoded, its bytes become U+FFFD, so it
// named no file (lstat: ENOENT) or, next to a real name that decodes the same, the same entry twice
// while the file itself went unreported. The diff stops instead: what it cannot name, it cannot report.
const listDir = (dir: string): string[] =>
  readdirSync(dir, { encoding: 'buffer' })
    .map((b) => {
      if (!isUtf8(b)) throw new Error(`a name that is not valid UTF-8 (bytes ${b.toString('hex')}) in ${dir}: it cannot be reported as it is`);
      return b.toString('utf8');
    })
    .sort();
async function breathe(seen: number): Promise<void> {
  if (seen % YIELD_EVERY === 0) await new Promise((r) => setImmediate(r));
}

/** Walks `root` without following links (the root itself must be a real directory). */
export async function snapshotTree(root: string, budget?: DiffBudget): Promise<TreeSnapshot> {
  const entries = new Map<string, TreeEntry>();
  const rootSt = lstatSync(root);
  if (!rootSt.isDirectory()) throw new Error(`snapshot root is not a directory: ${root}`);
  const stack: string[] = [''];
  while (stack.length > 0) {
    const rel = stack.pop() as string;
    for (const name of listDir(join(root, rel))) {
      const childRel = rel === '' ? name : `${rel}/${name}`;
      const abs = join(root, childRel);
      await breathe(entries.size + 1);
      const st = lstatSync(abs);
      entries.set(childRel, await entryOf(abs, st, budget));
      if (st.isDirectory()) stack.push(childRel);
    }
  }
  return { root, entries };
}

const sandboxPath = (mountPoint: string, rel: string): string => posix.join('/', mountPoint, rel);

function sameContent(a: TreeEntry, b: TreeEntry): boolean {
  const kind = (t: FsEntryType): string => (t === 'hardlink' ? 'file' : t);
  // A directory's size is its filesystem's bookkeeping (4096 on ext4, a count of entries on tmpfs), not
  // content: an overlay's upper dir on another filesystem than its lower must not look modified.
  const sizeMatters = a.type !== 'dir';
  return kind(a.type) === kind(b.type) && a.mode === b.mode && (!sizeMatters || a.size === b.size) && a.sha256 === b.sha256 && a.linkTarget === b.linkTarget;
}

function change(kind: FsChange['change'], path: string, before: TreeEntry | undefined, after: TreeEntry | undefined): FsChange {
  const cur = (after ?? before) as TreeEntry;
  const c: FsChange = { change: kind, path, type: cur.type, mode: cur.mode, size: cur.size };
  if (before?.uid !== undefined) c.uidBefore = before.uid;
  if (before && after) c.modeBefore = before.mode;
  if (before?.sha256 !== undefined) c.sha256Before = before.sha256;
  if (after?.sha256 !== undefined) c.sha256After = after.sha256;
  if (cur.linkTarget !== undefined) c.linkTarget = cur.linkTarget;
  if (cur.type === 'hardlink') c.nlink = cur.nlink;
  if (before && after && before.type !== after.type) c.typeBefore = before.type;
  return c;
}

/** Adds `hardlinkOf`: the other paths of the same inode inside the same tree. */
function linkGroups(entries: Map<string, TreeEntry>): Map<string, string[]> {
  const byInode = new Map<string, string[]>();
  for (const [rel, e] of entries) {
    if (e.type !== 'hardlink') continue;
    const list = byInode.get(e.inode) ?? [];
    list.push(rel);
    byInode.set(e.inode, list);
  }
  return byInode;
}

/** Changes from `before` to `after`, sorted by path; paths are absolute inside the sandbox. */
export function diffSnapshots(before: TreeSnapshot, after: TreeSnapshot, opts: { mountPoint: string }): FsChange[] {
  const out: FsChange[] = [];
  const groups = linkGroups(after.entries);
  for (const [rel, a] of after.entries) {
    const b = before.entries.get(rel);
    let c: FsChange | null = null;
    if (!b) c = change('added', sandboxPath(opts.mountPoint, rel), undefined, a);
    else if (!sameContent(b, a) || (a.type === 'hardlink') !== (b.type === 'hardlink')) c = change('modified', sandboxPath(opts.mountPoint, rel), b, a);
    if (c && a.type === 'hardlink') {
      const others = (groups.get(a.inode) ?? []).filter((r) => r !== rel).map((r) => sandboxPath(opts.mountPoint, r));
      if (others.length > 0) c.hardlinkOf = others;
    }
    if (c) out.push(c);
  }
  for (const [rel, b] of before.entries) {
    if (!after.entries.has(rel)) out.push(change('deleted', sandboxPath(opts.mountPoint, rel), b, undefined));
  }
  return out.sort((x, y) => (x.path < y.path ? -1 : x.path > y.path ? 1 : 0));
}

// ---- overlayfs upper dir -------------------------------------------------------------------------

const isWhiteout = (st: Stats): boolean => st.isCharacterDevice() && st.rdev === 0;

// Node has no xattr API and `getfattr` is not always installed: one python3 call reads the opaque
// flag of every candidate directory (only upper dirs that shadow a lower dir, i.e. few).
// Only `trusted.overlay.opaque`: scope overlays are mounted by root without `userxattr`, so overlayfs
// keeps its own marks in the trusted namespace, which the sandbox's user cannot write. A
// `user.overlay.opaque` in the upper dir is the program's own xattr (user.* passes through the
// overlay): read as opaque, it made the diff report deletions of files the program could not delete.
const OPAQUE_PY = [
  'import os,sys',
  'for p in sys.stdin.buffer.read().split(b"\\0"):',
  '  if not p: continue',
  '  try:',
  '    if os.getxattr(p, b"trusted.overlay.opaque", follow_symlinks=False) == b"y": sys.stdout.buffer.write(p + b"\\0")',
  '  except OSError: pass',
].join('\n');

/** The subset of `dirs` that overlayfs marked opaque (xattr trusted.overlay.opaque = "y"). */
export async function opaqueDirs(dirs: string[], python = process.env['AIRLOCK_PYTHON'] ?? 'python3'): Promise<Set<string>> {
  if (dirs.length === 0) return new Set();
  return new Promise((resolve, reject) => {
    const child = spawn(python, ['-I', '-S', '-c', OPAQUE_PY], { stdio: ['pipe', 'pipe', 'pipe'] });
    const chunks: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => chunks.push(d));
    child.on('error', (e) => reject(new Error(`cannot read overlay xattrs (needs ${python}): ${e.message}`)));
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`cannot read overlay xattrs: ${python} exited with ${code}`));
      resolve(new Set(Buffer.concat(chunks).toString('utf8').split('\0').filter((s) => s !== '')));
    });
    child.stdin.end(Buffer.from(dirs.join('\0') + '\0', 'utf8'));
  });
}

/**
 * A one-file scope: the sandbox's copy against the real file (modified, or no change). Only its
 * content: the copy belongs to the sandbox's user (so that it may write it), and its mode is that
 * user's to change as the owner, which it is not of the real file (a directory scope's top folder,
 * the sandbox's in the overlay too, is not diffed either). The real file keeps its mode.
 * `staged`: the content the copy was given. A copy that still holds it was not changed by the
 * program, whatever the real file holds now (its owner may have edited it during the run); a copy
 * the program changed while the owner changed the real file cannot be told apart from theirs: the
 * diff fails (fail closed) rather than report the owner's old content as the program's new one.
 */
export async function diffFileCopy(copy: string, lower: LowerTree, rel: string, realPath: string, staged?: { sha256: string }, budget?: DiffBudget): Promise<FsChange[]> {
  const low = await lower.entry(rel);
  if (!low) throw new Error(`the scope file ${realPath} is gone`);
  const up = { ...(await entryOf(copy, await lstat(copy), budget)), mode: low.mode };
  if (staged && up.sha256 === staged.sha256) return [];
  if (staged && low.sha256 !== staged.sha256) {
    throw new Error(`the scope file ${realPath} was changed outside the sandbox while the run had it (sha256 ${staged.sha256} when staged, ${low.sha256} now), and the program changed its copy too: whose change is whose cannot be told`);
  }
  return sameContent(low, up) ? [] : [change('modified', realPath, low, up)];
}

/**
 * Changes in a declared scope from its overlay upper dir alone (the lower is read only where the
 * upper has something). The overlay must be mounted with metacopy=off (the default), or a copied-up
 * file's data would still be in the lower dir.
 */
export async function diffOverlayUpper(upperDir: string, lower: LowerTree, mountPoint: string, budget?: DiffBudget, openedMs?: number): Promise<FsChange[]> {
  // The overlay shows the real tree live until the program copies a file up: a real entry the
  // program touched that changed after the scope was opened holds someone else's change, which a
  // diff of the upper against it would report as the program's (the owner's edit undone).
  const raced = (rel: string, e: TreeEntry): void => {
    if (openedMs === undefined || e.type === 'dir' || e.changedMs === undefined || e.changedMs <= openedMs) return;
    throw new Error(`${at(rel)} was changed outside the sandbox while the run had its scope, and the program changed it too: whose change is whose cannot be told`);
  };
  const deletedUnraced = (rel: string, e: TreeEntry): FsChange => {
    raced(rel, e);
    return change('deleted', at(rel), e, undefined);
  };
  const out: FsChange[] = [];
  const at = (rel: string): string => sandboxPath(mountPoint, rel);
  // First walk: collect upper entries and the dirs whose opaque flag matters.
  const upper: { rel: string; st: Stats; low: TreeEntry | null }[] = [];
  const candidates: string[] = [];
  const stack: string[] = [''];
  while (stack.length > 0) {
    const rel = stack.pop() as string;
    for (const name of listDir(join(upperDir, rel))) {
      const childRel = rel === '' ? name : `${rel}/${name}`;
      await breathe(upper.length + 1);
      const st = lstatSync(join(upperDir, childRel));
      budget?.tick();
      const low = await lower.entry(childRel);
      upper.push({ rel: childRel, st, low });
      if (st.isDirectory()) {
        stack.push(childRel);
        if (low?.type === 'dir') candidates.push(join(upperDir, childRel));
      }
    }
  }
  const opaque = await opaqueDirs(candidates);
  const upperRels = new Set(upper.map((u) => u.rel));
  const upperEntries = new Map<string, TreeEntry>();
  for (const { rel, st } of upper) if (!isWhiteout(st)) upperEntries.set(rel, await entryOf(join(upperDir, rel), st, budget));
  const groups = linkGroups(upperEntries);
  for (const { rel, st, low: lowOrNull } of upper) {
    const upAbs = join(upperDir, rel);
    const low = lowOrNull ?? undefined;
    if (isWhiteout(st)) {
      if (!low) continue; // whiteout of something that never was in the scope: nothing to report
      out.push(deletedUnraced(rel, low));
      if (low.type === 'dir') for (const [r, e] of await lower.subtree(rel)) out.push(deletedUnraced(r, e));
      continue;
    }
    const up = upperEntries.get(rel) as TreeEntry;
    let c: FsChange | null = null;
    if (!low) c = change('added', at(rel), undefined, up);
    else if (!sameContent(low, up)) {
      raced(rel, low);
      c = change('modified', at(rel), low, up);
    }
    if (c && up.type === 'hardlink') {
      const others = (groups.get(up.inode) ?? []).filter((r) => r !== rel).map(at);
      if (others.length > 0) c.hardlinkOf = others;
    }
    if (c) out.push(c);
    // A lower directory replaced by a non-directory: its old contents are gone too.
    if (low?.type === 'dir' && up.type !== 'dir') {
      for (const [r, e] of await lower.subtree(rel)) out.push(deletedUnraced(r, e));
    }
    // An opaque dir hides the whole lower dir: what the upper does not hold again was deleted.
    if (opaque.has(upAbs) && low?.type === 'dir') {
      for (const [r, e] of await lower.subtree(rel)) {
        if (!upperRels.has(r)) out.push(deletedUnraced(r, e));
      }
    }
  }
  // Upper entries below an opaque dir that also existed below it in the lower were compared above
  // against the lower entry; that is what the program sees as modified, which is right.
  return out.sort((x, y) => (x.path < y.path ? -1 : x.path > y.path ? 1 : 0));
}
