import { createHash } from 'node:crypto';
import { closeSync, constants, existsSync, fsyncSync, openSync, readSync, statfsSync } from 'node:fs';
import { openRegular, putStreamInStore } from '../base/content-store.js';
import { basename, dirname, join } from 'node:path';
import { ScopeFsError, type EntryStat } from '../base/scope-fs.js';
import type { Scopes } from './scopes.js';
import type { PathState } from './types.js';

/**
 * The filesystem primitives of promotion and rollback. Inside a scope, everything goes through the
 * scope's agent (src/base/scope-fs.ts): a descriptor walk that never follows a link, with the scope
 * owner's authority, and every replace, removal or mode change checked against the inode that was
 * just read. A file is written beside its target, fsync'd with its final mode, then swapped into
 * place: a path holds its old content or its new content, never half of one.
 *
 * The workspace's own stores (blobs, tombstones) are the host's: they are read and written here by
 * path, never with anything the sandbox or a scope owner can reach.
 */

const CHUNK = 1 << 20;

/** What is at a scope path now: null (absent), a file or dir state, or `other` (a link, fifo, device...). */
export type CurrentState = (PathState & { ident: string; version: string; nlink: number }) | null | { type: 'other'; kind: string; ident: string; version: string };

const stateOf = (st: EntryStat, sha256?: string): NonNullable<CurrentState> => {
  const base = { mode: st.mode, uid: st.uid, gid: st.gid, ident: st.ident, version: st.version, nlink: st.nlink };
  if (st.type === 'dir') return { type: 'dir', ...base };
  if (st.type === 'file') return { type: 'file', ...base, sha256, mtime: st.mtime, atime: st.atime };
  return { type: 'other', kind: st.type, ident: st.ident, version: st.version };
};

/** The state of a scope path, read through its agent (content hashed when it is a regular file). */
export async function currentState(scopes: Scopes, path: string, withHash = true): Promise<CurrentState> {
  const { fs, rel } = scopes.at(path);
  const st = await fs.stat(rel);
  if (!st) return null;
  if (st.type !== 'file' || !withHash) return stateOf(st);
  const h = await fs.hash(rel);
  // What was hashed must be what was stat'ed: a file swapped in between is reported as changing.
  if (h.stat.ident !== st.ident) return { type: 'other', kind: 'changing', ident: st.ident, version: st.version };
  // h.stat was taken when the hash's read opened the file: an edit in place since then changes its
  // version, and the agent then refuses to replace, remove or chmod it.
  return stateOf(h.stat, h.sha256);
}

/** Same type and content (file hash); with `strict`, same permission bits too. */
export function sameState(cur: CurrentState, want: PathState | null, strict = true): boolean {
  if (cur === null || want === null) return cur === want;
  if (cur.type !== want.type) return false;
  const c = cur as PathState;
  if (want.type === 'file' && c.sha256 !== want.sha256) return false;
  return !strict || c.mode === want.mode;
}

/**
 * The name a staged file gets beside its target (recovery removes leftovers by this name): the
 * target's first 80 characters, and no more bytes than a name may have (255): 80 characters of CJK
 * text are 240 bytes, and the stage could never be created (ENAMETOOLONG), so such a file was never
 * promoted. Names that fitted before are unchanged (a leftover of an older attempt is still found).
 */
export function stageName(path: string, token: string, i: number): string {
  const prefix = `.airlock-stage-${token}-${i}-`;
  let room = 255 - Buffer.byteLength(prefix);
  let tail = '';
  for (const ch of [...basename(path)].slice(0, 80)) {
    room -= Buffer.byteLength(ch);
    if (room < 0) break;
    tail += ch;
  }
  return join(dirname(path), prefix + tail);
}

/**
 * Brings scope path `path` to `want` (null: absent), from `cur` as just read. File content comes
 * from `bytes` (already verified). A new entry gets the agent's (the scope owner's) uid; its group
 * is set only when it differs, and only to a group the owner belongs to.
 */
