import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { openAuditLog, AuditError, type AuditEvent, type AuditRecord } from '../audit/index.js';
import { fsyncDir, writeFileAtomic } from '../audit/files.js';
import { withLockAsync } from '../audit/lock.js';
import type { Workspace } from '../workspace/workspace.js';
import { fail, type CommitFailure, type Journal } from './types.js';

/**
 * Where promotion keeps its records, inside the workspace (outside every scope):
 *   promotions/<sandbox_id>/journal.json   the write-ahead journal, then the promotion record
 *   promotions/inflight/<sandbox_id>       present while an apply or a rollback is not finished
 *   promotions/cooldown/<declaration>.json the last rollback of a declaration (cooldown_on_repeat)
 *   promotions/.lock                       one commit operation at a time per workspace
 */
export interface CommitPaths {
  root: string;
  inflight: string;
  cooldown: string;
  lock: string;
}

export function commitPaths(ws: Workspace): CommitPaths {
  const root = join(ws.root, 'promotions');
  return { root, inflight: join(root, 'inflight'), cooldown: join(root, 'cooldown'), lock: join(root, '.lock') };
}

export function ensureCommitDirs(ws: Workspace): CommitPaths {
  const p = commitPaths(ws);
  for (const d of [p.root, p.inflight, p.cooldown, ws.tombstones, ws.blobs]) mkdirSync(d, { recursive: true, mode: 0o700 });
  return p;
}

/** Runs `fn` holding the workspace's commit lock (a crashed holder's lock is stale by its dead pid). */
export async function withCommitLock<T>(ws: Workspace, fn: () => Promise<T | CommitFailure>): Promise<T | CommitFailure> {
  const p = ensureCommitDirs(ws);
  try {
    return await withLockAsync(p.lock, fn, { timeoutMs: 10_000, staleMs: 24 * 3600_000 });
  } catch (e) {
    if (e instanceof AuditError && e.code === 'AUDIT_LOCK_TIMEOUT') return fail('COMMIT_LOCKED', `another airlock command holds ${p.lock}; try again when it has finished`);
    throw e;
  }
}

export const recordDir = (ws: Workspace, sandboxId: string): string => join(commitPaths(ws).root, sandboxId);
export const journalFile = (ws: Workspace, sandboxId: string): string => join(recordDir(ws, sandboxId), 'journal.json');

export function readJournal(ws: Workspace, sandboxId: string): Journal | null {
  const f = journalFile(ws, sandboxId);
  if (!existsSync(f)) return null;
  return JSON.parse(readFileSync(f, 'utf8')) as Journal; // written by us only, atomically
}

/** Atomic and durable: readers (and a crash) see the previous journal or this one. */
export function writeJournal(ws: Workspace, j: Journal): void {
  writeFileAtomic(journalFile(ws, j.sandbox_id), JSON.stringify(j) + '\n');
}

/** Creates the promotion record atomically (mkdir): false when one exists already. */
export function claimRecord(ws: Workspace, sandboxId: string): boolean {
  try {
    mkdirSync(recordDir(ws, sandboxId), { mode: 0o700 });
    fsyncDir(commitPaths(ws).root);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw e;
  }
}

export function setInflight(ws: Workspace, sandboxId: string, on: boolean): void {
  const p = commitPaths(ws);
  const f = join(p.inflight, sandboxId);
  if (on) writeFileAtomic(f, `${new Date().toISOString()}\n`);
  else {
    rmSync(f, { force: true });
    fsyncDir(p.inflight);
  }
}

export const inflightIds = (ws: Workspace): string[] => {
  const p = commitPaths(ws);
  return existsSync(p.inflight) ? readdirSync(p.inflight).filter((n) => !n.includes('.tmp-')) : [];
};

export function allRecordIds(ws: Workspace): string[] {
  const p = commitPaths(ws);
  if (!existsSync(p.root)) return [];
  return readdirSync(p.root).filter((n) => n !== 'inflight' && n !== 'cooldown' && !n.startsWith('.') && existsSync(join(p.root, n, 'journal.json')));
}

export interface CooldownEntry {
  declaration_sha256: string;
  rolled_back_at: string;
  sandbox_id: string;
  action_id: string;
  cooldown_on_repeat: boolean;
}

export function writeCooldown(ws: Workspace, e: CooldownEntry): void {
  writeFileAtomic(join(commitPaths(ws).cooldown, `${e.declaration_sha256}.json`), JSON.stringify(e) + '\n');
}

export function readCooldown(ws: Workspace, declaration: string): CooldownEntry | null {
  const f = join(commitPaths(ws).cooldown, `${declaration}.json`);
  return existsSync(f) ? (JSON.parse(readFileSync(f, 'utf8')) as CooldownEntry) : null;
}

/** Appends an audit record; an AuditError becomes COMMIT_AUDIT_FAILED (the caller fails closed). */
export function audit(ws: Workspace, event: AuditEvent): { ok: true; record: AuditRecord } | CommitFailure {
  try {
    return { ok: true, record: openAuditLog(ws.auditFile).append(event) };
  } catch (e) {
    if (e instanceof AuditError) return fail('COMMIT_AUDIT_FAILED', `the audit log refused the ${event.type} record: ${e.message}`);
    throw e;
  }
}

/** The journal's summary for audit records: ids and the diff's hashes, never file contents. */
export function auditDetail(j: Journal, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const MAX = 200;
  const files = j.ops.slice(0, MAX).map((o) => ({ path: o.path, change: o.kind, before: o.before?.sha256 ?? (o.before ? o.before.type : null), after: o.after?.sha256 ?? (o.after ? o.after.type : null) }));
  return {
    diff_sha256: j.diff_sha256,
    result_sha256: j.result_sha256,
    declaration_sha256: j.declaration_sha256,
    verdict: j.verdict,
    journal_token: j.token,
    ...(j.child_action_ids.length ? { child_action_ids: j.child_action_ids } : {}),
    changes: { added: j.ops.filter((o) => o.kind === 'added').length, modified: j.ops.filter((o) => o.kind === 'modified').length, deleted: j.ops.filter((o) => o.kind === 'deleted').length },
    files,
    ...(j.ops.length > MAX ? { files_not_listed: j.ops.length - MAX } : {}),
    ...extra,
  };
}
