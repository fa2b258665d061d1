import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

/** Writes a file atomically: a temp file in the same folder, then rename. */
export function writeAtomic(path: string, data: string | Buffer, mode = 0o600): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.tmp`);
  writeFileSync(tmp, data, { mode });
  renameSync(tmp, path);
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