export async function putState(scopes: Scopes, path: string, cur: CurrentState, want: PathState | null, bytes: Buffer | null, stage: string): Promise<void> {
  const { fs, rel } = scopes.at(path);
  const gid = want && want.gid !== fs.authority.gid ? want.gid : undefined;
  if (want === null) {
    if (!cur) return;
    if (cur.type === 'dir') await fs.rmdir(rel, cur.ident);
    else await fs.unlink(rel, cur.version);
    return;
  }
  if (want.type === 'dir') {
    if (cur && cur.type !== 'dir') throw new Error(`${path} is not a directory`);
    if (!cur) await fs.mkdir(rel, want.mode, gid);
    else if (cur.mode !== want.mode || cur.gid !== want.gid) await fs.chmod(rel, want.mode, gid, cur.version);
    return;
  }
  if (!bytes) throw new Error(`no content for ${path}`);
  if (cur && cur.type !== 'file') throw new Error(`${path} is not a regular file`);
  await fs.write(rel, basename(stage), bytes, { mode: want.mode, ...(gid !== undefined ? { gid } : {}), ...(want.atime ? { atime: want.atime } : {}), ...(want.mtime ? { mtime: want.mtime } : {}), expect: cur ? cur.version : null });
}

/** Removes a staging file an interrupted attempt may have left (only a regular file by that name). */
export async function removeStage(scopes: Scopes, stage: string): Promise<void> {
  const dir = scopes.parentOf(stage);
  if (!dir) return;
  const rel = dir.rel ? `${dir.rel}/${basename(stage)}` : basename(stage);
  try {
    const st = await dir.fs.stat(rel);
    if (st?.type === 'file') await dir.fs.unlink(rel, st.ident);
  } catch {
    /* a parent gone or unsafe: nothing of ours can be there */
  }
}

// ---- the workspace's content stores (host-owned, by path) ------------------------------------------

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

/** sha256 of a store file, never through a link; null when it is not a regular file. */
export function hashFileNoFollow(path: string): string | null {
  const file = openRegular(path);
  if (!file) return null;
  try {
    return hashFd(file.fd);
  } finally {
    closeSync(file.fd);
  }
}

export function fsyncPath(path: string): void {
  const fd = openSync(path, constants.O_RDONLY);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * What a store may still take: its file system keeps a reserve free (beyond what only root may
 * use): STORE_RESERVE of its size, at most STORE_RESERVE_MAX. What is kept comes from a scope,
 * whose owner chooses its size: a sparse file costs them no disk, and was copied in full into
 * root's workspace until its disk was full. The cap keeps a large disk that is merely well used
 * (91 % of 250 GB) from refusing every pre-image.
 */
export const STORE_RESERVE = 0.1;
export const STORE_RESERVE_MAX = 1 << 30;
function roomIn(store: string): { room: number; reserve: number } {
  const s = statfsSync(store);
  const reserve = Math.min(STORE_RESERVE * s.blocks * s.bsize, STORE_RESERVE_MAX);
  return { room: Math.max(0, s.bavail * s.bsize - reserve), reserve };
}

/**
 * Copies a scope file's content into a store through its agent (streamed) when its sha256 is
 * `sha256`. Refused (ScopeFsError ENOSPC, nothing kept) when it would leave the store's file
 * system less than its reserve free (roomIn); a file that grows past that while copied ends the agent.
 */
export async function keepInStore(store: string, scopes: Scopes, path: string, sha256: string): Promise<boolean> {
  if (existsSync(join(store, sha256))) return true;
  const { fs, rel } = scopes.at(path);
  const { room, reserve } = roomIn(store);
  const tooBig = (size: number): ScopeFsError =>
    new ScopeFsError('ENOSPC', `${path} has ${size} bytes or more: keeping it in ${store} would leave its file system less than its reserve free (${Math.floor(reserve)} bytes: ${STORE_RESERVE * 100}% of it, at most 1 GiB; ${Math.floor(room)} bytes may be kept); nothing of it was kept`, rel);
  const st = await fs.stat(rel);
  if (st && st.size > room) throw tooBig(st.size);
  let written = 0;
  return putStreamInStore(store, sha256, (each) =>
    fs.stream(
      rel,
      (b) => {
        written += b.length;
        each(b);
      },
      () => {
        if (written > room) throw tooBig(written);
      },
    ),
  );
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
