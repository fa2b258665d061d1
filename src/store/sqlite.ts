import Database, { type Transaction } from 'better-sqlite3';
import { openSqliteFile } from './sqlite-file.js';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { DelayedBatch, GroupCommit, ItemFailed } from './batch.js';
import { rowToApproval, rowToClaim, rowToInbox, rowToTool, type Row } from './rows.js';
import {
  StoreUnavailableError,
  type Anchor,
  type AnswerInput,
  type AnswerOutcome,
  type ApprovalRecord,
  type ApprovalState,
  type ClaimOutcome,
  type ClaimRecord,
  type InboxReport,
  type Store,
  type ToolRecord,
  WOKEN_FLUSH_MS,
} from './types.js';

type TxFunction = Parameters<Database.Database['transaction']>[0];

/**
 * The embedded store: one SQLite file (WAL mode, so several worker processes on one host can share
 * it; writers serialise on SQLite's lock with a busy timeout). Statements are synchronous; the
 * async interface is for parity with PostgreSQL.
 */

const SCHEMA = `
CREATE TABLE IF NOT EXISTS cards (
  card_id TEXT PRIMARY KEY,
  type TEXT NOT NULL,
  agent_turn_id TEXT,
  tool_call_id TEXT,
  body TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
-- A call's result is the card its claim names (claims.result_card_id), not whatever tool.result card
-- has its anchor: a unique index on those let a card forged by anyone with the store block the answer.
DROP INDEX IF EXISTS cards_one_result;
CREATE TABLE IF NOT EXISTS tools (
  project_id TEXT NOT NULL,
  tool_name TEXT NOT NULL,
  description TEXT NOT NULL,
  parameters TEXT NOT NULL,
  target_subject TEXT NOT NULL,
  after_execution TEXT NOT NULL,
  options TEXT NOT NULL,
  signature TEXT,
  PRIMARY KEY (project_id, tool_name)
);
CREATE TABLE IF NOT EXISTS claims (
  agent_turn_id TEXT NOT NULL,
  tool_call_id TEXT NOT NULL,
  tool_call_card_id TEXT,
  context TEXT,
  worker_id TEXT NOT NULL,
  state TEXT NOT NULL,
  lease_until INTEGER NOT NULL,
  cancel_requested INTEGER NOT NULL DEFAULT 0,
  result_card_id TEXT,
  wakeup TEXT,
  woken INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (agent_turn_id, tool_call_id)
);
-- The sweeper's two queries, each on a partial index that holds only the rows it looks for: running
-- claims by lease, answered claims whose wakeup is not known sent, oldest first. An index of every
-- claim by state made each sweep read all answered claims (npm run bench:sweep, 300,000 of them:
-- 28 ms a sweep on SQLite, 20 ms on PostgreSQL).
CREATE INDEX IF NOT EXISTS claims_lease ON claims (lease_until) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS claims_unwoken ON claims (updated_at) WHERE state = 'answered' AND woken = 0;
DROP INDEX IF EXISTS claims_running;
-- Heartbeats renew claims by their key (the calls a worker runs): no index on worker_id to keep up
-- on every claim and answer. Dropped from stores made by earlier versions.
DROP INDEX IF EXISTS claims_worker;
CREATE TABLE IF NOT EXISTS inbox (
  id INTEGER PRIMARY KEY, -- no AUTOINCREMENT: reports are never deleted, so ids only grow (and no sqlite_sequence write per report)
  agent_id TEXT NOT NULL,
  agent_turn_id TEXT NOT NULL,
  tool_call_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  payload TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  UNIQUE (agent_turn_id, tool_call_id, kind)
);
CREATE INDEX IF NOT EXISTS inbox_agent ON inbox (agent_id, id);
CREATE TABLE IF NOT EXISTS approvals (
  id TEXT PRIMARY KEY,
  agent_turn_id TEXT NOT NULL,
  tool_call_id TEXT NOT NULL,
  project_id TEXT NOT NULL,
  tool_name TEXT NOT NULL,
  summary TEXT NOT NULL,
  state TEXT NOT NULL,
  decided_by TEXT,
  reason TEXT,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  signature TEXT,
  decided_at INTEGER
);
CREATE INDEX IF NOT EXISTS approvals_state ON approvals (state, created_at);
`;

