import { closeSync, fstatSync, fsyncSync, openSync, readFileSync, readSync, renameSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { HEX64_RE, TS_RE } from './canonical.js';
import { MAX_RECORD_BYTES, type AuditAnchor, type AuditHead } from './types.js';

/** The files that live beside the log `<dir>/<name>.jsonl`. */
export interface AuditPaths {
  log: string;
  head: string;
  anchor: string;
  lock: string;
  /** Temporary file a prune writes before renaming it over the log. */
  pruneTmp: string;
  /** Quarantine for a partial last line: `<name>.partial-<stamp>.jsonl`. */
  partial: (stamp: string) => string;
}

export function auditPaths(file: string): AuditPaths {
  const dir = dirname(file);
  const stem = basename(file).replace(/\.jsonl$/, '');
  return {
    log: file,
    head: join(dir, `${stem}.head.json`),
    anchor: join(dir, `${stem}.anchor.json`),
    lock: join(dir, `${stem}.lock`),
    pruneTmp: join(dir, `${stem}.prune-tmp.jsonl`),
    partial: (stamp) => join(dir, `${stem}.partial-${stamp}.jsonl`),
  };
}

const isMissing = (e: unknown) => (e as NodeJS.ErrnoException).code === 'ENOENT';

/** Makes a rename or a new file in `dir` durable. */
export function fsyncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

export function writeAllSync(fd: number, buf: Buffer): void {
  let off = 0;
  while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off);
}

