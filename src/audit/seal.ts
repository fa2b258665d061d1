import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { createOnce } from '../base/create-once.js';

/**
 * The audit log's seal: every record and the head file carry an HMAC-SHA256, under a host key kept
 * outside the workspace, of what makes them what they are (the record's hash; the head's seq and
 * hash). So a record added to the end of the log by someone who can write the workspace but not
 * read the key, however well it is hashed and chained, does not verify; nor does a head file they
 * write. The key is 32 random bytes, created on first use, mode 0600.
 */
export interface SealKey {
  /** sha256 of the key, first 16 hex digits: names the key without revealing it. */
  id: string;
  key: Buffer;
  file: string;
}

/** `$AIRLOCK_AUDIT_KEY`, else `~/.config/airlock/audit-seal.key` (beside the operator keys, outside every workspace). */
export function sealKeyFile(): string {
  return process.env.AIRLOCK_AUDIT_KEY ?? join(homedir(), '.config', 'airlock', 'audit-seal.key');
}

const keyOf = (key: Buffer, file: string): SealKey => ({ id: createHash('sha256').update(key).digest('hex').slice(0, 16), key, file });

/** The key at `file`, or null when there is none (or it is not a key). */
export function readSealKey(file = sealKeyFile()): SealKey | null {
  try {
    const key = readFileSync(file);
    return key.length === 32 ? keyOf(key, file) : null;
  } catch {
    return null;
  }
}

/** The key at `file`, created (atomically: one writer wins) when there is none. */
export function ensureSealKey(file = sealKeyFile()): SealKey {
  const found = readSealKey(file);
  if (found) return found;
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  createOnce(file, randomBytes(32));
  const key = readSealKey(file);
  if (!key) throw new Error(`${file} is not an audit seal key (32 bytes)`);
  return key;
}

const mac = (k: SealKey, text: string): string => createHmac('sha256', k.key).update(text).digest('hex');

/** A record's seal: over its hash (which covers every other field). */
export const recordSeal = (k: SealKey, hash: string): string => mac(k, `airlock-audit-record-v1\n${hash}\n`);

/** The head file's seal: over the seq and hash it says the log ends with. */
export const headSeal = (k: SealKey, seq: number, hash: string): string => mac(k, `airlock-audit-head-v1\n${seq}\n${hash}\n`);

export function sealMatches(expected: string, actual: string | undefined): boolean {
  if (actual === undefined || actual.length !== expected.length) return false;
  return timingSafeEqual(Buffer.from(expected), Buffer.from(actual));
}
