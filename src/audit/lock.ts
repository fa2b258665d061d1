import { closeSync, openSync, readFileSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { AuditError } from './types.js';
import { ownerAlive, ownerStamp } from '../base/owner.js';

/**
 * A cross-process lock from an O_EXCL lock file (no native addon, works for the gate service and
 * the CLI at once). The file holds the owner's pid, host and a random token.
 *
 * A lock is stale when its owner is gone (same host, and its pid is gone or now names a process with
 * another start time) or it is older
 * than `staleMs` (a reused pid must not block the log forever). Breaking a stale lock is itself
 * guarded by a second O_EXCL file, so two waiters cannot both break it and then delete the lock
 * the first one has just taken.
 */
export interface LockOptions {
  /** Give up after this long (default 10 s): a live holder appends in milliseconds. */
  timeoutMs?: number;
  /** A lock older than this is stale even if its pid is alive (default 5 min). */
  staleMs?: number;
  /**
   * When the lock file cannot be created because the folder is missing or read-only (a reader with
   * read access only, or no log yet), run `fn` unlocked instead of failing. For readers only.
   */
  readerFallback?: boolean;
}

interface LockInfo {
  pid: number;
  host: string;
  token: string;
  ts: string;
  /** The holder's `<pid> <start time>` (base/owner.ts): a pid reused since by a live process is not the holder. */
  owner?: string;
}

const sleepCell = new Int32Array(new SharedArrayBuffer(4));
/** Synchronous sleep: the log's API is synchronous so an append cannot be interleaved by the event loop. */
const sleep = (ms: number): void => void Atomics.wait(sleepCell, 0, 0, ms);

function readLock(path: string): { raw: string; info?: LockInfo; mtimeMs: number } | undefined {
  try {
    const raw = readFileSync(path, 'utf8');
    const mtimeMs = statSync(path).mtimeMs;
    try {
      const v = JSON.parse(raw) as LockInfo;
      if (Number.isSafeInteger(v.pid) && typeof v.host === 'string' && typeof v.token === 'string') return { raw, info: v, mtimeMs };
    } catch {
      /* being written right now, or garbage: decided by age below */
    }
    return { raw, mtimeMs };
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM'; // exists, owned by someone else
  }
}

function isStale(l: { info?: LockInfo; mtimeMs: number }, staleMs: number): boolean {
  const age = Date.now() - l.mtimeMs;
  if (!l.info) return age > 2000; // an owner writes its info right after creating the file
  if (age > staleMs) return true;
  if (l.info.host !== hostname()) return false;
  return l.info.owner ? !ownerAlive(l.info.owner) : !pidAlive(l.info.pid);
}

/** Removes the lock if it still has exactly the content we judged stale. */
function breakStale(path: string, seenRaw: string): void {
  const guard = `${path}.break`;
  let fd: number;
  try {
    fd = openSync(guard, 'wx', 0o600);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    // Someone else is breaking it; a guard left by a breaker that died is removed after 10 s.
    try {
      if (Date.now() - statSync(guard).mtimeMs > 10_000) unlinkSync(guard);
    } catch {
      /* gone already */
    }
    return;
  }
  try {
    const now = readLock(path);
    if (now && now.raw === seenRaw) unlinkSync(path);
  } finally {
    closeSync(fd);
    unlinkSync(guard);
  }
}

/**
 * Takes the lock at `path` (waiting with short sleeps); returns its release, or null when
 * `readerFallback` lets a reader go on without one. Throws AUDIT_LOCK_TIMEOUT when a live holder
 * keeps it too long.
 */
function acquire(path: string, opts: LockOptions): (() => void) | null {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const staleMs = opts.staleMs ?? 5 * 60_000;
  const info: LockInfo = { pid: process.pid, host: hostname(), token: randomBytes(16).toString('hex'), ts: new Date().toISOString(), owner: ownerStamp() };
  const raw = JSON.stringify(info);
  const deadline = Date.now() + timeoutMs;
  let wait = 1;
  for (;;) {
    let fd: number | undefined;
    try {
      fd = openSync(path, 'wx', 0o600);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (opts.readerFallback && (code === 'ENOENT' || code === 'EACCES' || code === 'EROFS' || code === 'EPERM')) return null;
      if (code !== 'EEXIST') throw new AuditError('AUDIT_IO', `cannot create the lock file ${path}: ${(e as Error).message}`);
    }
    if (fd !== undefined) {
      try {
        writeSync(fd, raw);
      } finally {
        closeSync(fd);
      }
      break;
    }
    const held = readLock(path);
    if (held && isStale(held, staleMs)) {
      breakStale(path, held.raw);
      continue;
    }
    if (Date.now() > deadline) {
      const who = held?.info ? `process ${held.info.pid} on ${held.info.host}` : 'another process';
      throw new AuditError('AUDIT_LOCK_TIMEOUT', `the audit log is locked by ${who} (${path}); if no Airlock process is running, remove that file`);
    }
    sleep(wait);
    wait = Math.min(wait * 2, 20);
  }
  return () => {
    // Release only our own lock (a holder older than staleMs may have been broken meanwhile).
    const now = readLock(path);
    if (now?.raw === raw) unlinkSync(path);
  };
}

/** Runs `fn` holding the lock at `path`; throws AUDIT_LOCK_TIMEOUT when a live holder keeps it too long. */
export function withLock<T>(path: string, fn: () => T, opts: LockOptions = {}): T {
  const release = acquire(path, opts);
  try {
    return fn();
  } finally {
    release?.();
  }
}

/** withLock for work that awaits: the lock is held until `fn`'s promise settles. */
export async function withLockAsync<T>(path: string, fn: () => Promise<T>, opts: LockOptions = {}): Promise<T> {
  const release = acquire(path, opts);
  try {
    return await fn();
  } finally {
    release?.();
  }
}