/** Write to a temporary file, fsync, rename over `path`, fsync the folder: readers see the old or the new file, never half. */
export function writeFileAtomic(path: string, text: string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  const fd = openSync(tmp, 'w', 0o600);
  try {
    writeAllSync(fd, Buffer.from(text, 'utf8'));
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
  fsyncDir(dirname(path));
}

type Small<T> = { state: 'missing' } | { state: 'bad'; message: string } | { state: 'ok'; value: T };

function readSmallJson(path: string): { state: 'missing' } | { state: 'bad'; message: string } | { state: 'ok'; value: Record<string, unknown> } {
  let text: string;
  try {
    const buf = readFileSync(path);
    if (buf.length > 64 * 1024) return { state: 'bad', message: 'larger than 64 KiB' };
    text = buf.toString('utf8');
  } catch (e) {
    if (isMissing(e)) return { state: 'missing' };
    return { state: 'bad', message: `unreadable (${(e as NodeJS.ErrnoException).code ?? 'error'})` };
  }
  try {
    const v: unknown = JSON.parse(text);
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return { state: 'bad', message: 'not a JSON object' };
    return { state: 'ok', value: v as Record<string, unknown> };
  } catch {
    return { state: 'bad', message: 'not valid JSON' };
  }
}

const isSeq = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isHash = (v: unknown): v is string => typeof v === 'string' && HEX64_RE.test(v);

export function readHead(path: string): Small<AuditHead> {
  const r = readSmallJson(path);
  if (r.state !== 'ok') return r;
  const { seq, hash, ts, seal, key_id } = r.value;
  if (!isSeq(seq) || !isHash(hash) || typeof ts !== 'string' || !TS_RE.test(ts)) return { state: 'bad', message: 'expected {"seq", "hash", "ts"}' };
  if ((seal !== undefined && !isHash(seal)) || (key_id !== undefined && typeof key_id !== 'string')) return { state: 'bad', message: 'its seal is not 64 hex digits' };
  return { state: 'ok', value: { seq, hash, ts, ...(typeof seal === 'string' ? { seal } : {}), ...(typeof key_id === 'string' ? { key_id } : {}) } };
}

export function readAnchor(path: string): Small<AuditAnchor> {
  const r = readSmallJson(path);
  if (r.state !== 'ok') return r;
  const v = r.value;
  const prev = v.previous;
  const prevOk = prev === null || (prev !== null && typeof prev === 'object' && isSeq((prev as Record<string, unknown>).seq) && isHash((prev as Record<string, unknown>).hash));
  if (!isSeq(v.seq) || v.seq < 1 || !isHash(v.hash) || typeof v.ts !== 'string' || !isSeq(v.count) || !isSeq(v.pruned_total) || typeof v.pruned_at !== 'string' || !prevOk) {
    return { state: 'bad', message: 'expected {"seq", "hash", "ts", "count", "pruned_total", "pruned_at", "previous"}' };
  }
  return { state: 'ok', value: v as unknown as AuditAnchor };
}

/** One line of the log as bytes: `terminated` is false only for a last line without its newline. */
export interface RawLine {
  line: number;
  /** Byte offset of the line's first byte. */
  offset: number;
  bytes: Buffer;
  terminated: boolean;
  /** The line was longer than MAX_RECORD_BYTES; `bytes` holds only its start. */
  tooLong: boolean;
}

/**
 * Reads the log line by line in 1 MiB chunks (memory stays flat however long the log is).
 * Throws the fs error if the file cannot be opened (the caller decides what ENOENT means).
 */
export function* readLines(path: string): Generator<RawLine> {
  const fd = openSync(path, 'r');
  try {
    const chunk = Buffer.alloc(1024 * 1024);
    let parts: Buffer[] = [];
    let partLen = 0;
    let tooLong = false;
    let lineStart = 0;
    let pos = 0;
    let line = 1;
    for (;;) {
      const n = readSync(fd, chunk, 0, chunk.length, pos);
      if (n === 0) break;
      let from = 0;
      for (;;) {
        const nl = chunk.indexOf(10, from);
        const end = nl === -1 || nl >= n ? n : nl;
        const piece = chunk.subarray(from, end);
        if (!tooLong) {
          if (partLen + piece.length > MAX_RECORD_BYTES) {
            tooLong = true;
            const keep = Math.max(0, MAX_RECORD_BYTES - partLen);
            parts.push(Buffer.from(piece.subarray(0, keep)));
            partLen += keep;
          } else {
            parts.push(Buffer.from(piece));
            partLen += piece.length;
          }
        }
        if (end === n) break;
        yield { line, offset: lineStart, bytes: Buffer.concat(parts), terminated: true, tooLong };
        line++;
        lineStart = pos + end + 1;
        parts = [];
        partLen = 0;
        tooLong = false;
        from = end + 1;
      }
      pos += n;
    }
    if (pos > lineStart) yield { line, offset: lineStart, bytes: Buffer.concat(parts), terminated: false, tooLong };
  } finally {
    closeSync(fd);
  }
}

/**
 * The end of the log without reading all of it: its size, whether it ends with a newline, and the
 * last complete line (if it fits in MAX_RECORD_BYTES). Used by append, which must be O(1) in the log's length.
 */
export function readTail(path: string): { size: number; endsWithNewline: boolean; lastLine?: Buffer; lastLineOffset?: number; lastLineTooLong?: boolean } | undefined {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (e) {
    if (isMissing(e)) return undefined;
    throw e;
  }
  try {
    // fstat the open fd: statSync(path) could race a prune's rename, the fd cannot.
    const size = sizeOf(fd);
    if (size === 0) return { size, endsWithNewline: true };
    const last = Buffer.alloc(1);
    readSync(fd, last, 0, 1, size - 1);
    if (last[0] !== 10) return { size, endsWithNewline: false };
    // Find the newline before the last line, scanning back at most MAX_RECORD_BYTES + 1 bytes.
    const want = Math.min(size - 1, MAX_RECORD_BYTES + 1);
    const buf = Buffer.alloc(want);
    readSync(fd, buf, 0, want, size - 1 - want);
    const nl = buf.lastIndexOf(10);
    if (nl === -1 && want < size - 1) return { size, endsWithNewline: true, lastLineTooLong: true };
    const start = nl + 1;
    return { size, endsWithNewline: true, lastLine: buf.subarray(start), lastLineOffset: size - 1 - want + start };
  } finally {
    closeSync(fd);
  }
}

const sizeOf = (fd: number): number => fstatSync(fd).size;
