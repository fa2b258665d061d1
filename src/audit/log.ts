import { createHash } from 'node:crypto';
import { closeSync, existsSync, fsyncSync, ftruncateSync, mkdirSync, openSync, readSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname } from 'node:path';
import { canonicalJson, eventFields, parseRecordLine, recordHash } from './canonical.js';
import { auditPaths, fsyncDir, readAnchor, readHead, readLines, readTail, writeAllSync, writeFileAtomic, type AuditPaths, type RawLine } from './files.js';
import { withLock, type LockOptions } from './lock.js';
import { ensureSealKey, headSeal, readSealKey, recordSeal, sealKeyFile, sealMatches, type SealKey } from './seal.js';
import { verifyLines } from './verify.js';
import {
  AuditError,
  GENESIS_HASH,
  MAX_RECORD_BYTES,
  type AuditAnchor,
  type AuditEvent,
  type AuditHead,
  type AuditFilter,
  type AuditRecord,
  type PruneResult,
  type RepairResult,
  type VerifyReport,
} from './types.js';

/**
 * The hash-chained audit log over an append-only JSON-lines file. Synchronous on purpose: each
 * operation holds the cross-process lock from start to end, and nothing else in this process can
 * run in between. Every method reads the files afresh, so several processes (the gate service,
 * the CLI) can each hold an AuditLog on the same file.
 */
export interface AuditLog {
  readonly file: string;
  /** Appends one record (seq, ts, prev, hash added), fsyncs it and updates the head. Throws AuditError when that is not safe. */
  append(event: AuditEvent): AuditRecord;
  /** Reads the whole log and reports every problem found, with its line and seq. Never throws on file content. */
  verify(): VerifyReport;
  /** Well-formed records matching every filter given, in file order. Does not verify: run verify for that. */
  show(filter?: AuditFilter): AuditRecord[];
  /** Removes the records older than `olderThanDays` from the start, writes the anchor and appends a `pruned` record. */
  prune(olderThanDays: number): PruneResult;
  /** Moves a partial last line to a quarantine file (never deletes it), brings a lagging head up to date, re-verifies. */
  repair(): RepairResult;
}

export interface AuditLogOptions {
  lock?: LockOptions;
  /** The clock (tests of retention). */
  now?: () => Date;
  /** The host's seal key file (default: sealKeyFile(), outside the workspace). */
  sealKeyFile?: string;
}

export function openAuditLog(file: string, opts: AuditLogOptions = {}): AuditLog {
  const paths = auditPaths(file);
  const keyFile = opts.sealKeyFile ?? sealKeyFile();
  const now = opts.now ?? (() => new Date());
  // Writers create the folder (the lock file lives in it); readers never create anything.
  const locked = <T>(fn: () => T): T => {
    try {
      mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    } catch (e) {
      throw ioError(`cannot create the folder of ${file}`, e);
    }
    return withLock(paths.lock, fn, opts.lock);
  };
  const readLocked = <T>(fn: () => T): T => withLock(paths.lock, fn, { ...opts.lock, readerFallback: true });
  return {
    file,
    append: (event) => {
      const fields = eventFields(event); // checked before taking the lock
      return locked(() => appendLocked(paths, fields, now, keyFile));
    },
    verify: () => readLocked(() => verifyLocked(paths, readSealKey(keyFile))),
    show: (filter = {}) => showRecords(paths, filter),
    prune: (days) => {
      if (typeof days !== 'number' || !Number.isFinite(days) || days < 0) throw new AuditError('AUDIT_BAD_ARGUMENT', 'the retention must be a number of days >= 0');
      return locked(() => pruneLocked(paths, days, now, keyFile));
    },
    repair: () => locked(() => repairLocked(paths, now, keyFile)),
  };
}

