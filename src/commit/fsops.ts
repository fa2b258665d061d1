import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  constants,
  existsSync,
  fchmodSync,
  fchownSync,
  fstatSync,
  fsyncSync,
  futimesSync,
  linkSync,
  lchownSync,
  lstatSync,
  mkdirSync,
  openSync,
  readSync,
  renameSync,
  rmdirSync,
  unlinkSync,
  writeSync,
  type Stats,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { PathState } from './types.js';

/**
 * The filesystem primitives of promotion and rollback. Nothing here follows a symbolic link at the
 * final component (O_NOFOLLOW, lstat, rename/link/unlink never follow), and every new file is
 * written beside its target, fsync'd with its final mode and owner, then renamed or linked into
 * place: a path holds its old content or its new content, never half of one.
 */

const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
const CHUNK = 1 << 20;

/** sha256 of an open file, read in chunks (no whole-file buffer for big files). */
function hashFd(fd: number): string {
  const h = createHash('sha256');
  const buf = Buffer.allocUnsafe(CHUNK);
  for (;;) {
    const n = readSync(fd, buf, 0, CHUNK, null);
    if (n === 0) break;
    h.update(buf.subarray(0, n));
  }
  return h.digest('hex');
}

/** sha256 of a regular file, never through a link; null when it is not a regular file. */
export function hashFileNoFollow(path: string): string | null {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    if (!fstatSync(fd).isFile()) return null;
    return hashFd(fd);
  } finally {
    closeSync(fd);
  }
}

export function lstatOrNull(path: string): Stats | null {
  try {
    return lstatSync(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT' || (e as NodeJS.ErrnoException).code === 'ENOTDIR') return null;
    throw e;
  }
}

/** What is at `path` now: null (absent), a file or dir state, or `other` (a link, fifo, device...). */
export function currentState(path: string, withHash = true): PathState | null | { type: 'other'; kind: string } {
  const st = lstatOrNull(path);
  if (!st) return null;
  const base = { mode: st.mode & 0o7777, uid: st.uid, gid: st.gid };
  if (st.isDirectory()) return { type: 'dir', ...base };
  if (st.isFile()) {
    const s: PathState = { type: 'file', ...base, mtimeMs: st.mtimeMs, atimeMs: st.atimeMs };
    if (withHash) {
      const h = hashFileNoFollow(path);
      if (h === null) return { type: 'other', kind: 'changing' };
      s.sha256 = h;
    }
    return s;
  }
  return { type: 'other', kind: st.isSymbolicLink() ? 'symlink' : st.isFIFO() ? 'fifo' : st.isSocket() ? 'socket' : 'device' };
}

/** Same type and content (file hash); with `strict`, same permission bits too. */
export function sameState(cur: ReturnType<typeof currentState>, want: PathState | null, strict = true): boolean {
  if (cur === null || want === null) return cur === want;
  if (cur.type !== want.type) return false;
  const c = cur as PathState;
  if (want.type === 'file' && c.sha256 !== want.sha256) return false;
  return !strict || c.mode === want.mode;
}

export function fsyncPath(path: string): void {
  const fd = openSync(path, constants.O_RDONLY);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Copies a content-addressed file into `store` (no-op when present), fsync'd; verifies the hash. */
export function keepInStore(store: string, src: string, sha256: string): boolean {
  const dest = join(store, sha256);
  if (existsSync(dest)) return true;
  const bytes = readVerified(src, sha256);
  if (!bytes) return false;
  const tmp = `${dest}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o400);
  try {
    writeAll(fd, bytes);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, dest);
  return true;
}

/** The bytes of a regular file when their sha256 is `sha256`, else null (missing, a link, damaged). */
export function readVerified(path: string, sha256: string): Buffer | null {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return null;
    const bytes = Buffer.allocUnsafe(st.size);
    let off = 0;
    while (off < st.size) {
      const n = readSync(fd, bytes, off, st.size - off, off);
      if (n === 0) break;
      off += n;
    }
    const body = bytes.subarray(0, off);
    return createHash('sha256').update(body).digest('hex') === sha256 ? body : null;
  } finally {
    closeSync(fd);
  }
}

function writeAll(fd: number, buf: Buffer): void {
  let off = 0;
  while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off);
}

/** The name a staged file gets beside its target (recovery removes leftovers by this name). */
export const stageName = (path: string, token: string, i: number): string => join(dirname(path), `.airlock-stage-${token}-${i}-${basename(path).slice(0, 80)}`);

/**
 * Brings `path` to `want` (null: absent). File content comes from `bytes` (already verified).
 * A file is staged beside the target with its final mode, owner and times, fsync'd, then renamed
 * over the old file or hard-linked into place when the path is free (link never replaces).
 */
export function putState(path: string, want: PathState | null, bytes: Buffer | null, stage: string): void {
  const st = lstatOrNull(path);
  if (want === null) {
    if (!st) return;
    if (st.isDirectory()) rmdirSync(path);
    else unlinkSync(path);
    return;
  }
  if (want.type === 'dir') {
    if (st && !st.isDirectory()) throw new Error(`${path} is not a directory`);
    if (!st) mkdirSync(path, { mode: want.mode & 0o777 });
    if (isRoot) lchownSync(path, want.uid, want.gid);
    chmodSync(path, want.mode); // after chown, which clears set-id bits; and not masked by umask
    return;
  }
  if (!bytes) throw new Error(`no content for ${path}`);
  if (st && !st.isFile()) throw new Error(`${path} is not a regular file`);
  try {
    unlinkSync(stage); // a leftover of an interrupted attempt with the same name
  } catch {
    /* none */
  }
  const fd = openSync(stage, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    writeAll(fd, bytes);
    if (isRoot) fchownSync(fd, want.uid, want.gid);
    fchmodSync(fd, want.mode);
    if (want.mtimeMs !== undefined) futimesSync(fd, (want.atimeMs ?? want.mtimeMs) / 1000, want.mtimeMs / 1000);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  if (st) renameSync(stage, path);
  else {
    linkSync(stage, path);
    unlinkSync(stage);
  }
}

export function removeQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    /* absent */
  }
}

/** Test-only hooks (docs/promotion.md): slow a promotion down, or kill -9 it after N changes. */
export function testHook(done: number): void {
  const delay = Number(process.env.AIRLOCK_TEST_COMMIT_DELAY_MS ?? 0);
  if (delay > 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, delay);
  const crash = process.env.AIRLOCK_TEST_COMMIT_CRASH_AFTER;
  if (crash !== undefined && done === Number(crash)) process.kill(process.pid, 'SIGKILL');
}

/** Test-only: kill -9 at a named point (AIRLOCK_TEST_COMMIT_CRASH_AT=after_commit_record). */
export function testPoint(name: string): void {
  if (process.env.AIRLOCK_TEST_COMMIT_CRASH_AT === name) process.kill(process.pid, 'SIGKILL');
}
