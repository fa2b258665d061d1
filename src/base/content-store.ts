import { createHash, randomBytes } from 'node:crypto';
import { closeSync, constants, existsSync, fstatSync, fsyncSync, openSync, readSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The workspace's content-addressed stores (blobs: what promotion applies; tombstones: pre-images).
 * They are the host's own folders: nothing the sandbox or a scope owner can reach.
 */

/** Puts verified bytes under `<store>/<sha256>` (no-op when present): written aside, fsync'd, renamed. */
export function putInStore(store: string, sha256: string, bytes: Buffer): void {
  const dest = join(store, sha256);
  if (existsSync(dest)) return;
  const tmp = `${dest}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o400);
  try {
    for (let off = 0; off < bytes.length; ) off += writeSync(fd, bytes, off, bytes.length - off);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, dest);
}

/**
 * Streams bytes into `<store>/<sha256>`: written aside chunk by chunk and hashed on the way (memory
 * stays bounded whatever the file's size), fsync'd, and renamed into place only when the hash is
 * `sha256`. False (nothing kept) when it is not; an error of `produce` is thrown, nothing kept.
 */
export async function putStreamInStore(store: string, sha256: string, produce: (each: (b: Buffer) => void) => Promise<unknown>): Promise<boolean> {
  const dest = join(store, sha256);
  if (existsSync(dest)) return true;
  const tmp = `${dest}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o400);
  const h = createHash('sha256');
  let same = false;
  try {
    await produce((b) => {
      h.update(b);
      for (let off = 0; off < b.length; ) off += writeSync(fd, b, off, b.length - off);
    });
    fsyncSync(fd);
    same = h.digest('hex') === sha256;
  } finally {
    closeSync(fd);
    if (!same) rmSync(tmp, { force: true });
  }
  if (same) renameSync(tmp, dest);
  return same;
}

/** A descriptor of a regular file opened without following a link (nor blocking on a fifo), or null. */
export function openRegular(path: string): { fd: number; size: number } | null {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return null;
  }
  const st = fstatSync(fd);
  if (st.isFile()) return { fd, size: st.size };
  closeSync(fd);
  return null;
}

/** A regular file's bytes (see openRegular), or null when it is not one or is larger than `max`. */
export function readRegular(path: string, max = Number.MAX_SAFE_INTEGER): Buffer | null {
  const file = openRegular(path);
  if (!file) return null;
  try {
    if (file.size > max) return null;
    const buf = Buffer.allocUnsafe(file.size);
    let off = 0;
    while (off < buf.length) {
      const n = readSync(file.fd, buf, off, buf.length - off, off);
      if (n === 0) break;
      off += n;
    }
    return buf.subarray(0, off);
  } finally {
    closeSync(file.fd);
  }
}

/** The bytes of a store file when their sha256 is `sha256`, else null (missing, a link, damaged). */
export function readVerified(path: string, sha256: string, max?: number): Buffer | null {
  const body = readRegular(path, max);
  return body && createHash('sha256').update(body).digest('hex') === sha256 ? body : null;
}