const isUniqueViolation = (e: unknown): boolean => (e as { code?: string }).code?.startsWith('SQLITE_CONSTRAINT') === true;

/**
 * Brings a store made by an earlier version up to SCHEMA (CREATE TABLE IF NOT EXISTS leaves an
 * existing table as it was): approvals.signature (signed UTP approvals) and tools.signature (signed
 * registrations). Idempotent; another process adding the same column at the same moment is not an error.
 */
function migrate(db: Database.Database): void {
  const has = (table: string, column: string) => (db.prepare(`PRAGMA table_info(${table})`).all() as { name: string }[]).some((c) => c.name === column);
  for (const table of ['approvals', 'tools']) {
    if (has(table, 'signature')) continue;
    try {
      db.exec(`ALTER TABLE ${table} ADD COLUMN signature TEXT`);
    } catch (e) {
      if (!/duplicate column/i.test((e as Error).message)) throw e;
    }
  }
}

/** The sweeper's statements; each reads through its partial index (claims_lease, claims_unwoken). */
export const SWEEP_SQL = {
  expired: `UPDATE claims SET worker_id = ?, lease_until = ?, updated_at = ?
    WHERE rowid IN (SELECT rowid FROM claims WHERE state = 'running' AND lease_until < ? LIMIT ?) AND state = 'running' AND lease_until < ?
    RETURNING *`,
  unwoken: "SELECT * FROM claims WHERE state = 'answered' AND woken = 0 AND updated_at < ? ORDER BY updated_at LIMIT ?",
} as const;

export class SqliteStore implements Store {
  readonly kind = 'sqlite' as const;
  readonly file: string;
  private db: Database.Database | null = null;

  constructor(file: string) {
    this.file = file;
  }

  private readonly statements = new Map<string, Database.Statement>();
  /** Prepared statements are cached: preparing costs more than running most of these. */
  private st(sql: string): Database.Statement {
    let s = this.statements.get(sql);
    if (!s) {
      s = this.d.prepare(sql);
      this.statements.set(sql, s);
    }
    return s;
  }

  private readonly transactions = new Map<string, Transaction<TxFunction>>();
  /** Transaction functions are cached too: better-sqlite3 builds four wrappers per transaction() (a few % of a worker's CPU when made per call). */
  private tx<F extends TxFunction>(name: string, fn: F): Transaction<F> {
    let t = this.transactions.get(name) as Transaction<F> | undefined;
    if (!t) {
      t = this.d.transaction(fn);
      this.transactions.set(name, t);
    }
    return t;
  }

  private get d(): Database.Database {
    if (!this.db) throw new StoreUnavailableError('the SQLite store is not open: call init() first');
    return this.db;
  }

  async init(): Promise<void> {
    if (this.db) return;
    try {
      if (this.file !== ':memory:') mkdirSync(dirname(this.file), { recursive: true, mode: 0o700 });
      // NORMAL in WAL mode: a commit survives a crash of the process (the at-most-once claim holds
      // against worker crashes); an OS crash or power loss may lose the last commits before the
      // next checkpoint (use PostgreSQL when that matters).
      const db = openSqliteFile(this.file, { synchronous: 'NORMAL', schema: SCHEMA });
      // Checkpoint every ~40 MB of WAL instead of ~4 MB: fewer checkpoints (each copies pages and
      // fsyncs) on the hot path. Durability of a commit is unchanged; the WAL file is truncated
      // back to 64 MB at most after a checkpoint.
      db.pragma('wal_autocheckpoint = 10000');
      db.pragma('journal_size_limit = 67108864');
      migrate(db); // columns added since a store was made (open in a transaction retried while busy)
      this.db = db;
    } catch (e) {
      throw new StoreUnavailableError(`cannot open the SQLite store ${this.file}: ${(e as Error).message}; check the path is writable (or give --db)`);
    }
  }

  async close(): Promise<void> {
    await this.woken.settled();
    this.statements.clear();
    this.transactions.clear();
    this.db?.close();
    this.db = null;
  }

  async now(): Promise<number> {
    return Date.now();
  }

