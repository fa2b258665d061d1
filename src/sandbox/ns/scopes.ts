// A run's declared scopes, on the host side: opened, staged for the sandbox and diffed afterwards,
// every real file read through the scope's agent (src/base/scope-fs.ts): from the scope root down
// without following a link at any component, with the authority of the scope root's owner. So a
// scope whose path has a link anywhere, or a one-file scope its owner cannot read, is refused before
// anything runs, and nothing a scope's owner swaps during the run makes the host read elsewhere.
import { createHash } from 'node:crypto';
import { chmodSync, chownSync, closeSync, constants, existsSync, lstatSync, openSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { putInStore, putStreamInStore } from '../../base/content-store.js';
import { ScopeFs, ScopeFsError, type EntryStat } from '../../base/scope-fs.js';
import type { Problem } from '../../base/problem.js';
import { diffFileCopy, diffOverlayUpper, DiffBudgetExceeded, type DiffBudget, type LowerTree, type TreeEntry } from '../observe/fs-diff.js';
import type { FsChange, ScopeObservation } from '../types.js';
import type { IdmapError, Mounter, ScopeIdmap } from './staging.js';

export interface OpenScope {
  hostPath: string;
  /** A directory (seen through an overlay) or one regular file (seen through a bound copy). */
  kind: 'dir' | 'file';
  fs: ScopeFs;
  /** A one-file scope: its name in the root (its parent directory). */
  fileRel: string;
  /** When its agent opened it (ms): a real entry changed after that was not changed by the run. */
  openedMs: number;
}

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** Opens one agent per scope; refuses (coded, nothing runs) a path with a link or a special file. */
export async function openScopes(paths: string[]): Promise<{ ok: true; scopes: OpenScope[] } | { ok: false; problems: Problem[] }> {
  const scopes: OpenScope[] = [];
  const problems: Problem[] = [];
  for (const hostPath of paths) {
    try {
      scopes.push(await openScope(hostPath));
    } catch (e) {
      if (!(e instanceof ScopeFsError)) throw e;
      const code = /not built/.test(e.message) ? 'NS_SCOPE_AGENT_MISSING' : 'NS_SCOPE_UNSAFE';
      problems.push({ code, message: `scope ${hostPath}: ${e.message}; nothing ran`, path: hostPath });
    }
  }
  if (problems.length === 0) return { ok: true, scopes };
  closeScopes(scopes);
  return { ok: false, problems };
}

async function openScope(hostPath: string): Promise<OpenScope> {
  try {
    return { hostPath, kind: 'dir', fs: await ScopeFs.open(hostPath, 'dir'), fileRel: '', openedMs: Date.now() };
  } catch (e) {
    if (!(e instanceof ScopeFsError) || e.errno !== 'ENOTDIR') throw e;
  }
  // Not a directory at the last component (a link anywhere on the way fails the same way): a file?
  const fs = await ScopeFs.open(hostPath, 'file');
  const st = await fs.stat(basename(hostPath)).catch((e: unknown) => {
    fs.close();
    throw e;
  });
  if (st?.type !== 'file') {
    fs.close();
    throw new ScopeFsError('ENOTDIR', st ? `is a ${st.type}: a scope is a directory or one regular file, never a link or a special file` : 'does not exist', hostPath);
  }
  return { hostPath, kind: 'file', fs, fileRel: basename(hostPath), openedMs: Date.now() };
}

export function closeScopes(scopes: OpenScope[]): void {
  for (const s of scopes) s.fs.close();
}

/**
 * A one-file scope's copy for the sandbox, read with the scope owner's authority (a file the owner
 * cannot read is refused: NS_SCOPE_UNREADABLE). Same permission bits (never set-id), owned by the
 * sandbox's host user, as the top folder of a directory scope's overlay is. The staged content's
 * hash is kept on `s` (`staged`): the diff compares the copy with what the program was given.
 */
export async function stageFileCopy(s: StagedScope, dest: string, uid: number, gid: number): Promise<Problem | null> {
  let read: Awaited<ReturnType<ScopeFs['read']>>;
  try {
    read = await s.fs.read(s.fileRel);
  } catch (e) {
    if (!(e instanceof ScopeFsError)) throw e;
    const denied = e.errno === 'EACCES' || e.errno === 'EPERM';
    return { code: denied ? 'NS_SCOPE_UNREADABLE' : 'NS_SCOPE_UNSAFE', message: `scope ${s.hostPath}: ${denied ? `its owner (uid ${s.fs.authority.uid}) cannot read it, so neither may the sandbox` : e.message}; nothing ran`, path: s.hostPath };
  }
  // The agent reads with the authority of the file's folder's owner. A file of another owner there
  // (another user's file in a root-owned folder, which the agent reads as root) is staged only when
  // anyone may read it: what the sandbox's user would see of it through a directory scope.
  if (read.stat.uid !== s.fs.authority.uid && !(read.stat.mode & 0o004)) {
    return { code: 'NS_SCOPE_UNREADABLE', message: `scope ${s.hostPath}: it belongs to uid ${read.stat.uid}, not to its folder's owner (uid ${s.fs.authority.uid}) whose authority reads it, and is not readable by others (mode ${read.stat.mode.toString(8).padStart(4, '0')}); nothing ran`, path: s.hostPath };
  }
  writeFileSync(dest, read.bytes, { flag: 'wx', mode: 0o600 });
  s.staged = { sha256: sha256(read.bytes) };
  chownSync(dest, uid, gid);
  chmodSync(dest, read.stat.mode & 0o777);
  return null;
}

const NOT_THERE = new Set(['ENOENT', 'ENOTDIR', 'ELOOP', 'EXDEV']);
/** st_mode's file type bits, so that real and upper entries compare as lstat gives them. */
const TYPE_BITS: Record<EntryStat['type'], number> = { file: 0o100000, dir: 0o040000, symlink: 0o120000, fifo: 0o010000, socket: 0o140000, 'char-device': 0o020000, 'block-device': 0o060000 };

/** The real side of a scope, read through its agent (the overlay's lower dir, or a scope file). */
export function lowerTreeOf(fs: ScopeFs, budget?: DiffBudget): LowerTree {
  const entry = async (rel: string): Promise<TreeEntry | null> => {
    budget?.tick();
    let st: EntryStat | null;
    try {
      st = await fs.stat(rel);
    } catch (e) {
      // A parent that is absent, not a directory, a link or a mount point in the real tree: the
      // overlay shows nothing of the real tree there either (promotion refuses such a path anyway).
      if (e instanceof ScopeFsError && NOT_THERE.has(e.errno)) return null;
      throw e;
    }
    if (!st) return null;
    const type = st.type === 'file' && st.nlink > 1 ? 'hardlink' : st.type;
    const [, , ctimeSec, ctimeNsec] = st.version.split(':').map(Number);
    const e: TreeEntry = { type, mode: TYPE_BITS[st.type] | st.mode, size: st.size, nlink: st.nlink, inode: st.ident, uid: st.uid, changedMs: (ctimeSec ?? 0) * 1000 + (ctimeNsec ?? 0) / 1e6 };
    if (st.type === 'file') {
      // The budget is checked per chunk too: one big pre-image (a deleted 8 GiB sparse file) is a
      // single entry, and took the host twice the whole observation deadline to hash.
      const h = await fs.hash(rel, budget && (() => budget.tick()));
      if (h.stat.ident !== st.ident) throw new Error(`file changed while hashing: ${rel}`);
      e.sha256 = h.sha256;
    } else if (st.type === 'symlink') {
      e.linkTarget = await fs.readlink(rel);
      e.sha256 = createHash('sha256').update(e.linkTarget).digest('hex');
    }
    return e;
  };
  const subtree = async (rel: string): Promise<Map<string, TreeEntry>> => {
    const out = new Map<string, TreeEntry>();
    const stack = [rel];
    while (stack.length > 0) {
      const dir = stack.pop() as string;
      for (const name of (await fs.list(dir)).sort()) {
        const child = dir === '' ? name : `${dir}/${name}`;
        budget?.entry(); // a deleted folder's contents are listed and hashed: they count too
        const e = await entry(child);
        if (!e) continue;
        out.set(child, e);
        if (e.type === 'dir') stack.push(child);
      }
    }
    return out;
  };
  return { entry, subtree };
}

/** Where a run's scope lives in staging: the overlay dirs, or the one-file copy in `upper`. */
export interface StagedScope extends OpenScope {
  upper: string;
  work: string;
  merged: string;
  /** A one-file scope: the content its copy was given (stageFileCopy). */
  staged?: { sha256: string };
}

/**
 * Mounts a directory scope's overlay with the agent's descriptor of the scope root as the lower dir
 * (/proc/<agent pid>/fd/N), and refuses it (unmounted again, NS_SCOPE_UNSAFE) if the agent had exited
 * before or by the end of the mount. The agent runs as the scope's owner, who may kill it: its pid
 * then stays a zombie of the agent server's until ScopeFs.close() (so no other process of the owner's
 * can get that pid and hold another directory at that fd number), but its descriptor is gone.
 *
 * With `idmap`, the lower dir is an idmapped, read-only clone of that descriptor's tree in which the
 * sandbox user's files are the run's own uid's (native/idmap.c): a run with a uid of its own may then
 * write them as the sandbox user could (in its overlay). The clone is not attached anywhere once the
 * overlay holds it (it keeps its own private copy; before Linux 6.15 the helper attaches it for the
 * mount's time in a folder only root may enter), so nothing else can reach it.
 * NS_SCOPE_IDMAP when the kernel or the scope's filesystem cannot: nothing ran, and the caller runs it
 * again without.
 */
export async function mountScopeOverlay(mnt: Pick<Mounter, 'overlay' | 'unmount'>, s: StagedScope, mounted: string[], readOnly = false, idmap?: ScopeIdmap): Promise<Problem | null> {
  const unsafe: Problem = { code: 'NS_SCOPE_UNSAFE', message: `scope ${s.hostPath}: its agent stopped before its overlay was mounted (killed?): its descriptor of the scope is gone; nothing ran`, path: s.hostPath };
  if (!s.fs.running) return unsafe;
  try {
    await mnt.overlay(s.fs.rootByDescriptor, s.upper, s.work, s.merged, readOnly, idmap);
  } catch (e) {
    // A helper killed after its mount(2) and before its answer reports a failure with the overlay in
    // place: it goes with the run's mounts, or the run's uid would be given back while an overlay
    // showing the scope's files as that uid's stayed mounted in a folder of its gid.
    if (mountedOn(s.merged)) mounted.push(s.merged);
    // `running` changes only when the agent's connection's close event has come, which may be after
    // the helper's answer: an agent killed meanwhile is seen by its descriptor, gone (its pid is
    // still its own, a zombie, so /proc/<pid>/fd/N is its descriptor or nothing).
    if (!s.fs.running || descriptorGone(s.fs.rootByDescriptor)) return unsafe;
    if (idmap) {
      const p: Problem = { code: 'NS_SCOPE_IDMAP', message: `scope ${s.hostPath}: cannot be mounted over an idmapped clone of it (${(e as Error).message}); nothing ran`, path: s.hostPath };
      refusalHolds.set(p, (e as Partial<IdmapError>).holds ?? 'once');
      return p;
    }
    throw e;
  }
  mounted.push(s.merged);
  if (s.fs.running) return null;
  const err = await mnt.unmount(s.merged);
  if (err === null) mounted.splice(mounted.indexOf(s.merged), 1);
  return unsafe;
}

const refusalHolds = new WeakMap<Problem, IdmapError['holds']>();

/** How long an NS_SCOPE_IDMAP refusal holds (staging.ts, IdmapError): for every scope of this host, this scope, or this run. */
export function idmapRefusalHolds(p: Problem): IdmapError['holds'] {
  return refusalHolds.get(p) ?? 'once';
}

/** Whether something is mounted on `dir` (an overlay: a device of its own; a pooled sandbox's self-bind of the same filesystem is not). */
function mountedOn(dir: string): boolean {
  try {
    return statSync(dir).dev !== statSync(dirname(dir)).dev;
  } catch {
    return false;
  }
}

function descriptorGone(byDescriptor: string): boolean {
  try {
    lstatSync(byDescriptor);
    return false;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

/** Where a file scope's copy lives: the upper dir holds it under the file's own name. */
export const fileCopyOf = (s: { hostPath: string; upper: string }): string => join(s.upper, basename(s.hostPath));

/**
 * The scope's changes after the run (every sandbox process is dead), with the new content kept in
 * `blobs` and the pre-images of modified or deleted files in `tombstones` (what promotion applies
 * and what rollback restores), both by sha256 and re-hashed.
 */
export async function observeScope(s: StagedScope, mechanism: ScopeObservation['mechanism'], keep: { blobs?: string; tombstones?: string }, budget?: DiffBudget): Promise<ScopeObservation> {
  const root = { ident: s.fs.root.ident, uid: s.fs.root.uid, gid: s.fs.root.gid };
  const base = { hostPath: s.hostPath, kind: s.kind, root, mechanism } as const;
  try {
    const lower = lowerTreeOf(s.fs, budget);
    const changes = s.kind === 'file' ? await diffFileCopy(fileCopyOf(s), lower, s.fileRel, s.hostPath, s.staged, budget) : await diffOverlayUpper(s.upper, lower, s.hostPath, budget, s.openedMs);
    if (keep.blobs) keepNewContent(changes, s.upper, s.kind === 'file' ? dirname(s.hostPath) : s.hostPath, keep.blobs);
    if (keep.tombstones) await keepPreimages(changes, s, keep.tombstones, budget);
    return { ...base, changes };
  } catch (e) {
    if (e instanceof DiffBudgetExceeded) return { ...base, changes: null, error: `the scope diff stopped: ${e.message}`, budgetExceeded: e.limit };
    return { ...base, changes: null, error: `the scope diff failed: ${(e as Error).message}` };
  }
}

/**
 * Copies the new content of every added or modified regular file out of the overlay's upper dir
 * (staging: the host's own) before it is discarded. A file whose bytes no longer match its diff
 * hash is not kept (promotion then refuses).
 */
function keepNewContent(changes: FsChange[], upper: string, mountPoint: string, dir: string): void {
  for (const c of changes) {
    if (c.change === 'deleted' || c.type !== 'file' || !c.sha256After || existsSync(join(dir, c.sha256After))) continue;
    const fd = openSync(join(upper, c.path.slice(mountPoint.length + 1)), constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      const bytes = readFileSync(fd);
      if (sha256(bytes) === c.sha256After) putInStore(dir, c.sha256After, bytes);
    } finally {
      closeSync(fd);
    }
  }
}

/**
 * Pre-images of modified and deleted files, read from the real scope through its agent, within the
 * observation's budget (each is read in full a second time: the same big file as in lowerTreeOf).
 */
async function keepPreimages(changes: FsChange[], s: OpenScope, dir: string, budget?: DiffBudget): Promise<void> {
  for (const c of changes) {
    if (c.change === 'added' || !c.sha256Before || (c.typeBefore ?? c.type) !== 'file' || existsSync(join(dir, c.sha256Before))) continue;
    const rel = s.kind === 'file' ? s.fileRel : c.path.slice(s.hostPath.length + 1);
    try {
      await putStreamInStore(dir, c.sha256Before, (each) => s.fs.stream(rel, each, budget && (() => budget.tick())));
    } catch (e) {
      // Past the budget: the observation stopped (observeScope reports it); the agent was ended.
      if (e instanceof DiffBudgetExceeded) throw e;
      /* gone or unreadable now: the diff records its hash; promotion re-checks and refuses */
    }
  }
}
