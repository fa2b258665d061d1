import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type Database from 'better-sqlite3';
import { openSqliteFile } from '../store/sqlite-file.js';

export type LedgerState = 'running' | 'done' | 'interrupted';

export interface LedgerEntry {
  request_id: string;
  sha256: string;
  state: LedgerState;
  claimed_at: string;
  finished_at: string | null;
  sandbox_id: string | null;
  outcome: string | null;
}

/**
 * The replay ledger: a request_id enters once, before anything runs (a PRIMARY KEY, not a
 * check-then-insert), so no approved request runs twice, and a crash leaves a `running` row that
 * the next start reports as interrupted instead of retrying it.
 */
export class Ledger {
  private db: Database.Database;

  constructor(file: string) {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    // Several gates (or a gate and `airlock status`) may share the ledger: wait for a lock, never fail on it.
    this.db = openSqliteFile(file, { synchronous: 'FULL', schema: `CREATE TABLE IF NOT EXISTS ledger (
      request_id TEXT PRIMARY KEY,
      sha256 TEXT NOT NULL,
      state TEXT NOT NULL CHECK (state IN ('running', 'done', 'interrupted')),
      claimed_at TEXT NOT NULL,
      finished_at TEXT,
      sandbox_id TEXT,
      outcome TEXT
    )` });
  }

  /** Claims a request_id for its one run; false when it was ever claimed before (a replay). */
  claim(requestId: string, sha256: string, now = new Date()): boolean {
    const r = this.db.prepare('INSERT OR IGNORE INTO ledger (request_id, sha256, state, claimed_at) VALUES (?, ?, ?, ?)').run(requestId, sha256, 'running', now.toISOString());
    return r.changes === 1;
  }

  finish(requestId: string, state: 'done' | 'interrupted', sandboxId: string | null, outcome: string, now = new Date()): void {
    this.db.prepare('UPDATE ledger SET state = ?, finished_at = ?, sandbox_id = ?, outcome = ? WHERE request_id = ?').run(state, now.toISOString(), sandboxId, outcome, requestId);
  }

  get(requestId: string): LedgerEntry | undefined {
    return this.db.prepare('SELECT * FROM ledger WHERE request_id = ?').get(requestId) as LedgerEntry | undefined;
  }

  running(): LedgerEntry[] {
    return this.db.prepare("SELECT * FROM ledger WHERE state = 'running' ORDER BY claimed_at").all() as LedgerEntry[];
  }

  all(): LedgerEntry[] {
    return this.db.prepare('SELECT * FROM ledger ORDER BY claimed_at').all() as LedgerEntry[];
  }

  close(): void {
    this.db.close();
  }
}
