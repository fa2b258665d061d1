import { randomBytes } from 'node:crypto';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

/**
 * Writes a file atomically: a temp file in the same folder, then rename. The temp name is
 * unpredictable and made with O_EXCL (a link already there is never followed), for folders that
 * others can write (the gate's requests_in/, results_out/, inbound/ and quarantine/).
 */
export function writeAtomic(path: string, data: string | Buffer, mode = 0o600): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(8).toString('hex')}.tmp`);
  writeFileSync(tmp, data, { mode, flag: 'wx' });
  renameSync(tmp, path);
}