const ioError = (what: string, e: unknown) => new AuditError('AUDIT_IO', `${what}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);

/**
 * The seal key for writing: a sealed log (its head or its last record carries a seal) needs the key
 * it was sealed with; a new log, or one from before seals, gets the host's key (created if needed).
 */
function writingKey(sealed: boolean, keyFile: string): SealKey {
  if (!sealed) return ensureSealKey(keyFile);
  const key = readSealKey(keyFile);
  if (!key) throw new AuditError('AUDIT_SEAL_KEY_MISSING', `the log is sealed and this host has no seal key at ${keyFile}: appends are refused (restore the key, or set AIRLOCK_AUDIT_KEY to it)`);
  return key;
}

/**
 * Where the next record goes, after checking the tail of the log against the head file (O(1) in
 * the log's length), and the key its seal is made with. A last record or head whose seal does not
 * verify was written without the key: appends are refused, so a forged record is never sealed in.
 */
function chainEnd(paths: AuditPaths, keyFile: string): { seq: number; hash: string; key: SealKey } {
  let tail: ReturnType<typeof readTail>;
  try {
    tail = readTail(paths.log);
  } catch (e) {
    throw ioError(`cannot read ${paths.log}`, e);
  }
  const head = readHead(paths.head);
  const anchor = readAnchor(paths.anchor);
  if (head.state === 'bad') throw new AuditError('AUDIT_HEAD_BAD', `the head file ${paths.head} is ${head.message}; run \`airlock audit verify\` and have a person check the log`);
  if (anchor.state === 'bad') throw new AuditError('AUDIT_ANCHOR_BAD', `the anchor file ${paths.anchor} is ${anchor.message}; run \`airlock audit verify\``);
  const refuse = (code: 'AUDIT_TRUNCATED' | 'AUDIT_HEAD_MISMATCH' | 'AUDIT_HEAD_MISSING' | 'AUDIT_EDITED', msg: string): never => {
    throw new AuditError(code, `${msg}; appends are refused so the evidence stays as it is. Run \`airlock audit verify\` and see docs/audit.md`);
  };
  if (!tail || tail.size === 0) {
    const floor = anchor.state === 'ok' ? anchor.value.seq : 0;
    if (anchor.state === 'ok') refuse('AUDIT_TRUNCATED', `the log was pruned to seq ${floor} but is now empty`);
    if (head.state === 'ok' && head.value.seq > 0) refuse('AUDIT_TRUNCATED', `the head file says the log reached seq ${head.value.seq} but the log is empty`);
    return { seq: 0, hash: GENESIS_HASH, key: writingKey(head.state === 'ok' && head.value.seal !== undefined, keyFile) };
  }
  if (!tail.endsWithNewline) {
    throw new AuditError('AUDIT_PARTIAL_LINE', `the log ends with an incomplete record (an interrupted append); run \`airlock audit verify --repair\` to move it to a quarantine file`);
  }
  if (!tail.lastLine) throw new AuditError('AUDIT_BAD_RECORD', 'the last line of the log is not a record; run `airlock audit verify`');
  const parsed = parseRecordLine(tail.lastLine.toString('utf8'));
  if (!('record' in parsed)) throw new AuditError(parsed.code, `the last line of the log: ${parsed.message}; run \`airlock audit verify\``);
  const last = parsed.record;
  if (head.state === 'missing') refuse('AUDIT_HEAD_MISSING', `the head file ${paths.head} is missing while the log has records`);
  const h = (head as { value: AuditHead }).value;
  const key = writingKey(h.seal !== undefined || last.seal !== undefined, keyFile);
  const unsealed = (what: string): never => {
    throw new AuditError('AUDIT_UNSEALED', `${what} does not verify with this host's seal key (${key.id}): it was written without the log's append; appends are refused so it is never sealed in. Run \`airlock audit verify\``);
  };
  if (h.seal !== undefined || last.seal !== undefined) {
    if (!sealMatches(recordSeal(key, last.hash), last.seal)) unsealed(`the last record (seq ${last.seq})`);
  }
  const headOk = h.seal === undefined ? last.seal === undefined : sealMatches(headSeal(key, h.seq, h.hash), h.seal);
  if (h.seq === last.seq && h.hash === last.hash) return headOk ? { ...last, key } : unsealed('the head file');
  // Crash between the line and the head: the (sealed) line stands.
  if (h.seq === last.seq - 1 && h.hash === last.prev) return headOk ? { ...last, key } : unsealed('the head file');
  if (h.seq > last.seq) refuse('AUDIT_TRUNCATED', `the head file says the log reached seq ${h.seq} but its last record is seq ${last.seq}`);
  if (h.seq === last.seq) refuse('AUDIT_EDITED', `the last record (seq ${last.seq}) is not the one the head file recorded`);
  return refuse('AUDIT_HEAD_MISMATCH', `the head file (seq ${h.seq}) does not match the end of the log (seq ${last.seq})`);
}

