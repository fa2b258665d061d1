import { closeSync, constants, existsSync, fstatSync, mkdirSync, openSync, readSync, renameSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { Problem } from '../base/problem.js';
import { writeAtomic } from '../base/write-atomic.js';
import { MAX_DOCUMENT_BYTES } from '../contracts/text.js';

/**
 * Reads a document the gate was handed (a request, its .sig): a regular file only, never through a
 * link, never blocking (a fifo), at most MAX_DOCUMENT_BYTES (+1, so that DOC_TOO_LARGE is reported).
 */
export function readHandedFile(path: string): { bytes: Buffer } | { problem: Problem } {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return { problem: { code: 'DOC_NOT_TEXT', message: code === 'ELOOP' ? `${basename(path)} is a link, not a file: the gate reads only files` : `${basename(path)} cannot be read (${code ?? e})` } };
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return { problem: { code: 'DOC_NOT_TEXT', message: `${basename(path)} is not a regular file (a folder, fifo, socket or device): the gate reads only files` } };
    if (st.size > MAX_DOCUMENT_BYTES) return { problem: { code: 'DOC_TOO_LARGE', message: `document is ${st.size} bytes; the limit is ${MAX_DOCUMENT_BYTES}` } };
    const buf = Buffer.alloc(MAX_DOCUMENT_BYTES + 1);
    let n = 0;
    for (let r = 1; r > 0 && n < buf.length; n += r) r = readSync(fd, buf, n, buf.length - n, null);
    return { bytes: buf.subarray(0, n) };
  } finally {
    closeSync(fd);
  }
}

/** Moves a file (and its `.sig` when present) into `dir`; never overwrites: a clash gets a suffix. */
export function moveInto(file: string, dir: string): string {
  mkdirSync(dir, { recursive: true });
  let dest = join(dir, basename(file));
  for (let i = 1; existsSync(dest); i++) dest = join(dir, `${basename(file, '.md')}.${i}${file.endsWith('.md') ? '.md' : ''}`);
  renameSync(file, dest);
  if (existsSync(`${file}.sig`)) renameSync(`${file}.sig`, `${dest}.sig`);
  return dest;
}

/** Quarantines a file with `<name>.reasons.json` beside it: nothing rejected is deleted. */
export function quarantine(file: string, dir: string, reasons: Record<string, unknown>): string {
  const dest = moveInto(file, dir);
  writeAtomic(`${dest}.reasons.json`, JSON.stringify({ file: basename(dest), quarantined_utc: new Date().toISOString(), ...reasons }, null, 2) + '\n');
  return dest;
}
