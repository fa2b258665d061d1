// Creating a file that several processes may create at once: written whole under a temporary name,
// synced, then hard-linked into place. No reader ever sees a half-written file; exactly one writer wins.
import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, linkSync, openSync, unlinkSync, writeSync } from 'node:fs';

export function createOnce(file: string, data: string | Buffer, mode = 0o600): void {
  const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  const fd = openSync(tmp, 'wx', mode);
  try {
    writeSync(fd, typeof data === 'string' ? Buffer.from(data) : data);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  try {
    linkSync(tmp, file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  } finally {
    unlinkSync(tmp);
  }
}
