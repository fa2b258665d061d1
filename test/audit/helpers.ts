import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openAuditLog, type AuditLog, type AuditLogOptions, type AuditProblem } from '../../src/audit/index.js';

export const tempLogFile = (): string => join(mkdtempSync(join(tmpdir(), 'airlock-audit-')), 'audit', 'audit.jsonl');

/** A log with `n` records: seq i has request TR-i, type `ran` (even) or `judged` (odd). */
export function logWith(n: number, opts: AuditLogOptions = {}): { file: string; log: AuditLog } {
  const file = tempLogFile();
  const log = openAuditLog(file, opts);
  for (let i = 1; i <= n; i++) log.append({ type: i % 2 ? 'judged' : 'ran', request_id: `TR-${i}`, detail: { i } });
  return { file, log };
}

export const readLinesOf = (file: string): string[] => readFileSync(file, 'utf8').split('\n').slice(0, -1);
export const writeLinesTo = (file: string, lines: string[]): void => writeFileSync(file, lines.map((l) => l + '\n').join(''));

/** An independent implementation of the record hash (sorted keys, no whitespace), to check the log's own. */
export function independentHash(record: Record<string, unknown>): string {
  const canon = (v: unknown): string => {
    if (v === null || typeof v !== 'object') return JSON.stringify(v);
    if (Array.isArray(v)) return `[${v.map(canon).join(',')}]`;
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canon((v as Record<string, unknown>)[k])}`).join(',')}}`;
  };
  const { hash: _h, seal: _s, ...body } = record;
  return createHash('sha256').update(canon(body)).digest('hex');
}

/** Re-hashes a record line after an edit, as an attacker who knows the format would. */
export function rehash(line: string, edit: (r: Record<string, unknown>) => void): string {
  const r = JSON.parse(line) as Record<string, unknown>;
  edit(r);
  r.hash = independentHash(r);
  const canon = (v: unknown): string => {
    if (v === null || typeof v !== 'object') return JSON.stringify(v);
    if (Array.isArray(v)) return `[${v.map(canon).join(',')}]`;
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canon((v as Record<string, unknown>)[k])}`).join(',')}}`;
  };
  return canon(r);
}

export const summary = (problems: AuditProblem[]) => problems.map((p) => ({ code: p.code, line: p.line, ...(p.seq !== undefined ? { seq: p.seq } : {}) }));