function serialize(record: Omit<AuditRecord, 'hash' | 'seal'>, key: SealKey): { record: AuditRecord; line: Buffer } {
  const hash = recordHash(record);
  const full = { ...record, hash, ...(hash ? { seal: recordSeal(key, hash) } : {}) } as AuditRecord;
  const c = canonicalJson(full);
  if (hash === undefined || 'error' in c) throw new AuditError('AUDIT_BAD_EVENT', 'the record is not JSON data'); // eventFields checked it: a bug
  const line = Buffer.from(c.text + '\n', 'utf8');
  if (line.length > MAX_RECORD_BYTES) throw new AuditError('AUDIT_RECORD_TOO_LARGE', `the record is ${line.length} bytes, more than ${MAX_RECORD_BYTES}; keep large data in a file and put its path and sha256 in detail`);
  return { record: full, line };
}

/** The head file: the last record's seq and hash, sealed. */
const headText = (r: AuditRecord, key: SealKey): string => JSON.stringify({ seq: r.seq, hash: r.hash, ts: r.ts, seal: headSeal(key, r.seq, r.hash), key_id: key.id }) + '\n';

function appendLocked(paths: AuditPaths, fields: Omit<AuditRecord, 'seq' | 'ts' | 'prev' | 'hash'>, now: () => Date, keyFile: string): AuditRecord {
  const end = chainEnd(paths, keyFile);
  const { record, line } = serialize({ ...fields, seq: end.seq + 1, ts: now().toISOString(), prev: end.hash }, end.key);
  try {
    const dir = dirname(paths.log);
    const created = !existsSync(paths.log);
    // O_APPEND and one write of the whole line under the lock; fsync before the head says it exists.
    const fd = openSync(paths.log, 'a', 0o600);
    try {
      writeAllSync(fd, line);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    if (created) fsyncDir(dir);
    writeFileAtomic(paths.head, headText(record, end.key));
  } catch (e) {
    if (e instanceof AuditError) throw e;
    throw ioError(`cannot append to ${paths.log}`, e);
  }
  return record;
}

function logLines(paths: AuditPaths): Iterable<RawLine> {
  return existsSync(paths.log) ? readLines(paths.log) : [];
}

function verifyLocked(paths: AuditPaths, key: SealKey | null, onRecord?: (r: AuditRecord, raw: RawLine) => void): VerifyReport {
  try {
    return verifyLines({ file: paths.log, lines: logLines(paths), head: readHead(paths.head), anchor: readAnchor(paths.anchor), key, ...(onRecord ? { onRecord } : {}) });
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? 'error';
    return { ok: false, file: paths.log, records: 0, problems: [{ code: 'AUDIT_UNREADABLE', line: 1, message: `cannot read the log (${code}); check the file's permissions and the disk` }] };
  }
}

function showRecords(paths: AuditPaths, f: AuditFilter): AuditRecord[] {
  const out: AuditRecord[] = [];
  const since = f.since?.getTime();
  const until = f.until?.getTime();
  for (const raw of logLines(paths)) {
    if (!raw.terminated || raw.tooLong) continue;
    const p = parseRecordLine(raw.bytes.toString('utf8'));
    if (!('record' in p)) continue;
    const r = p.record;
    if (f.request !== undefined && r.request_id !== f.request) continue;
    if (f.action !== undefined && r.action_id !== f.action) continue;
    if (f.sandbox !== undefined && r.sandbox_id !== f.sandbox) continue;
    if (f.type !== undefined && r.type !== f.type) continue;
    const t = Date.parse(r.ts);
    if (since !== undefined && t < since) continue;
    if (until !== undefined && t > until) continue;
    out.push(r);
  }
  return out;
}

interface Slot {
  seq: number;
  hash: string;
  ts: string;
  offset: number;
}

function pruneLocked(paths: AuditPaths, days: number, now: () => Date, keyFile: string): PruneResult {
  rmSync(paths.pruneTmp, { force: true }); // left by a prune that died before its rename
  const at = now();
  const cutoff = at.getTime() - days * 86_400_000;
  const slots: Slot[] = [];
  const report = verifyLocked(paths, readSealKey(keyFile), (r, raw) => slots.push({ seq: r.seq, hash: r.hash, ts: r.ts, offset: raw.offset }));
  // Pruning a damaged log would destroy the evidence of the damage.
  if (!report.ok) throw new AuditError('AUDIT_PRUNE_REFUSED', `the log has ${report.problems.length} problem(s); run \`airlock audit verify\` and resolve them first`, report.problems);
  const old = readAnchor(paths.anchor);
  const oldAnchor = old.state === 'ok' ? old.value : undefined;
  const pending = oldAnchor !== undefined && slots.length > 0 && slots[0]!.seq <= oldAnchor.seq;
  // Verified, so file order is seq order. Prune the prefix older than the cutoff (and at least what a pending prune announced).
  let k = 0;
  while (k < slots.length && (Date.parse(slots[k]!.ts) < cutoff || (pending && slots[k]!.seq <= oldAnchor.seq))) k++;
  if (k === 0) return { pruned: 0 };
  const first = slots[0]!;
  const lastPruned = slots[k - 1]!;
  const last = slots[slots.length - 1]!;
  const key = writingKey(report.seals !== undefined && report.seals.sealed > 0, keyFile);
  const { record, line } = serialize({
    type: 'pruned',
    actor: 'airlock',
    detail: { from_seq: first.seq, to_seq: lastPruned.seq, to_hash: lastPruned.hash, count: k, oldest_ts: first.ts, newest_ts: lastPruned.ts, older_than_days: days, cutoff: new Date(cutoff).toISOString() },
    seq: last.seq + 1,
    ts: at.toISOString(),
    prev: last.hash,
  }, key);
  const anchor: AuditAnchor = {
    seq: lastPruned.seq,
    hash: lastPruned.hash,
    ts: lastPruned.ts,
    count: k,
    pruned_total: (oldAnchor?.pruned_total ?? 0) - (pending ? oldAnchor!.count : 0) + k,
    pruned_at: at.toISOString(),
    previous: pending ? oldAnchor!.previous : oldAnchor ? { seq: oldAnchor.seq, hash: oldAnchor.hash } : null,
  };
  try {
    // 1. The surviving records plus the `pruned` record, durable in a temporary file.
    const keepFrom = k < slots.length ? slots[k]!.offset : undefined;
    const out = openSync(paths.pruneTmp, 'wx', 0o600);
    try {
      if (keepFrom !== undefined) copyRange(paths.log, keepFrom, out);
      writeAllSync(out, line);
      fsyncSync(out);
    } finally {
      closeSync(out);
    }
    // 2. The anchor. A crash now leaves the old log whole and the anchor ahead: verify accepts that as a pending prune.
    writeFileAtomic(paths.anchor, JSON.stringify(anchor) + '\n');
    // 3. The new log. A crash now leaves the head one behind the `pruned` record: accepted too.
    renameSync(paths.pruneTmp, paths.log);
    fsyncDir(dirname(paths.log));
    // 4. The head.
    writeFileAtomic(paths.head, headText(record, key));
  } catch (e) {
    throw ioError(`cannot prune ${paths.log}`, e);
  }
  return { pruned: k, fromSeq: first.seq, toSeq: lastPruned.seq, anchor, record };
}

/** Copies bytes [from, end) of `src` to the open `outFd`. */
function copyRange(src: string, from: number, outFd: number): void {
  const fd = openSync(src, 'r');
  try {
    const buf = Buffer.alloc(1024 * 1024);
    for (let pos = from; ; ) {
      const n = readSync(fd, buf, 0, buf.length, pos);
      if (n === 0) break;
      writeAllSync(outFd, buf.subarray(0, n));
      pos += n;
    }
  } finally {
    closeSync(fd);
  }
}

/** Byte offset just after the last newline of the file (0 when there is none). */
function endOfLastLine(fd: number, size: number): number {
  const buf = Buffer.alloc(64 * 1024);
  for (let end = size; end > 0; ) {
    const start = Math.max(0, end - buf.length);
    const n = readSync(fd, buf, 0, end - start, start);
    const nl = buf.subarray(0, n).lastIndexOf(10);
    if (nl !== -1) return start + nl + 1;
    end = start;
  }
  return 0;
}

function repairLocked(paths: AuditPaths, now: () => Date, keyFile: string): RepairResult {
  const result: RepairResult = { headUpdated: false, report: undefined as unknown as VerifyReport };
  const tail = readTail(paths.log);
  try {
    if (tail && !tail.endsWithNewline) {
      const fd = openSync(paths.log, 'r+');
      try {
        const cut = endOfLastLine(fd, tail.size);
        const stamp = now().toISOString().replace(/[-:.]/g, '');
        const target = existsSync(paths.partial(stamp)) ? paths.partial(`${stamp}-${process.pid}`) : paths.partial(stamp);
        // Copy the partial tail out and make it durable before the log loses it: it is never deleted.
        const out = openSync(target, 'wx', 0o600);
        const hash = createHash('sha256');
        try {
          const buf = Buffer.alloc(1024 * 1024);
          for (let pos = cut; pos < tail.size; ) {
            const n = readSync(fd, buf, 0, Math.min(buf.length, tail.size - pos), pos);
            if (n === 0) break;
            hash.update(buf.subarray(0, n));
            writeAllSync(out, buf.subarray(0, n));
            pos += n;
          }
          fsyncSync(out);
        } finally {
          closeSync(out);
        }
        fsyncDir(dirname(paths.log));
        ftruncateSync(fd, cut);
        fsyncSync(fd);
        result.quarantined = { file: target, bytes: tail.size - cut, sha256: hash.digest('hex') };
      } finally {
        closeSync(fd);
      }
    }
    // A head one record behind (crash between the line and the head) is brought up to date.
    const t2 = readTail(paths.log);
    const head = readHead(paths.head);
    if (t2?.lastLine && head.state === 'ok') {
      const p = parseRecordLine(t2.lastLine.toString('utf8'));
      // Only a line the log's own append wrote (sealed, when the log is) earns a head.
      if ('record' in p && head.value.seq === p.record.seq - 1 && head.value.hash === p.record.prev) {
        const key = writingKey(head.value.seal !== undefined || p.record.seal !== undefined, keyFile);
        if (p.record.seal === undefined ? head.value.seal === undefined : sealMatches(recordSeal(key, p.record.hash), p.record.seal)) {
          writeFileAtomic(paths.head, headText(p.record, key));
          result.headUpdated = true;
        }
      }
    }
  } catch (e) {
    throw ioError(`cannot repair ${paths.log}`, e);
  }
  if (result.quarantined) {
    // The log itself says what was moved where (by name: the folder is the log's own).
    try {
      const q = result.quarantined;
      result.record = appendLocked(paths, eventFields({ type: 'audit_repaired', actor: 'airlock', detail: { partial_bytes: q.bytes, partial_sha256: q.sha256, moved_to: basename(q.file) } }), now, keyFile);
    } catch (e) {
      result.recordError = (e as Error).message;
    }
  }
  result.report = verifyLocked(paths, readSealKey(keyFile));
  return result;
}
