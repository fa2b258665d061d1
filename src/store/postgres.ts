import pg from 'pg';
import { TurnBatch } from './turn-batch.js';
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
} from './types.js';

/**
 * The distributed store: PostgreSQL shared by every worker on every host. Leases use the
 * database's clock (clock_timestamp()), so workers on different hosts need not agree on time.
 * All tables live in one schema (default `airlock`; `?schema=name` in the URL or the option).
 */

const NOW = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;
export const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

const tables = `
CREATE TABLE IF NOT EXISTS cards (
  card_id text PRIMARY KEY,
  type text NOT NULL,
  agent_turn_id text,
  tool_call_id text,
  body jsonb NOT NULL,
  created_at bigint NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS cards_one_result ON cards (agent_turn_id, tool_call_id) WHERE type = 'tool.result';
CREATE TABLE IF NOT EXISTS tools (
  project_id text NOT NULL,
  tool_name text NOT NULL,
  description text NOT NULL,
  parameters jsonb NOT NULL,
  target_subject text NOT NULL,
  after_execution text NOT NULL,
  options jsonb NOT NULL,
  PRIMARY KEY (project_id, tool_name)
);
CREATE TABLE IF NOT EXISTS claims (
  agent_turn_id text NOT NULL,
  tool_call_id text NOT NULL,
  tool_call_card_id text,
  context jsonb,
  worker_id text NOT NULL,
  state text NOT NULL,
  lease_until bigint NOT NULL,
  cancel_requested boolean NOT NULL DEFAULT false,
  result_card_id text,
  wakeup jsonb,
  woken boolean NOT NULL DEFAULT false,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  PRIMARY KEY (agent_turn_id, tool_call_id)
);
CREATE INDEX IF NOT EXISTS claims_running ON claims (state, lease_until);
CREATE INDEX IF NOT EXISTS claims_worker ON claims (worker_id, state);
CREATE TABLE IF NOT EXISTS inbox (
  id bigserial PRIMARY KEY,
  agent_id text NOT NULL,
  agent_turn_id text NOT NULL,
  tool_call_id text NOT NULL,
  kind text NOT NULL,
  payload jsonb NOT NULL,
  created_at bigint NOT NULL,
  UNIQUE (agent_turn_id, tool_call_id, kind)
);
CREATE INDEX IF NOT EXISTS inbox_agent ON inbox (agent_id, id);
CREATE TABLE IF NOT EXISTS approvals (
  id text PRIMARY KEY,
  agent_turn_id text NOT NULL,
  tool_call_id text NOT NULL,
  project_id text NOT NULL,
  tool_name text NOT NULL,
  summary jsonb NOT NULL,
  state text NOT NULL,
  decided_by text,
  reason text,
  created_at bigint NOT NULL,
  expires_at bigint NOT NULL,
  decided_at bigint
);
CREATE INDEX IF NOT EXISTS approvals_state ON approvals (state, created_at);
`;

const isUniqueViolation = (e: unknown): boolean => (e as { code?: string }).code === '23505';

/** Splits `?schema=name` off a connection URL (pg would pass it to the server as an unknown option). */
export function splitSchema(url: string): { url: string; schema: string | undefined } {
  try {
    const u = new URL(url);
    const schema = u.searchParams.get('schema') ?? undefined;
    u.searchParams.delete('schema');
    return { url: u.toString(), schema };
  } catch {
    return { url, schema: undefined };
  }
}