  /**
   * Group commit: a write runs at once; the writes that arrive during the rest of that event-loop
   * turn (many calls in flight) run together in ONE transaction — one lock, one commit — each in its
   * own savepoint, so each caller still gets its own outcome. Fewer write transactions also means
   * fewer busy waits between processes sharing the file.
   */
  private writes<T, R>(name: string, one: (x: T) => R): GroupCommit<T, R> {
    // In a batch, each item in its own savepoint: one that throws is rolled back and fails alone.
    const settled = (f: (x: T) => R) => (x: T): R | ItemFailed => {
      try {
        return f(x);
      } catch (e) {
        return new ItemFailed(e);
      }
    };
    const alone = settled(one);
    const inSavepoint = settled((x: T) => this.tx(`${name}:item`, one)(x));
    return new GroupCommit<T, R>((xs) => (xs.length === 1 ? [alone(xs[0] as T)] : this.tx(`${name}:batch`, (ys: T[]) => ys.map(inSavepoint)).immediate(xs)), { maxInFlight: 1, holdTurn: true });
  }

  private readonly cardWrites = this.writes('cards', (x: { card: { card_id: string; type: string }; anchor?: Anchor }): boolean => {
    try {
      this.st('INSERT INTO cards (card_id, type, agent_turn_id, tool_call_id, body, created_at) VALUES (?, ?, ?, ?, ?, ?)')
        .run(x.card.card_id, x.card.type, x.anchor?.agent_turn_id ?? null, x.anchor?.tool_call_id ?? null, JSON.stringify(x.card), Date.now());
      return true;
    } catch (e) {
      if (isUniqueViolation(e)) return false;
      throw e;
    }
  });

  putCard(card: { card_id: string; type: string; created_at: string; content: unknown; metadata?: unknown }, anchor?: Anchor): Promise<boolean> {
    return this.cardWrites.add({ card, anchor });
  }

  async getCard(cardId: string): Promise<unknown | undefined> {
    return this.readCard(cardId);
  }

  private readCard(cardId: string): unknown {
    const row = this.st('SELECT body FROM cards WHERE card_id = ?').get(cardId) as Row | undefined;
    return row ? JSON.parse(String(row.body)) : undefined;
  }

  async getResultCardFor(a: Anchor): Promise<unknown | undefined> {
    const row = this.st('SELECT c.body FROM claims cl JOIN cards c ON c.card_id = cl.result_card_id WHERE cl.agent_turn_id = ? AND cl.tool_call_id = ?').get(a.agent_turn_id, a.tool_call_id) as Row | undefined;
    return row ? JSON.parse(String(row.body)) : undefined;
  }

  async countResultCards(a: Anchor): Promise<number> {
    const row = this.st("SELECT count(*) AS n FROM cards WHERE type = 'tool.result' AND agent_turn_id = ? AND tool_call_id = ?").get(a.agent_turn_id, a.tool_call_id) as Row;
    return Number(row.n);
  }

  async upsertTool(t: ToolRecord): Promise<void> {
    this.st(
        `INSERT INTO tools (project_id, tool_name, description, parameters, target_subject, after_execution, options, signature) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (project_id, tool_name) DO UPDATE SET description = excluded.description, parameters = excluded.parameters,
           target_subject = excluded.target_subject, after_execution = excluded.after_execution, options = excluded.options, signature = excluded.signature`,
      )
      .run(t.project_id, t.tool_name, t.description, JSON.stringify(t.parameters), t.target_subject, t.after_execution, JSON.stringify(t.options), t.signature ?? null);
  }

  async getTool(projectId: string, toolName: string): Promise<ToolRecord | undefined> {
    const row = this.st('SELECT * FROM tools WHERE project_id = ? AND tool_name = ?').get(projectId, toolName) as Row | undefined;
    return row ? rowToTool(row) : undefined;
  }

  async listTools(projectId?: string): Promise<ToolRecord[]> {
    const rows = (projectId === undefined
      ? this.st('SELECT * FROM tools ORDER BY project_id, tool_name').all()
      : this.st('SELECT * FROM tools WHERE project_id = ? ORDER BY tool_name').all(projectId)) as Row[];
    return rows.map(rowToTool);
  }

  async removeTool(projectId: string, toolName: string): Promise<boolean> {
    return this.st('DELETE FROM tools WHERE project_id = ? AND tool_name = ?').run(projectId, toolName).changes > 0;
  }

