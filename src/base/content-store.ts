import { randomBytes } from 'node:crypto';
import { closeSync, constants, existsSync, fsyncSync, openSync, renameSync, writeSync } from 'node:fs';
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