/** The URL without its password, for messages. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'the given PostgreSQL URL';
  }
}

export class PostgresStore implements Store {
  readonly kind = 'postgres' as const;
  readonly schema: string;
  private readonly url: string;
  private pool: pg.Pool | null = null;
  private readonly poolSize: number;

  constructor(url: string, opts: { schema?: string; poolSize?: number } = {}) {
    const split = splitSchema(url);
    this.url = split.url;
    this.schema = opts.schema ?? split.schema ?? 'airlock';
    if (!SCHEMA_NAME.test(this.schema)) throw new StoreUnavailableError(`PostgreSQL schema name "${this.schema.slice(0, 64)}" must match ${SCHEMA_NAME.source}`);
    this.poolSize = opts.poolSize ?? 16;
  }

  private get p(): pg.Pool {
    if (!this.pool) throw new StoreUnavailableError('the PostgreSQL store is not open: call init() first');
    return this.pool;
  }

  private q(sql: string, args: unknown[] = []): Promise<pg.QueryResult<Row>> {
    return this.p.query<Row>(sql, args);
  }

  /**
   * A named prepared statement (the hot path of every call): each pooled connection parses and
   * plans it once, then only binds and executes it. The name is per store schema (search_path is
   * per connection and fixed, so a statement never runs against another schema).
   */
  private qp(name: string, sql: string, args: unknown[]): Promise<pg.QueryResult<Row>> {
    return this.p.query<Row>({ name: `airlock_${name}`, text: sql, values: args });
  }

  async init(): Promise<void> {
    if (this.pool) return;
    const pool = new pg.Pool({
      connectionString: this.url,
      max: this.poolSize,
      connectionTimeoutMillis: 3000,
      options: `-c search_path=${this.schema}`,
    });
    // An idle client's error (server restart) must not crash the process; the next query reports it.
    pool.on('error', () => undefined);
    try {
      const c = await pool.connect();
      try {
        await c.query('BEGIN');
        // Several workers may start at once: CREATE ... IF NOT EXISTS is not race-free in PostgreSQL.
        await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`airlock-schema-${this.schema}`]);
        await c.query(`CREATE SCHEMA IF NOT EXISTS ${this.schema}`);
        await c.query(tables);
        await c.query('COMMIT');
      } catch (e) {
        await c.query('ROLLBACK').catch(() => undefined);
        throw e;
      } finally {
        c.release();
      }
    } catch (e) {
      await pool.end().catch(() => undefined);
      throw new StoreUnavailableError(
        `PostgreSQL at ${redactUrl(this.url)} is not usable: ${(e as Error).message}. Start it (e.g. \`service postgresql start\`) and check the URL, user and database.`,
      );
    }
    this.pool = pool;
  }

  async close(): Promise<void> {
    await this.woken.settled();
    const p = this.pool;
    this.pool = null;
    await p?.end();
  }

  /** Drops the whole schema (tests). */
  async dropSchema(): Promise<void> {
    await this.q(`DROP SCHEMA IF EXISTS ${this.schema} CASCADE`);
  }

  async now(): Promise<number> {
    const r = await this.q(`SELECT ${NOW} AS now`);
    return Number(r.rows[0]?.now);
  }

  async putCard(card: { card_id: string; type: string; created_at: string; content: unknown; metadata?: unknown }, anchor?: Anchor): Promise<boolean> {
    try {
      await this.qp('put_card', `INSERT INTO cards (card_id, type, agent_turn_id, tool_call_id, body, created_at) VALUES ($1, $2, $3, $4, $5, ${NOW})`, [
        card.card_id,
        card.type,
        anchor?.agent_turn_id ?? null,
        anchor?.tool_call_id ?? null,
        JSON.stringify(card),
      ]);
      return true;
    } catch (e) {
      if (isUniqueViolation(e)) return false;
      throw e;
    }
  }

  async getCard(cardId: string): Promise<unknown | undefined> {
    return (await this.qp('get_card', 'SELECT body FROM cards WHERE card_id = $1', [cardId])).rows[0]?.body;
  }

  async getResultCardFor(a: Anchor): Promise<unknown | undefined> {
    return (await this.q("SELECT body FROM cards WHERE type = 'tool.result' AND agent_turn_id = $1 AND tool_call_id = $2", [a.agent_turn_id, a.tool_call_id])).rows[0]?.body;
  }

  async countResultCards(a: Anchor): Promise<number> {
    const r = await this.q("SELECT count(*) AS n FROM cards WHERE type = 'tool.result' AND agent_turn_id = $1 AND tool_call_id = $2", [a.agent_turn_id, a.tool_call_id]);
    return Number(r.rows[0]?.n);
  }

  async upsertTool(t: ToolRecord): Promise<void> {
    await this.q(
      `INSERT INTO tools (project_id, tool_name, description, parameters, target_subject, after_execution, options) VALUES ($1, $2, $3, $4, $5, $6, $7)
       ON CONFLICT (project_id, tool_name) DO UPDATE SET description = excluded.description, parameters = excluded.parameters,
         target_subject = excluded.target_subject, after_execution = excluded.after_execution, options = excluded.options`,
      [t.project_id, t.tool_name, t.description, JSON.stringify(t.parameters), t.target_subject, t.after_execution, JSON.stringify(t.options)],
    );
  }

  async getTool(projectId: string, toolName: string): Promise<ToolRecord | undefined> {
    const row = (await this.q('SELECT * FROM tools WHERE project_id = $1 AND tool_name = $2', [projectId, toolName])).rows[0];
    return row ? rowToTool(row) : undefined;
  }

  async listTools(projectId?: string): Promise<ToolRecord[]> {
    const r =
      projectId === undefined
        ? await this.q('SELECT * FROM tools ORDER BY project_id, tool_name')
        : await this.q('SELECT * FROM tools WHERE project_id = $1 ORDER BY tool_name', [projectId]);
    return r.rows.map(rowToTool);
  }

  async removeTool(projectId: string, toolName: string): Promise<boolean> {
    return ((await this.q('DELETE FROM tools WHERE project_id = $1 AND tool_name = $2', [projectId, toolName])).rowCount ?? 0) > 0;
  }

  async claim(a: Anchor, cardId: string | null, workerId: string, leaseMs: number, context: Record<string, unknown>, readCardId?: string | null): Promise<ClaimOutcome & { card?: unknown }> {
    // One statement, one round trip: the primary key decides (exactly one INSERT wins; the others
    // read the winner's row), and the optional card read comes from the statement's snapshot (the
    // caller committed the card before publishing the command).
    const r = await this.qp(
      'claim_read_card',
      `WITH ins AS (
         INSERT INTO claims (agent_turn_id, tool_call_id, tool_call_card_id, context, worker_id, state, lease_until, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, 'running', ${NOW} + $6, ${NOW}, ${NOW}) ON CONFLICT DO NOTHING RETURNING *)
       SELECT (SELECT to_jsonb(ins) FROM ins) AS claim, (SELECT body FROM cards WHERE card_id = $7) AS card`,
      [a.agent_turn_id, a.tool_call_id, cardId, JSON.stringify(context), workerId, leaseMs, readCardId ?? null],
    );
    const row = r.rows[0];
    const card = row?.card ?? undefined;
    const won = row?.claim as Row | null | undefined;
    if (won) return { claimed: true, claim: rowToClaim(won), card };
    const existing = await this.getClaim(a);
    if (!existing) throw new Error('claim: conflicting row vanished (claims are never deleted)');
    return { claimed: false, existing, card };
  }

  async getClaim(a: Anchor): Promise<ClaimRecord | undefined> {
    const row = (await this.qp('get_claim', 'SELECT * FROM claims WHERE agent_turn_id = $1 AND tool_call_id = $2', [a.agent_turn_id, a.tool_call_id])).rows[0];
    return row ? rowToClaim(row) : undefined;
  }

  async heartbeat(workerId: string, leaseMs: number): Promise<Anchor[]> {
    const r = await this.q(
      `UPDATE claims SET lease_until = ${NOW} + $2, updated_at = ${NOW} WHERE worker_id = $1 AND state = 'running'
       RETURNING agent_turn_id, tool_call_id, cancel_requested`,
      [workerId, leaseMs],
    );
    return r.rows.filter((x) => x.cancel_requested === true).map((x) => ({ agent_turn_id: String(x.agent_turn_id), tool_call_id: String(x.tool_call_id) }));
  }

  async takeOverExpired(workerId: string, leaseMs: number, limit: number): Promise<ClaimRecord[]> {
    // SKIP LOCKED: concurrent sweepers split the expired claims instead of queueing on them; the
    // outer WHERE re-checks the lease under the row lock.
    const r = await this.q(
      `UPDATE claims SET worker_id = $1, lease_until = ${NOW} + $2, updated_at = ${NOW}
       WHERE (agent_turn_id, tool_call_id) IN (
         SELECT agent_turn_id, tool_call_id FROM claims WHERE state = 'running' AND lease_until < ${NOW} LIMIT $3 FOR UPDATE SKIP LOCKED)
       AND state = 'running' AND lease_until < ${NOW}
       RETURNING *`,
      [workerId, leaseMs, limit],
    );
    return r.rows.map(rowToClaim);
  }

  async answer(a: AnswerInput): Promise<AnswerOutcome> {
    // One statement = one implicit transaction and one round trip: the claim update, the card and
    // the report land together or not at all (a unique violation aborts the whole statement).
    let landed: boolean;
    try {
      const r = await this.qp(
        'answer',
        `WITH u AS (
           UPDATE claims SET state = 'answered', result_card_id = $1, wakeup = $2, updated_at = ${NOW}
           WHERE agent_turn_id = $3 AND tool_call_id = $4 AND state = 'running' AND worker_id = $5 RETURNING 1),
         c AS (
           INSERT INTO cards (card_id, type, agent_turn_id, tool_call_id, body, created_at)
           SELECT $1, 'tool.result', $3, $4, $6, ${NOW} WHERE EXISTS (SELECT 1 FROM u) RETURNING 1),
         i AS (
           INSERT INTO inbox (agent_id, agent_turn_id, tool_call_id, kind, payload, created_at)
           SELECT $7, $3, $4, $8, $9, ${NOW} WHERE EXISTS (SELECT 1 FROM u) RETURNING 1)
         SELECT (SELECT count(*) FROM u) AS u, (SELECT count(*) FROM c) AS c, (SELECT count(*) FROM i) AS i`,
        [a.card.card_id, JSON.stringify(a.wakeup), a.agent_turn_id, a.tool_call_id, a.worker_id, JSON.stringify(a.card), a.report.agent_id, a.report.kind, JSON.stringify(a.report.payload)],
      );
      landed = Number(r.rows[0]?.u) === 1;
    } catch (e) {
      if (!isUniqueViolation(e)) throw e;
      return { ok: false, reason: 'duplicate', existing: await this.getClaim(a) };
    }
    if (!landed) return { ok: false, reason: 'not-owner', existing: await this.getClaim(a) };
    return { ok: true };
  }

  /**
   * Batched: the flags of every wakeup published in the same turn of the event loop are set by ONE
   * statement (one round trip, one commit). A flag lost to a crash only means a sweeper publishes
   * the same wakeup again (at-least-once wakeups).
   */
  private readonly woken = new TurnBatch<Anchor>((anchors) =>
    this.qp(
      'mark_woken',
      `UPDATE claims SET woken = true FROM unnest($1::text[], $2::text[]) AS x(t, c)
               WHERE claims.agent_turn_id = x.t AND claims.tool_call_id = x.c`,
      [anchors.map((x) => x.agent_turn_id), anchors.map((x) => x.tool_call_id)],
    ).then(() => undefined),
  );

  markWoken(a: Anchor): Promise<void> {
    return this.woken.add(a);
  }

  async unwokenAnswers(olderThanMs: number, limit: number): Promise<ClaimRecord[]> {
    const r = await this.q(`SELECT * FROM claims WHERE state = 'answered' AND woken = false AND updated_at < ${NOW} - $1 ORDER BY updated_at LIMIT $2`, [olderThanMs, limit]);
    return r.rows.map(rowToClaim);
  }

  async requestCancel(a: Anchor): Promise<ClaimRecord | undefined> {
    await this.q("UPDATE claims SET cancel_requested = true WHERE agent_turn_id = $1 AND tool_call_id = $2 AND state = 'running'", [a.agent_turn_id, a.tool_call_id]);
    return this.getClaim(a);
  }

  async listInbox(filter: { agent_id?: string; anchor?: Anchor; limit?: number } = {}): Promise<InboxReport[]> {
    const where: string[] = [];
    const args: unknown[] = [];
    if (filter.agent_id !== undefined) {
      args.push(filter.agent_id);
      where.push(`agent_id = $${args.length}`);
    }
    if (filter.anchor) {
      args.push(filter.anchor.agent_turn_id, filter.anchor.tool_call_id);
      where.push(`agent_turn_id = $${args.length - 1} AND tool_call_id = $${args.length}`);
    }
    args.push(filter.limit ?? 1000);
    const r = await this.q(`SELECT * FROM inbox ${where.length ? 'WHERE ' + where.join(' AND ') : ''} ORDER BY id LIMIT $${args.length}`, args);
    return r.rows.map(rowToInbox);
  }

  async createApproval(a: Omit<ApprovalRecord, 'state' | 'decided_by' | 'reason' | 'decided_at' | 'created_at'>): Promise<ApprovalRecord> {
    const r = await this.q(
      `INSERT INTO approvals (id, agent_turn_id, tool_call_id, project_id, tool_name, summary, state, created_at, expires_at)
       VALUES ($1, $2, $3, $4, $5, $6, 'pending', ${NOW}, $7) RETURNING *`,
      [a.id, a.agent_turn_id, a.tool_call_id, a.project_id, a.tool_name, JSON.stringify(a.summary), a.expires_at],
    );
    return rowToApproval(r.rows[0] as Row);
  }

  async getApproval(id: string): Promise<ApprovalRecord | undefined> {
    const row = (await this.q('SELECT * FROM approvals WHERE id = $1', [id])).rows[0];
    return row ? rowToApproval(row) : undefined;
  }

  async listApprovals(state?: ApprovalState): Promise<ApprovalRecord[]> {
    const r = state === undefined ? await this.q('SELECT * FROM approvals ORDER BY created_at') : await this.q('SELECT * FROM approvals WHERE state = $1 ORDER BY created_at', [state]);
    return r.rows.map(rowToApproval);
  }

  async decideApproval(id: string, state: Exclude<ApprovalState, 'pending'>, by: string | null, reason: string | null): Promise<boolean> {
    const r = await this.q(`UPDATE approvals SET state = $2, decided_by = $3, reason = $4, decided_at = ${NOW} WHERE id = $1 AND state = 'pending'`, [id, state, by, reason]);
    return r.rowCount === 1;
  }
}