  private readonly claims = this.writes('claims', (x: { a: Anchor; cardId: string | null; workerId: string; leaseMs: number; context: Record<string, unknown>; readCardId: string | null }): ClaimOutcome & { card?: unknown } => {
    const { a } = x;
    // Embedded: no round trip to save. A card that cannot be read is read again (and reported) by the caller.
    let card: unknown;
    try {
      card = x.readCardId ? this.readCard(x.readCardId) : undefined;
    } catch {
      card = undefined;
    }
    const now = Date.now();
    // INSERT ... ON CONFLICT DO NOTHING is the whole race: exactly one inserter wins the primary key.
    const won = this.st(
        `INSERT INTO claims (agent_turn_id, tool_call_id, tool_call_card_id, context, worker_id, state, lease_until, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?) ON CONFLICT DO NOTHING`,
      )
      .run(a.agent_turn_id, a.tool_call_id, x.cardId, JSON.stringify(x.context), x.workerId, now + x.leaseMs, now, now).changes === 1;
    if (won) return { claimed: true, card };
    const existing = this.readClaim(a);
    if (!existing) throw new Error('claim: conflicting row vanished (claims are never deleted)');
    return { claimed: false, existing, card };
  });

  claim(a: Anchor, cardId: string | null, workerId: string, leaseMs: number, context: Record<string, unknown>, readCardId?: string | null): Promise<ClaimOutcome & { card?: unknown }> {
    return this.claims.add({ a, cardId, workerId, leaseMs, context, readCardId: readCardId ?? null });
  }

  async getClaim(a: Anchor): Promise<ClaimRecord | undefined> {
    return this.readClaim(a);
  }

  private readClaim(a: Anchor): ClaimRecord | undefined {
    const row = this.st('SELECT * FROM claims WHERE agent_turn_id = ? AND tool_call_id = ?').get(a.agent_turn_id, a.tool_call_id) as Row | undefined;
    return row ? rowToClaim(row) : undefined;
  }

  async heartbeat(workerId: string, leaseMs: number, running: Anchor[]): Promise<Anchor[]> {
    const now = Date.now();
    const renew = this.st(
      "UPDATE claims SET lease_until = ?, updated_at = ? WHERE agent_turn_id = ? AND tool_call_id = ? AND worker_id = ? AND state = 'running' RETURNING cancel_requested",
    );
    return this.d.transaction(() =>
      running.filter((a) => (renew.get(now + leaseMs, now, a.agent_turn_id, a.tool_call_id, workerId) as Row | undefined)?.cancel_requested === 1),
    )();
  }

  async takeOverExpired(workerId: string, leaseMs: number, limit: number): Promise<ClaimRecord[]> {
    const now = Date.now();
    const rows = this.st(SWEEP_SQL.expired).all(workerId, now + leaseMs, now, now, limit, now) as Row[];
    return rows.map(rowToClaim);
  }

  // Alone, its own immediate transaction; in a turn's batch, a savepoint of the batch's transaction.
  private readonly answers = this.writes('answers', (a: AnswerInput): AnswerOutcome => {
    const tx = this.tx('answer', (x: AnswerInput, now: number): AnswerOutcome => {
      const u = this.st(
          `UPDATE claims SET state = 'answered', result_card_id = ?, wakeup = ?, updated_at = ?
           WHERE agent_turn_id = ? AND tool_call_id = ? AND state = 'running' AND worker_id = ?`,
        )
        .run(x.card.card_id, JSON.stringify(x.wakeup), now, x.agent_turn_id, x.tool_call_id, x.worker_id);
      if (u.changes !== 1) return { ok: false, reason: 'not-owner', existing: undefined };
      this.st('INSERT INTO cards (card_id, type, agent_turn_id, tool_call_id, body, created_at) VALUES (?, ?, ?, ?, ?, ?)').run(
        x.card.card_id,
        'tool.result',
        x.agent_turn_id,
        x.tool_call_id,
        JSON.stringify(x.card),
        now,
      );
      // The call's one report is this one: a row for the anchor before the answer was written by
      // someone else with the store (it would make the insert fail, and the call go unanswered for ever).
      this.st('DELETE FROM inbox WHERE agent_turn_id = ? AND tool_call_id = ? AND kind = ?').run(x.agent_turn_id, x.tool_call_id, x.report.kind);
      this.st('INSERT INTO inbox (agent_id, agent_turn_id, tool_call_id, kind, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)').run(
        x.report.agent_id,
        x.agent_turn_id,
        x.tool_call_id,
        x.report.kind,
        JSON.stringify(x.report.payload),
        now,
      );
      return { ok: true };
    });
    try {
      const r = tx.immediate(a, Date.now());
      if (!r.ok) return { ...r, existing: this.readClaim(a) };
      return r;
    } catch (e) {
      if (isUniqueViolation(e)) return { ok: false, reason: 'duplicate', existing: this.readClaim(a) };
      throw e;
    }
  });

  answer(a: AnswerInput): Promise<AnswerOutcome> {
    return this.answers.add(a);
  }

  /** One write for the flags of a WOKEN_FLUSH_MS batch (see Store.markWoken). */
  private readonly woken = new DelayedBatch<Anchor>((anchors) => {
    const u = this.st('UPDATE claims SET woken = 1 WHERE agent_turn_id = ? AND tool_call_id = ?');
    this.d.transaction(() => {
      for (const x of anchors) u.run(x.agent_turn_id, x.tool_call_id);
    })();
  }, WOKEN_FLUSH_MS);

  markWoken(a: Anchor): Promise<void> {
    return this.woken.add(a);
  }

  async unwokenAnswers(olderThanMs: number, limit: number): Promise<ClaimRecord[]> {
    const rows = this.st(SWEEP_SQL.unwoken).all(Date.now() - olderThanMs, limit) as Row[];
    return rows.map(rowToClaim);
  }

  async requestCancel(a: Anchor): Promise<ClaimRecord | undefined> {
    this.st("UPDATE claims SET cancel_requested = 1 WHERE agent_turn_id = ? AND tool_call_id = ? AND state = 'running'").run(a.agent_turn_id, a.tool_call_id);
    return this.getClaim(a);
  }

  async listInbox(filter: { agent_id?: string; anchor?: Anchor; limit?: number } = {}): Promise<InboxReport[]> {
    const where: string[] = [];
    const args: unknown[] = [];
    if (filter.agent_id !== undefined) {
      where.push('agent_id = ?');
      args.push(filter.agent_id);
    }
    if (filter.anchor) {
      where.push('agent_turn_id = ? AND tool_call_id = ?');
      args.push(filter.anchor.agent_turn_id, filter.anchor.tool_call_id);
    }
    const sql = `SELECT * FROM inbox ${where.length ? 'WHERE ' + where.join(' AND ') : ''} ORDER BY id LIMIT ?`;
    return (this.st(sql).all(...args, filter.limit ?? 1000) as Row[]).map(rowToInbox);
  }

  async createApproval(a: Omit<ApprovalRecord, 'state' | 'decided_by' | 'reason' | 'decided_at' | 'created_at' | 'signature'>): Promise<ApprovalRecord> {
    const now = Date.now();
    this.st(
        `INSERT INTO approvals (id, agent_turn_id, tool_call_id, project_id, tool_name, summary, state, created_at, expires_at)
         VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?)`,
      )
      .run(a.id, a.agent_turn_id, a.tool_call_id, a.project_id, a.tool_name, JSON.stringify(a.summary), now, a.expires_at);
    return (await this.getApproval(a.id)) as ApprovalRecord;
  }

  async getApproval(id: string): Promise<ApprovalRecord | undefined> {
    const row = this.st('SELECT * FROM approvals WHERE id = ?').get(id) as Row | undefined;
    return row ? rowToApproval(row) : undefined;
  }

  async listApprovals(state?: ApprovalState): Promise<ApprovalRecord[]> {
    const rows = (state === undefined
      ? this.st('SELECT * FROM approvals ORDER BY created_at').all()
      : this.st('SELECT * FROM approvals WHERE state = ? ORDER BY created_at').all(state)) as Row[];
    return rows.map(rowToApproval);
  }

  async decideApproval(id: string, state: Exclude<ApprovalState, 'pending'>, by: string | null, reason: string | null, signature: string | null = null): Promise<boolean> {
    return (
      this.st("UPDATE approvals SET state = ?, decided_by = ?, reason = ?, signature = ?, decided_at = ? WHERE id = ? AND state = 'pending'")
        .run(state, by, reason, signature, Date.now(), id).changes === 1
    );
  }
}
